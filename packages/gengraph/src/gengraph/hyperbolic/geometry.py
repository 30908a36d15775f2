"""Origin-centred operations for hyperbolic layers, on top of :class:`gencore.manifolds.PoincareBall`.

Hyperbolic layers (Ganea et al. 2018, "Hyperbolic Neural Networks"; Chami et al. 2019, HGCN) mostly move
between the ball and the tangent space at the origin. Those maps have closed forms that are cheaper and
better conditioned than the general ``exp_x``/``log_x``:

    exp_0(u) = tanh(sqrt(c) |u|) u / (sqrt(c) |u|),      log_0(y) = artanh(sqrt(c) |y|) y / (sqrt(c) |y|).

Float32 near the boundary: ``exp_0`` clips its result to norm ``(1 - eps) / sqrt(c)`` (geoopt's 4e-3 in
float32) and ``log_0`` clamps ``sqrt(c)|y|`` to the same radius before ``artanh``, so a point pushed onto the
boundary by round-off maps to a finite tangent vector; every norm goes through ``gencore``'s ``safe_norm``
so gradients are finite at the origin.

``to_space``/``from_space`` map a point to the space-like coordinates of its image on the hyperboloid and back
(the identity in flat space): coordinates in which a Euclidean normalisation keeps points at a moderate
distance from the origin (see :class:`gengraph.hyperbolic.layers.HypNorm`).

:class:`BallGeometry` and :class:`EuclideanGeometry` answer the same calls (``expmap0``, ``logmap0``,
``mobius_add``, ``to_space``, ``from_space``, ``pairwise_dist``, ``midpoint``, ``frechet_mean``, ``geodesic``),
so every layer and the GGBall model run unchanged in flat space: that is the Euclidean-latent ablation.

Weighted midpoint on the ball: Ungar's gyromidpoint (used by HNN++ and hyperbolic attention),

    m = (1/2) (x) ( sum_i w_i lambda_i x_i / sum_i w_i (lambda_i - 1) ),   lambda_i = 2 / (1 - c |x_i|^2),

with ``(x)`` Mobius scalar multiplication. It is equivariant under rotations and permutations and equals the
Frechet mean for two points of equal weight. The bracket is not a ball point (its norm reaches ``1 / sqrt(c)``
only at infinity, like a Klein point's), so the halving is taken in closed form,
``(1/2) (x) y = y / (1 + sqrt(1 - c |y|^2))``: clipping ``y`` to the ball first, as until 2026-12-07, capped every
midpoint at distance ``atanh(0.996) / sqrt(c) ~ 3.1 / sqrt(c)`` from the origin in float32.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.manifolds import Euclidean, PoincareBall
from gencore.manifolds.base import EPS, TINY, safe_norm, safe_sqrt

__all__ = ["BallGeometry", "EuclideanGeometry", "Geometry", "make_geometry"]

#: boundary margin of the ball in units of 1/sqrt(c), per dtype (geoopt's projection margins)
BALL_EPS = {torch.float32: 4e-3, torch.float64: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def _cdist(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Batched Euclidean distances ``[..., N, M]`` from explicit differences (exact at ``x = y``)."""
    lead = torch.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    xb = x.expand(*lead, *x.shape[-2:]).reshape(-1, *x.shape[-2:])
    yb = y.expand(*lead, *y.shape[-2:]).reshape(-1, *y.shape[-2:])
    d = torch.cdist(xb, yb, compute_mode="donot_use_mm_for_euclid_dist")
    return d.reshape(*lead, x.shape[-2], y.shape[-2])


class EuclideanGeometry(nn.Module):
    """Flat ``R^d`` with the same interface as :class:`BallGeometry` (all maps are identities)."""

    kind = "euclidean"

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.manifold = Euclidean(dim)

    def expmap0(self, u: torch.Tensor) -> torch.Tensor:
        return u

    def logmap0(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def mobius_add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y

    def to_space(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def from_space(self, s: torch.Tensor) -> torch.Tensor:
        return s

    def pairwise_dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[..., N, M]`` distances between ``x: [..., N, d]`` and ``y: [..., M, d]`` (differentiable)."""
        return _cdist(x, y)

    def midpoint(self, weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Weighted mean: ``weights: [..., N, M]`` (rows sum to one or not), ``x: [..., M, d]`` -> ``[..., N, d]``."""
        return (weights @ x) / weights.sum(-1, keepdim=True).clamp_min(EPS[x.dtype])

    def frechet_mean(self, x: torch.Tensor, weights: torch.Tensor, init: torch.Tensor, iters: int = 3) -> torch.Tensor:
        """``[K, d]`` weighted means of ``x: [M, d]`` with ``weights: [K, M]`` (closed form; ``init`` unused
        where a row has weight)."""
        w = weights.sum(-1, keepdim=True)
        return torch.where(w > 0, (weights @ x) / w.clamp_min(EPS[x.dtype]), init)

    def cluster_means(self, x: torch.Tensor, assign: torch.Tensor, k: int, init: torch.Tensor) -> torch.Tensor:
        """``[k, d]`` means of the clusters ``assign: [M]`` (values in ``0..k-1``) of ``x: [M, d]``, i.e.
        ``frechet_mean`` with one-hot weights in ``O(M d)`` instead of ``O(k M d)``; empty clusters return
        ``init``."""
        counts = torch.zeros(k, 1, dtype=x.dtype, device=x.device).index_add_(0, assign, torch.ones_like(x[:, :1]))
        sums = torch.zeros(k, x.shape[-1], dtype=x.dtype, device=x.device).index_add_(0, assign, x)
        return torch.where(counts > 0, sums / counts.clamp_min(1), init)

    def geodesic(self, x: torch.Tensor, y: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        return x + t * (y - x)


class BallGeometry(nn.Module):
    """The Poincare ball of curvature ``-c`` (a :class:`gencore.manifolds.PoincareBall` inside)."""

    kind = "ball"

    def __init__(self, dim: int, c: float = 1.0) -> None:
        super().__init__()
        self.dim = dim
        self.manifold = PoincareBall(dim, c=c)

    @property
    def c(self) -> torch.Tensor:
        return self.manifold.c

    def _sc(self, x: torch.Tensor) -> torch.Tensor:
        return self.manifold.c.to(x.dtype).sqrt()

    def max_norm(self, x: torch.Tensor) -> torch.Tensor:
        return (1 - BALL_EPS.get(x.dtype, 4e-3)) / self._sc(x)

    def projx(self, x: torch.Tensor) -> torch.Tensor:
        n = safe_norm(x)
        cap = self.max_norm(x)
        return torch.where(n > cap, x / n * cap, x)

    def expmap0(self, u: torch.Tensor) -> torch.Tensor:
        sc = self._sc(u)
        n = safe_norm(u)
        return self.projx(torch.tanh(sc * n) * u / (sc * n))

    def logmap0(self, y: torch.Tensor) -> torch.Tensor:
        sc = self._sc(y)
        n = safe_norm(y)
        r = (sc * n).clamp_max(1 - BALL_EPS.get(y.dtype, 4e-3))
        return torch.atanh(r) * y / (sc * n)

    def mobius_add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.projx(self.manifold.mobius_add(x, y))

    def to_space(self, x: torch.Tensor) -> torch.Tensor:
        """The space-like part ``lambda_x x = 2x / (1 - c|x|^2)`` of ``x``'s image on the hyperboloid
        ``<y, y>_L = -1/c`` (norm ``sinh(sqrt(c) r) / sqrt(c)`` at distance ``r`` from the origin)."""
        return self.lambda_x(x) * x

    def from_space(self, s: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`to_space`: ``s / (1 + sqrt(1 + c|s|^2))``, defined for every ``s`` (projected)."""
        c = self.manifold.c.to(s.dtype)
        return self.projx(s / (1 + (1 + c * s.square().sum(-1, keepdim=True)).sqrt()))

    def lambda_x(self, x: torch.Tensor) -> torch.Tensor:
        return 2 / (1 - self.manifold.c.to(x.dtype) * x.square().sum(-1, keepdim=True)).clamp_min(EPS[x.dtype])

    def pairwise_dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[..., N, M]`` geodesic distances ``arcosh(1 + 2c|x - y|^2 / ((1 - c|x|^2)(1 - c|y|^2))) / sqrt(c)``.

        ``|x - y|`` comes from ``torch.cdist`` with explicit differences (not the ``|x|^2 + |y|^2 - 2 x.y``
        matrix-product shortcut, whose cancellation, divided by ``(1 - c|x|^2)^2 ~ 1e-5`` near the float32
        boundary, would turn ``d(x, x)`` into ~0.1); ``arcosh(1 + z) = log1p(z + sqrt(z (z + 2)))``."""
        c = self.manifold.c.to(x.dtype)
        e = EPS[x.dtype]
        x2, y2 = x.square().sum(-1), y.square().sum(-1)
        sq = _cdist(x, y).square()
        den = (1 - c * x2).clamp_min(e)[..., :, None] * (1 - c * y2).clamp_min(e)[..., None, :]
        z = 2 * c * sq / den
        return torch.log1p(z + (z * (z + 2)).clamp_min(TINY[x.dtype]).sqrt()) / c.sqrt()

    def midpoint(self, weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        lam = self.lambda_x(x)  # [..., M, 1]
        return self._half(weights @ (lam * x) / (weights @ (lam - 1)).clamp_min(EPS[x.dtype]))

    def _half(self, y: torch.Tensor) -> torch.Tensor:
        """``(1/2) (x) y`` for the gyromidpoint's bracket ``y`` (module docstring), projected onto the ball.

        ``safe_sqrt``: for points on the float32 boundary the bracket's ``1 - c|y|^2`` rounds to exactly 0, where
        ``sqrt`` has an infinite derivative (NaN gradients through ``clamp_min(0).sqrt()``)."""
        c = self.manifold.c.to(y.dtype)
        return self.projx(y / (1 + safe_sqrt(1 - c * y.square().sum(-1, keepdim=True))))

    def frechet_mean(self, x: torch.Tensor, weights: torch.Tensor, init: torch.Tensor, iters: int = 3) -> torch.Tensor:
        """Weighted Frechet (Karcher) means ``[K, d]`` of ``x: [M, d]`` with ``weights: [K, M]``; rows without
        weight return ``init``.

        Start at the weighted gyromidpoint (close to the mean), then ``iters`` Riemannian gradient steps on
        ``F(mu) = sum_i w_i d(mu, x_i)^2 / 2`` (weights normalised), ``mu <- exp_mu(a sum_i w_i log_mu x_i)``.
        The step is ``a = 1 / sum_i w_i r_i coth(r_i)``, ``r_i = sqrt(c) d(mu, x_i)``: the Hessian of ``F`` lies
        between 1 and that bound in negative curvature, so the unit step of the flat-space Karcher iteration
        can overshoot and oscillate on spread-out points, while this one decreases ``F`` monotonically."""
        w = weights / weights.sum(-1, keepdim=True).clamp_min(EPS[x.dtype])
        mu = self.midpoint(w, x)
        sc = self._sc(x)
        for _ in range(iters):
            logs = self.manifold.logmap(mu[:, None, :], x[None, :, :])  # [K, M, d]
            r = sc * self.manifold.dist(mu[:, None, :], x[None, :, :])  # [K, M]
            rcoth = torch.where(r > 1e-4, r / torch.tanh(r.clamp_min(1e-4)), 1 + r.square() / 3)
            step = (w[..., None] * logs).sum(1) / (w * rcoth).sum(-1, keepdim=True).clamp_min(1)
            mu = self.projx(self.manifold.expmap(mu, step))
        has = weights.sum(-1, keepdim=True) > 0
        return torch.where(has, mu, init)

    def cluster_means(
        self, x: torch.Tensor, assign: torch.Tensor, k: int, init: torch.Tensor, iters: int = 3
    ) -> torch.Tensor:
        """``frechet_mean`` with one-hot weights (cluster ``assign: [M]`` of each point), computed per point and
        summed per cluster: ``O(M d)`` instead of the dense ``O(k M d)``; the same iteration and step size."""

        def per_cluster(v: torch.Tensor) -> torch.Tensor:
            return torch.zeros(k, v.shape[-1], dtype=v.dtype, device=v.device).index_add_(0, assign, v)

        lam = self.lambda_x(x)
        counts = per_cluster(torch.ones_like(x[:, :1]))
        mu = self._half(per_cluster(lam * x) / per_cluster(lam - 1).clamp_min(EPS[x.dtype]))
        sc = self._sc(x)
        for _ in range(iters):
            m = mu[assign]
            logs = self.manifold.logmap(m, x)  # [M, d]
            r = sc * self.manifold.dist(m, x)[:, None]  # [M, 1]
            rcoth = torch.where(r > 1e-4, r / torch.tanh(r.clamp_min(1e-4)), 1 + r.square() / 3)
            step = per_cluster(logs) / per_cluster(rcoth).clamp_min(1)
            mu = self.projx(self.manifold.expmap(mu, step))
        return torch.where(counts > 0, mu, init)

    def geodesic(self, x: torch.Tensor, y: torch.Tensor, t: float | torch.Tensor) -> torch.Tensor:
        return self.projx(self.manifold.expmap(x, t * self.manifold.logmap(x, y)))


Geometry = BallGeometry | EuclideanGeometry


def make_geometry(kind: str, dim: int, c: float = 1.0) -> Geometry:
    from gencore.checks import check_choice

    check_choice(kind, ("ball", "euclidean"), "latent geometry")
    return BallGeometry(dim, c) if kind == "ball" else EuclideanGeometry(dim)
