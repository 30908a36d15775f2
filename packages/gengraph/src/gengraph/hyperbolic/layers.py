"""Hyperbolic layers on the Poincare ball and the Lorentz hyperboloid.

- :class:`PoincareLinear`: Mobius matrix-vector product and Mobius bias (Ganea et al. 2018, "Hyperbolic
  Neural Networks", eq. 25-27): ``y = exp_0(W log_0 x) (+) b``, ``b = exp_0(b_T)``; with ``bias_on_ball`` the
  bias is a ``geoopt.ManifoldParameter`` on the ball itself, to be trained with :func:`riemannian_adam`.
- :class:`LorentzLinear`: the fully hyperbolic linear layer (Chen et al. 2022, "Fully Hyperbolic Neural
  Networks", eq. 3 without the normalisation term): the space part ``y_s = W x + b`` of the output is computed
  from the whole input point and the time part is solved for, ``y_0 = sqrt(|y_s|^2 + k)``, so the output lies
  on the hyperboloid exactly, in any dtype.
- :class:`HypGraphConv`: HGCN's convolution (Chami et al. 2019): a Poincare linear map, aggregation of the
  neighbourhood (with self-loops, degree-normalised) by the weighted gyromidpoint, and a pointwise
  non-linearity in the tangent space at the origin.
- :class:`HypAttention` / :class:`HypTransformerBlock`: attention whose scores are negative hyperbolic
  distances between queries and keys, ``s_ij = -beta d(q_i, k_j) - gamma`` (Gulcehre et al. 2019, "Hyperbolic
  Attention Networks"), normalised by a softmax over keys (so the per-head offset ``gamma`` cancels and gets no
  gradient: it would act only under an element-wise gate such as a sigmoid; kept so that saved models load), values
  aggregated by the gyromidpoint; the block adds Mobius residuals and a
  tangent-space feed-forward network, with :class:`HypNorm` (layer normalisation of the space-like
  hyperboloid coordinates, as in HypFormer, Yang et al. 2024) before each sub-layer.

Every layer takes a geometry (:mod:`gengraph.hyperbolic.geometry`), shared and not registered as a submodule
(the model that owns the layers registers it once, so its curvature is saved once and moves with ``.to()``);
with :class:`EuclideanGeometry` the same code is an ordinary Euclidean GNN/transformer (the ablation).
Shapes: points ``[B, N, d]``, adjacency ``[B, N, N]``, node mask ``[B, N]``.
"""

from __future__ import annotations

import math

import geoopt
import torch
from torch import nn

from gencore.errors import ConfigError
from gengraph.hyperbolic.geometry import BallGeometry, Geometry

__all__ = ["HypAttention", "HypGraphConv", "HypNorm", "HypTransformerBlock", "LorentzLinear", "PoincareLinear"]


class PoincareLinear(nn.Module):
    """``y = exp_0(W log_0 x) (+) b`` from a ball of width ``d_in`` to one of width ``d_out`` (same curvature)."""

    def __init__(self, geometry: Geometry, d_in: int, d_out: int, *, bias: bool = True, bias_on_ball: bool = False):
        super().__init__()
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.weight = nn.Linear(d_in, d_out, bias=False)
        self.bias_on_ball = bias_on_ball
        if not bias:
            self.bias = None
        elif bias_on_ball:
            if not isinstance(geometry, BallGeometry):
                raise ConfigError("bias_on_ball needs a BallGeometry (a ball-valued bias), got a flat geometry.")
            self.bias = geoopt.ManifoldParameter(torch.zeros(d_out), manifold=geometry.manifold.geo)
        else:
            self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = self.geometry
        y = g.expmap0(self.weight(g.logmap0(x)))
        if self.bias is None:
            return y
        b = self.bias if self.bias_on_ball else g.expmap0(self.bias)
        return g.mobius_add(y, b.to(y.dtype))


class LorentzLinear(nn.Module):
    """Points ``[..., d_in + 1]`` on ``<x, x>_L = -k`` to points ``[..., d_out + 1]`` on the same hyperboloid."""

    def __init__(self, d_in: int, d_out: int, k: float = 1.0, *, bias: bool = True) -> None:
        super().__init__()
        self.k = float(k)
        self.linear = nn.Linear(d_in + 1, d_out, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        space = self.linear(x)
        time = (space.square().sum(-1, keepdim=True) + self.k).sqrt()
        return torch.cat([time, space], dim=-1)


def ball_to_lorentz(x: torch.Tensor, k: float = 1.0) -> torch.Tensor:
    """The isometry from the ball of curvature ``-1/k`` to the hyperboloid ``<y, y>_L = -k``."""
    sk = math.sqrt(k)
    x2 = x.square().sum(-1, keepdim=True) / k
    return torch.cat([sk * (1 + x2), 2 * x], dim=-1) / (1 - x2)


def lorentz_to_ball(y: torch.Tensor, k: float = 1.0) -> torch.Tensor:
    return y[..., 1:] / (1 + y[..., :1] / math.sqrt(k))


class HypNorm(nn.Module):
    """Layer normalisation of the space-like hyperboloid coordinates (HypFormer's HypLayerNorm, Yang et al.
    2024): ``s = lambda_x x``, ``x <- from_space(LayerNorm(s))``; plain LayerNorm in flat space.

    Not ``exp_0(LayerNorm(log_0 x))``: LayerNorm returns vectors of norm ``~sqrt(d)`` (unit variance per
    coordinate), and ``exp_0`` of that lies at distance ``2 sqrt(d)`` from the origin, past the float32
    clipping radius (distance ``~6.2 / sqrt(c)``) already for ``d >= 10`` at ``c = 1``: every normalised point
    would sit on the clipping sphere, ``tanh`` saturated and the radial gradient zero. In the space coordinates the same
    normalisation puts points at distance ``asinh(sqrt(c d)) / sqrt(c)`` (2.4 for ``d = 32``, ``c = 1``)."""

    def __init__(self, geometry: Geometry, dim: int) -> None:
        super().__init__()
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.geometry.from_space(self.norm(self.geometry.to_space(x)))


class HypGraphConv(nn.Module):
    """HGCN layer: ``x_i <- sigma^{(x)}( midpoint_{j in N(i) + i} (W (x) x_j (+) b) )``."""

    def __init__(self, geometry: Geometry, d_in: int, d_out: int, *, activation: bool = True) -> None:
        super().__init__()
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.linear = PoincareLinear(geometry, d_in, d_out)
        self.activation = activation

    def forward(self, x: torch.Tensor, adjacency: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.linear(x)
        eye = torch.eye(adjacency.shape[-1], dtype=h.dtype, device=h.device)
        w = adjacency.to(h.dtype) + eye
        if mask is not None:
            w = w * mask[..., None, :].to(h.dtype)
        out = self.geometry.midpoint(w, h)
        if self.activation:
            out = self.geometry.expmap0(torch.nn.functional.silu(self.geometry.logmap0(out)))
        return out


class HypAttention(nn.Module):
    """Multi-head distance attention; each head works on its own ``d / heads`` ball, heads are joined in
    ``T_0`` (concatenation of ``log_0`` images, then ``exp_0``)."""

    def __init__(self, geometry: Geometry, dim: int, heads: int = 4) -> None:
        super().__init__()
        if dim % heads:
            raise ConfigError(f"dim ({dim}) must be divisible by heads ({heads}).")
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.heads, self.dh = heads, dim // heads
        self.q = PoincareLinear(geometry, dim, dim)
        self.k = PoincareLinear(geometry, dim, dim)
        self.v = PoincareLinear(geometry, dim, dim)
        self.out = PoincareLinear(geometry, dim, dim)
        self.log_beta = nn.Parameter(torch.zeros(heads))
        self.gamma = nn.Parameter(torch.zeros(heads))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        g = self.geometry
        u = g.logmap0(x)
        b, n, _ = u.shape
        return g.expmap0(u.view(b, n, self.heads, self.dh).transpose(1, 2))  # [B, H, N, dh]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        g = self.geometry
        q, k, v = self._split(self.q(x)), self._split(self.k(x)), self._split(self.v(x))
        d = g.pairwise_dist(q, k)  # [B, H, N, N]
        scores = -self.log_beta.exp()[:, None, None] * d - self.gamma[:, None, None]
        if mask is not None:
            # any dtype, as in HypGraphConv (``~`` of a float mask raised, of an int mask it is bitwise)
            scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        heads = g.logmap0(g.midpoint(attn, v))  # [B, H, N, dh]
        b, _, n, _ = heads.shape
        return self.out(g.expmap0(heads.transpose(1, 2).reshape(b, n, -1)))


class HypTransformerBlock(nn.Module):
    """``x <- x (+) Attn(Norm x)``, then ``x <- x (+) exp_0(FFN(log_0 Norm x))``."""

    def __init__(self, geometry: Geometry, dim: int, heads: int = 4, mlp_ratio: int = 2) -> None:
        super().__init__()
        self.__dict__["geometry"] = geometry  # shared, not a submodule: the owner registers it once
        self.norm1, self.norm2 = HypNorm(geometry, dim), HypNorm(geometry, dim)
        self.attn = HypAttention(geometry, dim, heads)
        self.ffn = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.SiLU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        g = self.geometry
        x = g.mobius_add(x, self.attn(self.norm1(x), mask))
        return g.mobius_add(x, g.expmap0(self.ffn(g.logmap0(self.norm2(x)))))
