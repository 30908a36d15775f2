"""Hyperbolic building blocks: geometries, Poincare/Lorentz layers, graph convolution, attention, Riemannian Adam."""

from gengraph.hyperbolic.geometry import BallGeometry, EuclideanGeometry, Geometry, make_geometry
from gengraph.hyperbolic.layers import (
    HypAttention,
    HypGraphConv,
    HypNorm,
    HypTransformerBlock,
    LorentzLinear,
    PoincareLinear,
    ball_to_lorentz,
    lorentz_to_ball,
)
from gengraph.hyperbolic.optim import riemannian_adam

__all__ = [
    "BallGeometry",
    "EuclideanGeometry",
    "Geometry",
    "HypAttention",
    "HypGraphConv",
    "HypNorm",
    "HypTransformerBlock",
    "LorentzLinear",
    "PoincareLinear",
    "ball_to_lorentz",
    "lorentz_to_ball",
    "make_geometry",
    "riemannian_adam",
]
