"""The command line end to end on tiny runs: train -> sample -> evaluate, methods by flag, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from gencore.testing import check_seed_refused
from genimage.cli import main
from genimage.runs import load_run
from genimage.sampling import generate, sample_noise


def test_train_writes_a_loadable_run(digits_run) -> None:
    for name in ("config.json", "model/model.safetensors", "samples.png", "metrics.jsonl", "loss.png"):
        assert (digits_run / name).is_file(), name
    run = load_run(digits_run)
    assert run.image_shape == (1, 8, 8) and run.num_classes == 10 and run.prediction == "velocity"
    assert not run.model.training and all(not p.requires_grad for p in run.model.parameters())
    x = generate(run, sample_noise(run, 4), torch.tensor([0, 1, 2, 3]), nfe=4, cfg_scale=2.0)
    assert x.shape == (4, 1, 8, 8) and float(x.abs().max()) <= 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_sampling_on_cuda_matches_the_cpu(digits_run) -> None:
    cpu, gpu = load_run(digits_run), load_run(digits_run, device="cuda")
    assert next(gpu.model.parameters()).device.type == "cuda"
    noise, labels = sample_noise(cpu, 4), torch.tensor([0, 1, 2, 3])
    x_cpu = generate(cpu, noise, labels, nfe=4, cfg_scale=2.0)
    x_gpu = generate(gpu, noise, labels, nfe=4, cfg_scale=2.0)
    assert x_gpu.device.type == "cpu"
    torch.testing.assert_close(x_gpu, x_cpu, atol=1e-2, rtol=0)  # cuDNN may use TF32 (10-bit mantissa) convolutions


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_metrics_of_a_run_on_cuda_match_the_cpu(digits_run) -> None:
    """Bits/dim and the feature extractors take CPU images for a run loaded on CUDA (they built their inputs,
    or kept their network, on the CPU: a device mismatch) and agree with the CPU numbers."""
    from genimage.metrics import bits_per_dim, classifier_features, efflite0_features
    from genimage.metrics.classifier import SmallCNN

    cpu, gpu = load_run(digits_run), load_run(digits_run, device="cuda")
    images = generate(cpu, sample_noise(cpu, 4), torch.tensor([0, 1, 2, 3]), nfe=4)
    assert bits_per_dim(gpu, images, steps=4) == pytest.approx(bits_per_dim(cpu, images, steps=4), rel=1e-3)
    f_cpu, f_gpu = efflite0_features(images, input_px=32), efflite0_features(images.to("cuda"), input_px=32)
    torch.testing.assert_close(f_gpu.cpu(), f_cpu, atol=1e-2, rtol=1e-2)
    net = SmallCNN(channels=1, num_classes=10)
    gpu_net = SmallCNN(channels=1, num_classes=10).to("cuda")
    gpu_net.load_state_dict(net.state_dict())
    torch.testing.assert_close(
        classifier_features(gpu_net, images).cpu(), classifier_features(net, images), atol=1e-3, rtol=1e-3
    )


def test_sample_on_cuda_without_cuda_is_one_line(digits_run, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "g.png"
    assert main(["sample", "--run", str(digits_run), "--out", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no usable CUDA device" in err[0] and not out.exists()


def test_a_hand_edited_run_config_is_one_sentence(digits_run, tmp_path, capsys) -> None:
    import shutil

    good = json.loads((digits_run / "config.json").read_text())
    edits = [
        ({"objective": "zzz"}, "field 'objective' must be 'flow' or 'vp'"),  # was silently sampled as flow
        ({"prediction": "noise"}, "field 'prediction' must be 'velocity'"),
        ({"sample_shape": [1, 8]}, "field 'sample_shape' must be three positive integers"),
        ({"t_end": "1"}, "field 't_end' must be a number"),
        ({"t_end": 0.5}, "field 't_end' must be a number, 1.0 for the 'flow' objective, got 0.5"),  # half-noisy
        ({"objective": "vp", "prediction": "noise"}, "field 't_end' must be a number, 0.999 for the 'vp' objective"),
    ]
    for k, (edit, message) in enumerate(edits):
        run = tmp_path / f"run{k}"
        shutil.copytree(digits_run, run, ignore=shutil.ignore_patterns("checkpoints", "samples"))
        (run / "config.json").write_text(json.dumps({**good, **edit}))
        out = tmp_path / "g.png"
        assert main(["sample", "--run", str(run), "--n", "2", "--nfe", "2", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not out.exists()


def test_unwritable_outputs_are_refused_before_sampling(digits_run, tmp_path, capsys) -> None:
    (tmp_path / "file").write_text("occupied")
    for argv, message in [
        (["sample", "--run", str(digits_run), "--out", str(tmp_path / "file" / "g.png")], "argument --out: cannot"),
        (["evaluate", "--run", str(digits_run), "--json", str(tmp_path)], "argument --json:"),
    ]:
        with pytest.raises(SystemExit) as exc:  # a usage error: argparse exits before any work
            main(argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert (tmp_path / "file").read_text() == "occupied"


def test_refusals_that_need_the_run_come_before_sampling_and_writing(digits_run, tmp_path, capsys) -> None:
    grid, individual = tmp_path / "g.png", tmp_path / "each"
    argv = ["sample", "--run", str(digits_run), "--n", "2", "--nfe", "2", "--out", str(grid)]
    assert main([*argv, "--individual", str(individual), "--wav", str(tmp_path / "w"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--wav needs a run trained on --data mel" in err[0]
    assert not grid.exists() and not individual.exists()
    path = tmp_path / "m.json"
    argv = ["evaluate", "--run", str(digits_run), "--n", "4", "--input-px", "16", "--json", str(path), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input size in pixels must be an integer >= 32, got 16" in err[0]
    assert not path.exists()


def test_sample_writes_a_valid_png_grid_and_files(digits_run, tmp_path) -> None:
    out = tmp_path / "grid.png"
    assert (
        main(
            [
                "sample",
                "--run",
                str(digits_run),
                "--n",
                "64",
                "--out",
                str(out),
                "--nfe",
                "4",
                "--individual",
                str(tmp_path / "each"),
            ]
        )
        == 0
    )
    with Image.open(out) as img:
        img.verify()
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > 8 * 10
    assert len(list((tmp_path / "each").glob("*.png"))) == 64


def test_sample_in_batches_draws_the_same_images(digits_run, tmp_path, capsys) -> None:
    """--batch-size bounds the model's memory without changing what is drawn: the same noise, split into batches."""
    from genimage.sampling import sample_images

    run, labels = load_run(digits_run), torch.arange(7) % 10
    whole = sample_images(run, 7, labels, nfe=4, cfg_scale=2.0, solver="euler", seed=3, progress=False)
    split = sample_images(run, 7, labels, nfe=4, cfg_scale=2.0, solver="euler", seed=3, batch_size=3, progress=False)
    torch.testing.assert_close(split, whole, atol=1e-5, rtol=0)
    assert whole.shape == (7, 1, 8, 8)
    base = ["sample", "--run", str(digits_run), "--n", "7", "--nfe", "4", "--seed", "3", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "a.png"), "--individual", str(tmp_path / "a")]) == 0
    assert (
        main([*base, "--batch-size", "2", "--out", str(tmp_path / "b.png"), "--individual", str(tmp_path / "b")]) == 0
    )
    for i in range(7):  # PNG levels may differ by one where float rounding differs between batch shapes
        with Image.open(tmp_path / "a" / f"img-{i:05d}.png") as a, Image.open(tmp_path / "b" / f"img-{i:05d}.png") as b:
            assert int(np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).max()) <= 1
    capsys.readouterr()
    assert main([*base, "--batch-size", "0", "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["genimage: error: --batch-size must be a positive integer, got 0."]
    assert not (tmp_path / "c.png").exists()


def test_sample_grid_format_follows_the_suffix(digits_run, tmp_path, capsys) -> None:
    for name, fmt in (("g.jpg", "JPEG"), ("g.JPEG", "JPEG"), ("g.webp", "WEBP")):
        assert main(["sample", "--run", str(digits_run), "--n", "4", "--out", str(tmp_path / name), "--nfe", "2"]) == 0
        with Image.open(tmp_path / name) as img:
            assert img.format == fmt
    bad = tmp_path / "g.jpgx"
    capsys.readouterr()
    assert main(["sample", "--run", str(digits_run), "--n", "4", "--out", str(bad), "--nfe", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "g.jpgx" in err[0] and ".png" in err[0] and not bad.exists()


def test_evaluate_writes_finite_fd(digits_run, tmp_path, capsys) -> None:
    path = tmp_path / "m.json"
    assert main(["evaluate", "--run", str(digits_run), "--json", str(path), "--n", "3"]) == 2
    assert "needs n >= 4 images" in capsys.readouterr().err and not path.exists()
    code = main(
        [
            "evaluate",
            "--run",
            str(digits_run),
            "--json",
            str(path),
            "--n",
            "40",
            "--nfe",
            "4",
            "--input-px",
            "32",
            "--bpd-images",
            "4",
            "--no-progress",
        ]
    )
    assert code == 0
    m = json.loads(path.read_text())
    for key in (
        "fd_efflite0",
        "kid_efflite0",
        "fd_classifier",
        "precision_knn",
        "recall_knn",
        "bits_per_dim",
        "hf_spectral_error",
    ):
        assert isinstance(m[key], float) and math.isfinite(m[key]), key
    assert 0.0 <= m["precision_knn"] <= 1.0 and m["bits_per_dim"] > 0 and m["bpd_ode"] == "midpoint 64"


def test_existing_run_is_not_overwritten(digits_run, capsys) -> None:
    assert main(["train", "--data", "digits", "--steps", "2", "--out", str(digits_run)]) == 2
    assert "--resume auto" in capsys.readouterr().err
    # resuming the finished run with its own settings trains and rewrites nothing, and says so
    before = {str(p): p.read_bytes() for p in digits_run.rglob("*") if p.is_file()}
    argv = ["train", "--data", "digits", "--steps", "30", "--batch-size", "64", "--out", str(digits_run)]
    assert main([*argv, "--resume", "auto"]) == 0
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    assert {str(p): p.read_bytes() for p in digits_run.rglob("*") if p.is_file()} == before


def test_resume_auto_with_fewer_steps_than_done_is_refused(digits_run, capsys) -> None:
    """--resume auto --steps 10 on a 30-step run used to keep the 30-step model and record "steps": 10."""
    before = {str(p): p.read_bytes() for p in digits_run.rglob("*") if p.is_file()}
    argv = ["train", "--data", "digits", "--steps", "10", "--batch-size", "64", "--out", str(digits_run)]
    assert main([*argv, "--no-progress", "--resume", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already trained 30 steps, more than the 10 asked for" in err[0], err
    assert {str(p): p.read_bytes() for p in digits_run.rglob("*") if p.is_file()} == before


def test_a_latent_run_refused_for_its_backbone_trains_no_vae(tmp_path, capsys) -> None:
    """A backbone setting refused on a latent run stops it before the VAE stage: it used to train and save vae/,
    which the corrected command then reused although its VAE settings differed."""
    args = ["train", "--data", "digits", "--latent", "--vae-steps", "2", "--steps", "2", "--batch-size", "8"]
    args += ["--no-progress", "--sample-nfe", "2"]
    a, b = tmp_path / "a", tmp_path / "b"
    assert main([*args, "--image-size", "12", "--patch-size", "4", "--out", str(a)]) == 2  # latent 6 x 6
    assert main([*args, "--image-size", "16", "--layersync-pairs", "blocks.1:blocks.9", "--out", str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "divisible by the patch size 4" in err[0] and "blocks.9 not found" in err[1], err
    assert not any((d / n).exists() for d in (a, b) for n in ("vae", "vae_train"))
    fixed = [*args, "--image-size", "12", "--vae-steps", "3", "--out", str(a)]  # the last --vae-steps wins
    assert main(fixed) == 0
    assert json.loads((a / "config.json").read_text())["vae_steps"] == 3
    assert [json.loads(r)["step"] for r in (a / "vae_train" / "metrics.jsonl").read_text().splitlines()][-1] == 3


def test_layersync_and_lwd_by_flag(tmp_path) -> None:
    out = tmp_path / "ls"
    args = ["train", "--data", "digits", "--steps", "4", "--batch-size", "16", "--out", str(out), "--no-progress"]
    assert main([*args, "--layersync", "--layersync-pairs", "blocks.0:blocks.2", "--lwd"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert "layersync" in rows[-1] and -1.0 <= rows[-1]["layersync"] <= 1.0
    assert 0.0 < rows[-1]["lwd_mask_fraction"] <= 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["layersync_pairs"] == ["blocks.0:blocks.2"] and config["lwd"] is True


def test_lr_schedule_constant_keeps_the_rate_after_warm_up_and_the_vae_still_decays(tmp_path) -> None:
    args = ["train", "--data", "digits", "--image-size", "12", "--steps", "6", "--batch-size", "8", "--lr", "1e-3"]
    args += ["--warmup-steps", "2", "--latent", "--vae-steps", "6", "--sample-nfe", "2", "--no-progress"]

    def last_lr(log) -> float:
        return [json.loads(line) for line in log.read_text().splitlines()][-1]["lr"]

    for schedule in ("constant", "cosine"):
        out = tmp_path / schedule
        assert main([*args, "--lr-schedule", schedule, "--out", str(out)]) == 0
        assert json.loads((out / "config.json").read_text())["lr_schedule"] == schedule
        assert last_lr(out / "vae_train" / "metrics.jsonl") < 0.5e-3  # the VAE decays either way
        if schedule == "constant":
            assert last_lr(out / "metrics.jsonl") == pytest.approx(1e-3)
        else:
            assert last_lr(out / "metrics.jsonl") < 0.5e-3


def test_layersync_pairs_in_a_config_file_without_layersync_are_refused(tmp_path, capsys) -> None:
    """The flag --layersync-pairs turns LayerSync on; pairs in a YAML file without layersync: true were unused."""
    (tmp_path / "c.yaml").write_text("layersync_pairs: blocks.1:blocks.3\n")
    out = tmp_path / "r"
    argv = ["train", "--data", "digits", "--steps", "2", "--config", str(tmp_path / "c.yaml"), "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "layersync_pairs is set but layersync is false" in err[0] and not out.exists()


def test_latent_unet_vp_run(tmp_path) -> None:
    out = tmp_path / "lat"
    args = ["train", "--data", "digits", "--image-size", "16", "--latent", "--vae-steps", "3", "--model", "unet"]
    args += ["--objective", "vp", "--steps", "3", "--batch-size", "16", "--unconditional", "--no-progress"]
    code = main([*args, "--out", str(out)])
    assert code == 0
    run = load_run(out)
    assert run.vae is not None and run.sample_shape == (4, 8, 8) and run.image_shape == (1, 16, 16)
    assert run.num_classes is None and run.prediction == "noise"
    x = generate(run, sample_noise(run, 2), nfe=2)
    assert x.shape == (2, 1, 16, 16)


def test_user_errors_are_one_line(tmp_path, capsys) -> None:
    assert main(["sample", "--run", str(tmp_path / "missing"), "--out", str(tmp_path / "g.png")]) == 2
    assert main(["train", "--data", "digits", "--objective", "sde", "--out", str(tmp_path / "x")]) == 2
    assert main(["train", "--data", "digits", "--layersync-pairs", "blocks.9", "--out", str(tmp_path / "y")]) == 2
    assert main(["train", "--data", "digits", "--channels", "3", "--out", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all("Traceback" not in line for line in err)
    assert "not a genimage run folder" in err[0] and "objective" in err[1] and "weak:strong" in err[2]
    assert "channels applies to folder, shards and video-folder data" in err[3] and not (tmp_path / "z").exists()


@pytest.mark.slow
def test_acceptance_300_steps(tmp_path) -> None:
    run = tmp_path / "d"
    assert main(["train", "--data", "digits", "--steps", "300", "--out", str(run), "--no-progress"]) == 0
    assert main(["sample", "--run", str(run), "--n", "64", "--out", str(tmp_path / "grid.png")]) == 0
    assert main(["evaluate", "--run", str(run), "--json", str(tmp_path / "m.json"), "--no-progress"]) == 0
    m = json.loads((tmp_path / "m.json").read_text())
    assert math.isfinite(m["fd_efflite0"]) and math.isfinite(m["fd_classifier"])


@pytest.mark.slow
@pytest.mark.distributed
def test_two_process_training(tmp_path) -> None:
    out = tmp_path / "ddp"
    args = ["train", "--data", "digits", "--steps", "4", "--batch-size", "16", "--nproc", "2", "--no-progress"]
    assert main([*args, "--out", str(out)]) == 0
    assert load_run(out).num_classes == 10


@pytest.mark.slow
def test_demo_writes_a_report(tmp_path) -> None:
    assert main(["demo", "--out", str(tmp_path / "report"), "--steps", "20", "--no-progress"]) == 0
    report = tmp_path / "report"
    text = (report / "README.md").read_text()
    for picture in ("real.png", "samples_cfg1.png", "samples_cfg3.png", "spectrum.png", "loss.png"):
        assert (report / picture).is_file() and picture in text
    assert math.isfinite(json.loads((report / "metrics.json").read_text())["fd_efflite0"])


def test_init_from_starts_at_the_runs_weights_at_another_size(digits_run, tmp_path) -> None:
    """A near-zero learning rate leaves the fine-tuned EMA weights at the initial run's, at 16x16 instead of 8x8;
    a fresh run with the same seed and rate stays at its own, different initialisation."""
    args = ["train", "--data", "digits", "--image-size", "16", "--steps", "1", "--batch-size", "8", "--lr", "1e-12"]
    args += ["--warmup-steps", "0", "--sample-nfe", "2", "--no-progress"]
    assert main([*args, "--init-from", str(digits_run), "--out", str(tmp_path / "ft")]) == 0
    assert main([*args, "--out", str(tmp_path / "fresh")]) == 0
    init, tuned, fresh = (load_run(p).model.state_dict() for p in (digits_run, tmp_path / "ft", tmp_path / "fresh"))
    assert all(torch.allclose(tuned[k], init[k], atol=1e-6) for k in init)
    assert not all(torch.allclose(fresh[k], init[k], atol=1e-3) for k in init)
    run = load_run(tmp_path / "ft")
    assert run.image_shape == (1, 16, 16) and run.config["init_from"] == str(digits_run)
    x = generate(run, sample_noise(run, 2), torch.tensor([3, 4]), nfe=2)
    assert x.shape == (2, 1, 16, 16) and bool(torch.isfinite(x).all())


def test_init_from_refuses_another_architecture_or_objective(digits_run, tmp_path, capsys) -> None:
    base = ["train", "--data", "digits", "--steps", "1", "--no-progress", "--init-from", str(digits_run)]
    assert main([*base, "--dit-size", "DiT-S", "--out", str(tmp_path / "a")]) == 2
    assert main([*base, "--objective", "vp", "--out", str(tmp_path / "b")]) == 2
    assert main([*base, "--latent", "--image-size", "16", "--out", str(tmp_path / "c")]) == 2
    assert main([*base[:-1], str(tmp_path / "nowhere"), "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all("Traceback" not in line for line in err)
    assert "same architecture" in err[0] and "hidden" in err[0]
    assert "same objective" in err[1] and "--latent" in err[2] and "not a genimage run folder" in err[3]
    assert not any((tmp_path / n / "model").exists() for n in "abcd")


def test_ctrl_c_in_the_vae_stage_stops_the_run_and_resume_continues_the_vae(tmp_path) -> None:
    """A latent run interrupted while its VAE trains: exit 130, a VAE checkpoint, no vae/ and no backbone;
    --resume auto goes on from that checkpoint (it used to save the half-trained VAE and train the DiT on it)."""
    import signal
    import subprocess
    import sys
    import time

    from gencore.train import find_checkpoints

    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "genimage.cli", "train", "--data", "digits", "--latent", "--vae-steps", "100000"]
    cmd += ["--steps", "2", "--batch-size", "32", "--checkpoint-every", "5", "--no-progress", "--out", str(out)]

    log = out / "vae_train" / "metrics.jsonl"

    def logged() -> list[int]:
        return [json.loads(line)["step"] for line in log.read_text().splitlines()] if log.is_file() else []

    def interrupt(argv: list[str], after: int = 0) -> tuple[int, str]:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        start = time.monotonic()
        while not (find_checkpoints(out / "vae_train" / "checkpoints") and max(logged(), default=0) > after):
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() - start < 120, "the VAE did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read().decode()
        return proc.wait(timeout=60), err

    code, err = interrupt(cmd)
    assert code == 130 and "interrupted: checkpoints are saved under" in err, err[-2000:]
    assert not (out / "vae").exists() and not (out / "model").exists() and not (out / "checkpoints").exists()
    first = int(find_checkpoints(out / "vae_train" / "checkpoints")[0].name.split("-")[1])
    code, err = interrupt([*cmd, "--resume", "auto"], after=max(logged()))
    assert code == 130, err[-2000:]
    steps = logged()
    assert steps == sorted(steps) and steps[-1] > first  # one log, continued past the first checkpoint
    # like --steps, --vae-steps may change on resume: ending the VAE at its newest checkpoint trains the DiT
    last = max(int(c.name.split("-")[1]) for c in find_checkpoints(out / "vae_train" / "checkpoints"))
    at_last = [*cmd[: cmd.index("100000")], str(last), *cmd[cmd.index("100000") + 1 :], "--resume", "auto"]
    done = subprocess.run(at_last, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "vae" / "model.safetensors").is_file() and (out / "model").is_dir()
    assert max(logged()) <= last  # no VAE step past the new count


def test_demo_with_a_bad_step_count_is_refused_before_anything_is_made(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--steps", "0", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == ["genimage: error: steps must be a positive integer, got 0."]
    assert not captured.out and not out.exists()


def test_negative_bpd_images_is_refused_before_any_sampling(digits_run, tmp_path, capsys, monkeypatch) -> None:
    """--bpd-images -1 was taken as 0 (skip) and the command exited 0 after the whole evaluation."""
    import genimage.evaluate

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampled before the bad flag was refused")

    monkeypatch.setattr(genimage.evaluate, "sample_images", no_sampling)
    out = tmp_path / "m.json"
    argv = ["evaluate", "--run", str(digits_run), "--n", "4", "--bpd-images", "-1", "--json", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bpd_images must be 0 (skip) or a positive integer, got -1" in err[0] and not out.exists()


def test_a_run_config_missing_a_field_is_one_clean_sentence(tmp_path, capsys) -> None:
    """The hint ended the sentence twice ("... lacks the field 'image_shape'; was the run finished?.")."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"prediction": "velocity", "objective": "flow"}))
    assert main(["sample", "--run", str(run), "--out", str(tmp_path / "g.png"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    where = str(run / "config.json")
    assert err == [f"genimage: error: {where} lacks the field 'image_shape'; the run may not have finished."], err


@pytest.mark.parametrize("value", ["-1", str(10**20)])
def test_a_seed_outside_the_range_is_refused_before_any_work(tmp_path, capsys, value) -> None:
    """``sample --seed 10**20`` was a traceback from torch's generator; ``sample`` and ``evaluate`` took -1 although
    ``train`` refused it."""
    verbs = [
        ["train", "--data", "digits", "--steps", "1", "--out", str(tmp_path / "run")],
        ["sample", "--run", str(tmp_path / "run"), "--out", str(tmp_path / "g.png")],
        ["evaluate", "--run", str(tmp_path / "run"), "--json", str(tmp_path / "e.json")],
    ]
    check_seed_refused(main, capsys, verbs, value)
    assert list(tmp_path.iterdir()) == []


def test_evaluate_never_writes_its_metrics_over_the_run_config(tmp_path, capsys) -> None:
    """``evaluate --json RUN/config.json`` replaced the run's config with the metrics: the run could not be loaded
    again."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"kept": true}\n')
    target = run / "config.json"
    assert main(["evaluate", "--run", str(run), "--n", "2", "--json", str(target), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"genimage: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would destroy; "
        "choose another --json."
    ]
    assert target.read_text() == '{"kept": true}\n'


@pytest.mark.parametrize("name", ["model/config.json", "vae/config.json"])
def test_evaluate_never_writes_its_metrics_over_the_model_or_vae_config(tmp_path, capsys, name) -> None:
    """``evaluate --json RUN/model/config.json`` replaced the network's config with the metrics (exit 0): the run's
    weights could not be loaded again."""
    target = tmp_path / "run" / name
    target.parent.mkdir(parents=True)
    target.write_text('{"kept": true}\n')
    run = str(tmp_path / "run")
    assert main(["evaluate", "--run", run, "--n", "2", "--json", str(target), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"genimage: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would destroy; "
        "choose another --json."
    ]
    assert target.read_text() == '{"kept": true}\n'


def test_shards_with_a_bad_shard_size_leaves_no_folder(tmp_path, capsys) -> None:
    """--shard-size 0 was refused only after the output folder had been made, which it left behind empty."""
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(images / "a.png")
    for size in ("0", "-2"):
        assert main(["shards", str(images), "--out", str(tmp_path / "s"), "--shard-size", size, "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"genimage: error: shard size must be a positive integer, got {size}."]
        assert not (tmp_path / "s").exists()


def test_sample_never_mixes_its_files_into_an_earlier_samples_folder(digits_run, tmp_path, capsys) -> None:
    """A second ``sample --individual DIR`` with a smaller --n overwrote the first sample's files up to its own --n
    and left the rest: a folder of two samples that read as one, without a word (likewise --wav)."""
    each = tmp_path / "each"
    base = ["sample", "--run", str(digits_run), "--nfe", "2", "--no-progress"]
    assert main([*base, "--n", "4", "--out", str(tmp_path / "a.png"), "--individual", str(each)]) == 0
    before = {p.name: p.read_bytes() for p in each.iterdir()}
    assert sorted(before) == [f"img-{i:05d}.png" for i in range(4)]
    capsys.readouterr()
    again = [*base, "--n", "2", "--seed", "7", "--out", str(tmp_path / "b.png"), "--individual", str(each)]
    assert main(again) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"genimage: error: --individual {str(each)!r} already holds the files of an earlier sample (img-00000.png); "
        "choose a new folder."
    ]
    assert {p.name: p.read_bytes() for p in each.iterdir()} == before and not (tmp_path / "b.png").exists()
    wav = tmp_path / "wav"
    wav.mkdir()
    (wav / "sample-00000.wav").write_bytes(b"RIFF")
    assert main([*base, "--out", str(tmp_path / "c.png"), "--wav", str(wav)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--wav {str(wav)!r} already holds the files of an earlier sample" in err[0], err
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "notes.txt").write_text("mine")  # a folder holding other files is still written into
    assert main([*base, "--n", "2", "--out", str(tmp_path / "d.png"), "--individual", str(tmp_path / "own")]) == 0
    assert sorted(p.name for p in (tmp_path / "own").iterdir()) == ["img-00000.png", "img-00001.png", "notes.txt"]
