"""Fixed-step explicit Runge-Kutta solvers over an explicit time grid.

Samplers in the style of k-diffusion: a plain function walks ``x`` along a given
grid ``t_0, t_1, ..., t_n`` (increasing to sample from noise to data, decreasing to
integrate backwards, e.g. for likelihoods) and returns an :class:`ODESolution`.

The vector field is ``f(x, t) -> dx/dt`` with ``x: [B, ...]`` and ``t`` a 0-dim tensor
(a model ``model(x_t, t)`` broadcasts it over the batch). With step ``h = t_{i+1} - t_i``:

* Euler (order 1, 1 evaluation/step):      ``x' = x + h f(x, t)``
* midpoint (order 2, 2 evaluations/step):  ``x' = x + h f(x + h/2 f(x, t), t + h/2)``
* Heun (order 2, 2 evaluations/step), the explicit trapezoid rule:
  ``k1 = f(x, t)``, ``k2 = f(x + h k1, t + h)``, ``x' = x + h/2 (k1 + k2)``
* classical RK4 (order 4, 4 evaluations/step).

The number of function evaluations is exactly ``n``, ``2n``, ``2n`` and ``4n`` for a grid of
``n`` steps (Heun does not skip its last corrector, unlike EDM's sampler). References:
Hairer, Norsett & Wanner, "Solving Ordinary Differential Equations I" (1993), II.1;
Karras et al. 2022 (EDM) for Heun as a diffusion sampler.

Nothing here disables autograd: under ``torch.no_grad()`` nothing is recorded, otherwise
gradients flow through every step to ``x0`` and to the parameters used by ``f``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.solvers.grids import uniform_grid

__all__ = ["FIXED_STEP_METHODS", "ODESolution", "VectorField", "solve_ode"]

VectorField = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``f(x: [B, ...], t: 0-dim tensor) -> dx/dt: [B, ...]``."""


@dataclass
class ODESolution:
    """Result of an ODE solve.

    Attributes:
        x: final state ``[B, ...]``.
        nfe: number of evaluations of ``f``.
        times: the time points visited ``[n_times]`` (the grid, or the accepted times of an
            adaptive solver, first point included).
        trajectory: ``[n_times, B, ...]`` states at ``times`` when asked for, else ``None``.
        n_accepted, n_rejected: step counts of adaptive solvers (``None`` for fixed step).
    """

    x: torch.Tensor
    nfe: int
    times: torch.Tensor
    trajectory: torch.Tensor | None = None
    n_accepted: int | None = None
    n_rejected: int | None = None


def _grid_dtype(x: torch.Tensor) -> torch.dtype:
    """Times are kept in the state's dtype, but never below float32 precision."""
    if x.dtype in (torch.float32, torch.float64):
        return x.dtype
    return torch.float32


def resolve_grid(grid: torch.Tensor | Sequence[float] | None, steps: int | None, x0: torch.Tensor) -> torch.Tensor:
    """Validate a 1-D strictly monotone grid (or build ``uniform_grid(steps)``) on ``x0``'s device."""
    if grid is None:
        if steps is None:
            raise ConfigError("give either grid (a 1-D tensor of times) or steps (an integer >= 1).")
        grid = uniform_grid(steps, dtype=torch.float64)
    elif steps is not None:
        raise ConfigError("give grid or steps, not both.")
    if not torch.is_tensor(grid):  # Python floats are doubles: torch's float32 default would round them
        grid = torch.as_tensor(grid, dtype=torch.float64)
    if not grid.is_floating_point():
        grid = grid.to(torch.float64)
    if grid.dim() != 1 or grid.shape[0] < 2:
        raise InputError(f"grid must be a 1-D tensor with at least 2 times, got shape {tuple(grid.shape)}.")
    g = grid.detach().to("cpu", torch.float64)
    if not bool(torch.isfinite(g).all()):
        raise InputError("grid contains NaN or inf times; expected finite numbers.")
    d = g[1:] - g[:-1]
    if not (bool((d > 0).all()) or bool((d < 0).all())):
        raise InputError("grid must be strictly increasing or strictly decreasing.")
    return grid.to(device=x0.device, dtype=_grid_dtype(x0))


def _check_x0(x0: torch.Tensor) -> None:
    if not torch.is_tensor(x0) or not x0.is_floating_point():
        raise InputError("x0 must be a floating-point torch.Tensor of shape [B, ...].")


def check_field_output(v, x: torch.Tensor) -> torch.Tensor:
    """``v`` if it is a tensor of ``x``'s shape, else :class:`InputError` (a ``[B]`` field on a ``[B, 1]`` state
    would broadcast the state to ``[B, B]`` and integrate silently)."""
    if not torch.is_tensor(v) or v.shape != x.shape:
        got = tuple(v.shape) if torch.is_tensor(v) else type(v).__name__
        raise InputError(f"the vector field must return a tensor of the state's shape {tuple(x.shape)}, got {got}.")
    return v


def solve_ode(
    f: VectorField,
    x0: torch.Tensor,
    grid: torch.Tensor | Sequence[float] | None = None,
    *,
    method: str = "euler",
    steps: int | None = None,
    return_trajectory: bool = False,
) -> ODESolution:
    """Integrate ``dx/dt = f(x, t)`` from ``grid[0]`` to ``grid[-1]`` with a fixed-step method.

    Args:
        f: vector field ``f(x, t)``, ``t`` a 0-dim tensor.
        x0: initial state ``[B, ...]`` at ``grid[0]``.
        grid: times ``[n + 1]``, strictly monotone (decreasing integrates backwards). If
            ``None``, ``steps`` uniform steps on ``[0, 1]`` are used.
        method: ``"euler"``, ``"midpoint"``, ``"heun"`` or ``"rk4"``.
        steps: number of uniform steps when ``grid`` is ``None``.
        return_trajectory: also return the states at every grid time, ``[n + 1, B, ...]``.

    Returns:
        :class:`ODESolution` with ``x`` at ``grid[-1]``, ``nfe`` (n, 2n, 2n, 4n) and ``times``.

    Example:
        >>> sol = solve_ode(lambda x, t: -x, torch.ones(3, 2), steps=100, method="rk4")
        >>> round(float(sol.x[0, 0]), 4), sol.nfe
        (0.3679, 400)
    """
    check_choice(method, FIXED_STEP_METHODS, "ODE method")
    _check_x0(x0)
    grid = resolve_grid(grid, steps, x0)
    step = _STEPS[method]
    n = grid.shape[0] - 1
    ts = grid.unbind(0)
    hs = (grid[1:] - grid[:-1]).unbind(0)
    x = x0
    traj = [x0] if return_trajectory else None
    checked = lambda x, t: check_field_output(f(x, t), x)  # noqa: E731  (the first step's evaluations)
    for i in range(n):
        x = step(checked if i == 0 else f, x, ts[i], hs[i], ts[i + 1])
        if traj is not None:
            traj.append(x)
    return ODESolution(
        x=x,
        nfe=n * _NFE_PER_STEP[method],
        times=grid,
        trajectory=torch.stack(traj) if traj is not None else None,
    )


def _euler(f: VectorField, x: torch.Tensor, t: torch.Tensor, h: torch.Tensor, t1: torch.Tensor):
    return x + h * f(x, t)


def _midpoint(f: VectorField, x: torch.Tensor, t: torch.Tensor, h: torch.Tensor, t1: torch.Tensor):
    half = 0.5 * h
    k1 = f(x, t)
    return x + h * f(x + half * k1, t + half)


def _heun(f: VectorField, x: torch.Tensor, t: torch.Tensor, h: torch.Tensor, t1: torch.Tensor):
    k1 = f(x, t)
    k2 = f(x + h * k1, t1)
    return x + (0.5 * h) * (k1 + k2)


def _rk4(f: VectorField, x: torch.Tensor, t: torch.Tensor, h: torch.Tensor, t1: torch.Tensor):
    half = 0.5 * h
    tm = t + half
    k1 = f(x, t)
    k2 = f(x + half * k1, tm)
    k3 = f(x + half * k2, tm)
    k4 = f(x + h * k3, t1)
    return x + (h / 6.0) * (k1 + 2.0 * (k2 + k3) + k4)


_STEPS = {"euler": _euler, "midpoint": _midpoint, "heun": _heun, "rk4": _rk4}
_NFE_PER_STEP = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}
FIXED_STEP_METHODS: tuple[str, ...] = tuple(_STEPS)
