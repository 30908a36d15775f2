"""The Riemannian flow-matching loss (Chen & Lipman 2024, "Flow Matching on General Geometries", eq. 7
with the geodesic premetric): ``E ||v_theta(x_t, t) - u_t||^2_{g(x_t)}``, the squared error measured in
the manifold's metric at ``x_t`` (on the Poincare ball this carries the conformal factor ``lambda_x^2``).
The network output is projected to ``T_{x_t}`` first.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gencore.manifolds.base import Manifold
from gencore.manifolds.interpolants import geodesic_interpolant


def rfm_loss(
    manifold: Manifold,
    model: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x0: torch.Tensor,
    x1: torch.Tensor,
    t: torch.Tensor,
    *,
    velocity: str = "log",
) -> torch.Tensor:
    """Mean over the batch of ``|proju(x_t, model(x_t, t)) - u_t|^2_{x_t}``."""
    xt, ut = geodesic_interpolant(manifold, x0, x1, t, velocity=velocity)
    diff = manifold.proju(xt, model(xt, t)) - ut
    return manifold.norm2(xt, diff).mean()
