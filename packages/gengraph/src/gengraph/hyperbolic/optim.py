"""Riemannian Adam (Becigneul & Ganea 2019, "Riemannian Adaptive Optimization Methods") from geoopt.

Parameters that are ``geoopt.ManifoldParameter`` (a ball-valued bias of :class:`PoincareLinear`) take
Riemannian steps: Riemannian gradient ``egrad / lambda_x^2``, second moment ``lambda_x^2 |rgrad|^2`` (one per
point), the first-order retraction of geoopt's ``PoincareBall`` (``projx(x + u)``, not the exponential map) and
the first moment parallel-transported to the new point; plain parameters take ordinary Adam steps, so one
optimiser serves a whole hyperbolic network.
"""

from __future__ import annotations

from collections.abc import Iterable

import geoopt
import torch

__all__ = ["riemannian_adam"]


def riemannian_adam(params: Iterable[torch.nn.Parameter], lr: float = 1e-3, **kwargs) -> torch.optim.Optimizer:
    """``geoopt.optim.RiemannianAdam`` with ``stabilize=1``: every step re-projects manifold parameters."""
    return geoopt.optim.RiemannianAdam(params, lr=lr, stabilize=1, **kwargs)
