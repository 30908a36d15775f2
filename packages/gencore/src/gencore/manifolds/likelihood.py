"""Log-likelihoods on manifolds through the Riemannian continuous change of variables.

Along ``dx/dt = v(x, t)`` on ``(M, g)``, ``d/dt log p_t(x_t) = -div_g v(x_t, t)`` with densities taken
w.r.t. the Riemannian volume (Mathieu & Nickel 2020, "Riemannian Continuous Normalizing Flows"; Chen &
Lipman 2024, Sec. 3). Integrating a data point from ``t = 1`` back to ``t = 0``:

    log p_1(x1) = log p_0(x0) - int_0^1 div_g v(x_t, t) dt,

where ``log p_0`` is the manifold's base log-density (uniform or wrapped normal, also w.r.t. the volume).

The divergence in the point representation (``P`` = tangent projector ``proju(x, .)``, ``J = dv/dx`` the
Jacobian of the field in ambient coordinates):

    div_g v = tr(J P) + v . grad log sqrt(det g)

The trace term is the divergence of a tangent field on an isometrically embedded manifold (sphere, SO(3),
Lorentz: the Levi-Civita connection is the projected ambient derivative) and the coordinate divergence on
the torus and the ball; the second term (``Manifold.divergence_correction``) is the volume-density term of a
chart, ``n c lambda_x <x, v>`` on the Poincare ball and zero elsewhere. ``tr(J P)`` is exact with ``D``
reverse-mode passes, or Hutchinson's unbiased estimate ``z^T J P z`` with Gaussian ``z ~ N(0, I_D)``
(Hutchinson 1989; Grathwohl et al. 2019), probes drawn once per solve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError
from gencore.manifolds.base import Manifold
from gencore.manifolds.solvers import solve_manifold_ode
from gencore.rng import draw_device

ESTIMATORS = ("exact", "hutchinson")


def riemannian_divergence(
    manifold: Manifold,
    field: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    t: torch.Tensor,
    *,
    estimator: str = "exact",
    probes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v, div_g v)`` at ``x: [B, D]`` (both detached). ``probes: [K, B, D]`` for ``"hutchinson"`` (mean over K)."""
    check_choice(estimator, ESTIMATORS, "divergence estimator")
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        v = manifold.proju(x, field(x, t))
        if estimator == "exact":
            eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)
            div = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
            for j in range(x.shape[-1]):
                row = torch.autograd.grad(v[..., j].sum(), x, retain_graph=True)[0]  # dv_j/dx
                div = div + (row * manifold.proju(x, eye[j].expand_as(x)).detach()).sum(-1)
        else:
            if probes is None:
                raise ConfigError("the Hutchinson estimator needs probes [K, B, D].")
            div = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
            for z in probes:
                jtz = torch.autograd.grad((v * z).sum(), x, retain_graph=True)[0]
                div = div + (jtz * manifold.proju(x, z).detach()).sum(-1)
            div = div / probes.shape[0]
        div = div + manifold.divergence_correction(x, v)
    return v.detach(), div.detach()


@dataclass
class ManifoldLikelihood:
    """``log_prob`` of the data points, the base point ``x0`` each maps to, and the NFE used."""

    log_prob: torch.Tensor
    x0: torch.Tensor
    nfe: int


def log_likelihood(
    manifold: Manifold,
    model: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x1: torch.Tensor,
    *,
    steps: int = 32,
    method: str = "rk4",
    estimator: str = "exact",
    n_probes: int = 1,
    generator: torch.Generator | None = None,
) -> ManifoldLikelihood:
    """``log p_1(x1)`` of the flow ``model(x, t)`` w.r.t. the Riemannian volume (see the module docstring)."""
    check_choice(estimator, ESTIMATORS, "divergence estimator")
    n_probes = check_int(n_probes, "n_probes", low=1)  # 0 probes averaged to a NaN divergence
    probes = None
    if estimator == "hutchinson":  # drawn where the generator lives (without one, the CPU), used on x1's device
        probes = torch.randn(
            (n_probes, *x1.shape), generator=generator, dtype=x1.dtype, device=draw_device(generator)
        ).to(x1.device)

    def f(x, t):
        return riemannian_divergence(manifold, model, x, t, estimator=estimator, probes=probes)

    sol = solve_manifold_ode(manifold, f, x1.detach(), steps=steps, method=method, t0=1.0, t1=0.0, with_aux=True)
    # aux = int_1^0 div dt = -int_0^1 div dt
    return ManifoldLikelihood(log_prob=manifold.base_log_prob(sol.x) + sol.aux, x0=sol.x, nfe=sol.nfe)
