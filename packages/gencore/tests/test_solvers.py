"""Fixed-step, adaptive and stochastic solvers against closed-form solutions."""

from __future__ import annotations

import importlib
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError, ConvergenceError, InputError
from gencore.solvers import (
    FIXED_STEP_METHODS,
    dopri5,
    euler_maruyama,
    karras_grid,
    shifted_grid,
    solve_ode,
    uniform_grid,
)

# the submodule (``gencore.solvers.dopri5`` the attribute is the function): its Butcher tableau constants
dp_mod = importlib.import_module("gencore.solvers.dopri5")

DT = torch.float64
A = torch.tensor([[-0.5, 2.0], [-2.0, -0.5]], dtype=DT)  # damped rotation
X0 = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=DT)
ORDERS = {"euler": 1.0, "midpoint": 2.0, "heun": 2.0, "rk4": 4.0}
NFE_PER_STEP = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}


def linear_field(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return x @ A.T


def linear_exact(x0: torch.Tensor, t0: float, t1: float) -> torch.Tensor:
    return x0 @ torch.linalg.matrix_exp(A * (t1 - t0)).T


def nonautonomous_field(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """dx/dt = cos(3t) x + t^2: exercises the stage times."""
    return torch.cos(3 * t) * x + t**2


def nonautonomous_exact(x0: torch.Tensor, t1: float, n: int = 20001) -> torch.Tensor:
    # x(t) = e^{F(t)} (x0 + int_0^t e^{-F(s)} s^2 ds), F(t) = sin(3t)/3; the integral by Simpson.
    s = torch.linspace(0.0, t1, n, dtype=DT)
    g = torch.exp(-torch.sin(3 * s) / 3) * s**2
    w = torch.ones(n, dtype=DT)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    integral = (w * g).sum() * (t1 / (n - 1)) / 3
    return math.exp(math.sin(3 * t1) / 3) * (x0 + integral)


class Counter:
    def __init__(self, f):
        self.f, self.calls = f, 0

    def __call__(self, x, t):
        self.calls += 1
        assert t.dim() == 0
        return self.f(x, t)


@pytest.mark.parametrize("method", FIXED_STEP_METHODS)
@pytest.mark.parametrize("problem", ["linear", "nonautonomous"])
def test_convergence_order(method: str, problem: str) -> None:
    if problem == "linear":
        f, exact = linear_field, linear_exact(X0, 0.0, 1.0)
    else:
        f, exact = nonautonomous_field, nonautonomous_exact(X0, 1.0)
    n = 8 if method == "rk4" else 32
    e1 = (solve_ode(f, X0, steps=n, method=method).x - exact).abs().max()
    e2 = (solve_ode(f, X0, steps=2 * n, method=method).x - exact).abs().max()
    order = math.log2(float(e1 / e2))
    assert abs(order - ORDERS[method]) < 0.3, order


@pytest.mark.parametrize("method", FIXED_STEP_METHODS)
def test_backward_order_and_reversal(method: str) -> None:
    grid = uniform_grid(40, dtype=DT).flip(0)  # 1 -> 0
    x1 = linear_exact(X0, 0.0, 1.0)
    back = solve_ode(linear_field, x1, grid, method=method)
    fine = solve_ode(linear_field, x1, uniform_grid(80, dtype=DT).flip(0), method=method)
    e1, e2 = (back.x - X0).abs().max(), (fine.x - X0).abs().max()
    assert abs(math.log2(float(e1 / e2)) - ORDERS[method]) < 0.3
    if method == "rk4":
        fwd = solve_ode(linear_field, X0, steps=200, method="rk4")
        rev = solve_ode(linear_field, fwd.x, uniform_grid(200, dtype=DT).flip(0), method="rk4")
        torch.testing.assert_close(rev.x, X0, atol=1e-9, rtol=0)


@pytest.mark.parametrize("method", FIXED_STEP_METHODS)
def test_nfe_and_trajectory(method: str) -> None:
    f = Counter(linear_field)
    grid = karras_grid(7, dtype=DT)
    sol = solve_ode(f, X0, grid, method=method, return_trajectory=True)
    assert sol.nfe == f.calls == 7 * NFE_PER_STEP[method]
    assert sol.trajectory is not None and sol.trajectory.shape == (8, *X0.shape)
    torch.testing.assert_close(sol.times, grid)
    torch.testing.assert_close(sol.trajectory[0], X0)
    torch.testing.assert_close(sol.trajectory[-1], sol.x)
    assert solve_ode(linear_field, X0, steps=3, method=method).trajectory is None


@settings(max_examples=15, deadline=None)
@given(
    method=st.sampled_from(FIXED_STEP_METHODS),
    n=st.integers(1, 12),
    shift=st.floats(0.2, 6.0),
    backwards=st.booleans(),
)
def test_polynomial_fields_integrated_exactly(method: str, n: int, shift: float, backwards: bool) -> None:
    """Every method integrates dx/dt = c exactly, and order >= 2 methods also dx/dt = 2t, on any grid."""
    grid = shifted_grid(n, shift, dtype=DT)
    if backwards:
        grid = grid.flip(0)
    c = torch.tensor([[0.7, -1.3]], dtype=DT)
    sol = solve_ode(lambda x, t: c.expand_as(x), X0, grid, method=method)
    torch.testing.assert_close(sol.x, X0 + c * (grid[-1] - grid[0]), atol=1e-12, rtol=0)
    if method != "euler":
        sol = solve_ode(lambda x, t: 2 * t * torch.ones_like(x), X0, grid, method=method)
        torch.testing.assert_close(sol.x, X0 + (grid[-1] ** 2 - grid[0] ** 2), atol=1e-12, rtol=0)


def test_gradients_flow_and_no_grad() -> None:
    x0 = X0.clone().requires_grad_(True)
    h = 1.0 / 10
    sol = solve_ode(linear_field, x0, steps=10, method="euler")
    w = torch.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=DT)
    (sol.x * w).sum().backward()
    step = torch.eye(2, dtype=DT) + h * A  # x_{k+1} = x_k step^T  =>  dL/dx0 = w step^10
    torch.testing.assert_close(x0.grad, w @ torch.linalg.matrix_power(step, 10))
    with torch.no_grad():
        assert not solve_ode(linear_field, x0, steps=3, method="rk4").x.requires_grad
        assert not dopri5(linear_field, x0).x.requires_grad
    # dopri5 gradient matches d x(1) / d x0 = expm(A)
    x0.grad = None
    dopri5(linear_field, x0, rtol=1e-10, atol=1e-10).x.mul(w).sum().backward()
    torch.testing.assert_close(x0.grad, w @ torch.linalg.matrix_exp(A), atol=1e-7, rtol=0)


def test_solve_ode_validation() -> None:
    with pytest.raises(ConfigError):
        solve_ode(linear_field, X0, steps=4, method="rk45")
    with pytest.raises(ConfigError):
        solve_ode(linear_field, X0)
    with pytest.raises(ConfigError):
        solve_ode(linear_field, X0, uniform_grid(3), steps=3)
    with pytest.raises(InputError):
        solve_ode(linear_field, X0, torch.tensor([0.0, 0.5, 0.4, 1.0]))
    with pytest.raises(InputError):
        solve_ode(linear_field, X0, torch.tensor([0.0]))


# ---------------------------------------------------------------- dopri5


@pytest.mark.parametrize("tol", [1e-4, 1e-7, 1e-10])
def test_dopri5_meets_tolerance(tol: float) -> None:
    exact = nonautonomous_exact(X0, 1.0)
    f = Counter(nonautonomous_field)
    sol = dopri5(f, X0, 0.0, 1.0, rtol=tol, atol=tol)
    err = (sol.x - exact).abs()
    assert bool((err <= 10 * (tol + tol * exact.abs())).all()), float(err.max())
    assert sol.nfe == f.calls == 2 + 6 * (sol.n_accepted + sol.n_rejected)
    assert float(sol.times[0]) == 0.0 and float(sol.times[-1]) == 1.0
    assert bool((sol.times.diff() > 0).all()) and sol.times.shape[0] == sol.n_accepted + 1


def test_dopri5_fewer_nfe_at_looser_tolerance() -> None:
    nfes = [dopri5(linear_field, X0, rtol=tol, atol=tol).nfe for tol in (1e-3, 1e-6, 1e-9)]
    assert nfes[0] < nfes[1] < nfes[2], nfes


def test_dopri5_backward_reverses_forward_and_trajectory() -> None:
    fwd = dopri5(linear_field, X0, 0.0, 1.0, rtol=1e-10, atol=1e-10, return_trajectory=True)
    torch.testing.assert_close(fwd.x, linear_exact(X0, 0.0, 1.0), atol=1e-8, rtol=0)
    back = dopri5(linear_field, fwd.x, 1.0, 0.0, rtol=1e-10, atol=1e-10, return_trajectory=True)
    torch.testing.assert_close(back.x, X0, atol=1e-8, rtol=0)
    assert bool((back.times.diff() < 0).all()) and float(back.times[-1]) == 0.0
    assert fwd.trajectory.shape == (fwd.times.shape[0], *X0.shape)
    for t, xt in zip(fwd.times[::3], fwd.trajectory[::3]):  # accepted states lie on the solution
        torch.testing.assert_close(xt, linear_exact(X0, 0.0, float(t)), atol=1e-8, rtol=0)


def test_dopri5_first_step_nfe_and_errors() -> None:
    sol = dopri5(linear_field, X0, first_step=0.1)
    assert sol.nfe == 1 + 6 * (sol.n_accepted + sol.n_rejected)
    with pytest.raises(ConvergenceError):
        dopri5(linear_field, X0, rtol=1e-12, atol=1e-12, max_steps=5)
    with pytest.raises(ConvergenceError):
        dopri5(lambda x, t: x / (0.5 - t) ** 2, X0, max_steps=100_000)  # blows up at t = 0.5
    with pytest.raises(ConfigError):
        dopri5(linear_field, X0, rtol=0.0, atol=0.0)
    assert dopri5(linear_field, X0, 0.3, 0.3).nfe == 0


def test_dopri5_float32_model_time_dtype() -> None:
    x0 = X0.float()
    seen = []

    def f(x, t):
        seen.append(t.dtype)
        return x @ A.float().T

    sol = dopri5(f, x0, rtol=1e-5, atol=1e-5)
    assert set(seen) == {torch.float32} and sol.x.dtype == torch.float32
    torch.testing.assert_close(sol.x, linear_exact(X0, 0.0, 1.0).float(), atol=1e-4, rtol=0)


# ---------------------------------------------------------------- Euler-Maruyama


def test_euler_maruyama_ornstein_uhlenbeck_moments() -> None:
    theta, sig, n_paths, n = 1.5, 0.8, 20000, 200
    x0 = torch.full((n_paths, 1), 2.0, dtype=DT)
    g = torch.Generator().manual_seed(0)
    sol = euler_maruyama(lambda x, t: -theta * x, sig, x0, steps=n, generator=g)
    assert sol.nfe == n
    # Closed form of the Euler-Maruyama recursion x' = (1 - theta h) x + sig sqrt(h) z (and the SDE):
    h = 1.0 / n
    a = 1 - theta * h
    mean_em = a**n * 2.0
    var_em = sig**2 * h * (1 - a ** (2 * n)) / (1 - a**2)
    var_sde = sig**2 / (2 * theta) * (1 - math.exp(-2 * theta))
    assert abs(mean_em - 2.0 * math.exp(-theta)) < 5e-3 and abs(var_em - var_sde) < 5e-3
    m, v = float(sol.x.mean()), float(sol.x.var())
    assert abs(m - mean_em) < 4 * math.sqrt(var_em / n_paths)
    assert abs(v - var_em) < 4 * var_em * math.sqrt(2 / (n_paths - 1))


def test_euler_maruyama_time_dependent_diffusion_backwards_and_reproducible() -> None:
    grid = shifted_grid(50, 2.0, dtype=DT).flip(0)  # 1 -> 0, non-uniform
    x0 = torch.zeros(12000, 2, dtype=DT)

    def diffusion(t):
        return 0.5 + t

    def run(seed: int, traj: bool = False):
        gen = torch.Generator().manual_seed(seed)
        return euler_maruyama(
            lambda x, t: torch.ones_like(x), diffusion, x0, grid, generator=gen, return_trajectory=traj
        )

    s1, s2, s3 = run(3, traj=True), run(3), run(4)
    torch.testing.assert_close(s1.x, s2.x, atol=0, rtol=0)
    assert not torch.equal(s1.x, s3.x)
    assert s1.trajectory.shape == (51, 12000, 2)
    torch.testing.assert_close(s1.trajectory[-1], s1.x)
    h = grid.diff()
    var = float((diffusion(grid[:-1]) ** 2 * h.abs()).sum())  # exact for EM: sum g(t_i)^2 |h_i|
    assert abs(float(s1.x.mean()) - (-1.0)) < 4 * math.sqrt(var / 24000)
    assert abs(float(s1.x.var()) - var) < 4 * var * math.sqrt(2 / 24000)


def test_euler_maruyama_noise_last_step_and_tensor_diffusion() -> None:
    x0 = torch.zeros(5000, 2, dtype=DT)
    grid = torch.tensor([0.0, 0.5, 1.0], dtype=DT)
    scale = torch.tensor([1.0, 0.0], dtype=DT)  # per-coordinate diffusion
    sol = euler_maruyama(
        lambda x, t: torch.zeros_like(x),
        lambda t: scale,
        x0,
        grid,
        generator=torch.Generator().manual_seed(1),
        noise_last_step=False,
    )
    assert bool((sol.x[:, 1] == 0).all())
    assert abs(float(sol.x[:, 0].var()) - 0.5) < 4 * 0.5 * math.sqrt(2 / 5000)


# Dormand & Prince 1980, Table 2 (also Hairer, Norsett & Wanner, "Solving ODEs I", Table II.5.2), as exact fractions.
_F = Fraction
DP_C = [_F(0), _F(1, 5), _F(3, 10), _F(4, 5), _F(8, 9), _F(1), _F(1)]
DP_A = [
    [],
    [_F(1, 5)],
    [_F(3, 40), _F(9, 40)],
    [_F(44, 45), _F(-56, 15), _F(32, 9)],
    [_F(19372, 6561), _F(-25360, 2187), _F(64448, 6561), _F(-212, 729)],
    [_F(9017, 3168), _F(-355, 33), _F(46732, 5247), _F(49, 176), _F(-5103, 18656)],
    [_F(35, 384), _F(0), _F(500, 1113), _F(125, 192), _F(-2187, 6784), _F(11, 84)],
]
DP_B = [_F(35, 384), _F(0), _F(500, 1113), _F(125, 192), _F(-2187, 6784), _F(11, 84), _F(0)]
DP_B_STAR = [_F(5179, 57600), _F(0), _F(7571, 16695), _F(393, 640), _F(-92097, 339200), _F(187, 2100), _F(1, 40)]


def _order_conditions(b: list[Fraction], a: list[list[Fraction]], c: list[Fraction]) -> dict[int, list[Fraction]]:
    """``b . Phi(tree) - 1 / gamma(tree)`` for every rooted tree up to order 5 (1, 1, 2, 4, 9 trees)."""
    s = len(b)

    def dot(u, v):
        return sum((ui * vi for ui, vi in zip(u, v)), _F(0))

    def mat(v):  # (A v)_i = sum_j a_ij v_j
        return [sum((a[i][j] * v[j] for j in range(len(a[i]))), _F(0)) for i in range(s)]

    def mul(*vs):
        return [math.prod((v[i] for v in vs), start=_F(1)) for i in range(s)]

    one, ac = [_F(1)] * s, mat(c)
    c2, c3 = mul(c, c), mul(c, c, c)
    return {
        1: [dot(b, one) - 1],
        2: [dot(b, c) - _F(1, 2)],
        3: [dot(b, c2) - _F(1, 3), dot(b, ac) - _F(1, 6)],
        4: [
            dot(b, c3) - _F(1, 4),
            dot(b, mul(c, ac)) - _F(1, 8),
            dot(b, mat(c2)) - _F(1, 12),
            dot(b, mat(ac)) - _F(1, 24),
        ],
        5: [
            dot(b, mul(c2, c2)) - _F(1, 5),
            dot(b, mul(c2, ac)) - _F(1, 10),
            dot(b, mul(c, mat(c2))) - _F(1, 15),
            dot(b, mul(c, mat(ac))) - _F(1, 30),
            dot(b, mul(ac, ac)) - _F(1, 20),
            dot(b, mat(c3)) - _F(1, 20),
            dot(b, mat(mul(c, ac))) - _F(1, 40),
            dot(b, mat(mat(c2))) - _F(1, 60),
            dot(b, mat(mat(ac))) - _F(1, 120),
        ],
    }


def test_dopri5_tableau_is_the_published_one() -> None:
    # the reference fractions are self-consistent: row sums give c, b is fifth order, b* exactly fourth order
    for i in range(1, 7):
        assert sum(DP_A[i]) == DP_C[i]
    conds = _order_conditions(DP_B, DP_A, DP_C)
    assert all(v == 0 for order in range(1, 6) for v in conds[order])
    conds_star = _order_conditions(DP_B_STAR, DP_A, DP_C)
    assert all(v == 0 for order in range(1, 5) for v in conds_star[order])
    assert any(v != 0 for v in conds_star[5])
    assert DP_B[:6] == DP_A[6]  # FSAL: the last stage is f at the propagated solution

    # the module's floats are these fractions, correctly rounded
    assert len(dp_mod._C) == 7 and [float(v) for v in DP_C] == list(dp_mod._C)
    assert len(dp_mod._A) == 7
    for row, ref in zip(dp_mod._A, DP_A):
        assert list(row) == [float(v) for v in ref]
    assert [float(v) for v in DP_B] == list(dp_mod._B) + [0.0] * (7 - len(dp_mod._B))
    assert [float(v) for v in DP_B_STAR] == list(dp_mod._B_STAR)
    assert len(dp_mod._E) == 7
    for e, b, bs in zip(dp_mod._E, DP_B, DP_B_STAR):
        assert math.isclose(e, float(b - bs), rel_tol=1e-14, abs_tol=1e-17)


def _dopri5_fixed(x0: torch.Tensor, t0: float, t1: float, n: int):
    """dopri5 with n equal steps: first_step = |t1 - t0| / n, no growth (max_factor 1), every step accepted."""
    return dopri5(nonautonomous_field, x0, t0, t1, first_step=abs(t1 - t0) / n, rtol=0.0, atol=1e6, max_factor=1.0)


@pytest.mark.parametrize("backwards", [False, True])
def test_dopri5_fifth_order_solution_has_observed_order_five(backwards: bool) -> None:
    x1 = nonautonomous_exact(X0, 1.0)
    start, end, t0, t1 = (x1, X0, 1.0, 0.0) if backwards else (X0, x1, 0.0, 1.0)
    sols = [_dopri5_fixed(start, t0, t1, n) for n in (16, 32)]
    for n, sol in zip((16, 32), sols):
        assert sol.n_accepted == n and sol.n_rejected == 0
        torch.testing.assert_close(sol.times, torch.linspace(t0, t1, n + 1, dtype=DT), atol=1e-14, rtol=0)
    e1, e2 = ((sol.x - end).abs().max() for sol in sols)
    assert 1e-12 < float(e2) < 1e-8  # well above round-off, well below the order-4 level
    order = math.log2(float(e1 / e2))
    assert abs(order - 5.0) < 0.3, order


@pytest.mark.parametrize("method", FIXED_STEP_METHODS)
def test_backward_order_nonautonomous(method: str) -> None:
    """Integrating from t = 1 back to t = 0 the stage times run backwards too: the order is kept."""
    x1 = nonautonomous_exact(X0, 1.0)
    n = 16 if method == "rk4" else 32
    errs = [
        (solve_ode(nonautonomous_field, x1, uniform_grid(k, dtype=DT).flip(0), method=method).x - X0).abs().max()
        for k in (n, 2 * n)
    ]
    order = math.log2(float(errs[0] / errs[1]))
    assert abs(order - ORDERS[method]) < 0.3, order


def test_python_float_grid_keeps_double_precision() -> None:
    # a list of Python floats (doubles) was built into a float32 tensor before being cast to the state's float64,
    # so the integration ended at 0.30000001192... instead of 0.3
    grid = [0.0, 0.1, 0.3]
    x0 = torch.zeros(2, 1, dtype=DT)
    for method in FIXED_STEP_METHODS:
        sol = solve_ode(lambda x, t: torch.ones_like(x), x0, grid, method=method)
        assert sol.times.tolist() == grid
        torch.testing.assert_close(sol.x, torch.full_like(x0, 0.3), atol=1e-15, rtol=0)
    em = euler_maruyama(lambda x, t: torch.ones_like(x), 0.0, x0, grid)
    assert em.times.tolist() == grid
    torch.testing.assert_close(em.x, torch.full_like(x0, 0.3), atol=1e-15, rtol=0)


def test_dopri5_pure_relative_tolerance_with_zero_components() -> None:
    # atol = 0 is allowed; a state entry that is exactly zero made the starting-step heuristic 0 / 0 = NaN, and the
    # solver then spent max_steps rejected steps (60002 evaluations) before raising ConvergenceError
    x0 = torch.tensor([[1.0, 0.0, 0.0]], dtype=DT)

    def field(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.stack([-x[:, 0], x[:, 0], torch.zeros_like(x[:, 2])], 1)  # the last entry stays exactly 0

    f = Counter(field)
    sol = dopri5(f, x0, rtol=1e-8, atol=0.0)
    exact = torch.tensor([[math.exp(-1.0), 1.0 - math.exp(-1.0), 0.0]], dtype=DT)
    torch.testing.assert_close(sol.x, exact, atol=1e-7, rtol=0)
    assert sol.nfe == f.calls < 1000, sol.nfe
    back = dopri5(field, sol.x, 1.0, 0.0, rtol=1e-8, atol=0.0)
    torch.testing.assert_close(back.x, x0, atol=1e-7, rtol=0)


def test_euler_maruyama_keeps_the_state_dtype() -> None:
    # a float64 per-coordinate diffusion promoted a float32 state to float64 after the first step
    x0 = torch.zeros(100, 2)
    grid = uniform_grid(4, dtype=torch.float32)
    runs = [
        euler_maruyama(
            lambda x, t: -x,
            lambda t, dt=dt: torch.tensor([1.0, 0.5], dtype=dt),
            x0,
            grid,
            generator=torch.Generator().manual_seed(0),
        )
        for dt in (torch.float64, torch.float32)
    ]
    assert runs[0].x.dtype == torch.float32
    assert torch.equal(runs[0].x, runs[1].x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_euler_maruyama_cpu_generator_gives_the_same_path_for_cuda_state() -> None:
    x0 = torch.zeros(64, 3, dtype=DT)
    cpu = euler_maruyama(lambda x, t: -x, 0.7, x0, steps=5, generator=torch.Generator().manual_seed(3))
    gpu = euler_maruyama(lambda x, t: -x, 0.7, x0.to("cuda"), steps=5, generator=torch.Generator().manual_seed(3))
    assert gpu.x.is_cuda
    torch.testing.assert_close(gpu.x.cpu(), cpu.x)


@pytest.mark.parametrize(("rtol", "atol"), [(1e-3, 1e-3), (1e-6, 1e-9), (1e-9, 1e-6)])
@pytest.mark.parametrize(("t0", "t1"), [(0.0, 3.0), (3.0, 0.0)])
def test_dopri5_takes_the_same_steps_as_scipy_rk45(rtol: float, atol: float, t0: float, t1: float) -> None:
    """SciPy's RK45 is the same method (Dormand-Prince 5(4), Hairer's starting step, RMS error norm with
    ``atol + rtol * max(|x|, |x'|)``, safety 0.9, factors clipped to [0.2, 10], no growth after a rejection): both
    must accept the same steps at the same tolerances. The accuracy tests alone do not pin the controller."""
    integrate = pytest.importorskip("scipy.integrate")
    x0 = X0 * torch.tensor([[1.0, 1e-3], [30.0, 1.0]], dtype=DT)  # entries of different magnitudes: rtol vs atol

    def rhs(t: float, y):
        return nonautonomous_field(torch.from_numpy(y).reshape(x0.shape), torch.tensor(t, dtype=DT)).reshape(-1).numpy()

    ref = integrate.solve_ivp(rhs, (t0, t1), x0.reshape(-1).numpy(), method="RK45", rtol=rtol, atol=atol)
    assert ref.success
    sol = dopri5(nonautonomous_field, x0, t0, t1, rtol=rtol, atol=atol)
    assert sol.n_accepted == len(ref.t) - 1 and sol.nfe == ref.nfev, (sol.n_accepted, sol.nfe, len(ref.t), ref.nfev)
    torch.testing.assert_close(sol.times, torch.from_numpy(ref.t), atol=1e-7, rtol=0)
    torch.testing.assert_close(sol.x.reshape(-1), torch.from_numpy(ref.y[:, -1]), atol=1e-10, rtol=1e-10)


def test_euler_maruyama_rejects_a_non_finite_constant_diffusion() -> None:
    x0 = torch.zeros(3, 2, dtype=DT)
    for bad in (float("nan"), float("inf"), torch.tensor([1.0, float("nan")], dtype=DT)):  # every path became NaN
        with pytest.raises(ConfigError, match="diffusion must be finite"):
            euler_maruyama(lambda x, t: -x, bad, x0, steps=2)


def test_marginal_preserving_sde_with_the_score_from_the_velocity_reaches_the_data() -> None:
    """dx = (v + g^2 / 2 * s) dt + g dW has the probability-flow marginals for any g (Song et al. 2021, eq. 13 read
    forwards in t); with the exact velocity of the linear path N(0, I) -> N(mu, diag(s^2)) and the score obtained
    from it by the path's conversion, Euler-Maruyama from N(0, I) at t = 0 lands on N(mu, diag(s^2)) at t = 1."""
    from gencore.paths import AffineGaussianPath, LinearSchedule

    mu, s = torch.tensor([1.0, -2.0], dtype=DT), torch.tensor([0.5, 1.5], dtype=DT)
    path = AffineGaussianPath(LinearSchedule())

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        var = (1 - t) ** 2 + t**2 * s**2
        return mu + (t * s**2 - (1 - t)) / var * (x - t * mu)

    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(0), dtype=DT)
    t = torch.tensor(0.37, dtype=DT)  # the conversion against the closed-form score -(x - t mu) / var_t
    var_t = (1 - t) ** 2 + t**2 * s**2
    torch.testing.assert_close(path.convert(velocity(x, t), x, t, "velocity", "score"), -(x - t * mu) / var_t)

    g, n = 0.8, 20000

    def drift(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        v = velocity(x, t)
        return v + 0.5 * g**2 * path.convert(v, x, t, "velocity", "score")

    x0 = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    sol = euler_maruyama(drift, g, x0, steps=200, generator=torch.Generator().manual_seed(2), noise_last_step=False)
    # standard errors: s / sqrt(n) for the mean, s / sqrt(2 n) for the std; plus an O(h) discretisation bias
    torch.testing.assert_close(sol.x.mean(0), mu, atol=4 * float(s.max()) / math.sqrt(n) + 0.01, rtol=0)
    torch.testing.assert_close(sol.x.std(0), s, atol=4 * float(s.max()) / math.sqrt(2 * n) + 0.01, rtol=0)


def test_euler_maruyama_rejects_drift_or_diffusion_that_would_change_the_state_shape() -> None:
    # a [B] drift or a per-sample [B] diffusion on a [B, 1] state silently broadcast it to [B, B]
    x0 = torch.zeros(4, 1, dtype=DT)
    with pytest.raises(InputError, match=r"drift must return a tensor of the state's shape \(4, 1\)"):
        euler_maruyama(lambda x, t: -x[:, 0], 0.5, x0, steps=3)
    with pytest.raises(InputError, match=r"diffusion\(t\) must broadcast to the state's shape \(4, 1\)"):
        euler_maruyama(lambda x, t: -x, lambda t: torch.ones(4, dtype=DT), x0, steps=3)
    per_sample = euler_maruyama(  # the documented way: one value per sample, shaped [B, 1]
        lambda x, t: -x, lambda t: torch.ones(4, 1, dtype=DT), x0, steps=3, generator=torch.Generator().manual_seed(0)
    )
    assert per_sample.x.shape == (4, 1)


@pytest.mark.parametrize("schedule", ["cosine", "vp"])
def test_marginal_preserving_sde_on_other_schedules_reaches_the_data(schedule: str) -> None:
    """The same check as above on schedules with alpha^2 + sigma^2 = 1: exact marginal velocity of
    x_t = alpha x1 + sigma eps with x1 ~ N(mu, diag(s^2)), start at the exact t = 0 marginal (not N(0, I) on VP),
    dx = (v + g^2 / 2 * s_t) dt + g dW with the score from the path's conversion, end at N(mu, diag(s^2))."""
    from gencore.paths import AffineGaussianPath, make_schedule

    sched = make_schedule(schedule)
    path = AffineGaussianPath(sched)
    mu, s = torch.tensor([1.0, -2.0], dtype=DT), torch.tensor([0.5, 1.5], dtype=DT)

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        c = sched(t)
        var = c.alpha**2 * s**2 + c.sigma**2
        return c.d_alpha * mu + (c.d_alpha * c.alpha * s**2 + c.d_sigma * c.sigma) / var * (x - c.alpha * mu)

    g, n = 0.8, 20000

    def drift(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        v = velocity(x, t)
        return v + 0.5 * g**2 * path.convert(v, x, t, "velocity", "score")

    c0 = sched(torch.tensor(0.0, dtype=DT))
    z = torch.randn(n, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    x0 = c0.alpha * mu + torch.sqrt(c0.alpha**2 * s**2 + c0.sigma**2) * z
    sol = euler_maruyama(drift, g, x0, steps=200, generator=torch.Generator().manual_seed(2), noise_last_step=False)
    torch.testing.assert_close(sol.x.mean(0), mu, atol=4 * float(s.max()) / math.sqrt(n) + 0.01, rtol=0)
    torch.testing.assert_close(sol.x.std(0), s, atol=4 * float(s.max()) / math.sqrt(2 * n) + 0.01, rtol=0)


@pytest.mark.parametrize("method", [*FIXED_STEP_METHODS, "dopri5"])
def test_ode_solvers_reject_a_field_that_would_change_the_state_shape(method: str) -> None:
    """A [B] field on a [B, 1] state broadcast the state to [B, B] and integrated silently; a field of the
    state's shape still integrates."""
    x0 = torch.ones(4, 1)

    def solve(f):
        if method == "dopri5":
            return dopri5(f, x0, 0.0, 1.0).x
        return solve_ode(f, x0, steps=4, method=method).x

    with pytest.raises(
        InputError, match=r"vector field must return a tensor of the state's shape \(4, 1\), got \(4,\)"
    ):
        solve(lambda x, t: -x[:, 0])
    with pytest.raises(InputError, match=r"state's shape \(4, 1\), got float"):
        solve(lambda x, t: 1.0)
    assert solve(lambda x, t: -x).shape == (4, 1)
