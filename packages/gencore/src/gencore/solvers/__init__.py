"""ODE and SDE solvers over explicit time grids (t = 0 noise, t = 1 data).

* :func:`solve_ode` — fixed-step Euler, midpoint, Heun, RK4 over a grid.
* :func:`dopri5` — adaptive Dormand-Prince 5(4) with error control.
* :func:`euler_maruyama` — Euler-Maruyama for ``dx = drift dt + diffusion dW``.
* grids: :func:`uniform_grid`, :func:`shifted_grid` (SD3), :func:`karras_grid` (EDM).
"""

from __future__ import annotations

from gencore.solvers.dopri5 import dopri5
from gencore.solvers.fixed_step import FIXED_STEP_METHODS, ODESolution, VectorField, solve_ode
from gencore.solvers.grids import karras_grid, shifted_grid, sigma_to_t, t_to_sigma, uniform_grid
from gencore.solvers.sde import SDESolution, euler_maruyama

__all__ = [
    "FIXED_STEP_METHODS",
    "ODESolution",
    "SDESolution",
    "VectorField",
    "dopri5",
    "euler_maruyama",
    "karras_grid",
    "shifted_grid",
    "sigma_to_t",
    "solve_ode",
    "t_to_sigma",
    "uniform_grid",
]
