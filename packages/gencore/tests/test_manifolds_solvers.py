"""Riemannian solvers: convergence order on ODEs with known solutions (sphere, ball, SO(3)) and NFE counts."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.manifolds import SO3, PoincareBall, Sphere, solve_manifold_ode
from gencore.manifolds.spaces import hat, rodrigues

AXIS = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
AXIS = AXIS / AXIS.norm()


def _angle(t):  # theta(t) = int_0^t 2 (1 + s) ds
    return 2 * (t + t**2 / 2)


def _sphere_problem():
    m = Sphere(2)

    def f(x, t):  # rotation about AXIS at angular speed 2 (1 + t): not a geodesic flow
        return 2 * (1 + t) * torch.linalg.cross(AXIS.expand_as(x), x)

    x0 = m.projx(torch.tensor([[1.0, 0.2, 0.1], [0.0, 0.0, 1.0], [-0.3, 0.9, 0.2]], dtype=torch.float64))
    exact = x0 @ rodrigues(_angle(1.0) * AXIS).T
    return m, f, x0, exact


def _ball_problem():
    m = PoincareBall(2, c=1.0)

    def f(x, t):  # Euclidean rotations about the origin are isometries of the disk; plus a time-varying speed
        return 2 * (1 + t) * torch.stack([-x[:, 1], x[:, 0]], -1)

    x0 = torch.tensor([[0.5, 0.1], [-0.2, 0.4], [0.0, -0.6]], dtype=torch.float64)
    a = _angle(1.0)
    rot = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
    return m, f, x0, x0 @ rot.T


def _so3_problem():
    m = SO3()
    a = torch.tensor([0.4, -1.0, 0.7], dtype=torch.float64)
    b = torch.tensor([0.9, 0.3, -0.2], dtype=torch.float64)

    def f(x, t):  # R(t) = R0 Exp(t a) Exp(t b) solves dR/dt = R hat(Exp(-t b) a + b): non-commuting
        w = rodrigues(-t * b) @ a + b
        return (x.reshape(-1, 3, 3) @ hat(w).expand(x.shape[0], 3, 3)).reshape(-1, 9)

    x0 = m.random_base(3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    exact = (x0.reshape(-1, 3, 3) @ rodrigues(a) @ rodrigues(b)).reshape(-1, 9)
    return m, f, x0, exact


PROBLEMS = {"sphere": _sphere_problem, "ball": _ball_problem, "so3": _so3_problem}
ORDERS = {"euler": 1, "midpoint": 2, "rk4": 4}


@pytest.mark.parametrize("method", list(ORDERS))
@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_convergence_order(problem, method):
    m, f, x0, exact = PROBLEMS[problem]()
    steps = (16, 32, 64) if method != "euler" else (128, 256, 512)
    errs = []
    for n in steps:
        sol = solve_manifold_ode(m, f, x0, steps=n, method=method)
        assert sol.nfe == n * {"euler": 1, "midpoint": 2, "rk4": 4}[method]
        errs.append(float(m.dist(sol.x, exact).max()))
    rates = [math.log2(errs[i] / errs[i + 1]) for i in range(len(errs) - 1)]
    assert all(abs(r - ORDERS[method]) < 0.3 for r in rates), (errs, rates)


def test_backward_integration_returns_to_the_start():
    m, f, x0, exact = _sphere_problem()
    back = solve_manifold_ode(m, f, exact, steps=32, method="rk4", t0=1.0, t1=0.0)
    assert m.dist(back.x, x0).max() < 1e-6


def test_stays_on_the_manifold_in_float32_and_rejects_bad_settings():
    m, f, x0, _ = _sphere_problem()
    x = solve_manifold_ode(m, lambda x, t: f(x.double(), t.double()).float(), x0.float(), steps=200).x
    assert torch.allclose(x.norm(dim=-1), torch.ones(3), atol=1e-6)
    with pytest.raises(ConfigError):
        solve_manifold_ode(m, f, x0, steps=0)
    with pytest.raises(ConfigError):
        solve_manifold_ode(m, f, x0, steps=4, method="dopri")


@pytest.mark.parametrize(
    "grid",
    [[0.0, 0.5, 0.3, 1.0], [0.0, 0.5, 0.5, 1.0], [0.0, float("nan"), 1.0]],
    ids=["not-monotone", "repeated-time", "nan"],
)
def test_bad_time_grid_is_refused(grid):
    m, f, x0, _ = _sphere_problem()
    with pytest.raises(InputError, match="time grid"):
        solve_manifold_ode(m, f, x0, grid=grid)


@pytest.mark.parametrize("kwargs", [{"steps": 2.5}, {"steps": True}, {"steps": 3, "grid": [0.0, 1.0]}])
def test_bad_steps_are_refused(kwargs):
    m, f, x0, _ = _sphere_problem()
    with pytest.raises(ConfigError, match="steps"):
        solve_manifold_ode(m, f, x0, **kwargs)


def test_decreasing_grid_runs_backwards():
    m, f, x0, exact = _sphere_problem()
    back = solve_manifold_ode(m, f, exact, grid=torch.linspace(1.0, 0.0, 201), method="rk4")
    assert torch.allclose(back.x, x0, atol=1e-8)


@pytest.mark.parametrize("method", list(ORDERS))
def test_gradients_through_the_so3_solver_are_finite_and_match_finite_differences(method):
    """Backpropagation through a solve on SO(3) (each step ends in projx): NaN before, now the exact derivative."""
    m, _, x0, _ = _so3_problem()
    b = torch.tensor([0.9, 0.3, -0.2], dtype=torch.float64)

    def loss(a: torch.Tensor) -> torch.Tensor:
        def f(x, t):
            w = rodrigues(-t * b) @ a + b
            return (x.reshape(-1, 3, 3) @ hat(w).expand(x.shape[0], 3, 3)).reshape(-1, 9)

        x1 = solve_manifold_ode(m, f, x0, steps=4, method=method).x
        return (x1 * torch.arange(9, dtype=torch.float64)).sum()

    a = torch.tensor([0.4, -1.0, 0.7], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(a), a)
    assert torch.isfinite(grad).all()
    h = 1e-6
    fd = torch.stack([(loss(a.detach() + h * e) - loss(a.detach() - h * e)) / (2 * h) for e in torch.eye(3).double()])
    torch.testing.assert_close(grad, fd, atol=1e-7, rtol=1e-7)
