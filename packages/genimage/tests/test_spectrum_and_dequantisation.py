"""Oracles for the radially averaged power spectrum (a brute-force DFT on non-square images) and for the
dequantisation that bits/dim feeds the likelihood (image and video layouts, the dimension count)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from genimage.metrics import bits_per_dim, radial_power_spectrum, spectral_errors
from genimage.models import ImageBackbone
from genimage.runs import LoadedRun


def _brute_force_spectrum(x: np.ndarray) -> np.ndarray:
    """``P(r)`` from the module docstring by explicit DFT sums: signed integer frequencies, rings round(|k|)."""
    h, w = x.shape[-2:]
    yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    r_max = min(h, w) // 2
    sums, counts = np.zeros(r_max + 1), np.zeros(r_max + 1)
    for ky in range(-(h // 2), (h + 1) // 2):
        for kx in range(-(w // 2), (w + 1) // 2):
            r = round(math.hypot(ky, kx))
            if r > r_max:
                continue
            basis = np.exp(-2j * math.pi * (ky * yy / h + kx * xx / w))
            power = np.abs((x * basis).sum(axis=(-2, -1))) ** 2 / (h * w)
            sums[r] += power.mean()
            counts[r] += 1
    return sums / counts


@pytest.mark.parametrize("shape", [(2, 3, 6, 10), (2, 1, 9, 8)])
def test_radial_power_spectrum_matches_a_brute_force_dft_on_non_square_images(shape) -> None:
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1
    got = radial_power_spectrum(x.float()).numpy()
    want = _brute_force_spectrum(x.float().double().numpy())
    assert got.shape == (min(shape[-2:]) // 2 + 1,)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("size", [(6, 10), (8, 8)])  # r_max = 3 (odd) and 4 (even)
def test_spectral_errors_average_the_right_rings(size) -> None:
    g = torch.Generator().manual_seed(2)
    a = torch.rand(4, 1, *size, generator=g) * 2 - 1
    b = torch.nn.functional.avg_pool2d(torch.rand(4, 1, *size, generator=g) * 2 - 1, 3, stride=1, padding=1)
    diff = np.abs(
        np.log10(_brute_force_spectrum(a.double().numpy())) - np.log10(_brute_force_spectrum(b.double().numpy()))
    )
    r_max = min(size) // 2
    got = spectral_errors(a, b)
    assert got["spectral_error"] == pytest.approx(diff[1:].mean(), rel=1e-9)  # rings r >= 1
    assert got["hf_spectral_error"] == pytest.approx(diff[np.arange(r_max + 1) > r_max / 2].mean(), rel=1e-9)


class _Zero(ImageBackbone):
    kind = "zero-test"

    def __init__(self) -> None:
        super().__init__()
        self.config, self.num_classes = {}, None
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, t, y=None):
        return torch.zeros_like(x)


@pytest.mark.parametrize("shape", [(3, 4, 2), (3, 4, 2, 2)])  # images [C, H, W] and videos [C, T, H, W]
def test_bits_per_dim_dequantises_each_pixel_in_its_own_bin_and_counts_every_dimension(shape, monkeypatch) -> None:
    """The likelihood must see ``y = (u + U) / 127.5 - 1`` pixel by pixel in the layout of ``images`` (a video's
    channels and frames not interleaved), and bits/dim divides by ``D = prod(shape)``."""
    import genimage.metrics.likelihood as lik

    run = LoadedRun.from_parts(
        _Zero(),
        {"prediction": "velocity", "objective": "flow", "image_shape": list(shape), "sample_shape": list(shape)}
        | {"t_end": 1.0, "num_classes": None},
    )
    n = 3
    u = torch.randint(0, 256, (n, *shape), generator=torch.Generator().manual_seed(4))
    images = u.float() / 127.5 - 1.0  # on the 8-bit grid: to_uint8 gives back u exactly
    seen = {}

    def fake_log_likelihood(model, y, **kwargs):
        seen["y"] = y
        return SimpleNamespace(log_prob=-0.5 * y.double().flatten(1).square().sum(1))

    monkeypatch.setattr(lik, "log_likelihood", fake_log_likelihood)
    bpd = bits_per_dim(run, images, seed=0)
    y = seen["y"]
    assert y.shape == images.shape
    offset = (y.double() - images.double()) * 127.5  # U[0, 1) in pixel units
    assert float(offset.min()) >= -1e-5 and float(offset.max()) < 1 + 1e-5 and float(offset.std()) > 0.2
    d = math.prod(shape)
    expected = float(((0.5 * y.double().flatten(1).square().sum(1) + d * math.log(127.5)) / (d * math.log(2))).mean())
    assert bpd == pytest.approx(expected, rel=1e-9)


class _Shrink(ImageBackbone):
    """The flow from N(0, I) at t = 0 to N(0, s^2 I) at t = 1: ``x_t = (1 - t + t s) z``,
    ``v = (s - 1) x / (1 - t + t s)``."""

    kind = "shrink-test"
    scale = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.config, self.num_classes = {}, None
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, x, t, y=None):
        t = torch.as_tensor(t, dtype=x.dtype).reshape(-1, *([1] * (x.dim() - 1)))
        return (self.scale - 1) / (1 - t + t * self.scale) * x


def test_bits_per_dim_of_an_analytic_flow_is_the_gaussian_code_length() -> None:
    """Through the real likelihood ODE (no stand-in): the data density at t = 1 is N(0, s^2 I), so bits/dim is
    ``(-log N(y; 0, s^2 I) + D log 127.5) / (D log 2)`` on the dequantised ``y`` (integrating the wrong way, or
    dropping the Jacobian constant, is off by bits)."""
    shape = (1, 4, 4)
    run = LoadedRun.from_parts(
        _Shrink(),
        {"prediction": "velocity", "objective": "flow", "image_shape": list(shape), "sample_shape": list(shape)}
        | {"t_end": 1.0, "num_classes": None},
    )
    u = torch.randint(0, 256, (3, *shape), generator=torch.Generator().manual_seed(0))
    bpd = bits_per_dim(run, u.float() / 127.5 - 1.0, method="rk4", steps=64, seed=0)
    # the dequantisation noise is the first draw of the seeded generator (as the dequantisation test pins)
    noise = torch.rand(u.shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y = ((u.double() + noise) / 127.5 - 1.0).float().double().flatten(1)
    d, s = y.shape[1], _Shrink.scale
    log_p = -0.5 * (y / s).square().sum(1) - d * math.log(s) - 0.5 * d * math.log(2 * math.pi)
    assert bpd == pytest.approx(float(((-log_p + d * math.log(127.5)) / (d * math.log(2))).mean()), rel=1e-5)
