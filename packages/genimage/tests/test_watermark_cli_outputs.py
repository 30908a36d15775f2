"""``genimage watermark``: outputs that would overwrite a run, a scheme folder or earlier results are refused before
any work, with one line and exit 2, and the files already there are left byte for byte as they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gencore.command import package_parser, run
from genimage.watermark.command import register


def _main(argv):
    parser, commands = package_parser("genimage", "test", "test")
    register(commands)
    return run(parser, argv)


def _hashes(*folders: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for f in folders for p in sorted(f.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (barely trained) 8x8 digits run: the run files a result could be written over."""
    from genimage.cli import main

    out = tmp_path_factory.mktemp("runs") / "d"
    argv = ["train", "--data", "digits", "--steps", "2", "--batch-size", "8", "--out", str(out), "--no-progress"]
    assert main([*argv, "--warmup-steps", "1", "--sample-nfe", "2"]) == 0
    return out


@pytest.fixture(scope="module")
def marked(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A spherical key for the run and two images marked with it."""
    work = tmp_path_factory.mktemp("marked")
    key = work / "k.json"
    kg = ["watermark", "keygen", "--scheme", "spherical", "--run", str(tiny_run), "--bits", "8", "--seed", "1"]
    assert _main([*kg, "--out", str(key)]) == 0
    em = ["watermark", "embed", "--key", str(key), "--run", str(tiny_run), "--steps", "2", "--n", "2"]
    assert _main([*em, "--out", str(work / "m")]) == 0
    return key, work / "m" / "images"


@pytest.mark.parametrize("name", ["config.json", "model/config.json", "model/model.safetensors"])
def test_detect_json_never_overwrites_the_run(name, tiny_run, marked, capsys):
    # detect --json run/config.json exited 0 and replaced the run's config by the detection records
    key, images = marked
    before = _hashes(tiny_run, key.parent)
    target = tiny_run / name
    argv = ["watermark", "detect", "--key", str(key), "--run", str(tiny_run), "--steps", "2", "--images", str(images)]
    assert _main([*argv, "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"--json {str(target)!r} is the input file" in err and "Traceback" not in err
    assert _hashes(tiny_run, key.parent) == before


def test_evaluate_outputs_never_overwrite_the_run(tiny_run, tmp_path, capsys):
    before = _hashes(tiny_run)
    target = tiny_run / "model" / "config.json"
    argv = ["watermark", "evaluate", "--run", str(tiny_run), "--steps", "2", "--schemes", "spherical", "--bits", "4"]
    argv += ["--attacks", "none", "--n", "2", "--noise-samples", "8", "--no-progress"]
    argv += ["--json", str(tmp_path / "x.json")]
    assert _main([*argv, "--figure", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"--figure {str(target)!r} is the input file" in err and "Traceback" not in err
    assert _hashes(tiny_run) == before
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--json", "x.png"], "--figure and --json are both 'x.png'"),  # the figure replaced the JSON
        (["--json", "x.json", "--markdown", "x.json"], "--markdown and --json are both 'x.json'"),
        (["--json", "x.json", "--examples", "x.png"], "--examples and --figure are both 'x.png'"),
    ],
)
def test_evaluate_outputs_must_be_distinct_files(extra, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["watermark", "evaluate", "--run", "gaussian:1,16,16", "--schemes", "spherical", "--attacks", "none"]
    assert _main([*argv, "--n", "2", "--bits", "4", "--noise-samples", "8", "--no-progress", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_detect_json_never_overwrites_the_scheme_weights(tmp_path, capsys):
    # only scheme.json was protected: --json over hidden/model.safetensors destroyed the trained scheme
    gen = ["--run", "gaussian:1,16,16", "--steps", "2"]
    sd = tmp_path / "sd"
    tr = ["watermark", "train", "--scheme", "hidden", *gen, "--hidden-steps", "2", "--bits", "4", "--seed", "1"]
    assert _main([*tr, "--no-progress", "--out", str(sd)]) == 0
    assert _main(["watermark", "embed", "--scheme-dir", str(sd), *gen, "--n", "2", "--out", str(tmp_path / "m")]) == 0
    weights = sd / "hidden" / "model.safetensors"
    assert weights.is_file()
    before = _hashes(sd)
    de = ["watermark", "detect", "--scheme-dir", str(sd), *gen, "--images", str(tmp_path / "m" / "images")]
    assert _main([*de, "--json", str(weights)]) == 2
    err = capsys.readouterr().err
    assert f"--json {str(weights)!r} is the input file" in err and "Traceback" not in err
    assert _hashes(sd) == before


def test_attack_into_a_folder_of_earlier_results_is_refused(tmp_path, capsys):
    # a second attack into one --out silently replaced the first attack's images
    key = tmp_path / "k.json"
    kg = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,16,16", "--bits", "4", "--seed", "1"]
    assert _main([*kg, "--out", str(key)]) == 0
    em = ["watermark", "embed", "--key", str(key), "--run", "gaussian:1,16,16", "--steps", "2", "--n", "2"]
    assert _main([*em, "--out", str(tmp_path / "m")]) == 0
    images, out = tmp_path / "m" / "images", tmp_path / "a"
    assert _main(["watermark", "attack", "--images", str(images), "--attack", "jpeg50", "--out", str(out)]) == 0
    capsys.readouterr()
    before = _hashes(out)
    assert _main(["watermark", "attack", "--images", str(images), "--attack", "blur", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {str(out)!r} already holds marked-00000.png from an earlier attack" in err
    assert "Traceback" not in err
    assert _hashes(out) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (  # inf passed the `>= 0` check: MOLM trained to NaN scores, refused only at the end as a bad null
            "watermark evaluate --run gaussian:1,8,8 --schemes molm --molm-fidelity inf --json x".split(),
            "--molm-fidelity must be a finite number >= 0, got inf",
        ),
        (
            "watermark train --scheme molm --run gaussian:1,8,8 --molm-fidelity inf --out sd".split(),
            "--molm-fidelity must be a finite number >= 0, got inf",
        ),
        (  # exit 0 before, with the message silently dropped from the key
            "watermark keygen --scheme tree-ring --shape 1,32,32 --message 0101 --out k.json".split(),
            "--message: a tree-ring key is zero-bit and carries no message",
        ),
        (
            "watermark keygen --scheme tree-ring --shape 1,32,32 --bits 8 --out k.json".split(),
            "--bits: a tree-ring key is zero-bit and carries no message",
        ),
        (  # said the folder "does not exist"
            "watermark detect --scheme-dir a.txt --run gaussian:1,8,8 --images .".split(),
            "scheme folder 'a.txt' is a file, not a folder",
        ),
    ],
)
def test_bad_options_are_one_line_errors(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("not a scheme folder")
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
