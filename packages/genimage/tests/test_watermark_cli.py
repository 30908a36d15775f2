"""The ``genimage watermark`` command on the exact analytic flow (no trained model needed)."""

from __future__ import annotations

import json

import pytest

from gencore.command import package_parser, run
from gencore.testing import check_seed_refused
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
    assert data["config"]["fd"] is False and data["config"]["n"] == 16
    assert "guidance_scale" not in data["config"] and "molm_fidelity" not in data["config"]  # schemes not run
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
    assert out.with_suffix(".examples.png").stat().st_size > 0


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
            "watermark evaluate --run gaussian:1,8,8 --schemes molm --molm-fidelity -0.5 --json x".split(),
            "--molm-fidelity must be a finite number >= 0, got -0.5",
        ),
        (
            "watermark keygen --scheme gaussian-shading --out k.json --shape 1,8,8 --param hw_factor=0".split(),
            "gaussian-shading key parameter 'hw_factor' must be a positive integer, got 0",
        ),
        (  # accepted before, and the NaN images scored after HiDDeN had trained
            "watermark evaluate --run gaussian:1,8,8 --schemes guidance --guidance-scale nan --json x".split(),
            "--guidance-scale must be a finite number >= 0, got nan",
        ),
        *[  # exit 0 before: 1.5 called every image marked, NaN none
            (
                f"watermark detect --key k.json --run gaussian:1,8,8 --images . --alpha {alpha}".split(),
                f"--alpha must be a p-value threshold in (0, 1), got {alpha}",
            )
            for alpha in ("0.0", "1.5", "nan", "-1.0")
        ],
    ],
)
def test_user_mistakes_are_one_line_errors(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("flag", ["--json", "--markdown", "--figure", "--examples"])
def test_evaluate_checks_every_output_before_it_runs(flag, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["watermark", "evaluate", "--run", "gaussian:1,8,8", "--json", "x.json", flag, "."]
    with pytest.raises(SystemExit) as exc:  # argparse's exit, before any image is made
        _main(argv)
    assert exc.value.code == 2
    assert f"argument {flag}: '.' is a folder; name a file to write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


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


def test_evaluate_compares_every_set_with_one_independent_unmarked_reference():
    """Quality is measured against a third, independent unmarked set; asking for it changes no other number."""
    import torch

    from genimage.watermark.evaluate import EvaluationConfig, ImageScheme, evaluate_watermarks
    from genimage.watermark.generators import GaussianFlowGenerator
    from genimage.watermark.spherical import Detection

    class Shift(ImageScheme):  # marks by a constant shift of 0.02: PSNR 10 log10(4 / 0.02^2) = 40 dB
        name = "shift"
        message = torch.tensor([1.0, 0.0])

        def mark(self, gen, noise, clean):
            return clean + 0.02

        def detect(self, images):
            score = images.flatten(1).mean(1)
            return Detection(score=score, pvalue=torch.full_like(score, 0.5), bits=self.message.expand(len(images), 2))

    gen = GaussianFlowGenerator(torch.zeros(1, 16, 16), torch.full((1, 16, 16), 0.5))
    cfg = EvaluationConfig(n=16, message_bits=16, noise_samples=64, progress=False)
    references = []

    def gap(images, reference):
        references.append(reference)
        return {"gap": float((images - reference).abs().mean())}

    schemes = ["spherical", "gaussian-shading", Shift()]
    plain = evaluate_watermarks(gen, schemes, ["none", "jpeg75"], cfg)
    examples: dict = {}
    rated = evaluate_watermarks(gen, schemes, ["none", "jpeg75"], cfg, quality=gap, examples=examples)
    assert list(examples) == ["unmarked", "spherical", "gaussian-shading", "shift"]
    assert all(x.shape == (8, 1, 16, 16) for x in examples.values())
    assert torch.equal(examples["shift"], examples["unmarked"] + 0.02)  # image schemes mark the same noise
    assert not torch.allclose(examples["spherical"], examples["unmarked"], atol=0.1)  # their own noise
    assert len(references) == 4 and all(torch.equal(r, references[0]) for r in references)
    for p, r in zip(plain, rated, strict=True):
        timing = {k for k in p if k.endswith("seconds_per_image")}
        assert {k: v for k, v in r.items() if k not in timing and not k.startswith("gap")} == {
            k: v for k, v in p.items() if k not in timing
        }
    # samples are 0.5 z, so two independent sets differ by E|0.5 (z - z')| = 0.5 * 2 / sqrt(pi) = 0.564 on average;
    # a reference that were the unmarked set itself would give 0, the shifted set's pairs 0.02
    for r in rated:
        assert abs(r["gap_unmarked"] - 0.564) < 0.06 and abs(r["gap"] - 0.564) < 0.06
    shift = [r for r in rated if r["scheme"] == "shift"]
    assert [r["psnr"] for r in shift] == pytest.approx([40.0, 40.0], abs=1e-4)  # float32 shift
    assert all("psnr" not in r for r in rated if r["scheme"] != "shift")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "0"], "the number of ODE steps (--steps) must be a positive integer, got 0"),
        (["--steps", "-3"], "the number of ODE steps (--steps) must be a positive integer, got -3"),
        (["--solver", "bogus"], "unknown solver 'bogus'; expected one of: euler, midpoint, heun, rk4"),
    ],
)
def test_bad_steps_or_solver_on_the_exact_generator_are_refused(flags, message, tmp_path, capsys):
    """The exact gaussian: generator never solves in embed/detect, so --steps 0 and an unknown --solver were
    accepted there (exit 0) and failed, if at all, only in a later regeneration attack or trained marker."""
    key = tmp_path / "k.json"
    argv = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,8,8", "--bits", "4", "--out", str(key)]
    assert _main(argv) == 0
    capsys.readouterr()
    out = tmp_path / "marked"
    assert (
        _main(
            ["watermark", "embed", "--key", str(key), "--run", "gaussian:1,8,8", "--n", "2", "--out", str(out), *flags]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_embed_never_writes_into_an_earlier_embed(tmp_path, capsys):
    """A second embed into one --out left the first embed's extra images beside the second's noise.safetensors: a
    folder whose images and noise disagree, which detect then read as one set."""
    key = tmp_path / "k.json"
    argv = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,8,8", "--bits", "4", "--out", str(key)]
    assert _main(argv) == 0
    out = tmp_path / "m"
    embed = ["watermark", "embed", "--key", str(key), "--run", "gaussian:1,8,8", "--out", str(out)]
    assert _main([*embed, "--n", "3"]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert _main([*embed, "--n", "2", "--seed", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{str(out)!r} already holds marked images" in err[0], err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_bad_molm_option_is_refused_before_hidden_trains(tmp_path, monkeypatch, capsys):
    """With --schemes hidden,molm the shared HiDDeN trained first and --molm-steps 0 was refused only afterwards."""
    import genimage.watermark.image_schemes

    def no_training(*args, **kwargs):
        raise AssertionError("HiDDeN trained before the bad option was refused")

    monkeypatch.setattr(genimage.watermark.image_schemes, "train_for_generator", no_training)
    argv = "watermark evaluate --run gaussian:1,8,8 --schemes hidden,molm --molm-steps 0 --n 2 --attacks none".split()
    assert _main([*argv, "--json", str(tmp_path / "x.json"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--molm-steps must be at least 1, got 0" in err[0], err


def test_keygen_never_replaces_an_existing_key(tmp_path, capsys):
    """A second keygen to the same --out replaced the key (by default with fresh random bits): the images marked
    with the first key could no longer be detected."""
    key = tmp_path / "k.json"
    argv = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,8,8", "--bits", "4", "--out", str(key)]
    assert _main(argv) == 0
    before = key.read_bytes()
    capsys.readouterr()
    assert _main([*argv, "--seed", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"genimage: error: key file {str(key)!r} already exists; a key is never overwritten, so name a new --out."
    ]
    assert key.read_bytes() == before


def test_detect_and_attack_never_write_over_their_inputs(tmp_path, capsys):
    """``detect --json`` naming the key replaced the key with the detections; ``attack --out`` naming the folder of
    the images replaced the originals with their attacked copies."""
    key = tmp_path / "k.json"
    argv = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,8,8", "--bits", "4", "--out", str(key)]
    assert _main(argv) == 0
    assert (
        _main(
            [
                "watermark",
                "embed",
                "--key",
                str(key),
                "--run",
                "gaussian:1,8,8",
                "--n",
                "2",
                "--out",
                str(tmp_path / "m"),
            ]
        )
        == 0
    )
    images = tmp_path / "m" / "images"
    first = sorted(images.iterdir())[0]
    before = {p: p.read_bytes() for p in [key, *images.iterdir()]}
    capsys.readouterr()
    detect = ["watermark", "detect", "--key", str(key), "--run", "gaussian:1,8,8", "--images"]
    for target, inputs in ((key, [str(images)]), (first, [str(first)]), (first, [str(images)])):
        assert _main([*detect, *inputs, "--json", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"genimage: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would "
            "destroy; choose another --json."
        ]
    for inputs in ([str(images)], [str(first)]):
        assert _main(["watermark", "attack", "--images", *inputs, "--attack", "jpeg75", "--out", str(images)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"genimage: error: --out {str(images)!r} would overwrite the input image {str(first)!r}; choose another "
            "folder."
        ]
    assert {p: p.read_bytes() for p in [key, *images.iterdir()]} == before


@pytest.mark.parametrize("value", ["-1", str(10**20)])
def test_a_seed_outside_the_range_is_refused_by_every_verb_that_draws_noise(tmp_path, capsys, value):
    """--seed 10**20 was a traceback from torch's generator in embed, attack and detect."""
    gen = ["--run", "gaussian:1,8,8"]
    verbs = [
        ["embed", "--key", "k.json", *gen, "--out", str(tmp_path / "m")],
        ["attack", "--images", "a.png", "--attack", "noise", "--out", str(tmp_path / "a")],
        ["detect", "--key", "k.json", *gen, "--images", "a.png"],
        ["evaluate", *gen, "--json", str(tmp_path / "e.json")],
    ]
    check_seed_refused(_main, capsys, [["watermark", *verb] for verb in verbs], value)
    assert list(tmp_path.iterdir()) == []


def test_keygen_sizes_the_message_by_bits_when_both_are_given(tmp_path, capsys):
    """--bits was dropped whenever --message was given: ``--message 0x1 --bits 8`` made a 4-bit key and
    ``--message 0101 --bits 8`` a 4-bit key without a word."""
    base = ["watermark", "keygen", "--scheme", "spherical", "--shape", "1,16,16", "--seed", "1"]
    assert _main([*base, "--message", "0x1", "--bits", "8", "--out", str(tmp_path / "a.json")]) == 0
    assert json.loads((tmp_path / "a.json").read_text())["message"] == "00000001"
    assert _main([*base, "--message", "0x1", "--out", str(tmp_path / "b.json")]) == 0  # the hex digits' own length
    assert json.loads((tmp_path / "b.json").read_text())["message"] == "0001"
    assert _main([*base, "--bits", "8", "--out", str(tmp_path / "c.json")]) == 0
    assert len(json.loads((tmp_path / "c.json").read_text())["message"]) == 8
    assert _main([*base, "--out", str(tmp_path / "d.json")]) == 0
    assert len(json.loads((tmp_path / "d.json").read_text())["message"]) == 32
    capsys.readouterr()
    for message, error in (("0101", "message '0101' has 4 bits, expected 8"), ("0x1ff", "does not fit in 8 bits")):
        assert _main([*base, "--message", message, "--bits", "8", "--out", str(tmp_path / "e.json")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and error in err[0], err
    assert not (tmp_path / "e.json").exists()


def test_evaluate_rows_do_not_depend_on_the_other_schemes():
    """An initial-noise scheme's records are the same evaluated alone or after other schemes (its marks come
    from a stream of its own), so a table's row can be re-measured with that scheme alone."""
    import torch

    from genimage.watermark.evaluate import EvaluationConfig, evaluate_watermarks
    from genimage.watermark.generators import GaussianFlowGenerator

    gen = GaussianFlowGenerator(torch.zeros(1, 16, 16), torch.full((1, 16, 16), 0.5))
    cfg = EvaluationConfig(n=16, message_bits=16, noise_samples=64, progress=False)
    alone = evaluate_watermarks(gen, ["tree-ring"], ["none", "blur"], cfg)
    after = evaluate_watermarks(gen, ["spherical", "gaussian-shading", "tree-ring"], ["none", "blur"], cfg)
    after = [r for r in after if r["scheme"] == "tree-ring"]
    for a, b in zip(alone, after, strict=True):
        timing = {k for k in a if k.endswith("seconds_per_image")}
        assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}
