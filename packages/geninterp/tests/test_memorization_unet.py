"""The ReLU U-Net velocity field and the tap-generic memorisation scoring on it."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.flow_matching import FlowMatcher
from geninterp.capture import ActivationCapture
from geninterp.memorization import (
    HEADLINES,
    PAPER_RECIPE,
    PROBE_TIMES,
    SPIKINESS_MEASURES,
    TAPS,
    detection,
    duplicated_training_set,
    make_model,
    pool_rep,
    probe_reps,
    rep_measures,
    sample_with_reps,
    train_flow,
)
from geninterp.memorization_unet import UNET_TAPS, ReLUUNet


def _unet(seed: int = 0) -> ReLUUNet:
    torch.manual_seed(seed)
    return ReLUUNet().eval()


def test_unet_is_a_velocity_field_on_flat_rows():
    model = _unet()
    x = torch.randn(5, 64)
    with torch.no_grad():
        v = model(x, 0.3)
        assert v.shape == (5, 64) and torch.isfinite(v).all()
        torch.testing.assert_close(model(x, torch.full((5,), 0.3)), v)  # scalar t == per-sample t
        assert not torch.allclose(model(x, 0.8), v)  # the time embedding reaches the output
        # GroupNorm is per sample: a sample's velocity does not depend on the rest of the batch
        torch.testing.assert_close(model(x[2:3], 0.3), v[2:3], rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError):
        model(torch.randn(2, 1, 8, 8), 0.3)
    with pytest.raises(ConfigError):
        ReLUUNet(side=6)
    with pytest.raises(ConfigError):
        ReLUUNet(channels=(12, 64))


def test_unet_gradients_reach_every_parameter():
    model = ReLUUNet().train()
    loss = FlowMatcher().loss(model, torch.randn(4, 64), generator=torch.Generator().manual_seed(0))
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing


def test_unet_taps_exist_with_their_shapes_and_are_non_negative():
    model = _unet()
    x = torch.randn(3, 64)
    with torch.no_grad(), ActivationCapture(model, list(UNET_TAPS)) as cap:
        model(x, 0.5)
    shapes = {name: tuple(h.shape) for name, h in cap.outputs.items()}
    assert shapes == {
        "down_blocks.0": (3, 32, 8, 8), "down_blocks.1": (3, 64, 4, 4), "mid_block": (3, 64, 2, 2),
        "up_blocks.0": (3, 64, 4, 4), "up_blocks.1": (3, 32, 8, 8),
    }  # fmt: skip
    for name, h in cap.outputs.items():
        assert h.min() >= 0, name  # ReLU outputs: spikiness measures are defined on them
        assert (h > 0).any(), name
    assert TAPS["unet"] == UNET_TAPS
    for arch in ("mlp", "unet"):  # the named scores exist among the model's taps
        assert PAPER_RECIPE[arch][0] in TAPS[arch] and HEADLINES[arch][0] in TAPS[arch]


def test_pool_rep_is_the_spatial_max_per_channel():
    h = torch.rand(2, 12, 4, 4)
    pooled = pool_rep(h)
    assert pooled.shape == (2, 12)
    for b in range(2):
        for c in range(12):
            assert pooled[b, c] == h[b, c].max()
    flat = torch.rand(5, 7)
    assert pool_rep(flat) is flat
    got = rep_measures(h)
    for name, fn in SPIKINESS_MEASURES.items():
        torch.testing.assert_close(got[name], fn(pooled))


def test_unet_sampling_reads_every_tap_and_steering_edits_the_chosen_one():
    model = _unet()
    noise = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    x, spikes = sample_with_reps(model, noise, nfe=3, taps=UNET_TAPS)
    assert x.shape == (4, 64)
    assert set(spikes) == set(UNET_TAPS)
    for by in spikes.values():
        assert set(by) == set(SPIKINESS_MEASURES) and all(v.shape == (3, 4) for v in by.values())
    same, _ = sample_with_reps(model, noise, nfe=3, steer=torch.zeros(64, 2, 2), taps=UNET_TAPS, steer_tap="mid_block")
    moved, _ = sample_with_reps(model, noise, nfe=3, steer=torch.ones(64, 2, 2), taps=UNET_TAPS, steer_tap="mid_block")
    torch.testing.assert_close(same, x)
    assert not torch.allclose(moved, x)
    # the probe at t = 1 reads the sample itself: std of the max-pooled up_blocks.0 map
    probe = probe_reps(model, x, times=(1.0,), draws=2, generator=torch.Generator().manual_seed(1), taps=UNET_TAPS)
    with torch.no_grad(), ActivationCapture(model, ["up_blocks.0"]) as cap:
        model(x, torch.tensor(1.0))
    torch.testing.assert_close(probe["up_blocks.0"]["std"][0], cap.outputs["up_blocks.0"].amax((2, 3)).std(-1))


def test_tiny_unet_training_run_lowers_the_flow_matching_loss():
    rows, *_ = duplicated_training_set(seed=0)

    def loss(model):
        with torch.no_grad():
            return float(FlowMatcher().loss(model, rows, generator=torch.Generator().manual_seed(3)))

    torch.manual_seed(0)
    before = loss(make_model("unet", 64).eval())
    trained = train_flow(rows, 30, 0, False, arch="unet")
    assert isinstance(trained, ReLUUNet)
    after = loss(trained)
    assert after < 0.8 * before


def test_detection_record_covers_every_tap_measure_and_window():
    rec, _ = detection(n_samples=24, nfe=4, model=_unet(), arch="unet")
    windows = {"early", "middle", "late", *(f"final, t={t}" for t in PROBE_TIMES)}
    keys = {(r["tap"], r["measure"], r["window"]) for r in rec["scores"]}
    assert keys == {(tap, m, w) for tap in UNET_TAPS for m in SPIKINESS_MEASURES for w in windows}
    assert rec["model"] == "unet" and rec["samples"] == 24 and 0 <= rec["memorised_samples"] <= 24
    assert set(rec["auroc_pixel_control"]) == set(SPIKINESS_MEASURES)
    for r in rec["scores"]:
        assert math.isnan(r["auroc"]) or 0 <= r["auroc"] <= 1


def test_unknown_model_and_non_square_rows_are_config_errors():
    with pytest.raises(ConfigError):
        make_model("dit", 64)
    with pytest.raises(ConfigError):
        make_model("unet", 60)
    with pytest.raises(ConfigError):
        detection(arch="transformer")


def test_cli_memorization_flags(capsys):
    from geninterp.cli import build_parser, main

    args = build_parser().parse_args(["memorization", "--model", "unet", "--seeds", "0,1,2", "--experiments", "detect"])
    assert args.model == "unet" and args.seeds == "0,1,2"
    assert build_parser().parse_args(["memorization"]).model == "mlp"  # the default stays the MLP
    assert main(["memorization", "--model", "unet", "--seeds", "0,1"]) == 2  # several seeds: detect only
    assert main(["memorization", "--seeds", "zero", "--experiments", "detect"]) == 2
    assert main(["memorization", "--steps", "0", "--experiments", "detect"]) == 2
    err = capsys.readouterr().err
    assert "--experiments detect" in err and "--seeds must be comma-separated integers" in err
    assert "training steps must be a positive integer" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["memorization", "--model", "dit"])
