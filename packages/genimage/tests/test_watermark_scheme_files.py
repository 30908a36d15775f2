"""Trained watermark schemes saved and loaded (genimage.watermark.scheme_files) and `watermark train`,
`embed --scheme-dir` and `detect --scheme-dir` on the tiny digits run."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from gencore.errors import ConfigError, StorageError
from genimage.cli import main
from genimage.watermark.generators import RunGenerator
from genimage.watermark.image_schemes import GuidanceScheme, HiddenScheme, train_for_generator
from genimage.watermark.molm import MOLMScheme, _markers
from genimage.watermark.scheme_files import load_scheme, run_fingerprint, save_scheme

STEPS = 2


@pytest.fixture(scope="module")
def trained_hidden(digits_run):
    gen = RunGenerator(digits_run, steps=STEPS)
    return train_for_generator(gen, message_bits=4, seed=0, n_train=32, n_null=16, steps=5, progress=False)


def _noise(gen, n=4, seed=11):
    return torch.randn(n, *gen.noise_shape, generator=torch.Generator().manual_seed(seed))


def _assert_same_detection(a, b, images):
    da, db = a.detect(images), b.detect(images)
    assert torch.equal(da.score, db.score) and torch.equal(da.pvalue, db.pvalue) and torch.equal(da.bits, db.bits)
    assert torch.equal(a.message, b.message)


def _save(tmp_path, gen, scheme, fingerprint, run):
    return save_scheme(tmp_path / "s", scheme, fingerprint=fingerprint, seed=0, options={"bits": 4}, run=run)


@pytest.mark.parametrize("name", ["hidden", "guidance"])
def test_hidden_and_guidance_round_trip_bit_identically(name, digits_run, trained_hidden, tmp_path):
    gen = RunGenerator(digits_run, steps=STEPS)
    if name == "hidden":
        scheme = HiddenScheme.build(gen, message_bits=4, seed=3, progress=False, trained=trained_hidden)
    else:
        scheme = GuidanceScheme.build(gen, message_bits=4, seed=3, scale=2.0, progress=False, trained=trained_hidden)
    folder = _save(tmp_path, gen, scheme, run_fingerprint(gen), digits_run)
    back = load_scheme(folder, RunGenerator(digits_run, steps=STEPS))  # as in another process: a fresh run
    assert type(back) is type(scheme) and back.null.mu == scheme.null.mu and back.null.sd == scheme.null.sd
    noise = _noise(gen)
    clean = gen.generate(noise)
    marked = scheme.mark(gen, noise, clean)
    assert torch.equal(back.mark(gen, noise, clean), marked)
    assert not torch.equal(marked, clean)
    _assert_same_detection(scheme, back, torch.cat([marked, clean]))
    # the weights themselves came back, not a model that merely behaves alike on these images
    for (k, v), (k2, v2) in zip(scheme.model.state_dict().items(), back.model.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)


def test_molm_round_trip_reattaches_the_markers_to_a_fresh_network(digits_run, tmp_path):
    gen = RunGenerator(digits_run, steps=STEPS)
    fingerprint = run_fingerprint(gen)
    scheme = MOLMScheme.build(
        gen, message_bits=4, seed=0, steps=3, sampler_steps=2, finetune_steps=2, finetune_images=16, progress=False
    )
    assert run_fingerprint(gen) != fingerprint  # the markers renamed the layers: why it is taken before training
    folder = _save(tmp_path, gen, scheme, fingerprint, digits_run)
    fresh = RunGenerator(digits_run, steps=STEPS)
    noise = _noise(fresh)
    plain = fresh.generate(noise)
    back = load_scheme(folder, fresh)
    assert len(_markers(fresh.run.model)) == len(_markers(gen.run.model)) > 0
    marked = scheme.mark(gen, noise, None)
    again = back.mark(fresh, noise, None)
    assert torch.equal(again, marked) and not torch.equal(again, plain)
    _assert_same_detection(scheme, back, torch.cat([marked, plain]))
    with pytest.raises(ConfigError, match="already carries MOLM markers"):
        load_scheme(folder, fresh)


def _unmarked_pngs(run, folder, n=16):
    from genimage.imageio import save_images

    gen = RunGenerator(run, steps=4)
    save_images(folder, gen.generate(_noise(gen, n, seed=99)), prefix="plain")
    return folder


def test_cli_train_embed_detect_finds_the_mark_and_not_on_unmarked_images(digits_run, tmp_path, capsys):
    scheme, marked = tmp_path / "scheme", tmp_path / "marked"
    gen = ["--run", str(digits_run), "--steps", "4"]
    train = ["watermark", "train", "--scheme", "guidance", *gen, "--bits", "8", "--seed", "1"]
    assert main([*train, "--hidden-steps", "100", "--guidance-scale", "3", "--out", str(scheme), "--no-progress"]) == 0
    record = json.loads((scheme / "scheme.json").read_text())
    assert record["format"] == "genimage.watermark-scheme" and record["version"] == 1
    assert record["scheme"] == "guidance" and len(record["message"]) == 8 and record["seed"] == 1
    assert main(["watermark", "embed", "--scheme-dir", str(scheme), *gen, "--n", "16", "--out", str(marked)]) == 0
    assert len(list((marked / "images").glob("*.png"))) == 16 and (marked / "noise.safetensors").is_file()
    results = {}
    for name, images in (("marked", marked / "images"), ("plain", _unmarked_pngs(digits_run, tmp_path / "plain"))):
        out = tmp_path / f"{name}.json"
        argv = ["watermark", "detect", "--scheme-dir", str(scheme), *gen, "--images", str(images), "--json", str(out)]
        assert main(argv) == 0
        results[name] = json.loads(out.read_text())["records"]
    m, p = results["marked"], results["plain"]
    assert all(r["bits"] and 0 <= r["bit_accuracy"] <= 1 for r in m + p)
    assert sum(r["marked"] for r in m) >= 10 and sum(r["pvalue"] for r in m) / 16 < 0.02
    assert sum(r["bit_accuracy"] for r in m) / 16 >= 0.7
    assert sum(r["marked"] for r in p) <= 1 and sum(r["pvalue"] for r in p) / 16 > 0.2


def _one_line_error(capsys, argv, needle):
    assert main(argv) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@pytest.fixture(scope="module")
def saved_hidden(digits_run, trained_hidden, tmp_path_factory):
    gen = RunGenerator(digits_run, steps=STEPS)
    scheme = HiddenScheme.build(gen, message_bits=4, seed=3, progress=False, trained=trained_hidden)
    folder = tmp_path_factory.mktemp("saved") / "hidden"
    return save_scheme(folder, scheme, fingerprint=run_fingerprint(gen), seed=3, options={}, run=digits_run)


def test_train_refuses_an_existing_folder_before_training(digits_run, saved_hidden, tmp_path, capsys):
    before = (saved_hidden / "scheme.json").read_bytes()
    argv = ["watermark", "train", "--scheme", "hidden", "--run", str(digits_run), "--out", str(saved_hidden)]
    _one_line_error(capsys, argv, "already exists and is not an empty folder")
    assert (saved_hidden / "scheme.json").read_bytes() == before
    with pytest.raises(StorageError, match="already exists"):
        save_scheme(
            saved_hidden, load_scheme(saved_hidden, RunGenerator(digits_run)), fingerprint="x", seed=0, options={}
        )
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is taken
    gen = RunGenerator(digits_run, steps=STEPS)
    save_scheme(empty, load_scheme(saved_hidden, gen), fingerprint=run_fingerprint(gen), seed=3, options={})
    assert (empty / "scheme.json").is_file() and not list(tmp_path.glob(".*tmp"))


def test_a_scheme_is_refused_for_another_runs_weights(digits_run, saved_hidden, tmp_path, capsys):
    other = tmp_path / "other"
    shutil.copytree(digits_run, other)
    weights = other / "model" / "model.safetensors"
    state = load_file(weights)
    name = sorted(state)[0]
    state[name] = state[name] + 1e-3
    save_file(state, weights)
    with pytest.raises(StorageError, match="fingerprint mismatch"):
        load_scheme(saved_hidden, RunGenerator(other))
    argv = ["watermark", "detect", "--scheme-dir", str(saved_hidden), "--run", str(other)]
    _one_line_error(capsys, [*argv, "--images", str(tmp_path)], "fingerprint mismatch")
    shutil.copytree(digits_run, tmp_path / "copy")  # the same weights elsewhere are the same run
    assert load_scheme(saved_hidden, RunGenerator(tmp_path / "copy")).name == "hidden"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda text: text[: len(text) // 2], "is not valid JSON"),
        (lambda text: text.replace('"version": 1', '"version": 7'), "version 7 is not one"),
        (lambda text: text.replace("genimage.watermark-scheme", "other"), "not a trained watermark scheme"),
        (lambda text: text.replace('"sd": ', '"sd": -'), "field 'null'"),
    ],
)
def test_a_corrupted_scheme_json_is_refused_in_one_sentence(digits_run, saved_hidden, tmp_path, capsys, edit, needle):
    folder = tmp_path / "s"
    shutil.copytree(saved_hidden, folder)
    path = folder / "scheme.json"
    path.write_text(edit(path.read_text()))
    with pytest.raises(StorageError, match=needle):
        load_scheme(folder, RunGenerator(digits_run))
    argv = ["watermark", "embed", "--scheme-dir", str(folder), "--run", str(digits_run), "--out", str(tmp_path / "m")]
    _one_line_error(capsys, argv, needle)
    assert not (tmp_path / "m" / "images").exists()


def test_corrupted_weights_are_refused(digits_run, saved_hidden, tmp_path):
    folder = tmp_path / "s"
    shutil.copytree(saved_hidden, folder)
    (folder / "hidden" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(StorageError, match="safetensors"):
        load_scheme(folder, RunGenerator(digits_run))


def test_key_and_scheme_dir_are_exclusive(digits_run, saved_hidden, tmp_path, capsys):
    key = tmp_path / "k.json"
    assert (
        main(["watermark", "keygen", "--scheme", "spherical", "--shape", "1,8,8", "--bits", "8", "--out", str(key)])
        == 0
    )
    capsys.readouterr()
    run = ["--run", str(digits_run)]
    both = ["--key", str(key), "--scheme-dir", str(saved_hidden), *run]
    _one_line_error(capsys, ["watermark", "embed", *both, "--out", str(tmp_path / "m")], "exactly one of --key")
    _one_line_error(capsys, ["watermark", "detect", *both, "--images", str(tmp_path)], "exactly one of --key")
    _one_line_error(capsys, ["watermark", "embed", *run, "--out", str(tmp_path / "m")], "exactly one of --key")
