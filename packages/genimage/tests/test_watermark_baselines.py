"""Tree-Ring and Gaussian Shading: own marks detected, other marks and clean noise rejected, exact null p-values."""

from __future__ import annotations

import math

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


def test_correlation_pvalue_closed_forms_and_one_dimension() -> None:
    """In D = 3 the cosine with a fixed direction is uniform on [-1, 1] (Archimedes), so p = (1 - cos) / 2; in
    D = 1 it is a fair sign, p = 1/2 when it agrees and 1 when not (scipy's Beta(0, 0) gave NaN)."""
    from genimage.watermark.stats import correlation_pvalue

    z = torch.randn(50, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = torch.tensor([0.3, -1.2, 0.5], dtype=torch.float64)
    cos = (z @ s) / (z.norm(dim=1) * s.norm())
    torch.testing.assert_close(correlation_pvalue(z, s), (1 - cos) / 2, rtol=0, atol=1e-12)
    pv = correlation_pvalue(torch.tensor([[2.0], [-0.5]]), torch.tensor([[3.0], [1.0]]))
    assert pv.tolist() == [0.5, 1.0]


def test_binomial_pvalue_is_the_randomised_upper_tail() -> None:
    from genimage.watermark.stats import binomial_pvalue

    n = 13
    m = torch.arange(n + 1)
    u = torch.rand(n + 1, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    tail = [sum(math.comb(n, j) for j in range(k + 1, n + 1)) / 2**n for k in range(n + 1)]
    want = torch.tensor(tail, dtype=torch.float64) + u * torch.tensor([math.comb(n, k) / 2**n for k in range(n + 1)])
    torch.testing.assert_close(binomial_pvalue(m, n, torch.Generator().manual_seed(4)), want, rtol=0, atol=1e-15)


@pytest.mark.parametrize(("h", "w", "radius"), [(32, 32, 5), (17, 24, 4)])
def test_tree_ring_geometry_and_key_by_brute_force(h: int, w: int, radius: int) -> None:
    """Mask = integer frequencies with |f| < radius; the key is one value per ring floor(|f|), its conjugate at -f;
    the real coordinates of the masked spectrum keep its squared norm (conjugate pairs counted twice)."""
    tr = TreeRingWatermark(new_key("tree-ring", (2, h, w), seed=3, radius=radius, channel=1))
    ring_value: dict[int, complex] = {}
    for i in range(h):
        for j in range(w):
            fy, fx = (i if 2 * i < h else i - h), (j if 2 * j < w else j - w)
            r = math.hypot(fy, fx)
            assert bool(tr.mask[i, j]) == (r < radius)
            if r < radius:
                value = complex(tr.pattern[i, j])
                mirror = complex(tr.pattern[(-i) % h, (-j) % w])
                assert mirror == value.conjugate()
                ring = ring_value.setdefault(int(r), value)
                assert value in (ring, ring.conjugate()) or (fy, fx) == (0, 0)
            else:
                assert complex(tr.pattern[i, j]) == 0
    assert sorted(ring_value) == list(range(radius))
    spec = torch.fft.fft2(torch.randn(3, h, w, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    v = tr._real_vector(spec)
    assert v.shape[-1] == int(tr.mask.sum())
    torch.testing.assert_close(v.square().sum(-1), spec[:, tr.mask].abs().square().sum(-1), rtol=1e-12, atol=0)
    # the score is minus the mean L1 distance to the key on the mask: about 0 on marked noise (float32 rounding)
    marked = tr.detect(tr.embed(3, generator=torch.Generator().manual_seed(1)))
    assert float(marked.score.min()) > -1e-5


def test_gaussian_shading_tiles_the_message_over_blocks() -> None:
    """Block (c // ch_factor, y // hw_factor, x // hw_factor) is cell g (row-major) and carries bit g mod L."""
    gs = GaussianShadingWatermark(
        new_key("gaussian-shading", (4, 8, 12), seed=2, message_bits=5, ch_factor=2, hw_factor=2)
    )
    index = gs.bit_index.reshape(4, 8, 12)
    for c in range(4):
        for y in range(8):
            for x in range(12):
                assert int(index[c, y, x]) == ((c // 2) * 4 * 6 + (y // 2) * 6 + x // 2) % 5


def test_tree_ring_and_gaussian_shading_refuse_degenerate_parameters() -> None:
    # radius 1 keeps only the DC coefficient: its p-values were NaN, and could never fall below 1/2
    with pytest.raises(ConfigError, match=r"radius must be in \[2, 16\)"):
        _tr(radius=1)
    for params in ({"hw_factor": 0}, {"ch_factor": -1}):
        with pytest.raises(ConfigError, match="must be positive integers"):
            _gs(**params)


def test_metric_values_closed_forms() -> None:
    from genimage.watermark.metrics import gaussianity, psnr, tpr_at_fpr

    assert bit_accuracy(torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]]), torch.tensor([1, 0, 1, 0])) == 5 / 8
    marked, clean = torch.tensor([0.001, 0.02, 0.5, 0.0099]), torch.tensor([0.5, 0.009, 0.3, 0.01])
    assert tpr_at_fpr(marked, clean, 0.01) == {"tpr": 0.5, "fpr": 0.25}  # p < alpha: 0.01 itself is not rejected
    assert psnr(torch.zeros(2, 1, 4, 4), torch.full((2, 1, 4, 4), 0.1)) == pytest.approx(10 * math.log10(4 / 0.01))
    # four samples of two coordinates: column means (1, 0), E z^2 = 28/8, E z^3 = 28/8, E z^4 = 148/8, E z0 z1 = 2
    g = gaussianity(torch.tensor([[1.0, 2.0], [1.0, -2.0], [3.0, 2.0], [-1.0, -2.0]]))
    assert g["mean"] == pytest.approx(4**0.5) and g["var"] == pytest.approx(3.5) and g["third"] == pytest.approx(3.5)
    assert g["kurtosis"] == pytest.approx(18.5 / 3.5**2 - 3) and g["cov_offdiag"] == pytest.approx(2 * 4**0.5)


def test_gaussian_shading_majority_vote_ties_give_zero() -> None:
    gs = _gs(seed=1)  # 64 cells of 4 x 4 for 32 bits: every bit has 32 repeats
    repeats = (gs.bit_index == 0).nonzero()[:, 0]
    assert repeats.numel() == 32
    raw = torch.zeros(gs.bit_index.numel(), dtype=torch.int64)
    raw[repeats[:16]] = 1  # bit 0 reads 1 in half of its repeats
    z = (2.0 * ((raw + gs.stream) % 2) - 1.0).reshape(1, *SHAPE)
    assert gs.extract(z)[0].tolist() == [0] * 32
    raw[repeats[16]] = 1
    z = (2.0 * ((raw + gs.stream) % 2) - 1.0).reshape(1, *SHAPE)
    assert gs.extract(z)[0].tolist() == [1] + [0] * 31


def test_tree_ring_key_has_the_power_of_the_white_noise_coefficients_it_replaces() -> None:
    """The reference's ring values are entries of the FFT of a Gaussian draw, at the scale of the noise's own FFT: under
    the orthonormal FFT a white-noise coefficient has E|y|^2 = 1 (Re, Im ~ N(0, 1/2); real ones N(0, 1)), so the
    key's real vector has unit-variance coordinates like the noise's, and the marked noise keeps unit power. Key
    parts of N(0, 1) doubled the power on the mask: key vector E v^2 = 2, marked noise E z^2 = 1.07 at 32 x 32."""
    g = torch.Generator().manual_seed(0)
    key_power, noise_power = [], []
    for seed in range(200):
        tr = _tr(seed=seed, radius=5)
        key_power.append(tr._real_vector(tr.pattern).square().mean())
        noise_power.append(tr.embed(2, generator=g).double().square().mean())
    assert abs(float(torch.stack(key_power).mean()) - 1.0) < 0.15  # standard error 0.04 over 200 keys
    assert abs(float(torch.stack(noise_power).mean()) - 1.0) < 0.015  # standard error 0.0035


@pytest.mark.parametrize("text", ["0x-1", "0x+f", "0xf_f", "0x f", "0x"])
def test_hex_messages_take_hex_digits_only(text: str) -> None:
    """``int(..., 16)`` also takes a sign, ``_`` and spaces: ``0x-1`` was read as eight 1 bits, ``0xf_f`` as 12 bits."""
    from gencore.errors import InputError
    from genimage.watermark.keys import parse_message

    with pytest.raises(InputError, match="not valid hexadecimal"):
        parse_message(text)
    assert parse_message("0x0F") == (0, 0, 0, 0, 1, 1, 1, 1)


def test_noise_metrics_refuse_too_few_draws() -> None:
    from gencore.errors import InputError
    from genimage.watermark.metrics import gaussianity

    # one draw left nothing to train or nothing to test on (it failed inside roc_auc on NaN scores)
    with pytest.raises(InputError, match="at least 2 draws"):
        detectability_auc(torch.randn(1, *SHAPE), torch.randn(1, *SHAPE))
    with pytest.raises(InputError, match="at least one draw"):  # every statistic was NaN
        gaussianity(torch.randn(0, *SHAPE))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
@pytest.mark.parametrize("scheme", ["spherical", "tree-ring", "gaussian-shading"])
def test_detection_takes_noise_on_the_gpu(scheme: str) -> None:
    """The key material lives on the CPU; noise inverted on a GPU used to fail with a device mismatch."""
    from genimage.watermark.schemes import noise_scheme

    wm = noise_scheme(new_key(scheme, SHAPE, seed=3, message_bits=8))
    z = wm.embed(4, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    want = wm.detect(z, generator=torch.Generator().manual_seed(1))
    got = wm.detect(z.to("cuda"), generator=g)
    torch.testing.assert_close(got.pvalue, want.pvalue)
    torch.testing.assert_close(got.score.cpu(), want.score)
