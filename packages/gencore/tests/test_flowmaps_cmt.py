"""Consistency Mid-Training: targets are points of the teacher's own ODE trajectories (endpoints, and pairs of
states with the teacher's velocity on the diagonal); the exact map has zero loss; mid-training learns it."""

from __future__ import annotations

import pytest
import torch

from gencore.data import sample_checkerboard
from gencore.errors import ConfigError
from gencore.flowmaps import (
    TwoTimeMLP,
    flow_map,
    gaussian_average_velocity,
    gaussian_flow_map,
    gaussian_velocity,
    mid_training_loss,
    pair_mid_training_loss,
    teacher_trajectories,
)
from gencore.flowmaps.experiment import FlowMapConfig, checkerboard_coverage, mid_train
from gencore.solvers import solve_ode

MEAN = torch.tensor([1.0, -2.0], dtype=torch.float64)
STD = 0.5


def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return gaussian_velocity(x, t, MEAN, STD)


def _noise(n: int = 64) -> torch.Tensor:
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_targets_are_each_trajectorys_teacher_endpoint() -> None:
    noise = _noise()
    data = teacher_trajectories(velocity, noise, steps=8, method="midpoint")
    assert data.x.shape == (8 * 64, 2) and data.s.shape == (8 * 64,)
    torch.testing.assert_close(data.s[:64], torch.zeros(64, dtype=torch.float64))
    torch.testing.assert_close(data.s[-1], torch.tensor(7 / 8, dtype=torch.float64))
    endpoint = solve_ode(velocity, noise, steps=8, method="midpoint").x
    torch.testing.assert_close(data.endpoints, endpoint)
    for i in range(8):  # block i holds the states at t_i, each paired with its own trajectory's endpoint
        torch.testing.assert_close(data.target[i * 64 : (i + 1) * 64], endpoint)
    # the state at t_i continued by the same solver from t_i reaches that same endpoint
    grid = torch.linspace(0.0, 1.0, 9, dtype=torch.float64)
    rest = solve_ode(velocity, data.x[3 * 64 : 4 * 64], grid=grid[3:], method="midpoint").x
    torch.testing.assert_close(rest, endpoint[:64])
    x, s, target = data.batch(10, torch.Generator().manual_seed(1))
    assert x.shape == (10, 2) and s.shape == (10,) and target.shape == (10, 2)


def test_exact_flow_map_has_zero_mid_training_loss_up_to_solver_error() -> None:
    data = teacher_trajectories(velocity, _noise(), steps=128, method="rk4")
    torch.testing.assert_close(data.endpoints, gaussian_flow_map(_noise(), 0.0, 1.0, MEAN, STD), rtol=0, atol=1e-9)
    exact = lambda x, s, t: gaussian_average_velocity(x, s, t, MEAN, STD)  # noqa: E731
    assert float(mid_training_loss(exact, data.x, data.s, data.target)) < 1e-16
    wrong = lambda x, s, t: gaussian_average_velocity(x, s, t, MEAN + 0.1, STD)  # noqa: E731
    assert float(mid_training_loss(wrong, data.x, data.s, data.target)) > 1e-3


def test_pair_targets_are_points_and_velocities_of_the_same_teacher_trajectory() -> None:
    noise = _noise()
    data = teacher_trajectories(velocity, noise, steps=8, method="midpoint")
    grid = torch.linspace(0.0, 1.0, 9, dtype=torch.float64)
    torch.testing.assert_close(data.times, grid)
    assert data.states.shape == (9, 64, 2) and data.velocities.shape == (8, 64, 2)
    full = solve_ode(velocity, noise, steps=8, method="midpoint", return_trajectory=True)
    torch.testing.assert_close(data.states, full.trajectory)
    x, s, t, u = data.pair_batch(4000, torch.Generator().manual_seed(2), diagonal=0.3)
    assert x.shape == (4000, 2) and s.shape == t.shape == (4000,) and u.shape == (4000, 2)
    assert bool((s <= t).all()) and bool((s < 1).all())
    same = s == t
    assert abs(float(same.double().mean()) - 0.3) < 0.03
    # the diagonal's target is the teacher's velocity at the state itself
    torch.testing.assert_close(u[same], velocity(x[same], s[same]))
    # off the diagonal, the jump X_{s,t}(x) = x + (t - s) u lands on the state at t of x's own trajectory:
    # continuing the same solver from x on the grid from s to t reproduces it exactly
    off = (~same).nonzero().flatten()[:200]
    for k in off.tolist():
        i, j = round(float(s[k]) * 8), round(float(t[k]) * 8)
        end = solve_ode(velocity, x[k : k + 1], grid=grid[i : j + 1], method="midpoint").x[0]
        torch.testing.assert_close(x[k] + (t[k] - s[k]) * u[k], end)
    # every start time and every later end time occurs
    assert set((s * 8).round().long().tolist()) == set(range(8))
    assert set((t[~same] * 8).round().long().tolist()) == set(range(1, 9))


def test_exact_average_velocity_has_zero_pair_loss_up_to_solver_error() -> None:
    data = teacher_trajectories(velocity, _noise(), steps=128, method="rk4")
    batch = data.pair_batch(2000, torch.Generator().manual_seed(3))
    exact = lambda x, s, t: gaussian_average_velocity(x, s, t, MEAN, STD)  # noqa: E731
    assert float(pair_mid_training_loss(exact, *batch)) < 1e-16
    wrong = lambda x, s, t: gaussian_average_velocity(x, s, t, MEAN + 0.1, STD)  # noqa: E731
    assert float(pair_mid_training_loss(wrong, *batch)) > 1e-3


def test_pair_mid_training_learns_the_whole_two_time_map() -> None:
    """Pair mid-training fits jumps of every length, including the diagonal, on the analytic flow.

    Endpoint-only mid-training leaves ``u(x, s, t)`` for ``t < 1`` untrained: its half-jumps stay far off.
    """
    noise = torch.randn(1024, 2, generator=torch.Generator().manual_seed(4))
    mean32 = MEAN.float()

    def v32(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return gaussian_velocity(x, t, mean32, STD)

    data = teacher_trajectories(v32, noise, steps=16, method="rk4")
    cfg = FlowMapConfig(cmt_steps=800, batch_size=256, lr=3e-3, progress=False)
    x = torch.randn(512, 2, generator=torch.Generator().manual_seed(5))
    errors = {}
    for targets in ("pairs", "endpoint"):
        torch.manual_seed(0)
        model, _ = mid_train(cfg, data, TwoTimeMLP(2, hidden=64, depth=2), targets=targets)
        with torch.no_grad():
            errors[targets] = {
                (a, b): float((flow_map(model, x, a, b) - gaussian_flow_map(x, a, b, mean32, STD)).norm(dim=1).mean())
                for a, b in ((0.0, 1.0), (0.0, 0.5), (0.5, 0.75))
            }
            errors[targets]["diag"] = float((model(x, 0.25, 0.25) - v32(x, 0.25)).norm(dim=1).mean())
    scale = float(gaussian_flow_map(x, 0.0, 1.0, mean32, STD).sub(x).norm(dim=1).mean())
    assert all(err < 0.05 * scale for err in errors["pairs"].values()), errors
    assert errors["endpoint"][(0.0, 1.0)] < 0.05 * scale
    assert errors["endpoint"][(0.0, 0.5)] > 5 * errors["pairs"][(0.0, 0.5)], errors
    assert errors["endpoint"]["diag"] > 5 * errors["pairs"]["diag"], errors


def test_bad_settings() -> None:
    for steps in (0, 2.5, True):  # a float or bool was reported as solve_ode's "n_steps"
        with pytest.raises(ConfigError, match=r"^steps must"):
            teacher_trajectories(velocity, _noise(), steps=steps)
    with pytest.raises(ConfigError):
        teacher_trajectories(velocity, _noise(), steps=4).pair_batch(8, diagonal=1.5)


def test_checkerboard_coverage_counts_cells() -> None:
    x = sample_checkerboard(4000, generator=0)
    assert checkerboard_coverage(x) == (8, 1.0)
    one_cell = x[(x[:, 0] < -2) & (x[:, 1] < -2)]
    assert checkerboard_coverage(one_cell) == (1, 1.0)
    outside = torch.tensor([[-3.0, -1.0], [5.0, 0.0]])  # a white cell and off the board
    assert checkerboard_coverage(outside) == (0, 0.0)


def test_bad_flow_map_config_is_refused_before_any_training() -> None:
    for kwargs in ({"fd_eps": 0.0}, {"fd_eps": float("nan")}, {"nfe": (1.5,)}, {"nfe": (True,)}, {"nfe": ()}):
        with pytest.raises(ConfigError):
            FlowMapConfig(**kwargs).validate()
    FlowMapConfig(nfe=(1, 4)).validate()


def test_trajectories_of_a_teacher_undefined_at_t1_never_evaluate_it_there() -> None:
    """A velocity converted from a data prediction, ``(x1_hat - x) / (1 - t)``, is undefined at ``t = 1``: the
    midpoint solver never evaluates it there, and neither may the stored velocities (they used to, and raised)."""

    def strict(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if bool((torch.as_tensor(t) >= 1.0).any()):
            raise ZeroDivisionError("1 - t = 0")
        return velocity(x, t)

    data = teacher_trajectories(strict, _noise(), steps=8, method="midpoint")
    torch.testing.assert_close(data.endpoints, teacher_trajectories(velocity, _noise(), steps=8).endpoints)
    for k in range(8):
        torch.testing.assert_close(data.velocities[k], velocity(data.states[k], data.times[k]))


def test_pair_indices_are_uniform_start_then_uniform_later_end() -> None:
    """``pair_batch``'s law: start ``i`` uniform over ``0 .. n - 1``; off the diagonal ``j | i`` uniform over
    ``i + 1 .. n``. Checked on 60 000 draws with a chi-square statistic per table (``n = 4``: 4 starts, 10 cells;
    the 0.1 % critical values are 16.3 for 3 and 27.9 for 9 degrees of freedom)."""
    n = 4
    data = teacher_trajectories(velocity, _noise(8), steps=n, method="euler")
    _, s, t, _ = data.pair_batch(60_000, torch.Generator().manual_seed(5), diagonal=0.25)
    i, j = (s * n).round().long(), (t * n).round().long()
    off = i != j
    start = torch.bincount(i, minlength=n).double()
    assert float(((start - 15_000) ** 2 / 15_000).sum()) < 16.3
    chi2 = 0.0
    for a in range(n):
        ends = j[off & (i == a)]
        counts = torch.bincount(ends - a - 1, minlength=n - a).double()
        assert counts.shape[0] == n - a  # never past the end
        expected = ends.shape[0] / (n - a)
        chi2 += float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 27.9
