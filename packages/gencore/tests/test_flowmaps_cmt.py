"""Consistency Mid-Training: trajectory pairs are the teacher's ODE endpoints; the exact map has zero loss."""

from __future__ import annotations

import pytest
import torch

from gencore.data import sample_checkerboard
from gencore.errors import ConfigError
from gencore.flowmaps import (
    gaussian_average_velocity,
    gaussian_flow_map,
    gaussian_velocity,
    mid_training_loss,
    teacher_trajectories,
)
from gencore.flowmaps.experiment import checkerboard_coverage
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


def test_bad_settings() -> None:
    with pytest.raises(ConfigError):
        teacher_trajectories(velocity, _noise(), steps=0)


def test_checkerboard_coverage_counts_cells() -> None:
    x = sample_checkerboard(4000, generator=0)
    assert checkerboard_coverage(x) == (8, 1.0)
    one_cell = x[(x[:, 0] < -2) & (x[:, 1] < -2)]
    assert checkerboard_coverage(one_cell) == (1, 1.0)
    outside = torch.tensor([[-3.0, -1.0], [5.0, 0.0]])  # a white cell and off the board
    assert checkerboard_coverage(outside) == (0, 0.0)
