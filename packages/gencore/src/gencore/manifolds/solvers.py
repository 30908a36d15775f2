"""Fixed-step Riemannian ODE solvers for ``dx/dt = v(x, t)``, ``v(x, t) in T_x M``, stepping through ``exp``.

Each step works in normal coordinates at the current point ``x`` (Munthe-Kaas 1999, "High order
Runge-Kutta methods on manifolds"; the Riemannian form in e.g. Celledoni et al. 2022): in those coordinates
the ODE reads ``xi' = (d exp_x)_xi^{-1} v(exp_x xi)``, an ODE on the vector space ``T_x M``, to which a
classical Runge-Kutta rule is applied; then ``x <- exp_x(xi)`` and ``projx`` removes round-off drift.

- ``euler``: ``x <- exp_x(h v(x, t))`` (projected/geodesic Euler, order 1, 1 NFE per step);
- ``midpoint``: order 2, 2 NFE per step;
- ``rk4``: the classical rule, order 4, 4 NFE per step. The order holds where ``Manifold.dexp_inv`` is exact
  (flat spaces, constant curvature: sphere, ball, Lorentz; SO(3) via the inverse right Jacobian).

An auxiliary scalar integrand ``a(x, t)`` (the divergence, for likelihoods) can be integrated with the same
rule: ``f`` then returns ``(v, a)``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.manifolds.base import Manifold

MANIFOLD_SOLVERS = ("euler", "midpoint", "rk4")

Field = Callable[[torch.Tensor, torch.Tensor], "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"]


@dataclass
class ManifoldODESolution:
    """Final state ``x``, the integrated auxiliary scalar (or None), the number of field evaluations."""

    x: torch.Tensor
    aux: torch.Tensor | None
    nfe: int


def _grid(steps: int | None, grid: torch.Tensor | Sequence[float] | None, t0: float, t1: float) -> torch.Tensor:
    if grid is not None:
        if steps is not None:
            raise ConfigError("give a time grid or steps, not both.")
        g = torch.as_tensor(grid, dtype=torch.float64)
        if g.dim() != 1 or g.numel() < 2:
            raise InputError(f"the time grid must be 1-D with at least two entries, got shape {tuple(g.shape)}.")
        c = g.detach().cpu()
        if not bool(torch.isfinite(c).all()):
            raise InputError("the time grid contains NaN or inf times; expected finite numbers.")
        d = c[1:] - c[:-1]
        if not (bool((d > 0).all()) or bool((d < 0).all())):
            raise InputError("the time grid must be strictly increasing or strictly decreasing.")
        return g
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ConfigError(f"give a time grid or steps, an integer >= 1, got steps={steps!r}.")
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise ConfigError(f"t0 and t1 must be finite numbers, got t0={t0}, t1={t1}.")
    return torch.linspace(float(t0), float(t1), int(steps) + 1, dtype=torch.float64)


def solve_manifold_ode(
    manifold: Manifold,
    f: Field,
    x0: torch.Tensor,
    *,
    steps: int | None = None,
    grid: torch.Tensor | Sequence[float] | None = None,
    method: str = "euler",
    t0: float = 0.0,
    t1: float = 1.0,
    with_aux: bool = False,
) -> ManifoldODESolution:
    """Integrate from ``t0`` to ``t1`` in ``steps`` equal steps (or along ``grid``; may run backwards).

    ``f(x, t)`` receives ``t`` as a scalar tensor of ``x``'s dtype and returns the tangent velocity, or
    ``(velocity, aux)`` with ``aux: [B]`` when ``with_aux`` (then ``solution.aux = int a(x_t, t) dt``).
    """
    check_choice(method, MANIFOLD_SOLVERS, "manifold ODE solver")
    g = _grid(steps, grid, t0, t1)
    nfe = 0

    def call(x: torch.Tensor, t: torch.Tensor):
        nonlocal nfe
        nfe += 1
        out = f(x, t.to(x.dtype))
        v, a = out if with_aux else (out, None)
        return manifold.proju(x, v), a

    x = x0
    aux = torch.zeros(x0.shape[:-1], dtype=x0.dtype, device=x0.device) if with_aux else None
    for i in range(g.numel() - 1):
        t, h = g[i], float(g[i + 1] - g[i])
        k1, a1 = call(x, t)
        if method == "euler":
            xi, da = h * k1, (h * a1 if with_aux else None)
        elif method == "midpoint":
            xi_half = 0.5 * h * k1
            y = manifold.expmap(x, xi_half)
            v2, a2 = call(y, t + 0.5 * h)
            xi = h * manifold.dexp_inv(x, xi_half, y, v2)
            da = h * a2 if with_aux else None
        else:
            ks, as_ = [k1], [a1]
            for c, frac in ((0.5, 0.5), (0.5, 0.5), (1.0, 1.0)):
                xi_c = c * h * ks[-1]
                y = manifold.expmap(x, xi_c)
                v, a = call(y, t + frac * h)
                ks.append(manifold.dexp_inv(x, xi_c, y, v))
                as_.append(a)
            xi = h / 6 * (ks[0] + 2 * ks[1] + 2 * ks[2] + ks[3])
            da = h / 6 * (as_[0] + 2 * as_[1] + 2 * as_[2] + as_[3]) if with_aux else None
        x = manifold.projx(manifold.expmap(x, xi))
        if with_aux:
            aux = aux + da
    return ManifoldODESolution(x=x, aux=aux, nfe=nfe)
