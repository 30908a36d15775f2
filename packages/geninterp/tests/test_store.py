"""Activation store: round trips (safetensors and npy), shards, statistics, splits and errors; hooks."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from geninterp.capture import ActivationCapture, OutputReplacement, capture_to_store
from geninterp.store import ActivationStore, ActivationWriter


@pytest.mark.parametrize("storage", ["safetensors", "npy"])
def test_round_trip(tmp_path, seq_acts, storage):
    tokens = torch.randint(1000, seq_acts.shape[:2])
    with ActivationWriter(tmp_path / "s", d_model=8, seq_len=16, shard_sequences=10, storage=storage) as w:
        for a, t in zip(seq_acts.split(5), tokens.split(5), strict=True):
            w.write(a, t)
    store = ActivationStore(tmp_path / "s", verify=True)
    assert len(store) == 24 and store.n_tokens == 24 * 16
    assert len(store.index["shards"]) == 3  # 10 + 10 + 4
    torch.testing.assert_close(store.load(), seq_acts, rtol=0, atol=0)
    assert torch.equal(torch.stack([store.tokens(i) for i in range(24)]), tokens)
    flat = seq_acts.reshape(-1, 8).double()
    torch.testing.assert_close(store.mean.double(), flat.mean(0), rtol=1e-6, atol=1e-6)
    assert store.mean_sq_norm == pytest.approx(float(flat.pow(2).sum(-1).mean()), rel=1e-9)
    batches = list(store.iter_batches(7))
    torch.testing.assert_close(torch.cat([a for a, _ in batches]), seq_acts, rtol=0, atol=0)


def test_half_precision(tmp_path, seq_acts):
    with ActivationWriter(tmp_path / "h", d_model=8, seq_len=16, dtype="float16") as w:
        w.write(seq_acts, torch.zeros(seq_acts.shape[:2], dtype=torch.long))
    got = ActivationStore(tmp_path / "h").load()
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, seq_acts.half().float(), rtol=0, atol=0)


def test_split_and_pickle(store_dir, seq_acts):
    store = ActivationStore(store_dir)
    train, held = store.split(0.25)
    assert len(train) == 18 and len(held) == 6
    torch.testing.assert_close(held[0], seq_acts[18], rtol=0, atol=0)
    _ = train[3]  # opens a shard
    clone = pickle.loads(pickle.dumps(train))  # DataLoader workers receive a copy without open handles
    torch.testing.assert_close(clone[3], seq_acts[3], rtol=0, atol=0)


def test_incomplete_and_corrupt_stores(tmp_path, store_dir, seq_acts):
    w = ActivationWriter(tmp_path / "partial", d_model=8, seq_len=16, shard_sequences=4)
    w.write(seq_acts[:8], torch.zeros(8, 16, dtype=torch.long))  # two shards written, no index yet
    with pytest.raises(StorageError, match="interrupted"):
        ActivationStore(tmp_path / "partial")
    shard = sorted(store_dir.glob("shard-*"))[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="SHA-256"):
        ActivationStore(store_dir, verify=True)
    with pytest.raises(StorageError, match="already holds"):
        ActivationWriter(store_dir, d_model=8, seq_len=16)


def test_writer_input_errors(tmp_path):
    w = ActivationWriter(tmp_path / "e", d_model=4, seq_len=3)
    with pytest.raises(InputError, match="shape"):
        w.write(torch.zeros(2, 3, 5), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(InputError, match="NaN"):
        w.write(torch.full((1, 3, 4), float("nan")), torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(InputError, match="empty"):
        w.close()
    with pytest.raises(ConfigError, match="storage"):
        ActivationWriter(tmp_path / "f", d_model=4, seq_len=3, storage="zarr")


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(50, 6)
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(6, 6) for _ in range(3)])
        self.calls = 0

    def forward(self, tokens):
        h = self.emb(tokens)
        for i, block in enumerate(self.blocks):
            self.calls += i == 2
            h = h + torch.tanh(block(h))
        return h


def test_capture_hooks_and_early_stop():
    torch.manual_seed(0)
    model = Tiny()
    tokens = torch.randint(50, (2, 5))
    with ActivationCapture(model, ["blocks.1"], stop_early=True) as cap:
        got = cap.run(lambda: model(tokens))["blocks.1"]
    assert model.calls == 0  # block 2 never ran
    h = model.emb(tokens)
    for block in model.blocks[:2]:
        h_in = h
        h = h + torch.tanh(block(h))
    torch.testing.assert_close(got, model.blocks[1](h_in))
    assert not model.blocks[1]._forward_hooks  # hooks removed on exit
    with pytest.raises(ConfigError, match="no module named"):
        ActivationCapture(model, ["blocks.7"]).__enter__()


def test_output_replacement_splices():
    model = Tiny()
    tokens = torch.randint(50, (2, 5))
    with OutputReplacement(model, "blocks.2", torch.zeros_like):
        out = model(tokens)
    h = model.emb(tokens)
    for block in model.blocks[:2]:
        h = h + torch.tanh(block(h))
    torch.testing.assert_close(out, h + torch.tanh(torch.zeros_like(h)))


def test_capture_to_store_streams_whole_sequences(tmp_path):
    torch.manual_seed(0)
    model = Tiny()
    chunks = (torch.randint(50, (5,), generator=torch.Generator().manual_seed(i)) for i in range(100))
    w = capture_to_store(model, model, "blocks.0", chunks, tmp_path / "c", n_tokens=42, batch_size=4, progress=False)
    store = ActivationStore(w.dir)
    assert len(store) == 9 and store.n_tokens == 45  # ceil(42 / 5) sequences
    first = torch.randint(50, (5,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(store.tokens(0), first)
    h = model.emb(first[None])
    torch.testing.assert_close(store[0], model.blocks[0](h)[0].detach())
    with pytest.raises(InputError, match="ran out"):
        capture_to_store(model, model, "blocks.0", iter([first]), tmp_path / "d", n_tokens=50, progress=False)


def _edit_index(store: Path, edit) -> None:
    index = json.loads((store / "index.json").read_text())
    edit(index)
    (store / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda ix: ix["shards"][0].update(n_sequences="abc"), "shards[0].n_sequences"),
        (lambda ix: ix["shards"][1].pop("n_sequences"), "shards[1].n_sequences"),
        (lambda ix: ix["shards"][0].update(files=["../elsewhere/shard-00000.safetensors"]), "shards[0].files"),
        (lambda ix: ix["shards"][2].update(sha256=[]), "shards[2].sha256"),
        (lambda ix: ix.update(d_model=6), "stats.mean"),
        (lambda ix: ix["stats"].update(mean_sq_norm="big"), "stats.mean_sq_norm"),
        (lambda ix: ix.update(seq_len=0), "seq_len"),
        (lambda ix: ix.update(storage="npy"), "shards[0].files"),
    ],
)
def test_an_edited_index_is_refused_naming_its_field(store_dir, edit, field):
    _edit_index(store_dir, edit)
    with pytest.raises(StorageError, match=re.escape(f"field {field!r} must be")):
        ActivationStore(store_dir)


@pytest.mark.parametrize("storage", ["safetensors", "npy"])
def test_shards_that_disagree_with_the_index_are_refused_when_opened(tmp_path, seq_acts, storage):
    """An index whose shapes do not match the shards' was read (wrong seq_len) or failed deep in training."""
    tokens = torch.zeros(seq_acts.shape[:2], dtype=torch.long)
    with ActivationWriter(tmp_path / "s", d_model=8, seq_len=16, shard_sequences=10, storage=storage) as w:
        w.write(seq_acts, tokens)
    first = "shard-00000.safetensors" if storage == "safetensors" else "shard-00000.activations.npy"
    for edit in (
        lambda ix: ix.update(seq_len=8),
        lambda ix: (ix["shards"][0].update(n_sequences=12), ix.update(n_sequences=26)),
    ):
        shutil.rmtree(tmp_path / "e", ignore_errors=True)
        shutil.copytree(tmp_path / "s", tmp_path / "e")
        _edit_index(tmp_path / "e", edit)
        with pytest.raises(StorageError, match=re.escape(f"{first}' holds")):
            ActivationStore(tmp_path / "e")
    if storage == "npy":  # token ids replaced by floats: the tokens file is named
        np.save(tmp_path / "s" / "shard-00001.tokens.npy", np.zeros((10, 16), np.float32))
        with pytest.raises(StorageError, match=r"shard-00001\.tokens\.npy' holds float32"):
            ActivationStore(tmp_path / "s")


def test_views_stay_inside_the_store_and_slices_are_views(store_dir, seq_acts):
    with pytest.raises(InputError, match="outside"):
        ActivationStore(store_dir, range(20, -20, -10))  # its last index is -10, its first inside
    store = ActivationStore(store_dir)
    view = store[3:9:2]
    assert isinstance(view, ActivationStore) and len(view) == 3
    torch.testing.assert_close(view.load(), seq_acts[3:9:2], rtol=0, atol=0)
    torch.testing.assert_close(view[1:][0], seq_acts[5], rtol=0, atol=0)


def test_a_missing_name_leaves_no_hook_behind():
    model = Tiny()
    with (
        pytest.raises(ConfigError, match=r"no module named 'blocks\.9'"),
        ActivationCapture(model, ["blocks.0", "blocks.9"]),
    ):
        pass
    assert not model.blocks[0]._forward_hooks


def test_capture_reads_mapping_outputs_and_names_a_module_without_a_tensor():
    class DictOut(torch.nn.Module):  # like a transformers ModelOutput: the activation is the first value
        def forward(self, x):
            return {"hidden": 2 * x, "extra": None}

    class NoneOut(torch.nn.Module):
        def forward(self, x):
            return None

    model = torch.nn.Sequential(DictOut())
    x = torch.randn(3, 4)
    with ActivationCapture(model, ["0"]) as cap:
        torch.testing.assert_close(cap.run(lambda: model(x))["0"], 2 * x)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), NoneOut())
    with ActivationCapture(model, ["1"]) as cap, pytest.raises(InputError, match="module '1' returned NoneType"):
        cap.run(lambda: model(x))


def test_replacement_of_a_mapping_output_replaces_the_value_capture_reads():
    """A module returning a mapping (a transformers ``ModelOutput``): capture reads its first value, so
    replacement edits that value and keeps the other fields (it used to hand ``fn`` the whole mapping)."""

    class DictOut(torch.nn.Module):
        def forward(self, x):
            return {"hidden": 2 * x, "aux": x + 1}

    class Head(torch.nn.Module):
        def forward(self, out):
            return out["hidden"] * 10 + out["aux"]

    model = torch.nn.Sequential(DictOut(), Head())
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with OutputReplacement(model, "0", lambda h: -h):
        with ActivationCapture(model, ["0"]) as cap:  # registered after the replacement: sees the replaced value
            got = model(x)
        seen = cap.outputs["0"]
    torch.testing.assert_close(seen, -2 * x)
    torch.testing.assert_close(got, -20 * x + (x + 1))
    model = torch.nn.Sequential(DictOut())
    with OutputReplacement(model, "0", torch.zeros_like):
        out = model(x)
    assert list(out) == ["hidden", "aux"]
    torch.testing.assert_close(out["hidden"], torch.zeros_like(x))
    torch.testing.assert_close(out["aux"], x + 1)


def test_captured_outputs_are_not_changed_by_later_in_place_ops():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(inplace=True), torch.nn.Linear(4, 4))
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    want = model[0](x)
    assert want.min() < 0  # the ReLU after the hooked layer would zero these in place
    with ActivationCapture(model, ["0"]) as cap:
        got = cap.run(lambda: model(x))["0"]
    torch.testing.assert_close(got, want)


def test_an_empty_view_has_no_sequences(store_dir):
    store = ActivationStore(store_dir)
    for view in (store[5:5], ActivationStore(store_dir, range(0))):
        assert len(view) == 0 and view.n_tokens == 0
        assert view.load().shape == (0, 16, 8)


def test_tuple_outputs_are_captured_and_replaced_by_their_first_item():
    class Block(torch.nn.Module):  # like a transformers block of older versions: (hidden, extras)
        def forward(self, x):
            return (2 * x, x + 1)

    class Head(torch.nn.Module):
        def forward(self, out):
            hidden, extra = out
            return hidden * 10 + extra

    model = torch.nn.Sequential(Block(), Head())
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with ActivationCapture(model, ["0"]) as cap:
        torch.testing.assert_close(cap.run(lambda: model(x))["0"], 2 * x)
    with OutputReplacement(model, "0", lambda h: -h):
        torch.testing.assert_close(model(x), -20 * x + (x + 1))


def test_early_stop_waits_for_every_named_module():
    model = Tiny()
    tokens = torch.randint(50, (2, 5), generator=torch.Generator().manual_seed(0))
    with ActivationCapture(model, ["blocks.1", "blocks.0"], stop_early=True) as cap:
        got = cap.run(lambda: model(tokens))
    assert sorted(got) == ["blocks.0", "blocks.1"] and model.calls == 0


def test_capture_to_store_reads_no_chunk_past_the_tokens_asked_for(tmp_path):
    model = Tiny()
    read = []

    def chunks():
        for i in range(100):
            read.append(i)
            yield torch.full((5,), i % 50)

    w = capture_to_store(model, model, "blocks.0", chunks(), tmp_path / "c", n_tokens=40, batch_size=4, progress=False)
    assert w.n_sequences == 8 and read == list(range(8))  # two full batches, then done


def test_ragged_token_chunks_are_one_sentence(tmp_path):
    model = Tiny()
    ragged = [torch.zeros(5, dtype=torch.long), torch.zeros(4, dtype=torch.long)]
    with pytest.raises(InputError, match="one length; got 4 after 5"):
        capture_to_store(model, model, "blocks.0", ragged, tmp_path / "r", n_tokens=9, progress=False)
    with pytest.raises(InputError, match=r"non-empty 1-D tensors, got \[2, 5\]"):
        capture_to_store(model, model, "blocks.0", [torch.zeros(2, 5)], tmp_path / "s", n_tokens=9, progress=False)


@pytest.mark.parametrize("storage", ["safetensors", "npy"])
def test_values_beyond_float16_are_refused_when_written(tmp_path, storage):
    """They were stored as inf, and the reader then called the store damaged ("capture it again")."""
    acts = torch.ones(2, 3, 4)
    acts[0, 1, 2] = 1e5  # finite in float32, past float16's largest 65504
    tokens = torch.zeros(2, 3, dtype=torch.long)
    w = ActivationWriter(tmp_path / "h", d_model=4, seq_len=3, dtype="float16", storage=storage)
    with pytest.raises(InputError, match="beyond the range of float16"):
        w.write(acts, tokens)
    with ActivationWriter(tmp_path / "b", d_model=4, seq_len=3, dtype="bfloat16", storage=storage) as w:
        w.write(acts, tokens)
    torch.testing.assert_close(ActivationStore(tmp_path / "b").load(), acts.bfloat16().float(), rtol=0, atol=0)


@pytest.mark.parametrize("storage", ["safetensors", "npy"])
def test_bfloat16_round_trip(tmp_path, seq_acts, storage):
    """numpy has no bfloat16: npy shards hold the bfloat16-rounded values as float32, and the index says so."""
    with ActivationWriter(tmp_path / "b", d_model=8, seq_len=16, dtype="bfloat16", storage=storage) as w:
        w.write(seq_acts, torch.zeros(seq_acts.shape[:2], dtype=torch.long))
    store = ActivationStore(tmp_path / "b")
    assert store.index["dtype"] == ("bfloat16" if storage == "safetensors" else "float32")
    torch.testing.assert_close(store.load(), seq_acts.bfloat16().float(), rtol=0, atol=0)


def test_split_holds_out_the_ceiling_and_views_read_their_own_tokens(store_dir, seq_acts):
    train, held = ActivationStore(store_dir).split(0.3)  # ceil(0.3 * 24) = 8
    assert (len(train), len(held)) == (16, 8)
    torch.testing.assert_close(held.load(), seq_acts[16:], rtol=0, atol=0)
    assert torch.equal(held.tokens(0), torch.arange(16 * 16, 17 * 16))  # the fixture's tokens count up
    assert held.load(max_sequences=3).shape == (3, 16, 8)
    ActivationStore(store_dir, range(24))
    with pytest.raises(InputError, match="outside"):
        ActivationStore(store_dir, range(25))


def test_split_holds_out_the_ceiling_of_the_fraction_as_written(tmp_path):
    """0.07 * 100 is 7.000000000000001 in floating point: its ceiling held out 8 sequences, not 7."""
    with ActivationWriter(tmp_path / "s", d_model=2, seq_len=1, shard_sequences=30) as w:
        w.write(
            torch.randn(100, 1, 2, generator=torch.Generator().manual_seed(0)), torch.zeros(100, 1, dtype=torch.long)
        )
    store = ActivationStore(tmp_path / "s")
    for fraction, held in ((0.07, 7), (0.14, 14), (0.55, 55), (0.071, 8), (0.1, 10), (0.001, 1)):
        train, test = store.split(fraction)
        assert (len(train), len(test)) == (100 - held, held), fraction
        assert train.sequences == range(100 - held) and test.sequences == range(100 - held, 100)


def test_metadata_that_json_cannot_hold_is_refused_before_anything_is_written(tmp_path):
    """It failed as a TypeError when index.json was written, after the whole capture."""
    for bad in ({"source": Path("corpus.txt")}, ["model", "minilm"]):
        with pytest.raises(ConfigError, match="metadata must be a mapping of JSON values"):
            ActivationWriter(tmp_path / "m", d_model=2, seq_len=2, metadata=bad)
        assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("metadata", [[1, 2], None, "minilm"])
def test_an_index_whose_metadata_is_not_an_object_is_refused(store_dir, metadata):
    """``store.metadata`` raised a TypeError (after training, in train-sae; in evaluate-sae)."""
    _edit_index(store_dir, lambda ix: ix.update(metadata=metadata))
    with pytest.raises(StorageError, match=re.escape("field 'metadata' must be a JSON object")):
        ActivationStore(store_dir)


def test_shards_of_unreadable_float_types_are_refused_naming_the_file(tmp_path, seq_acts):
    """float8 (safetensors) and long double (npy) activations passed the header check, then failed in torch."""
    from safetensors.torch import load_file, save_file

    tokens = torch.zeros(seq_acts.shape[:2], dtype=torch.long)
    with ActivationWriter(tmp_path / "s", d_model=8, seq_len=16, shard_sequences=10) as w:
        w.write(seq_acts, tokens)
    shard = tmp_path / "s" / "shard-00001.safetensors"
    tensors = load_file(shard)
    tensors["activations"] = tensors["activations"].to(torch.float8_e4m3fn)
    save_file(tensors, shard)
    with pytest.raises(StorageError, match=r"shard-00001\.safetensors' holds F8_E4M3 \[10, 16, 8\]"):
        ActivationStore(tmp_path / "s")
    if np.dtype(np.longdouble).itemsize <= 8:  # long double is float64 on this platform
        return
    with ActivationWriter(tmp_path / "n", d_model=8, seq_len=16, shard_sequences=10, storage="npy") as w:
        w.write(seq_acts, tokens)
    np.save(tmp_path / "n" / "shard-00000.activations.npy", seq_acts[:10].numpy().astype(np.longdouble))
    wide = np.dtype(np.longdouble).name
    with pytest.raises(StorageError, match=rf"shard-00000\.activations\.npy' holds {wide} \[10, 16, 8\]"):
        ActivationStore(tmp_path / "n")


def test_npy_shards_of_the_other_byte_order_read_as_written(tmp_path, seq_acts):
    """A store written on a machine of the other endianness: torch.from_numpy refused the array."""
    tokens = torch.arange(24 * 16).view(24, 16)
    with ActivationWriter(tmp_path / "n", d_model=8, seq_len=16, shard_sequences=10, storage="npy") as w:
        w.write(seq_acts, tokens)
    for name, array in (("activations", seq_acts[10:20].numpy()), ("tokens", tokens[10:20].numpy())):
        swapped = array.astype(array.dtype.newbyteorder("S"))
        assert swapped.dtype.byteorder in "<>" and np.array_equal(swapped, array)
        np.save(tmp_path / "n" / f"shard-00001.{name}.npy", swapped)
    store = ActivationStore(tmp_path / "n")
    torch.testing.assert_close(store.load(), seq_acts, rtol=0, atol=0)
    assert torch.equal(torch.stack([store.tokens(i) for i in range(24)]), tokens)


def test_batch_and_load_sizes_are_checked(store_dir):
    """A negative batch size yielded no batch at all (an empty evaluation), zero a bare ValueError from range()."""
    store = ActivationStore(store_dir)
    for size in (0, -1):
        with pytest.raises(ConfigError, match=f"batch_sequences must be a positive integer, got {size}"):
            next(store.iter_batches(size))
    with pytest.raises(ConfigError, match="max_sequences must be a non-negative integer or None, got -1"):
        store.load(max_sequences=-1)
    assert store.load(max_sequences=0).shape == (0, 16, 8)
