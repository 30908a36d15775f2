"""Target distributions on manifolds: samples against their own densities (exact CDFs), densities normalised."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from gencore.manifolds import VonMisesFisherMixture

MU = torch.tensor([[0.0, 0.6, 0.8]])


def _cos_cdf(kappa: float):
    """CDF of w = mu . x under vMF(kappa) on S^2 (density prop. to exp(kappa w) on [-1, 1]), stable for small kappa."""
    return lambda w: torch.expm1(torch.as_tensor(kappa * (w + 1), dtype=torch.float64)).numpy() / math.expm1(2 * kappa)


@pytest.mark.parametrize("kappa", [1e-17, 1e-6, 0.5, 5.0, 50.0])
def test_vmf_cosines_to_the_mean_and_azimuths_follow_their_exact_distributions(kappa):
    """Inverse-CDF sampling: with exp(-2 kappa) rounded to 1 (kappa below ~1e-16 in float64) every sample sat on the
    mean instead of being uniform."""
    vmf = VonMisesFisherMixture(MU, kappas=[kappa])
    x = vmf.sample(4000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mu = vmf.means[0]
    w = (x @ mu).numpy()
    assert stats.kstest(w, _cos_cdf(kappa)).pvalue > 1e-3
    e1 = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    e2 = torch.linalg.cross(mu, e1)
    phi = torch.atan2(x @ e2, x @ e1).numpy()
    assert stats.kstest(phi, stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kappa", [1e-8, 1e-6, 3.0])
def test_vmf_density_is_normalised_and_accurate_in_every_dtype(kappa, dtype):
    """In float32 the normaliser's 1 - exp(-2 kappa) rounded to 0 at kappa = 1e-8 (an infinite log-density) and was
    3 % off at kappa = 1e-6; the mixture of one component must equal the closed form in float64."""
    vmf = VonMisesFisherMixture(MU, kappas=[kappa])
    n = 200
    lat = (torch.arange(n, dtype=torch.float64) + 0.5) / n * math.pi - math.pi / 2
    lon = (torch.arange(2 * n, dtype=torch.float64) + 0.5) / (2 * n) * 2 * math.pi - math.pi
    la, lo = torch.meshgrid(lat, lon, indexing="ij")
    pts = torch.stack([la.cos() * lo.cos(), la.cos() * lo.sin(), la.sin()], -1).reshape(-1, 3)
    area = (la.cos() * (math.pi / n) * (2 * math.pi / (2 * n))).reshape(-1)
    lp = vmf.log_prob(pts.to(dtype))
    assert torch.isfinite(lp).all()
    mass = float((lp.double().exp() * area).sum())
    assert abs(mass - 1) < 1e-4, mass
    # closed form: kappa exp(kappa (w - 1)) / (2 pi (1 - exp(-2 kappa)))
    w = pts[:5] @ vmf.means[0]
    exact = math.log(kappa) + kappa * (w - 1) - math.log(2 * math.pi) - math.log(-math.expm1(-2 * kappa))
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(lp[:5].double(), exact, rtol=0, atol=tol)
