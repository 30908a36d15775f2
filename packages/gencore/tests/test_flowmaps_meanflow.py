"""MeanFlow: the analytic Gaussian flow map, the MeanFlow identity (JVP and finite difference), and training."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError
from gencore.flowmaps import (
    MeanFlow,
    TwoTimeMLP,
    flow_map,
    gaussian_average_velocity,
    gaussian_flow_map,
    gaussian_velocity,
    meanflow_target,
    sample_flow_map,
    total_derivative,
)
from gencore.solvers import solve_ode

MEAN = torch.tensor([1.5, -0.5], dtype=torch.float64)
STD = 0.4


def exact_u(x, s, t):
    return gaussian_average_velocity(x, s, t, MEAN, STD)


def _x(n: int = 64, seed: int = 0) -> torch.Tensor:
    return 2.0 * torch.randn(n, 2, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0))
def test_gaussian_flow_map_semigroup(r: float, s: float, t: float) -> None:
    x = _x()
    composed = gaussian_flow_map(gaussian_flow_map(x, r, s, MEAN, STD), s, t, MEAN, STD)
    torch.testing.assert_close(composed, gaussian_flow_map(x, r, t, MEAN, STD), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gaussian_flow_map(x, s, s, MEAN, STD), x, rtol=0, atol=1e-14)


def test_gaussian_flow_map_solves_the_velocity_ode_and_pushes_noise_to_the_target() -> None:
    x0 = _x(256)
    sol = solve_ode(lambda x, t: gaussian_velocity(x, t, MEAN, STD), x0, steps=200, method="rk4")
    torch.testing.assert_close(sol.x, gaussian_flow_map(x0, 0.0, 1.0, MEAN, STD), rtol=0, atol=1e-9)
    z = torch.randn(20_000, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x1 = gaussian_flow_map(z, 0.0, 1.0, MEAN, STD)
    torch.testing.assert_close(x1.mean(0), MEAN, rtol=0, atol=0.02)
    torch.testing.assert_close(x1.std(0), torch.full((2,), STD, dtype=torch.float64), rtol=0, atol=0.01)


def test_flow_map_of_exact_average_velocity_is_the_analytic_map_and_composes() -> None:
    x = _x()
    for r, s, t in [(0.0, 0.3, 1.0), (0.1, 0.6, 0.9), (0.8, 0.2, 0.5)]:
        torch.testing.assert_close(flow_map(exact_u, x, r, t), gaussian_flow_map(x, r, t, MEAN, STD))
        torch.testing.assert_close(flow_map(exact_u, flow_map(exact_u, x, r, s), s, t), flow_map(exact_u, x, r, t))


def _pairs(n: int = 64):
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(n, generator=g, dtype=torch.float64), torch.rand(n, generator=g, dtype=torch.float64)
    s, t = 0.05 + 0.9 * torch.minimum(a, b), 0.05 + 0.9 * torch.maximum(a, b)
    x_s = gaussian_flow_map(_x(n), 0.0, s, MEAN, STD)  # on-distribution states at their times
    return x_s, s, t, gaussian_velocity(x_s, s, MEAN, STD)


def test_meanflow_target_is_exact_at_the_analytic_solution_with_jvp() -> None:
    x, s, t, v = _pairs()
    u, u_tgt = meanflow_target(exact_u, x, s, t, v, derivative="jvp")
    torch.testing.assert_close(u, exact_u(x, s, t))
    torch.testing.assert_close(u_tgt, u, rtol=0, atol=1e-12)
    assert float(MeanFlow().adaptive_loss(u - u_tgt)) < 1e-18
    # the correction term is far from zero, so a wrong sign or a wrong tangent would not pass
    _, du = total_derivative(exact_u, x, s, t, v)
    assert float(((t - s)[:, None] * du).abs().max()) > 0.1
    _, wrong = meanflow_target(exact_u, x, s, t, -v)
    assert float((wrong - u).abs().max()) > 0.1


def test_meanflow_target_finite_difference_is_second_order() -> None:
    x, s, t, v = _pairs()
    errors = []
    for h in (1e-2, 5e-3, 2.5e-3):
        u, u_tgt = meanflow_target(exact_u, x, s, t, v, derivative="fd", fd_eps=h)
        errors.append(float((u_tgt - u).abs().max()))
    for a, b in itertools.pairwise(errors):
        assert 3.0 < a / b < 5.0  # central difference: error ~ h^2
    # float64 at h = 1e-5: truncation ~ 1e-10 |d3u/ds3|, round-off ~ 1e-16 / 1e-5
    u, u_tgt = meanflow_target(exact_u, x, s, t, v, derivative="fd", fd_eps=1e-5)
    assert float((u_tgt - u).abs().max()) < 1e-8


def _net(seed: int = 0) -> TwoTimeMLP:
    torch.manual_seed(seed)
    return TwoTimeMLP(2, hidden=32, depth=2).double()


def test_jvp_total_derivative_matches_autograd_and_finite_differences_on_a_network() -> None:
    net = _net()
    x, s, t, v = _pairs(16)
    _u, du = total_derivative(net, x, s, t, v, derivative="jvp")
    # reverse-mode reference: d/de u(x + e v, s + e, t) at e = 0, one output coordinate at a time
    e = torch.zeros(x.shape[0], 1, dtype=x.dtype, requires_grad=True)
    out = net(x + e * v, s + e[:, 0], t)
    ref = torch.stack([torch.autograd.grad(out[:, i].sum(), e, retain_graph=True)[0][:, 0] for i in range(2)], 1)
    torch.testing.assert_close(du, ref, rtol=1e-10, atol=1e-10)
    _, du_fd = total_derivative(net, x, s, t, v, derivative="fd", fd_eps=1e-5)
    torch.testing.assert_close(du_fd, du, rtol=0, atol=1e-7)


def test_loss_gradients_reach_the_weights_but_not_through_the_target() -> None:
    net = _net()
    x, s, t, v = _pairs(16)
    for derivative in ("jvp", "fd"):
        u, u_tgt = meanflow_target(net, x, s, t, v, derivative=derivative)
        assert u.requires_grad and not u_tgt.requires_grad
        net.zero_grad()
        MeanFlow().adaptive_loss(u - u_tgt).backward()
        assert all(p.grad is not None for p in net.parameters())


def test_meanflow_times_respect_ratio_and_order() -> None:
    mf = MeanFlow(ratio=0.25)
    s, t = mf.times(20_000, torch.zeros(1), torch.Generator().manual_seed(0))
    assert bool((s <= t).all())
    assert abs(float((s != t).double().mean()) - 0.25) < 0.02
    with pytest.raises(ConfigError):
        MeanFlow(ratio=1.5)
    with pytest.raises(ConfigError):
        MeanFlow(derivative="autodiff")


def _train_one_step_error(ratio: float, derivative: str, steps: int = 800) -> float:
    """Mean distance of the learned 1-step map ``X_{0,1}`` to the exact Gaussian flow map."""
    torch.manual_seed(0)
    net = TwoTimeMLP(2, hidden=64, depth=2)
    mf = MeanFlow(ratio=ratio, derivative=derivative)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    mean = MEAN.float()
    for _ in range(steps):
        loss = mf.loss(net, mean + STD * torch.randn(256, 2, generator=g), generator=g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    z = torch.randn(2048, 2, generator=torch.Generator().manual_seed(5))
    return float((sample_flow_map(net, z, 1) - gaussian_flow_map(z, 0.0, 1.0, mean, STD)).norm(dim=1).mean())


def test_meanflow_training_learns_the_one_step_map_that_flow_matching_alone_does_not() -> None:
    # ratio 0 is plain flow matching on the diagonal s = t: the jump u(x, 0, 1) is never trained
    fm_only = _train_one_step_error(0.0, "jvp")
    assert fm_only > 0.8
    for derivative in ("jvp", "fd"):
        assert _train_one_step_error(0.5, derivative) < 0.4 * fm_only


def test_one_or_more_jumps_of_the_exact_average_velocity_give_the_exact_transport() -> None:
    z = _x(256, seed=7)
    exact = gaussian_flow_map(z, 0.0, 1.0, MEAN, STD)
    for nfe in (1, 2, 3, 5):
        torch.testing.assert_close(sample_flow_map(exact_u, z, nfe), exact, rtol=0, atol=1e-12)
    assert float((exact - z).abs().max()) > 1.0  # the transport is far from the identity


def test_adaptive_loss_value_and_its_stop_gradient_weight() -> None:
    delta = torch.tensor([[0.3, -0.4], [0.0, 0.1], [2.0, 1.0]], dtype=torch.float64, requires_grad=True)
    sq = delta.detach().square().sum(dim=1)
    for p, c in ((1.0, 1e-3), (0.5, 0.1), (0.0, 1e-3)):
        loss = MeanFlow(weight_power=p, weight_eps=c).adaptive_loss(delta)
        w = (sq + c) ** -p
        torch.testing.assert_close(loss, (w * sq).mean(), rtol=1e-12, atol=0)
        # the weight is a constant: d loss / d delta = 2 w delta / B, not the gradient of sq / (sq + c)^p
        (grad,) = torch.autograd.grad(loss, delta)
        torch.testing.assert_close(grad, 2.0 * w[:, None] * delta.detach() / 3, rtol=1e-12, atol=0)


@pytest.mark.parametrize("derivative", ["jvp", "fd"])
def test_the_exact_average_velocity_is_a_stationary_point_of_the_meanflow_loss(derivative: str) -> None:
    """The conditional target's mean given ``x_s`` is the marginal one (the correction is linear in ``v``), so the
    exact ``u`` plus a zero perturbation ``x A + b + c (t - s)`` has zero expected gradient in ``(A, b, c)``.

    Off zero, with ``delta = u - u_tgt`` and ``sg`` on the target: a shift ``b`` gives ``d/db = 2 b``;
    ``c (t - s)`` adds ``c (t - s)`` to ``u`` and ``-(t - s) d/ds[c (t - s)] = c (t - s)`` to ``delta``, so
    ``d/dc = 8 c E[(t - s)^2]`` with ``E[(t - s)^2] = ratio / 6`` for sorted uniform times.
    A wrong time, tangent or velocity breaks this.
    """
    a = torch.zeros(2, 2, dtype=torch.float64, requires_grad=True)
    b = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    c = torch.zeros((), dtype=torch.float64, requires_grad=True)

    def model(x, s, t):
        return exact_u(x, s, t) + x @ a + b + c * (t - s)[:, None]

    mf = MeanFlow(ratio=0.75, derivative=derivative, weight_power=0.0)
    g = torch.Generator().manual_seed(0)
    x1 = MEAN + STD * torch.randn(50_000, 2, generator=g, dtype=torch.float64)

    def grads():
        return torch.autograd.grad(mf.loss(model, x1, generator=torch.Generator().manual_seed(1)), [a, b, c])

    assert max(float(gr.abs().max()) for gr in grads()) < 0.02  # Monte Carlo noise ~ 0.005
    with torch.no_grad():
        b.fill_(0.05)
    torch.testing.assert_close(grads()[1], torch.full((2,), 0.1, dtype=torch.float64), rtol=0, atol=0.02)
    with torch.no_grad():
        b.fill_(0.0)
        c.fill_(0.05)
    torch.testing.assert_close(grads()[2], torch.tensor(8 * 0.05 * 0.75 / 6, dtype=torch.float64), rtol=0, atol=0.01)


def test_bad_meanflow_settings_raise_one_config_error() -> None:
    bad = ({"weight_power": float("nan")}, {"weight_power": -1.0}, {"fd_eps": 0.0}, {"weight_eps": float("nan")})
    for kwargs in bad:
        with pytest.raises(ConfigError):
            MeanFlow(**kwargs)


def test_loss_with_a_stochastic_path_draws_its_noise_from_the_generator() -> None:
    """The Brownian bridge draws ``eps`` per sample: with the path ignoring ``generator`` it came from the global
    RNG, so the same seed gave a different loss on every call."""
    from gencore.paths.bridge import BrownianBridgePath

    mf = MeanFlow(BrownianBridgePath(sigma=0.5))
    x1 = MEAN + STD * torch.randn(64, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    first = mf.loss(exact_u, x1, generator=torch.Generator().manual_seed(1))
    torch.randn(10)  # moves the global RNG
    second = mf.loss(exact_u, x1, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(first, second, rtol=0, atol=0)


def _ks(sample: torch.Tensor, cdf) -> float:
    """Kolmogorov-Smirnov distance of ``sample`` to the continuous ``cdf``."""
    x = sample.double().sort().values
    n = x.shape[0]
    f = cdf(x)
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n - f
    lower = f - torch.arange(0, n, dtype=torch.float64) / n
    return float(torch.maximum(upper, lower).max())


def test_meanflow_time_pairs_follow_the_sorted_uniform_law_and_the_diagonal_sits_at_the_noisier_time() -> None:
    """Default sampler: ``(s, t)`` the sorted pair of two ``U(0, 1)`` draws, so ``P(s <= x) = 1 - (1 - x)^2`` and
    ``P(t <= x) = x^2``; a diagonal pair keeps ``s`` (the paper sets ``r = t`` at its noisier time, our smaller one),
    so ``s = t`` has the law of ``s``. KS critical value at 0.1 % for 20 000 draws: 1.95 / sqrt(20 000) = 0.014."""
    mf = MeanFlow(ratio=0.5)
    s, t = mf.times(40_000, torch.zeros(1, dtype=torch.float64), torch.Generator().manual_seed(0))
    off = s != t
    assert s.dtype == torch.float64 and abs(float(off.double().mean()) - 0.5) < 0.01
    assert _ks(s[off], lambda x: 1 - (1 - x) ** 2) < 0.015
    assert _ks(t[off], lambda x: x**2) < 0.015
    assert _ks(s[~off], lambda x: 1 - (1 - x) ** 2) < 0.015
    assert _ks(s[~off], lambda x: x) > 0.2  # the diagonal is not uniform either
    # the diagonal is chosen independently of the times: its share is the same at small and at large s
    low = s < 0.3
    assert abs(float(off[low].double().mean()) - float(off[~low].double().mean())) < 0.03


def test_trained_two_time_network_saves_and_loads_exactly_in_float64_with_batch_one(tmp_path) -> None:
    net = _net(1)
    net.save_pretrained(tmp_path / "fm")
    loaded = TwoTimeMLP.from_pretrained(tmp_path / "fm").double()
    z = _x(1, seed=2)
    assert z.shape == (1, 2)
    torch.testing.assert_close(sample_flow_map(loaded, z, 2), sample_flow_map(net, z, 2), rtol=0, atol=0)
    assert sample_flow_map(loaded, z, 2).dtype == torch.float64
    loss = MeanFlow().loss(loaded, z, generator=torch.Generator().manual_seed(0))
    assert loss.dtype == torch.float64 and bool(torch.isfinite(loss))
