"""Affine Gaussian paths, prediction conversions and the Brownian bridge: Monte Carlo marginals with
standard-error tolerances, exact conditional targets in every prediction space, finite differences along
fixed pairs, and the Bayes-optimal (Gaussian data) marginal score."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError, InputError
from gencore.paths import (
    PREDICTIONS,
    AffineGaussianPath,
    BrownianBridgePath,
    CosineSchedule,
    EDMSchedule,
    LinearSchedule,
    PathSample,
    ProbabilityPath,
    ShiftedSchedule,
    VESchedule,
    VPSchedule,
)

F64 = torch.float64
SCHEDULES = [
    LinearSchedule(),
    CosineSchedule(),
    VPSchedule(),
    VESchedule(0.01, 50.0),
    EDMSchedule(),
    ShiftedSchedule(LinearSchedule(), 3.0),
]
IDS = ["linear", "cosine", "vp", "ve", "edm", "shifted"]
Z = 5.0  # z-score tolerance of the Monte Carlo checks (false alarm ~ 6e-7 per coordinate)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("sched", SCHEDULES, ids=IDS)
@pytest.mark.parametrize("t", [0.1, 0.5, 0.9])
def test_marginal_mean_and_variance_given_x1(sched, t: float) -> None:
    n, d = 40_000, 3
    path = AffineGaussianPath(sched)
    x1 = torch.tensor([[1.5, -2.0, 0.25]], dtype=F64).expand(n, d)
    x0 = torch.randn(n, d, generator=_gen(1), dtype=F64)
    s = path.sample(x0, x1, torch.full((n,), t, dtype=F64))
    c = sched(torch.tensor(t, dtype=F64))
    mean, var = s.x_t.mean(0), s.x_t.var(0)
    se_mean = c.sigma / math.sqrt(n)
    se_var = c.sigma**2 * math.sqrt(2.0 / (n - 1))
    assert torch.all((mean - c.alpha * x1[0]).abs() < Z * se_mean)
    assert torch.all((var - c.sigma**2).abs() < Z * se_var)


@pytest.mark.parametrize("sched", SCHEDULES, ids=IDS)
def test_velocity_is_time_derivative_along_fixed_pair(sched) -> None:
    path = AffineGaussianPath(sched)
    g = _gen(2)
    x0, x1 = torch.randn(6, 4, generator=g, dtype=F64), torch.randn(6, 4, generator=g, dtype=F64)
    t = torch.linspace(0.05, 0.95, 6, dtype=F64)
    h = 1e-6
    fd = (path.sample(x0, x1, t + h).x_t - path.sample(x0, x1, t - h).x_t) / (2 * h)
    s = path.sample(x0, x1, t)
    torch.testing.assert_close(s.u_t, fd, rtol=1e-6, atol=1e-6)
    # every prediction of the exact conditional quantities converts to this same velocity
    for src in PREDICTIONS:
        v = path.convert(path.target(x0, x1, t, src), s.x_t, t, src, "velocity")
        torch.testing.assert_close(v, fd, rtol=1e-6, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(0, len(SCHEDULES) - 1),
    t=st.floats(0.02, 0.98),
    seed=st.integers(0, 2**31 - 1),
)
def test_conversions_exact_for_all_pairs(k: int, t: float, seed: int) -> None:
    """All 16 (src, dst) pairs map the exact conditional quantity of src to that of dst, and round-trip."""
    path = AffineGaussianPath(SCHEDULES[k])
    g = _gen(seed)
    x0, x1 = torch.randn(3, 2, 2, generator=g, dtype=F64), torch.randn(3, 2, 2, generator=g, dtype=F64)
    tt = torch.full((3,), t, dtype=F64)
    x_t = path.sample(x0, x1, tt).x_t
    truth = {kind: path.target(x0, x1, tt, kind) for kind in PREDICTIONS}
    c = SCHEDULES[k](torch.tensor(t, dtype=F64))
    torch.testing.assert_close(truth["score"], -x0 / c.sigma)
    arbitrary = torch.randn(3, 2, 2, generator=g, dtype=F64)
    for src, dst in itertools.product(PREDICTIONS, PREDICTIONS):
        got = path.convert(truth[src], x_t, tt, src, dst)
        scale = truth[dst].abs().max().item() + 1.0
        torch.testing.assert_close(got, truth[dst], rtol=1e-8, atol=1e-9 * scale)
        back = path.convert(path.convert(arbitrary, x_t, tt, src, dst), x_t, tt, dst, src)
        torch.testing.assert_close(back, arbitrary, rtol=1e-7, atol=1e-8)


def test_velocity_to_data_at_the_end_of_vp_is_the_limit_with_finite_gradients() -> None:
    # VP's d_sigma is -inf at t = 1: the conversion returns its limits x1 = x_t / alpha, eps = 0, not inf/inf
    path = AffineGaussianPath(VPSchedule())
    g = _gen(3)
    x = torch.randn(4, 3, generator=g, dtype=F64).requires_grad_(True)
    v = torch.randn(4, 3, generator=g, dtype=F64).requires_grad_(True)
    t = torch.tensor([1.0, 1.0 - 1e-12, 0.5, 1.0], dtype=F64)
    x1 = path.convert(v, x, t, "velocity", "data")
    torch.testing.assert_close(x1[[0, 3]], x[[0, 3]].detach(), rtol=0, atol=0)
    torch.testing.assert_close(x1[1], x[1].detach(), rtol=0, atol=1e-9)  # continuous at t = 1
    eps = path.convert(v, x, t, "velocity", "noise")
    assert torch.equal(eps[[0, 3]], torch.zeros(2, 3, dtype=F64))
    gx, gv = torch.autograd.grad((x1.sum() + eps.sum()), (x, v))
    assert torch.isfinite(gx).all() and torch.isfinite(gv).all()
    torch.testing.assert_close(gx[0], torch.ones(3, dtype=F64))  # d(x_t / alpha) / dx_t with alpha = 1


@pytest.mark.parametrize("sched", SCHEDULES, ids=IDS)
def test_bayes_optimal_predictions_convert_into_each_other(sched) -> None:
    """Data x1 ~ N(m, c^2 I): the four Bayes-optimal predictions are known in closed form (E[x1 | x_t],
    E[x0 | x_t], E[u_t | x_t] and grad log p_t); every one of the 12 conversions maps one onto another (so the
    posterior mean converts to the marginal score exactly, and to the velocity E[d_alpha x1 + d_sigma x0 | x_t])."""
    m, c2 = torch.tensor([0.7, -1.2], dtype=F64), 0.5**2
    path = AffineGaussianPath(sched)
    x_t = torch.randn(5, 2, generator=_gen(13), dtype=F64) * 3
    t = torch.tensor([0.02, 0.3, 0.5, 0.7, 0.98], dtype=F64)
    co = sched(t)
    a, s = co.alpha[:, None], co.sigma[:, None]
    var = a**2 * c2 + s**2
    bayes = {
        "data": m + a * c2 / var * (x_t - a * m),
        "noise": s / var * (x_t - a * m),
        "score": -(x_t - a * m) / var,
    }
    bayes["velocity"] = co.d_alpha[:, None] * bayes["data"] + co.d_sigma[:, None] * bayes["noise"]
    for src, dst in itertools.product(PREDICTIONS, PREDICTIONS):
        got = path.convert(bayes[src], x_t, t, src, dst)
        torch.testing.assert_close(got, bayes[dst], rtol=1e-9, atol=1e-9, msg=f"{src} -> {dst}")


def test_path_sample_fields_and_shapes() -> None:
    path = AffineGaussianPath(CosineSchedule())
    assert isinstance(path, ProbabilityPath)
    x0, x1 = torch.randn(4, 3, 5, 5), torch.randn(4, 3, 5, 5)
    s = path.sample(x0, x1, torch.rand(4))
    assert isinstance(s, PathSample)
    assert s.x_t.shape == s.u_t.shape == x1.shape and s.t.shape == (4,) and s.std.shape == (4,)
    assert s.noise is x0
    s_scalar = path.sample(x0, x1, 0.25)
    torch.testing.assert_close(s_scalar.x_t, path.sample(x0, x1, torch.full((4,), 0.25)).x_t)


def test_path_input_errors() -> None:
    path = AffineGaussianPath(LinearSchedule())
    with pytest.raises(InputError, match="same shape"):
        path.sample(torch.randn(4, 2), torch.randn(4, 3), torch.rand(4))
    with pytest.raises(InputError, match="t must"):
        path.sample(torch.randn(4, 2), torch.randn(4, 2), torch.rand(3))
    with pytest.raises(ConfigError, match="unknown prediction"):
        path.convert(torch.randn(4, 2), torch.randn(4, 2), torch.rand(4), "epsilon", "data")
    with pytest.raises(InputError, match="pred has shape"):
        path.convert(torch.randn(4, 3), torch.randn(4, 2), torch.rand(4), "noise", "data")
    with pytest.raises(ConfigError, match="Schedule"):
        AffineGaussianPath("linear")  # type: ignore[arg-type]


# ------------------------------------------------------------------ Brownian bridge (Tong et al. 2024)


@pytest.mark.parametrize("t", [0.1, 0.5, 0.8])
def test_bridge_marginal_mean_and_variance(t: float) -> None:
    n, sigma = 40_000, 0.7
    x0 = torch.tensor([[-1.0, 2.0]], dtype=F64).expand(n, 2)
    x1 = torch.tensor([[3.0, 0.5]], dtype=F64).expand(n, 2)
    s = BrownianBridgePath(sigma).sample(x0, x1, torch.full((n,), t, dtype=F64), generator=_gen(4))
    var = sigma**2 * t * (1 - t)
    mu = (1 - t) * x0[0] + t * x1[0]
    assert torch.all((s.x_t.mean(0) - mu).abs() < Z * math.sqrt(var / n))
    assert torch.all((s.x_t.var(0) - var).abs() < Z * var * math.sqrt(2.0 / (n - 1)))
    torch.testing.assert_close(s.std, torch.full((n,), math.sqrt(var), dtype=F64))


def test_bridge_velocity_is_derivative_along_fixed_noise() -> None:
    path = BrownianBridgePath(sigma=0.9)
    g = _gen(5)
    x0, x1, eps = (torch.randn(8, 3, generator=g, dtype=F64) for _ in range(3))
    t = torch.linspace(0.03, 0.97, 8, dtype=F64)
    h = 1e-7
    fd = (path.sample(x0, x1, t + h, noise=eps).x_t - path.sample(x0, x1, t - h, noise=eps).x_t) / (2 * h)
    s = path.sample(x0, x1, t, noise=eps)
    torch.testing.assert_close(s.u_t, fd, rtol=1e-6, atol=1e-6)
    # the (x_t - mu_t) form of the paper gives the same velocity
    mu = (1 - t[:, None]) * x0 + t[:, None] * x1
    paper = x1 - x0 + ((1 - 2 * t) / (2 * t * (1 - t)))[:, None] * (s.x_t - mu)
    torch.testing.assert_close(s.u_t, paper)


def test_bridge_with_zero_noise_follows_mean() -> None:
    g = _gen(6)
    x0, x1 = torch.randn(5, 2, generator=g, dtype=F64), torch.randn(5, 2, generator=g, dtype=F64)
    t = torch.rand(5, generator=g, dtype=F64)
    s = BrownianBridgePath(0.8).sample(x0, x1, t, noise=torch.zeros_like(x0))
    torch.testing.assert_close(s.u_t, x1 - x0)  # = d mu_t / dt
    # mu_t integrates the velocity: mu_1 - mu_0 = int_0^1 u dt
    torch.testing.assert_close(s.x_t, x0 + t[:, None] * (x1 - x0))
    linear = AffineGaussianPath(LinearSchedule()).sample(x0, x1, t)
    s0 = BrownianBridgePath(0.0).sample(x0, x1, t)
    torch.testing.assert_close(s0.x_t, linear.x_t)
    torch.testing.assert_close(s0.u_t, linear.u_t)
    assert s0.noise is None and s0.std is None


def test_bridge_is_finite_at_the_ends_and_clamped_safely() -> None:
    path = BrownianBridgePath(1.0, t_eps=1e-5)
    g = _gen(7)
    x0, x1, eps = (torch.randn(4, 2, generator=g) for _ in range(3))
    t = torch.tensor([0.0, 1e-9, 1.0 - 1e-7, 1.0])
    s = path.sample(x0, x1, t, noise=eps)
    assert torch.isfinite(s.u_t).all() and torch.isfinite(s.x_t).all()
    torch.testing.assert_close(s.x_t[[0, 3]], torch.stack([x0[0], x1[3]]))
    torch.testing.assert_close(s.u_t[[0, 3]], (x1 - x0)[[0, 3]])  # no noise term where std = 0
    assert (s.u_t - (x1 - x0)).abs().max() <= 1.0 / (2 * math.sqrt(1e-5)) * eps.abs().max() + 1e-4


def test_bridge_generator_reproducible_and_errors() -> None:
    path = BrownianBridgePath(0.5)
    x0, x1, t = torch.randn(6, 2), torch.randn(6, 2), torch.rand(6)
    a = path.sample(x0, x1, t, generator=_gen(8))
    b = path.sample(x0, x1, t, generator=_gen(8))
    assert torch.equal(a.x_t, b.x_t) and torch.equal(a.u_t, b.u_t)
    with pytest.raises(ConfigError):
        BrownianBridgePath(-1.0)
    with pytest.raises(ConfigError):
        BrownianBridgePath(1.0, t_eps=0.0)
    with pytest.raises(InputError, match="noise"):
        path.sample(x0, x1, t, noise=torch.randn(6, 3))


def test_velocity_conversions_at_the_end_of_vp_without_beta_min() -> None:
    # VP with beta_min = 0 has a finite d_sigma = -sqrt(beta_max / 2) at t = 1; it was NaN, so every conversion
    # from a velocity there was NaN. At t = 1: x_t = x1 and v = d_sigma eps.
    path = AffineGaussianPath(VPSchedule(beta_min=0.0, beta_max=20.0))
    g = _gen(9)
    x, v = torch.randn(3, 2, generator=g, dtype=F64), torch.randn(3, 2, generator=g, dtype=F64)
    t = torch.ones(3, dtype=F64)
    torch.testing.assert_close(path.convert(v, x, t, "velocity", "data"), x)
    torch.testing.assert_close(path.convert(v, x, t, "velocity", "noise"), -v / math.sqrt(10.0))


def test_integer_data_is_refused_rather_than_truncating_t() -> None:
    # t takes x1's dtype: integer data truncated every t in [0, 1) to 0, so x_t was the noise x0 at any t
    x0, x1 = torch.zeros(2, 2), torch.tensor([[2, 4], [6, 8]])
    t = torch.tensor([0.5, 0.9])
    for path in (AffineGaussianPath(LinearSchedule()), BrownianBridgePath(0.5)):
        with pytest.raises(InputError, match="floating-point"):
            path.sample(x0, x1, t)
    with pytest.raises(InputError, match="floating-point"):
        AffineGaussianPath(LinearSchedule()).convert(torch.zeros(2, 2), x1, t, "noise", "data")
    s = AffineGaussianPath(LinearSchedule()).sample(x0, x1.float(), t)
    torch.testing.assert_close(s.x_t, t[:, None] * x1.float())
