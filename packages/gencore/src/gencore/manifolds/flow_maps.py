"""Generalised Flow Maps on Riemannian manifolds (Davis, Albergo, Boffi, Bronstein & Bose, "Generalised Flow
Maps for Few-Step Generative Modelling on Riemannian Manifolds", ICLR 2026, arXiv:2510.21608), building on the
Euclidean flow-map self-distillation of Boffi, Albergo & Vanden-Eijnden 2025 ("How to build a consistency
model: learning flow maps via self-distillation"). No public implementation existed; this one is written
from the equations.

The two-time map is parametrised through the exponential map,

    X_{s,t}(x) = exp_x((t - s) v_theta(x, s, t)),        v_theta(x, s, t) in T_x M,

so ``X_{s,s} = id`` exactly and ``d/dt X_{s,t}(x)|_{t=s} = v_theta(x, s, s)``: the diagonal is the
instantaneous velocity, trained by Riemannian flow matching (:func:`diagonal_loss`). Off the diagonal one of
three self-distillation losses ties the map to its own diagonal, with ``s <= t`` uniform and ``x = x_s``
on the geodesic interpolant:

- G-LSD (Lagrangian): ``d/dt X_{s,t}(x) = v(X_{s,t}(x), t, t)``. The left side is computed with
  ``torch.func.jvp`` of ``t -> X_{s,t}(x)`` (forward-mode AD through ``exp``, i.e. the differential of the
  exponential map applied to the ``t``-derivative of its argument). It is a tangent vector at the mapped point
  ``X_{s,t}(x)``, as is the target, so the two are compared there, in the metric norm of ``X_{s,t}(x)``; the
  target is stop-gradient.
- G-ESD (Eulerian): ``d/ds X_{s,t}(x) + dX_{s,t}(x)[v(x, s, s)] = 0``: one ``jvp`` of ``(s, x) -> X_{s,t}(x)``
  along ``(1, v(x, s, s))`` (the direction stop-gradient, ``x`` moving in ``T_x M``), a tangent vector at
  ``X_{s,t}(x)`` whose squared metric norm is the loss.
- G-PSD (progressive): ``X_{s,t} = X_{u,t} o X_{s,u}`` with ``u = (s + t) / 2``; the two half-jumps are the
  stop-gradient target and the loss is ``d(X_{s,t}(x), target)^2 / (t - s)^2`` (velocity units; ``t - s`` is
  clamped at ``gap_eps``).

Sampling: ``k`` jumps on the uniform grid, ``x <- X_{t_i, t_{i+1}}(x)`` (``k`` network calls).
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.checks import check_choice, check_int
from gencore.manifolds.base import Manifold
from gencore.manifolds.interpolants import geodesic_interpolant
from gencore.manifolds.loss import rfm_loss
from gencore.nn import broadcast_time, expand_like
from gencore.rng import rand_with

GFM_LOSSES = ("lsd", "esd", "psd")


class GeneralisedFlowMap(nn.Module):
    """``X_{s,t}(x) = exp_x((t - s) v(x, s, t))`` around a two-time tangent network ``net(x, s, t)``."""

    def __init__(self, manifold: Manifold, net: nn.Module) -> None:
        super().__init__()
        self.manifold, self.net = manifold, net

    def velocity(self, x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float) -> torch.Tensor:
        return self.manifold.proju(x, self.net(x, broadcast_time(s, x), broadcast_time(t, x)))

    def forward(self, x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float) -> torch.Tensor:
        s, t = broadcast_time(s, x), broadcast_time(t, x)
        return self.manifold.expmap(x, expand_like(t - s, x) * self.velocity(x, s, t))

    @torch.no_grad()
    def sample(self, x0: torch.Tensor, nfe: int) -> torch.Tensor:
        """Map base points ``x0`` to ``t = 1`` in ``nfe`` equal jumps."""
        nfe = check_int(nfe, "nfe", low=1)
        grid = torch.linspace(0.0, 1.0, nfe + 1, dtype=torch.float64)
        x = x0
        for i in range(nfe):
            x = self.manifold.projx(self(x, float(grid[i]), float(grid[i + 1])))
        return x


def diagonal_loss(fm: GeneralisedFlowMap, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Riemannian flow matching of the diagonal ``v(x, t, t)``."""
    return rfm_loss(fm.manifold, lambda x, tt: fm.velocity(x, tt, tt), x0, x1, t)


def lsd_residual(fm: GeneralisedFlowMap, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor):
    """``(X_{s,t}(x), d/dt X_{s,t}(x) - sg[v(X, t, t)])``, the residual tangent at ``X_{s,t}(x)``."""
    xm, dxdt = torch.func.jvp(lambda tt: fm(x, s, tt), (t,), (torch.ones_like(t),))
    with torch.no_grad():
        target = fm.velocity(xm, t, t)
    return xm, fm.manifold.proju(xm.detach(), dxdt) - target


def esd_residual(fm: GeneralisedFlowMap, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor):
    """``(X_{s,t}(x), d/ds X_{s,t}(x) + dX_{s,t}(x)[sg[v(x, s, s)]])``, tangent at ``X_{s,t}(x)``."""
    with torch.no_grad():
        w = fm.velocity(x, s, s)
    xm, d = torch.func.jvp(lambda ss, xx: fm(xx, ss, t), (s, x), (torch.ones_like(s), w))
    return xm, fm.manifold.proju(xm.detach(), d)


def psd_loss(fm: GeneralisedFlowMap, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor, gap_eps: float = 1e-3):
    """``d(X_{s,t}(x), sg[X_{u,t}(X_{s,u}(x))])^2 / (t - s)^2`` per sample, ``u = (s + t) / 2``."""
    u = (s + t) / 2
    with torch.no_grad():
        target = fm(fm(x, s, u), u, t)
    pred = fm(x, s, t)
    return fm.manifold.sq_dist(pred, target) / (t - s).clamp_min(gap_eps).square()


def gfm_loss(
    fm: GeneralisedFlowMap,
    x0: torch.Tensor,
    x1: torch.Tensor,
    method: str,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Diagonal RFM loss plus the ``method`` (``"lsd"``, ``"esd"``, ``"psd"``) self-distillation loss.

    Times are drawn from ``generator``: ``t_diag ~ U(0, 1)``; ``(s, t)`` the sorted pair of two uniforms; the
    self-distillation points are ``x_s`` on the geodesic from ``x0`` to ``x1``.
    Returns the total loss and the two parts as detached scalar tensors (no host sync in a training step).
    """
    check_choice(method, GFM_LOSSES, "flow-map loss")
    m = fm.manifold
    b = x0.shape[0]
    # drawn on the generator's device (a CPU generator also serves CUDA data, with the same draws)
    t_diag = rand_with((b,), generator, device=x0.device, dtype=x0.dtype)
    st = rand_with((b, 2), generator, device=x0.device, dtype=x0.dtype).sort(dim=-1).values
    s, t = st[:, 0], st[:, 1]
    l_diag = diagonal_loss(fm, x0, x1, t_diag)
    xs, _ = geodesic_interpolant(m, x0, x1, s)
    if method == "lsd":
        xm, r = lsd_residual(fm, xs, s, t)
        l_sd = m.norm2(xm.detach(), r).mean()
    elif method == "esd":
        xm, r = esd_residual(fm, xs, s, t)
        l_sd = m.norm2(xm.detach(), r).mean()
    else:
        l_sd = psd_loss(fm, xs, s, t).mean()
    return l_diag + l_sd, {"diag": l_diag.detach(), method: l_sd.detach()}
