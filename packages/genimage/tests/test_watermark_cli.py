"""The ``genimage watermark`` command on the exact analytic flow (no trained model needed)."""

from __future__ import annotations

import json

import pytest

from gencore.command import package_parser, run
from genimage.watermark.command import register


def _main(argv):
    parser, commands = package_parser("genimage", "test", "test")
    register(commands)
    return run(parser, argv)


def test_keygen_embed_attack_detect_round_trip(tmp_path, capsys):
    key = tmp_path / "k.json"
    assert (
        _main(
            [
                "watermark",
                "keygen",
                "--scheme",
                "spherical",
                "--shape",
                "1,16,16",
                "--bits",
                "8",
                "--seed",
                "3",
                "--out",
                str(key),
            ]
        )
        == 0
    )
    assert json.loads(key.read_text())["scheme"] == "spherical"
    gen = ["--run", "gaussian:1,16,16"]
    assert _main(["watermark", "embed", "--key", str(key), *gen, "--n", "4", "--out", str(tmp_path / "m")]) == 0
    assert len(list((tmp_path / "m" / "images").glob("*.png"))) == 4
    att = ["watermark", "attack", "--images", str(tmp_path / "m" / "images"), "--attack", "noise0.02"]
    assert _main([*att, "--out", str(tmp_path / "a")]) == 0
    det = tmp_path / "d.json"
    assert (
        _main(["watermark", "detect", "--key", str(key), *gen, "--images", str(tmp_path / "a"), "--json", str(det)])
        == 0
    )
    recs = json.loads(det.read_text())["records"]
    assert len(recs) == 4 and all(r["marked"] and r["bit_accuracy"] == 1.0 for r in recs)


def test_evaluate_writes_one_record_per_scheme_and_attack(tmp_path):
    out = tmp_path / "wm.json"
    argv = ["watermark", "evaluate", "--run", "gaussian:1,32,32", "--schemes", "spherical,tree-ring,gaussian-shading"]
    argv += ["--attacks", "none,jpeg75", "--n", "16", "--noise-samples", "64", "--json", str(out), "--no-progress"]
    assert _main(argv) == 0
    data = json.loads(out.read_text())
    recs = data["records"]
    assert [(r["scheme"], r["attack"]) for r in recs] == [
        (s, a) for s in ("spherical", "tree-ring", "gaussian-shading") for a in ("none", "jpeg75")
    ]
    sph = next(r for r in recs if r["scheme"] == "spherical" and r["attack"] == "none")
    assert sph["bit_accuracy"] == 1.0
    tr = next(r for r in recs if r["scheme"] == "tree-ring")
    assert tr["bit_accuracy"] is None and tr["tpr_at_1fpr"] == 1.0
    assert out.with_suffix(".md").read_text().startswith("| scheme")
    assert out.with_suffix(".png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["watermark", "evaluate", "--run", "nowhere", "--json", "x.json"], "does not exist"),
        (
            ["watermark", "evaluate", "--run", "gaussian:1,8,8", "--schemes", "bogus", "--json", "x.json"],
            "unknown scheme",
        ),
        (
            ["watermark", "evaluate", "--run", "gaussian:1,8,8", "--attacks", "sharpen", "--json", "x.json"],
            "unknown attack",
        ),
        (
            ["watermark", "evaluate", "--run", "gaussian:1,8,8", "--attacks", "none,jpeg0", "--json", "x.json"],
            "attack 'jpeg0': the jpeg parameter must lie in [1, 100], got 0",
        ),
        (
            ["watermark", "embed", "--key", "k.json", "--run", "gaussian:1,8,8", "--n", "-1", "--out", "m"],
            "--n must be a positive integer, got -1",
        ),
        (["watermark", "keygen", "--scheme", "spherical", "--out", "k.json"], "give --shape"),
        (["watermark", "keygen", "--scheme", "spherical", "--out", "k.json", "--shape", "a,b"], "three positive sizes"),
        (
            ["watermark", "evaluate", "--run", "gaussian:1,8,8", "--schemes", "spherical", "--n", "0", "--json", "x"],
            "needs n >= 1, got 0",
        ),
        (
            ["watermark", "keygen", "--scheme", "tree-ring", "--out", "k.json", "--shape", "1,8,8", "--param", "rad=2"],
            "tree-ring keys take the parameters channel, radius; got unknown rad",
        ),
        (
            ["watermark", "detect", "--key", "missing.json", "--run", "gaussian:1,8,8", "--images", "."],
            "does not exist",
        ),
        (
            [
                "watermark",
                "keygen",
                "--scheme",
                "tree-ring",
                "--out",
                "k.json",
                "--shape",
                "1,8,8",
                "--param",
                "radius=x",
            ],
            "tree-ring key parameter 'radius' must be an integer, got 'x'",
        ),
        (
            "watermark evaluate --run gaussian:1,8,8 --schemes molm --molm-steps 0 --json x".split(),
            "--molm-steps must be at least 1, got 0",
        ),
        (
            "watermark evaluate --run gaussian:1,8,8 --schemes molm --molm-finetune-steps -1 --json x".split(),
            "--molm-finetune-steps must be at least 0, got -1",
        ),
        (
            "watermark evaluate --run gaussian:1,8,8 --schemes molm --molm-sampler-steps -2 --json x".split(),
            "--molm-sampler-steps must be at least 0, got -2",
        ),
        (
            "watermark keygen --scheme gaussian-shading --out k.json --shape 1,8,8 --param hw_factor=0".split(),
            "gaussian-shading key parameter 'hw_factor' must be a positive integer, got 0",
        ),
    ],
)
def test_user_mistakes_are_one_line_errors(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_attack_reads_16_bit_gray_and_palette_images(tmp_path, monkeypatch, capsys):
    import numpy as np
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    ramp = np.arange(64, dtype=np.uint16).reshape(8, 8) * 4
    Image.fromarray(ramp * 257).save(tmp_path / "a16.png")  # 16-bit gray: 8-bit value v stored as 257 v
    colour = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(colour).quantize(16).save(tmp_path / "pal.png")  # a colour palette image stays colour
    big = tmp_path / "big"
    big.mkdir()
    Image.new("L", (8, 8)).save(big / "b.png")
    for name in ("a16.png", "pal.png"):
        assert _main(["watermark", "attack", "--images", str(tmp_path / name), "--attack", "none", "--out", "o"]) == 0
    got = Image.open("o/a16.png")
    assert got.mode == "L" and np.array_equal(np.asarray(got), ramp.astype(np.uint8))
    assert Image.open("o/pal.png").mode == "RGB"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 16)  # 64 pixels: over twice the limit
    assert _main(["watermark", "attack", "--images", str(big), "--attack", "none", "--out", "o2"]) == 2
    err = capsys.readouterr().err
    assert "b.png" in err and "too large to decode safely" in err and "Traceback" not in err
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    Image.new("L", (8, 8)).save(big / "a16.jpg")  # the same stem as a16.png: one output name for two images
    argv = ["watermark", "attack", "--images", str(tmp_path / "a16.png"), str(big), "--attack", "none", "--out", "o3"]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "would both be written as a16.png" in err[0] and not (tmp_path / "o3").exists()
