"""Riemannian flow matching and Generalised Flow Maps on manifolds (on geoopt).

- :mod:`~gencore.manifolds.spaces`: Sphere, flat Torus, Poincare ball (learnable curvature), Lorentz, SO(3),
  Euclidean, all behind the :class:`~gencore.manifolds.base.Manifold` protocol.
- :mod:`~gencore.manifolds.interpolants`: geodesic interpolants with closed-form conditional velocities.
- :mod:`~gencore.manifolds.loss`: the Riemannian flow-matching loss in the metric norm.
- :mod:`~gencore.manifolds.solvers`: projected Euler, midpoint and RK4 (Runge-Kutta-Munthe-Kaas) via ``exp``.
- :mod:`~gencore.manifolds.likelihood`: log-likelihoods with the Riemannian divergence.
- :mod:`~gencore.manifolds.flow_maps`: Generalised Flow Maps with G-LSD, G-ESD and G-PSD self-distillation.
- :mod:`~gencore.manifolds.metrics`: MMD with a geodesic-distance kernel.
"""

from __future__ import annotations

from gencore.manifolds.base import Manifold
from gencore.manifolds.distributions import (
    VonMisesFisherMixture,
    WrappedNormalMixture,
    torus_checkerboard,
)
from gencore.manifolds.flow_maps import GFM_LOSSES, GeneralisedFlowMap, gfm_loss
from gencore.manifolds.interpolants import geodesic_interpolant
from gencore.manifolds.likelihood import log_likelihood, riemannian_divergence
from gencore.manifolds.loss import rfm_loss
from gencore.manifolds.metrics import geodesic_mmd
from gencore.manifolds.nets import ManifoldMLP, TangentVelocity
from gencore.manifolds.solvers import MANIFOLD_SOLVERS, ManifoldODESolution, solve_manifold_ode
from gencore.manifolds.spaces import SO3, Euclidean, Lorentz, PoincareBall, Sphere, Torus

__all__ = [
    "GFM_LOSSES",
    "MANIFOLD_SOLVERS",
    "SO3",
    "Euclidean",
    "GeneralisedFlowMap",
    "Lorentz",
    "Manifold",
    "ManifoldMLP",
    "ManifoldODESolution",
    "PoincareBall",
    "Sphere",
    "TangentVelocity",
    "Torus",
    "VonMisesFisherMixture",
    "WrappedNormalMixture",
    "geodesic_interpolant",
    "geodesic_mmd",
    "gfm_loss",
    "log_likelihood",
    "rfm_loss",
    "riemannian_divergence",
    "solve_manifold_ode",
    "torus_checkerboard",
]
