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


def test_mixture_denoiser_with_unequal_weights_and_covariances_by_grid_integration():
    """2-D, three components of different weights and full covariances: E[x|y] from the posterior on a fine grid
    (the 1-D check above has equal weights and variances, which hide the weight and log-determinant terms)."""
    g = torch.Generator().manual_seed(0)
    weights = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    means = torch.tensor([[-1.5, 0.5], [1.0, 1.0], [0.3, -1.2]], dtype=torch.float64)
    a = 0.5 * torch.randn(3, 2, 2, generator=g, dtype=torch.float64)
    covs = a @ a.mT + 0.1 * torch.eye(2, dtype=torch.float64)
    den = GaussianMixtureDenoiser(weights, means, covs)
    axis = torch.linspace(-7, 7, 401, dtype=torch.float64)
    grid = torch.cartesian_prod(axis, axis)
    prior = torch.zeros(len(grid), dtype=torch.float64)
    for w, m, c in zip(weights, means, covs, strict=True):
        r = grid - m
        density = torch.exp(-0.5 * (r @ torch.linalg.inv(c) * r).sum(-1)) / (2 * math.pi * torch.linalg.det(c).sqrt())
        prior += w * density
    for y, s in (([0.1, 0.2], 0.3), ([-2.0, 1.0], 1.0), ([3.0, -1.0], 2.0)):
        yt = torch.tensor(y, dtype=torch.float64)
        post = prior * torch.exp(-(grid - yt).pow(2).sum(-1) / (2 * s**2))
        want = (grid * post[:, None]).sum(0) / post.sum()
        torch.testing.assert_close(den(yt[None], torch.tensor([s], dtype=torch.float64))[0], want, rtol=0, atol=1e-8)


def test_the_denoiser_sees_the_gaussian_channel_at_each_level():
    """At SNR g both signals are observed as ``x + W_g / g`` with the same ``W_g ~ N(0, g)``, at ``sigma = g^-1/2``."""
    seen = []

    def recorder(y: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        seen.append((y.clone(), sigma.clone()))
        return torch.zeros_like(y)

    b, d = 4000, 2
    x1, x2 = torch.zeros(b, d, dtype=torch.float64), torch.ones(b, d, dtype=torch.float64)
    res = information_estimation_metric(recorder, x1, x2, gamma_min=0.01, gamma_max=100.0, n_levels=3, batch_levels=3)
    y, sigma = seen[0]
    gammas = res.gammas
    y1, y2 = y[: 3 * b].view(3, b, d), y[3 * b :].view(3, b, d)
    torch.testing.assert_close(y2 - 1.0, y1)  # the same Brownian path for both signals
    torch.testing.assert_close(sigma[: 3 * b].view(3, b), gammas.rsqrt()[:, None].expand(3, b))
    var = y1.reshape(3, -1).var(1)
    torch.testing.assert_close(var * gammas, torch.ones(3, dtype=torch.float64), rtol=0.05, atol=0)
    # W at consecutive levels is one path: corr(W_g0, W_g1) = sqrt(g0 / g1)
    w = y1 * gammas[:, None, None]
    corr = torch.corrcoef(torch.stack([w[0].flatten(), w[1].flatten()]))[0, 1]
    assert float(corr) == pytest.approx(math.sqrt(float(gammas[0] / gammas[1])), abs=0.03)


def test_several_paths_are_the_mean_of_single_paths():
    """``n_paths`` paths drawn from one generator give the mean squared distance, the mean integrand, and the standard
    error of the mean, of the same paths taken one call at a time."""
    den = _mixture_1d()
    x1 = torch.tensor([[-2.5], [-0.5]], dtype=torch.float64)
    x2 = torch.tensor([[-1.5], [0.5]], dtype=torch.float64)
    kw = {"n_levels": 32, "gamma_min": 1e-3, "gamma_max": 1e3}
    many = information_estimation_metric(den, x1, x2, n_paths=4, generator=torch.Generator().manual_seed(5), **kw)
    gen = torch.Generator().manual_seed(5)
    single = [information_estimation_metric(den, x1, x2, generator=gen, **kw) for _ in range(4)]
    sq = torch.stack([r.distance.pow(2) for r in single])
    torch.testing.assert_close(many.distance, sq.mean(0).sqrt())
    torch.testing.assert_close(many.stderr, sq.std(0) / 2)
    torch.testing.assert_close(many.integrand, torch.stack([r.integrand for r in single]).mean(0))
    assert float(many.stderr.min()) > 0


def test_mixture_reference_against_a_direct_quadrature():
    """Two SNRs: ``f(g) = E_z (e(x1) - e(x2))^2`` with ``W_g / g = z / sqrt(g)`` by a dense z-grid, then the trapezoid
    in ``log g`` with both end corrections written out."""
    den = _mixture_1d()
    x1, x2 = torch.tensor([[-0.5]], dtype=torch.float64), torch.tensor([[0.5]], dtype=torch.float64)
    gammas = torch.tensor([0.5, 8.0], dtype=torch.float64)
    z = torch.linspace(-10, 10, 4001, dtype=torch.float64)
    pz = torch.exp(-0.5 * z**2)
    pz = pz / pz.sum()
    f = []
    for g in gammas:
        y = z / g.sqrt()
        sigma = torch.full_like(z, float(g.rsqrt()))
        e1 = x1[0, 0] - den((x1[0, 0] + y)[:, None], sigma)[:, 0]
        e2 = x2[0, 0] - den((x2[0, 0] + y)[:, None], sigma)[:, 0]
        f.append(float(((e1 - e2) ** 2 * pz).sum()))
    g0, g1 = float(gammas[0]), float(gammas[1])
    want = g0 * f[0] + g1 * f[1] + 0.5 * (g0 * f[0] + g1 * f[1]) * math.log(g1 / g0)
    got = float(mixture_reference(den, x1, x2, gammas)[0])
    assert got == pytest.approx(want, rel=1e-6)  # 96 Gauss-Hermite nodes against the grid


def _edm_with_net(dim: int, net: str):
    """An EDM denoiser whose network ``F(u, t)`` is replaced by the identity or by zero."""
    from geninterp.iem_experiments import EDMDenoiser

    class Net(torch.nn.Module):
        def forward(self, u, t):
            return u if net == "identity" else torch.zeros_like(u)

    den = EDMDenoiser(dim).double()
    den.net = Net()
    return den


def test_edm_preconditioning_and_loss_weight_in_closed_form():
    """``D = c_skip y + c_out F(c_in y, t)`` with Karras et al.'s coefficients, read off with ``F`` the identity; with
    ``F = 0``, ``D`` is the MMSE denoiser of ``N(0, sigma_data^2 I)``, whose weighted EDM loss is 1 at every sigma."""
    from geninterp.iem_experiments import SIGMA_DATA, DenoiserTask

    y = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = torch.tensor([0.01, 0.1, 1.0, 3.0, 50.0], dtype=torch.float64)[:, None]
    var = s**2 + SIGMA_DATA**2
    want = SIGMA_DATA**2 / var * y + s * SIGMA_DATA / var.sqrt() * (y / var.sqrt())
    torch.testing.assert_close(_edm_with_net(3, "identity")(y, s[:, 0]), want)
    zero = _edm_with_net(3, "zero")
    gauss = GaussianDenoiser(torch.zeros(3), SIGMA_DATA**2 * torch.eye(3))
    torch.testing.assert_close(zero(y, s[:, 0]), gauss(y, s[:, 0]))
    x = SIGMA_DATA * torch.randn(20000, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    zero = _edm_with_net(4, "zero")
    loss, _ = DenoiserTask(zero).loss(zero, (x,), torch.Generator().manual_seed(2))
    assert float(loss) == pytest.approx(1.0, abs=0.03)  # relative standard error sqrt(2 / 80000) = 0.005


def test_leave_one_out_accuracy_never_picks_the_point_itself():
    from geninterp.iem_experiments import _loo_accuracy

    dist = torch.tensor([[0.0, 1.0, 5.0], [1.0, 0.0, 5.0], [5.0, 4.0, 0.0]], dtype=torch.float64)
    assert _loo_accuracy(dist, torch.tensor([0, 0, 1])) == pytest.approx(2 / 3)
    assert _loo_accuracy(dist, torch.tensor([0, 0, 0])) == 1.0


def test_non_finite_covariances_and_a_single_path_check_are_refused():
    nan = torch.tensor([[1.0, math.nan], [math.nan, 1.0]])
    with pytest.raises(InputError, match="cov must hold finite values"):
        GaussianDenoiser(torch.zeros(2), nan)
    with pytest.raises(InputError, match="covs must hold finite values"):
        GaussianMixtureDenoiser(torch.ones(1), torch.zeros(1, 2), nan[None])
    with pytest.raises(ConfigError, match="n_paths >= 2"):
        mixture_report(n_paths=1, n_levels=8)


def test_an_infinite_snr_range_is_refused():
    """``gamma_max = inf`` passed ``0 < gamma_min < gamma_max`` and returned a NaN distance."""
    den = GaussianDenoiser(torch.zeros(2), torch.eye(2))
    with pytest.raises(ConfigError, match="gamma_max < inf"):
        information_estimation_metric(den, torch.zeros(1, 2), torch.ones(1, 2), gamma_max=math.inf)
    with pytest.raises(ConfigError, match="gamma_max < inf"):
        log_spaced_snr(1e-3, math.inf, 8)


def test_non_finite_means_and_weights_are_refused():
    """A NaN mean or an infinite mixture weight used to give an all-NaN denoiser; 1-D ``means`` a bare ValueError."""
    eye = torch.eye(2)
    with pytest.raises(InputError, match="mean must hold finite values"):
        GaussianDenoiser(torch.tensor([math.nan, 0.0]), eye)
    with pytest.raises(InputError, match="weights must be positive finite"):
        GaussianMixtureDenoiser(torch.tensor([1.0, math.inf]), torch.zeros(2, 2), eye.expand(2, 2, 2).clone())
    with pytest.raises(InputError, match="means must hold finite values"):
        GaussianMixtureDenoiser(torch.ones(2), torch.tensor([[0.0, math.nan], [1.0, 1.0]]), eye.expand(2, 2, 2).clone())
    with pytest.raises(InputError, match=r"means must be \[K, D\]"):
        GaussianMixtureDenoiser(torch.ones(1), torch.zeros(2), eye[None])


def test_narrow_mixture_in_high_dimension_is_the_softmax_average_of_its_points():
    """Components ``N(m_k, s^2 I)`` in D = 512: ``E[x|y] = sum_k p_k (m_k + s^2 / (s^2 + sigma^2) (y - m_k))`` with
    ``log p_k = log w_k - |y - m_k|^2 / (2 (s^2 + sigma^2)) - logsumexp``. The likelihoods themselves underflow
    (exponents below -700), so only a log-domain posterior gets this right; ``y`` is equidistant from two points, whose
    posterior odds are then their weights' ratio."""
    from scipy.special import logsumexp

    d, s2 = 512, 1e-4
    g = torch.Generator().manual_seed(0)
    points = torch.randn(4, d, generator=g, dtype=torch.float64)
    weights = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    den = GaussianMixtureDenoiser(weights, points, s2 * torch.eye(d, dtype=torch.float64).expand(4, d, d).clone())
    sigma = torch.tensor([0.05, 0.1, 0.2, 0.3], dtype=torch.float64)
    a, b = torch.arange(4), (torch.arange(4) + 1) % 4
    gap = torch.nn.functional.normalize(points[a] - points[b], dim=-1)
    z = torch.randn(4, d, generator=g, dtype=torch.float64)
    z = z - (z * gap).sum(-1, keepdim=True) * gap  # orthogonal to m_a - m_b: |y - m_a| = |y - m_b|
    y = 0.5 * (points[a] + points[b]) + sigma[:, None] * z
    got = den(y, sigma)
    for i in range(4):
        v = s2 + float(sigma[i]) ** 2
        logits = (weights.log() - (y[i] - points).pow(2).sum(-1) / (2 * v)).numpy()
        assert logits.max() < -700  # exp() of every logit underflows to 0 in float64
        p = torch.from_numpy(logits - logsumexp(logits)).exp()
        assert float(p[a[i]] / p[b[i]]) == pytest.approx(float(weights[a[i]] / weights[b[i]]), rel=1e-6)
        want = (p[:, None] * (points + s2 / v * (y[i] - points))).sum(0)
        torch.testing.assert_close(got[i], want, rtol=1e-9, atol=1e-9)


def test_a_denoiser_returning_another_shape_is_refused():
    """A denoiser returning one value per row used to fail inside the IEM's reshape with an unrelated message."""
    den = GaussianDenoiser(torch.zeros(3), torch.eye(3))
    x1, x2 = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(InputError, match=r"denoiser must return its input's shape \(\d+, 3\)"):
        information_estimation_metric(lambda y, s: den(y, s).sum(-1), x1, x2, n_levels=4)


def test_an_empty_batch_of_pairs_is_refused():
    """``B = 0`` (or ``D = 0``) failed inside a reshape with an unrelated message."""
    den = GaussianDenoiser(torch.zeros(2), torch.eye(2))
    for shape in ((0, 2), (3, 0)):
        with pytest.raises(InputError, match="at least one pair of signals"):
            information_estimation_metric(den, torch.zeros(shape), torch.ones(shape), n_levels=4)
