"""Checkpoints: exact state round trips, RNG continuation, atomic saves, verification, pickle refusal."""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import re
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save as st_save

import gencore.train.checkpoint as ckpt
from gencore.errors import InputError, StorageError
from gencore.train.checkpoint import (
    capture_rng_state,
    find_checkpoints,
    flatten_state,
    load_checkpoint,
    load_latest,
    pack_state,
    restore_rng_state,
    save_checkpoint,
    unflatten_state,
    unpack_state,
)

# ----------------------------------------------------------------------------------------- helpers


def assert_same(a, b, path="<root>") -> None:
    """Strict structural equality: identical types (tuple vs list, int vs bool), key order and key types,
    bit-identical tensors (dtype, shape, values incl. NaN) and floats (incl. -0.0 and NaN)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=path)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), path
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), path
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b)), path
    elif isinstance(a, dict):
        assert len(a) == len(b), path
        for (ka, va), (kb, vb) in zip(a.items(), b.items()):
            assert_same(ka, kb, f"{path}.key")
            assert_same(va, vb, f"{path}.{ka}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}.{i}")
    else:
        assert a == b, path


def json_trip(meta):
    """Meta must be strict JSON (no NaN tokens): dump and reparse it."""
    return json.loads(json.dumps(meta, allow_nan=False))


def make_task(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.8, 0.95), weight_decay=0.1, amsgrad=True)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[3])
    return model, opt, sched


def train(model, opt, sched, steps: range) -> None:
    for i in steps:
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(16, 4, generator=g)
        y = torch.sin(x[:, :2])
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def write_good(root, step: int):
    model, opt, sched = make_task(step)
    train(model, opt, sched, range(2))
    return save_checkpoint(
        root,
        step,
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
        extra={"data_position": step * 16, "config": {"betas": (0.8, 0.95)}},
        keep_last=None,
    )


# ----------------------------------------------------------------------------------------- flatten


def test_flatten_round_trip_keeps_every_type() -> None:
    t = torch.randn(3)
    obj = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}, 7: {}},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 7], "foreach": None, "fused": False}],
        (1, "a"): [None, True, 2**70, -0.0, math.nan, math.inf, -math.inf, "s"],
        None: {True: 1, 1.5: ()},
        "__t__": "a user key that looks like our tag",
        "tensors": [
            torch.zeros((), dtype=torch.int64),
            torch.tensor([True, False]),
            torch.randn(2, 2).to(torch.bfloat16),
            torch.tensor([1.0, math.nan]),
            torch.arange(6, dtype=torch.uint8).reshape(2, 3),
            torch.empty(0, 3),
        ],
        "numpy": (np.arange(5, dtype=np.uint32), np.float32(1.25), np.int64(-3), np.zeros((2, 0))),
        "alias": [t, t],
    }
    tensors, meta = flatten_state(obj)
    back = unflatten_state(tensors, json_trip(meta))
    assert_same(obj, back)
    assert back["alias"][0] is back["alias"][1]
    assert all(isinstance(k, str) for k in tensors)


def test_flatten_names_unsupported_values() -> None:
    with pytest.raises(InputError, match=re.escape("'a.b'")):
        flatten_state({"a": {"b": object()}})
    with pytest.raises(InputError, match="key"):
        flatten_state({torch.zeros(1): 1})
    with pytest.raises(InputError, match="missing"):
        unflatten_state({}, {"__t__": "tensor", "key": "w"})
    with pytest.raises(InputError, match="not referenced"):
        unflatten_state({"w": torch.zeros(1)}, {})
    with pytest.raises(InputError, match="unknown tag"):
        unflatten_state({}, {"__t__": "pickle"})


_keys = st.one_of(st.text(max_size=5), st.integers(-5, 5), st.booleans(), st.none(), st.tuples(st.integers(0, 3)))
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.floats(-1e6, 1e6, width=32), max_size=4).map(lambda v: torch.tensor(v, dtype=torch.float32)),
    st.lists(st.integers(-100, 100), min_size=1, max_size=4).map(lambda v: torch.tensor(v)),
)
_nested = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(_nested)
def test_flatten_round_trip_property(obj) -> None:
    tensors, meta = flatten_state(obj)
    assert_same(obj, unflatten_state(tensors, json_trip(meta)))


# ----------------------------------------------------------------------------------------- exact resumption


def test_optimizer_and_scheduler_resume_bit_identically(tmp_path) -> None:
    ref_model, ref_opt, ref_sched = make_task(0)
    train(ref_model, ref_opt, ref_sched, range(10))

    model, opt, sched = make_task(0)
    train(model, opt, sched, range(4))
    tensors, meta = flatten_state(opt.state_dict())
    assert_same(opt.state_dict(), unflatten_state(tensors, json_trip(meta)))
    save_checkpoint(
        tmp_path,
        4,
        {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
        extra={"data_position": 4},
    )
    del model, opt, sched

    model, opt, sched = make_task(123)  # different init: everything must come from the checkpoint
    ck = load_latest(tmp_path)
    assert ck is not None and ck.step == 4 and ck.extra == {"data_position": 4}
    model.load_state_dict(ck.groups["model"])
    opt.load_state_dict(ck.groups["optimizer"])
    sched.load_state_dict(ck.groups["scheduler"])
    train(model, opt, sched, range(ck.extra["data_position"], 10))

    for p, q in zip(model.parameters(), ref_model.parameters()):
        assert torch.equal(p, q)
    assert_same(opt.state_dict(), ref_opt.state_dict())
    assert sched.get_last_lr() == ref_sched.get_last_lr()


def _draws():
    return (
        random.random(),
        random.gauss(0.0, 1.0),
        np.random.rand(3).tolist(),  # noqa: NPY002
        float(np.random.standard_normal()),  # noqa: NPY002
        torch.randn(5),
        torch.randint(0, 1000, (3,)),
    )


def test_rng_restore_continues_every_stream(tmp_path) -> None:
    random.seed(1)
    np.random.seed(2)  # noqa: NPY002
    torch.manual_seed(3)
    random.gauss(0.0, 1.0)  # leaves a cached second Gaussian in python's state
    np.random.standard_normal()  # noqa: NPY002  (and in numpy's)
    state = capture_rng_state()
    uninterrupted = _draws()

    save_checkpoint(tmp_path, 1, {"rng-rank0": state})
    random.seed(99)
    np.random.seed(99)  # noqa: NPY002
    torch.manual_seed(99)
    assert _draws()[0] != uninterrupted[0]
    restore_rng_state(load_checkpoint(tmp_path / "step-000000001").groups["rng-rank0"])
    resumed = _draws()
    for a, b in zip(uninterrupted, resumed):
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b

    with pytest.raises(InputError, match="capture_rng_state"):
        restore_rng_state({"python": random.getstate()})


def test_pack_state_round_trips_with_padding() -> None:
    state = {"rng": capture_rng_state(), 3: (torch.randn(2, 2), None, math.inf)}
    packed = pack_state(state)
    assert packed.dtype == torch.uint8 and packed.ndim == 1
    padded = torch.cat([packed, torch.zeros(37, dtype=torch.uint8)])  # as after an all-gather to max length
    assert_same(unpack_state(padded), state)
    with pytest.raises(InputError, match="pack_state"):
        unpack_state(torch.zeros(16, dtype=torch.uint8))


# ----------------------------------------------------------------------------------------- verification


def _truncate(d):
    p = d / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-10])
    return p


def _flip(d):
    p = d / "optimizer.safetensors"
    data = bytearray(p.read_bytes())
    data[len(data) - 7] ^= 0x01
    p.write_bytes(bytes(data))
    return p


def _edit_state(d):
    p = d / "state.json"
    s = json.loads(p.read_text())
    s["extra"]["data_position"] += 1
    p.write_text(json.dumps(s))
    return p


def _bad_json(d):
    p = d / "state.json"
    p.write_text("{not json")
    return p


def _pickle_group(d):
    p = d / "model.safetensors"
    p.write_bytes(pickle.dumps({"weight": [1.0, 2.0]}))
    return p


def _torch_save_group(d):
    p = d / "scheduler.safetensors"
    torch.save({"w": torch.zeros(2)}, p)
    return p


def _stray_pt(d):
    p = d / "extra.pt"
    torch.save({"w": torch.zeros(2)}, p)
    return p


def _missing(d):
    p = d / "optimizer.safetensors"
    p.unlink()
    return p


CORRUPTIONS = {
    "truncated": (_truncate, "truncated"),
    "flipped": (_flip, "SHA-256"),
    "state-edit": (_edit_state, "modified"),
    "bad-json": (_bad_json, "JSON"),
    "pickle": (_pickle_group, "pickle"),
    "torch-save": (_torch_save_group, "torch.save"),
    "stray-pt": (_stray_pt, "pickle"),
    "missing": (_missing, "missing"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_corruption_is_named_and_resume_falls_back(tmp_path, kind, monkeypatch) -> None:
    corrupt, word = CORRUPTIONS[kind]
    good = write_good(tmp_path, 10)
    bad = write_good(tmp_path, 20)
    bad_file = corrupt(bad)

    def no_unpickling(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    monkeypatch.setattr(pickle, "loads", no_unpickling)
    monkeypatch.setattr(pickle, "load", no_unpickling)
    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(StorageError, match=re.escape(str(bad_file))) as info:
        load_checkpoint(bad)
    assert word in str(info.value)

    with pytest.warns(UserWarning, match=re.escape(bad.name)):
        ck = load_latest(tmp_path)
    assert ck is not None and ck.path == good and ck.step == 10
    assert ck.extra == {"data_position": 160, "config": {"betas": (0.8, 0.95)}}


def test_load_latest_without_any_usable_checkpoint(tmp_path) -> None:
    assert load_latest(tmp_path / "nothing-here") is None
    assert load_latest(tmp_path) is None
    _truncate(write_good(tmp_path, 5))
    with pytest.warns(UserWarning, match="step-000000005"), pytest.raises(StorageError, match="none of the 1"):
        load_latest(tmp_path)


def test_safetensors_header_resembling_pickle_magic_is_accepted(tmp_path) -> None:
    # A safetensors header length of 0x0280 begins with bytes 0x80 0x02, the pickle-2 magic.
    for n in range(2000):
        group = {"pad": "x" * n, "t": torch.zeros(1)}
        tensors, meta = flatten_state(group)
        blob = st_save(tensors, metadata={"gencore.meta": json.dumps(meta, separators=(",", ":")), "format": "pt"})
        if blob[:2] == b"\x80\x02":
            break
    else:
        pytest.fail("no padding produced a header length of 0x0280")
    path = save_checkpoint(tmp_path, 1, {"g": group})
    assert (path / "g.safetensors").read_bytes()[:2] == b"\x80\x02"
    assert_same(load_checkpoint(path).groups["g"], group)


# ----------------------------------------------------------------------------------------- atomic save and pruning


def test_keep_last_prunes_but_keeps_the_new_one(tmp_path) -> None:
    for s in range(1, 6):
        save_checkpoint(tmp_path, s, {"m": {"w": torch.full((2,), float(s))}}, keep_last=2)
    assert [p.name for p in find_checkpoints(tmp_path)] == ["step-000000005", "step-000000004"]
    save_checkpoint(tmp_path, 2, {"m": {"w": torch.zeros(2)}}, keep_last=2)  # older than the rest: still kept
    assert [p.name for p in find_checkpoints(tmp_path)] == ["step-000000005", "step-000000002"]
    save_checkpoint(tmp_path, 5, {"m": {"w": torch.ones(2)}}, keep_last=1)  # same step is replaced
    assert [p.name for p in find_checkpoints(tmp_path)] == ["step-000000005"]
    assert torch.equal(load_checkpoint(tmp_path / "step-000000005").groups["m"]["w"], torch.ones(2))
    assert sorted(os.listdir(tmp_path)) == ["step-000000005"]


def test_interrupted_save_leaves_previous_checkpoint(tmp_path, monkeypatch) -> None:
    first = write_good(tmp_path, 1)
    real = ckpt._write_group
    calls = []

    def dying(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise KeyboardInterrupt("killed mid-save")
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "_write_group", dying)
    model, opt, _ = make_task(0)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 2, {"model": model.state_dict(), "optimizer": opt.state_dict()})
    assert calls == ["model", "optimizer"]
    assert find_checkpoints(tmp_path) == [first]
    assert sorted(os.listdir(tmp_path)) == [first.name]
    assert load_latest(tmp_path).step == 1

    # Leftovers of a SIGKILL: a temporary folder and a step folder without state.json are not checkpoints.
    (tmp_path / ".tmp-step-000000003-1-abc").mkdir()
    (tmp_path / ".tmp-step-000000003-1-abc" / "model.safetensors").write_bytes(b"partial")
    (tmp_path / "step-000000004").mkdir()
    assert find_checkpoints(tmp_path) == [first]
    assert load_latest(tmp_path).step == 1
    monkeypatch.setattr(ckpt, "_write_group", real)
    save_checkpoint(tmp_path, 5, {"m": {"w": torch.zeros(1)}})
    assert not any(n.startswith(".tmp") for n in os.listdir(tmp_path))


def test_find_checkpoints_orders_numerically(tmp_path) -> None:
    for s in (9, 10, 1_234_567_890, 0):
        save_checkpoint(tmp_path, s, {"m": {"w": torch.zeros(1)}}, keep_last=None)
    assert [p.name for p in find_checkpoints(tmp_path)] == [
        "step-1234567890",
        "step-000000010",
        "step-000000009",
        "step-000000000",
    ]


def test_state_json_is_plain_json_with_checksums(tmp_path) -> None:
    path = write_good(tmp_path, 3)
    state = json.loads((path / "state.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert state["step"] == 3 and state["groups"] == ["model", "optimizer", "scheduler"]
    for name, entry in state["files"].items():
        assert entry["size"] == (path / name).stat().st_size and len(entry["sha256"]) == 64
    assert struct.unpack("<Q", (path / "model.safetensors").read_bytes()[:8])[0] > 0


def test_shared_storage_and_odd_extra_round_trip(tmp_path) -> None:
    base = torch.arange(6.0)
    groups = {"model": {"a": base, "b": base[:3], "c": base.view(2, 3).t()}}
    extra = {"position": (3, 7), 1: [math.nan], "np": np.float64(0.5)}
    ck = load_checkpoint(save_checkpoint(tmp_path, 1, groups, extra=extra))
    assert_same(ck.groups["model"], {k: v.contiguous() for k, v in groups["model"].items()})
    assert_same(ck.extra, {"position": (3, 7), 1: [math.nan], "np": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        ({"step": -1}, "step"),
        ({"step": True}, "step"),
        ({"keep_last": 0}, "keep_last"),
        ({"groups": {"../x": {}}}, "group name"),
        ({"groups": {"state": {}}}, "group name"),
        ({"groups": {}}, "groups"),
        ({"extra": {"t": torch.zeros(1)}}, "tensor"),
    ],
)
def test_save_checkpoint_rejects_bad_arguments(tmp_path, kwargs, word) -> None:
    args = {"root": tmp_path, "step": 1, "groups": {"m": {"w": torch.zeros(1)}}, **kwargs}
    with pytest.raises(InputError, match=word):
        save_checkpoint(**args)
    assert find_checkpoints(tmp_path) == []
