"""Tree-Ring and Gaussian Shading: own marks detected, other marks and clean noise rejected, exact null p-values."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from gencore.errors import ConfigError
from genimage.watermark.gaussian_shading import GaussianShadingWatermark
from genimage.watermark.keys import new_key
from genimage.watermark.metrics import bit_accuracy, detectability_auc
from genimage.watermark.spherical import SphericalWatermark
from genimage.watermark.tree_ring import TreeRingWatermark, ring_geometry

SHAPE = (1, 32, 32)


def _tr(seed=1, **p):
    return TreeRingWatermark(new_key("tree-ring", SHAPE, seed=seed, **p))


def _gs(seed=1, **p):
    return GaussianShadingWatermark(new_key("gaussian-shading", SHAPE, seed=seed, message_bits=32, **p))


def test_tree_ring_pattern_is_hermitian_so_the_planted_key_is_the_tested_key():
    tr = _tr(radius=5)
    z = tr.embed(3, generator=torch.Generator().manual_seed(0)).double()
    spec = torch.fft.fft2(z[:, 0], norm="ortho")
    # the key is present exactly (up to float32 rounding of the noise) on every masked frequency
    assert torch.allclose(spec[:, tr.mask], tr.pattern[tr.mask].to(spec.dtype).expand(3, -1), atol=1e-5)
    geo = ring_geometry(32, 32, 5)
    assert bool(geo["real"].sum() == 4)  # DC and the three Nyquist frequencies of an even grid


def test_tree_ring_detects_own_mark_and_rejects_other_keys():
    g = torch.Generator().manual_seed(0)
    tr = _tr(seed=1)
    marked = tr.embed(50, generator=g)
    assert float(tr.detect(marked).pvalue.max()) < 1e-6
    # five rings give a small key space: a few key pairs collide, most are told apart
    false_rate = [
        float((tr.detect(_tr(seed=s).embed(10, generator=g)).pvalue < 0.01).double().mean()) for s in range(2, 22)
    ]
    assert sum(false_rate) / len(false_rate) < 0.15
    assert sorted(false_rate)[len(false_rate) // 2] == 0.0
    # noisy marks are still found
    noisy = marked + 0.3 * torch.randn(marked.shape, generator=g)
    assert float((tr.detect(noisy).pvalue < 0.01).double().mean()) == 1.0


def test_tree_ring_null_pvalues_are_uniform():
    """20,000 unmarked white-noise draws, at unit and at another scale (the test needs no variance estimate): a
    KS test finds the p-values uniform and the realised rate at 0.001 is nominal. A plug-in variance failed both."""
    g = torch.Generator().manual_seed(1)
    for scale in (1.0, 0.3):
        pv = _tr(seed=3).detect(scale * torch.randn(20_000, *SHAPE, generator=g, dtype=torch.float64)).pvalue
        assert stats.kstest(pv.numpy(), "uniform").pvalue > 0.01
        assert float((pv < 1e-3).double().mean()) < 1e-3 + 3 * (1e-3 / 20_000) ** 0.5


def test_tree_ring_noise_is_detectable_spherical_is_not():
    g = torch.Generator().manual_seed(2)
    n = 600
    ref = torch.randn(n, *SHAPE, generator=g)
    auc_tr = detectability_auc(_tr(seed=4).embed(n, generator=g), ref)
    auc_sw = detectability_auc(SphericalWatermark(new_key("spherical", SHAPE, seed=4)).embed(n, generator=g), ref)
    assert auc_tr > 0.95
    assert abs(auc_sw - 0.5) < 0.08


def test_gaussian_shading_round_trip_and_rejection():
    g = torch.Generator().manual_seed(0)
    gs = _gs(seed=5)
    msgs = torch.randint(0, 2, (40, 32), generator=g)
    z = gs.embed(40, generator=g, message=msgs)
    assert torch.equal(gs.extract(z), msgs)
    det = gs.detect(gs.embed(20, generator=g))
    assert bit_accuracy(det.bits, gs.key.message_tensor()) == 1.0 and float(det.pvalue.max()) < 1e-50
    other = _gs(seed=6)
    pv = gs.detect(other.embed(300, generator=g)).pvalue
    assert float((pv < 0.01).double().mean()) < 0.05
    # a wrong key flips a key-pair-dependent subset of bits: chance level on average over keys
    accs = [bit_accuracy(_gs(seed=s).extract(z), msgs) for s in range(10, 30)]
    assert abs(sum(accs) / len(accs) - 0.5) < 0.05


def test_gaussian_shading_marginals_are_exact_and_null_pvalues_uniform():
    g = torch.Generator().manual_seed(3)
    gs = _gs(seed=7)
    z = gs.embed(2000, generator=g)
    # each coordinate is a half-normal with a key-fixed sign: |z| is exactly half-normal
    assert stats.kstest(z.abs().flatten()[:20000].numpy(), stats.halfnorm.cdf).pvalue > 0.001
    pv = gs.detect(torch.randn(1500, *SHAPE, generator=g)).pvalue
    assert stats.kstest(pv.numpy(), "uniform").pvalue > 0.001
    # the null is scale-free: a wrong noise variance after inversion does not break calibration
    pv_scaled = gs.detect(3.0 * torch.randn(1500, *SHAPE, generator=g)).pvalue
    assert stats.kstest(pv_scaled.numpy(), "uniform").pvalue > 0.001


def test_bad_parameters_raise_config_errors():
    with pytest.raises(ConfigError, match="radius"):
        _tr(radius=40)
    with pytest.raises(ConfigError, match="must divide"):
        _gs(hw_factor=5)
    with pytest.raises(ConfigError, match="needs a gaussian-shading key"):
        GaussianShadingWatermark(new_key("spherical", SHAPE, seed=1))


def test_metrics_refuse_inputs_that_give_nan_or_broadcast() -> None:
    from gencore.errors import InputError
    from genimage.watermark.metrics import psnr, pvalue_calibration, tpr_at_fpr

    with pytest.raises(InputError, match="one shape"):
        psnr(torch.zeros(2, 1, 4, 4), torch.zeros(1, 1, 4, 4))
    with pytest.raises(InputError, match="one shape"):
        psnr(torch.zeros(2, 1, 4, 4), torch.zeros(1, 4, 4))
    with pytest.raises(ConfigError, match="alpha"):
        tpr_at_fpr(torch.rand(5), torch.rand(5), 2.0)
    with pytest.raises(InputError, match="non-empty"):
        tpr_at_fpr(torch.rand(0), torch.rand(5), 0.01)
    with pytest.raises(InputError, match="p-value"):
        pvalue_calibration(torch.rand(0))
    with pytest.raises(InputError, match="p-value"):
        pvalue_calibration(torch.tensor([0.2, float("nan")]))
    with pytest.raises(InputError, match="at least one"):
        bit_accuracy(torch.zeros(0, 3), torch.tensor([1, 0, 1]))
    with pytest.raises(InputError, match="reference messages"):
        bit_accuracy(torch.zeros(2, 3), torch.zeros(3, 3))


@pytest.mark.parametrize("scheme", ["spherical", "gaussian-shading"])
def test_embed_refuses_non_binary_messages(scheme: str) -> None:
    from gencore.errors import InputError

    key = new_key(scheme, (1, 16, 16), seed=1, message_bits=8)
    wm = SphericalWatermark(key) if scheme == "spherical" else GaussianShadingWatermark(key)
    with pytest.raises(InputError, match="0/1"):
        wm.embed(2, message=torch.full((8,), 2))
