"""Information-Estimation Metric: analytic Gaussian and mixture cases, and the Brownian path."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError, InputError
from geninterp.iem import (
    GaussianDenoiser,
    GaussianMixtureDenoiser,
    brownian_path,
    gaussian_identity_check,
    information_estimation_metric,
    log_spaced_snr,
    random_gaussian,
)
from geninterp.iem_experiments import _mixture_1d, mixture_reference, mixture_report


@pytest.mark.parametrize("dim", [1, 3, 16])
def test_gaussian_iem_is_mahalanobis(dim):
    rec = gaussian_identity_check(dim=dim, n_pairs=12, seed=dim, n_levels=256)
    assert rec["passed"] and rec["max_rel_error"] < 1e-3


@pytest.mark.parametrize(("dim", "pairs"), [(0, 4), (3, 0)])
def test_gaussian_check_refuses_empty_problems(dim, pairs):
    with pytest.raises(ConfigError, match="dim >= 1 and n_pairs >= 1"):
        gaussian_identity_check(dim=dim, n_pairs=pairs)


def test_gaussian_truncated_integral_matches_closed_form():
    """Without the end corrections' range, int_{a}^{b} of (1 + g l)^{-2} is (b - a) / ((1 + a l)(1 + b l))."""
    mean, cov = random_gaussian(4, seed=3)
    den = GaussianDenoiser(mean, cov)
    x1, x2 = mean[None] + 1.0, mean[None] - 0.5
    res = information_estimation_metric(den, x1, x2, gamma_min=1e-2, gamma_max=1e2, n_levels=1024)
    d = (x1 - x2)[0] @ den.evecs
    lam = den.evals
    a, b = 1e-2, 1e2
    body = (d**2 * (b - a) / ((1 + a * lam) * (1 + b * lam))).sum()
    head = a * (d**2 / (1 + a * lam) ** 2).sum()
    tail = b * (d**2 / (1 + b * lam) ** 2).sum()
    assert float(res.distance[0] ** 2) == pytest.approx(float(body + head + tail), rel=1e-5)


def test_gaussian_denoiser_is_the_posterior_mean():
    """Against the textbook formula E[x|y] = m + S (S + s^2 I)^{-1} (y - m) solved directly."""
    mean, cov = random_gaussian(5, seed=1)
    den = GaussianDenoiser(mean, cov)
    y = torch.randn(4, 5, dtype=torch.float64)
    sigma = torch.tensor([0.1, 1.0, 3.0, 10.0], dtype=torch.float64)
    for i in range(4):
        want = mean + cov @ torch.linalg.solve(cov + sigma[i] ** 2 * torch.eye(5, dtype=torch.float64), y[i] - mean)
        torch.testing.assert_close(den(y[i : i + 1], sigma[i : i + 1])[0], want)


def test_mixture_denoiser_by_numerical_integration():
    """1-D mixture: E[x|y] from a fine grid of the posterior density."""
    den = _mixture_1d()
    grid = torch.linspace(-8, 8, 40001, dtype=torch.float64)
    prior = 0.5 * torch.exp(-((grid + 2) ** 2) / 0.5) + 0.5 * torch.exp(-((grid - 2) ** 2) / 0.5)
    for y, s in ((-1.0, 0.3), (0.2, 1.0), (1.7, 2.5), (5.0, 0.8)):
        post = prior * torch.exp(-((y - grid) ** 2) / (2 * s**2))
        want = float((grid * post).sum() / post.sum())
        got = float(den(torch.tensor([[y]], dtype=torch.float64), torch.tensor([s], dtype=torch.float64)))
        assert got == pytest.approx(want, abs=1e-6)


def test_single_component_mixture_equals_gaussian():
    mean, cov = random_gaussian(3, seed=4)
    gmm = GaussianMixtureDenoiser(torch.ones(1), mean[None], cov[None])
    gauss = GaussianDenoiser(mean, cov)
    y = torch.randn(6, 3, dtype=torch.float64)
    s = torch.logspace(-1, 1, 6, dtype=torch.float64)
    torch.testing.assert_close(gmm(y, s), gauss(y, s))


def test_mixture_monte_carlo_matches_reference_and_axioms():
    rec = mixture_report(n_paths=24, n_levels=64)
    assert rec["max_z_score"] < 4.0
    assert rec["triangle_inequality"] and rec["symmetric"] and rec["iem_self"] == 0.0
    # equal Euclidean distance, very different IEM: the low-density gap between modes is "far"
    assert rec["iem_across_modes_pair"] > 1.5 * rec["iem_within_mode_pair"]
    assert rec["passed"]


def test_mixture_reference_reduces_to_mahalanobis_for_one_mode():
    gmm = GaussianMixtureDenoiser(torch.ones(1), torch.zeros(1, 1), 2.0 * torch.ones(1, 1, 1))
    gammas = log_spaced_snr(1e-5, 1e5, 400)
    sq = mixture_reference(gmm, torch.tensor([[0.3]]).double(), torch.tensor([[1.5]]).double(), gammas)
    assert float(sq[0]) == pytest.approx(1.2**2 / 2.0, rel=1e-4)


def test_brownian_path_statistics():
    gammas = torch.tensor([0.5, 2.0, 8.0], dtype=torch.float64)
    w = brownian_path((20000,), gammas, torch.Generator().manual_seed(0))
    var = w.var(1)
    torch.testing.assert_close(var, gammas, rtol=0.05, atol=0)
    inc = torch.diff(w, dim=0)
    corr = torch.corrcoef(torch.stack([w[0], inc[0], inc[1]]))
    assert corr[0, 1].abs() < 0.05 and corr[1, 2].abs() < 0.05  # independent increments


def test_input_errors():
    den = GaussianDenoiser(torch.zeros(2), torch.eye(2))
    with pytest.raises(InputError):
        information_estimation_metric(den, torch.zeros(3, 2), torch.zeros(2, 2))
    with pytest.raises(ConfigError):
        log_spaced_snr(1.0, 0.5, 10)
    with pytest.raises(InputError, match="positive definite"):
        GaussianDenoiser(torch.zeros(2), -torch.eye(2))
    assert math.isfinite(float(den.mahalanobis(torch.ones(1, 2), torch.zeros(1, 2))[0]))


def test_a_non_symmetric_covariance_is_refused():
    """``eigh`` reads only the lower triangle: an asymmetric ``cov`` would silently be a different prior."""
    cov = torch.tensor([[2.0, 0.5], [0.0, 1.0]])
    with pytest.raises(InputError, match="cov must be symmetric"):
        GaussianDenoiser(torch.zeros(2), cov)
    with pytest.raises(InputError, match="covs must be symmetric"):
        GaussianMixtureDenoiser(torch.ones(1), torch.zeros(1, 2), cov[None])
    a = torch.randn(5, 5, generator=torch.Generator().manual_seed(0))
    GaussianDenoiser(torch.zeros(5), a @ a.T + torch.eye(5))  # symmetric up to float32 rounding: accepted
    with pytest.raises(InputError, match="mean must be a vector"):
        GaussianDenoiser(torch.zeros(()), torch.eye(1))


def test_integer_signals_are_measured_in_floating_point():
    """Integer inputs (e.g. pixel values) must not truncate the noisy observations the denoiser sees."""
    den = GaussianDenoiser(torch.zeros(2), torch.tensor([[2.0, 0.5], [0.5, 1.0]]))
    x1, x2 = torch.tensor([[1, 0]]), torch.tensor([[0, 1]])
    got = information_estimation_metric(den, x1, x2).distance
    torch.testing.assert_close(got, information_estimation_metric(den, x1.float(), x2.float()).distance)
    assert abs(float(got[0]) / float(den.mahalanobis(x1, x2)[0]) - 1) < 1e-2


def test_iem_refuses_non_finite_signals_and_empty_level_batches():
    den = GaussianDenoiser(torch.zeros(2), torch.eye(2))
    with pytest.raises(InputError, match="finite"):
        information_estimation_metric(den, torch.tensor([[math.nan, 0.0]]), torch.zeros(1, 2))
    with pytest.raises(ConfigError, match="batch_levels must be positive"):
        information_estimation_metric(den, torch.zeros(1, 2), torch.ones(1, 2), batch_levels=0)
