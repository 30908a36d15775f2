"""Video end to end on a tiny Moving MNIST run: train -> sample (GIF, frame rows) -> evaluate, and the refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from PIL import Image

from genimage.cli import main
from genimage.config import ImageTrainConfig
from genimage.evaluate import clip_motion
from genimage.runs import load_run
from genimage.sampling import generate, sample_noise

TRAIN = ["train", "--data", "moving-mnist", "--image-size", "16", "--frames", "4", "--patch-size", "4"]
TRAIN += ["--steps", "6", "--batch-size", "8", "--sample-nfe", "2", "--no-progress"]


@pytest.fixture(scope="module")
def video_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("video") / "run"
    assert main([*TRAIN, "--out", str(out)]) == 0
    return out


def test_a_video_run_trains_samples_and_reloads(video_run, tmp_path) -> None:
    run = load_run(video_run)
    assert run.image_shape == (1, 4, 16, 16) and run.model.kind == "video-dit" and run.num_classes is None
    x = generate(run, sample_noise(run, 3), nfe=2)
    assert x.shape == (3, 1, 4, 16, 16) and float(x.abs().max()) <= 1.0
    for name in ("samples.png", "samples.gif", "loss.png", "metrics.jsonl"):
        assert (video_run / name).is_file(), name
    gif = tmp_path / "v.gif"
    assert main(["sample", "--run", str(video_run), "--n", "4", "--nfe", "2", "--out", str(gif)]) == 0
    with Image.open(gif) as im:
        assert im.n_frames == 4  # one GIF frame per video frame, each a grid of the 4 videos
    rows = tmp_path / "rows.png"
    assert main(["sample", "--run", str(video_run), "--n", "3", "--nfe", "2", "--out", str(rows)]) == 0
    with Image.open(rows) as im:  # 3 rows (videos) of 4 frames, 1-pixel padding, enlarged by an integer factor
        scale = im.size[0] // (4 * 17 + 1)
        assert scale >= 1 and im.size == (scale * (4 * 17 + 1), scale * (3 * 17 + 1))


def test_evaluate_scores_frames_and_motion(video_run, tmp_path) -> None:
    out = tmp_path / "m.json"
    argv = ["evaluate", "--run", str(video_run), "--n", "6", "--nfe", "2", "--input-px", "32", "--bpd-images", "2"]
    assert main([*argv, "--json", str(out), "--no-progress"]) == 0
    rec = json.loads(out.read_text())
    for key in ("fd_efflite0", "kid_efflite0", "motion_w1", "fd_efflite0_diff", "bits_per_dim", "spectral_error"):
        assert math.isfinite(rec[key]), key
    assert rec["motion_real"] > 0 and rec["n_samples"] == 6 and "fd_classifier" not in rec


def test_watermarking_a_video_run_is_one_sentence(video_run, tmp_path, capsys) -> None:
    argv = ["watermark", "keygen", "--scheme", "tree-ring", "--run", str(video_run), "--out", str(tmp_path / "k.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generates videos [1, 4, 16, 16]; the watermark schemes mark images" in err[0]


def test_clip_motion_is_the_mean_absolute_frame_difference() -> None:
    still = torch.zeros(2, 1, 5, 4, 4)
    assert clip_motion(still).tolist() == [0.0, 0.0]
    ramp = torch.arange(5.0).view(1, 1, 5, 1, 1).expand(1, 1, 5, 4, 4) * 0.25  # +0.25 per frame everywhere
    assert clip_motion(ramp).item() == pytest.approx(0.25)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "unet"], "video data (moving-mnist) trains the video DiT"),
        (["--lwd"], "drop --lwd for video data"),
        (["--latent"], "videos train in pixels"),
        (["--frames", "1"], "frames must be at least 2"),
        (["--temporal-patch", "3"], "temporal_patch must be a positive divisor of frames (4)"),
        (["--video-attention", "axial"], "unknown video attention 'axial'; expected one of: full, factorised"),
    ],
)
def test_video_settings_that_do_not_apply_are_one_sentence(tmp_path, capsys, extra, message) -> None:
    assert main([*TRAIN, *extra, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_factorised_attention_trains_and_reloads(tmp_path) -> None:
    out = tmp_path / "f"
    assert main([*TRAIN, "--video-attention", "factorised", "--out", str(out)]) == 0
    run = load_run(out)
    assert run.model.config["attention"] == "factorised"
    assert json.loads((out / "config.json").read_text())["video_attention"] == "factorised"
    assert generate(run, sample_noise(run, 2), nfe=2).shape == (2, 1, 4, 16, 16)


def test_frames_on_image_data_and_gif_for_image_runs_are_refused(digits_run, tmp_path, capsys) -> None:
    with pytest.raises(Exception, match="frames applies to video data"):
        ImageTrainConfig(data="digits", frames=4).validate()
    with pytest.raises(Exception, match="video_attention applies to video data"):
        ImageTrainConfig(data="digits", video_attention="full").validate()
    assert main(["sample", "--run", str(digits_run), "--n", "2", "--out", str(tmp_path / "x.gif")]) == 2
    assert "a .gif grid is for video runs" in capsys.readouterr().err


def test_a_video_run_fine_tunes_from_a_video_run_only(video_run, digits_run, tmp_path, capsys) -> None:
    base = [a if a != "16" else "24" for a in TRAIN]  # another frame size: the positions are fixed tables
    assert main([*base, "--steps", "1", "--init-from", str(video_run), "--out", str(tmp_path / "ft")]) == 0
    assert load_run(tmp_path / "ft").image_shape == (1, 4, 24, 24)
    capsys.readouterr()
    assert main([*TRAIN, "--init-from", str(digits_run), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "its dit backbone differs from this run's video-dit" in err and not (tmp_path / "bad" / "model").exists()


@pytest.mark.parametrize(
    ("name", "content", "said"),
    [("bad.gif", b"GIF89a" + bytes(20), "not a readable"), ("short.npy", None, "holds 3 frames, fewer than the 4")],
)
def test_a_bad_video_file_stops_the_command_line_with_one_sentence_naming_it(
    tmp_path, capsys, name, content, said
) -> None:
    import numpy as np

    root = tmp_path / "clips"
    root.mkdir()
    rng = np.random.default_rng(0)
    np.save(root / "good.npy", rng.integers(0, 256, (4, 8, 8), dtype=np.uint8))
    if content is None:
        np.save(root / name, rng.integers(0, 256, (3, 8, 8), dtype=np.uint8))
    else:
        (root / name).write_bytes(content)
    args = ["train", "--data", "video-folder", "--data-path", str(root), "--image-size", "8", "--frames", "4"]
    args += ["--patch-size", "4", "--steps", "1", "--batch-size", "2", "--no-progress", "--out", str(tmp_path / "r")]
    assert main(args) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(root / name) in err[0] and said in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "r" / "checkpoints").exists()
