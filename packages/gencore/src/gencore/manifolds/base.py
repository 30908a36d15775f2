"""The manifold protocol every Riemannian flow in :mod:`gencore.manifolds` is written against.

Points are batch-first tensors ``x: [..., D]`` in an ambient (or coordinate) representation of
width ``D = ambient_dim``; tangent vectors at ``x`` live in the same ``[..., D]`` space. The
intrinsic dimension is ``dim``. Every operation broadcasts over the leading dimensions.

Numerics: every norm that may vanish goes through :func:`safe_norm` (the squared norm is clamped
at a dtype-dependent ``tiny`` before the square root, so ``expmap(x, 0)``, ``dist(x, x)`` and their
gradients are finite), and every division by a quantity that may vanish is guarded by an explicit
``eps`` (:data:`EPS`).
"""

from __future__ import annotations

import abc
import math

import torch
from torch import nn

#: guard for divisions and clamps, per dtype
EPS = {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-7, torch.float64: 1e-15}
#: floor of a squared norm before its square root, per dtype (gradient of the floor is zero, never NaN);
#: float16's is its smallest normal number, since 1e-8 rounds to 0 there
TINY = {torch.float16: 2.0**-14, torch.bfloat16: 1e-8, torch.float32: 1e-30, torch.float64: 1e-200}


def eps_for(x: torch.Tensor) -> float:
    return EPS.get(x.dtype, 1e-7)


def safe_norm(u: torch.Tensor, keepdim: bool = True) -> torch.Tensor:
    """Euclidean norm over the last axis whose gradient is finite (zero) at ``u = 0``."""
    sq = u.square().sum(-1, keepdim=keepdim)
    return sq.clamp_min(TINY.get(u.dtype, 1e-30)).sqrt()


def safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(max(x, tiny))``: finite gradient at and below zero."""
    return x.clamp_min(TINY.get(x.dtype, 1e-30)).sqrt()


def sinc_ratio(r: torch.Tensor, curvature: float | torch.Tensor) -> torch.Tensor:
    """``sin(sqrt(K) r) / (sqrt(K) r)`` (``sinh`` for ``K < 0``, 1 for ``K = 0``), with its small-``r`` series.

    A tensor ``K`` (a learnable curvature) keeps its gradient; its sign picks the branch.
    """
    k = float(curvature.detach()) if torch.is_tensor(curvature) else float(curvature)
    if k == 0:
        return torch.ones_like(r)
    root = curvature.to(r.dtype).abs().sqrt() if torch.is_tensor(curvature) else math.sqrt(abs(k))
    a = root * r
    small = a < 1e-3
    a_safe = torch.where(small, torch.ones_like(a), a)
    if k > 0:
        exact = torch.sin(a_safe) / a_safe
        series = 1 - a.square() / 6
    else:
        exact = torch.sinh(a_safe) / a_safe
        series = 1 + a.square() / 6
    return torch.where(small, series, exact)


class Manifold(nn.Module, abc.ABC):
    """A Riemannian manifold with the operations flows need.

    Subclasses implement the abstract methods; the rest (``norm2``, ``sq_dist``, ``dexp_inv``,
    ``divergence_correction``, ``features``) have correct generic defaults.

    Attributes:
        name: short name (``"sphere"``, ``"ball"``, ...).
        dim: intrinsic dimension ``n``.
        ambient_dim: width ``D`` of the point representation.
        curvature: the constant sectional curvature when there is one (used by :meth:`dexp_inv`),
            else None.
    """

    name: str = "manifold"
    dim: int
    ambient_dim: int
    curvature: float | None = None

    # ------------------------------------------------------------------ required operations
    @abc.abstractmethod
    def projx(self, x: torch.Tensor) -> torch.Tensor:
        """The nearest point of the manifold (re-normalise, wrap, clip into the ball)."""

    @abc.abstractmethod
    def proju(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Project an ambient vector ``u`` onto the tangent space at ``x`` (metric-orthogonally)."""

    @abc.abstractmethod
    def expmap(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The exponential map ``exp_x(u)``."""

    @abc.abstractmethod
    def logmap(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The logarithm ``log_x(y)``, the inverse of ``exp_x`` inside the injectivity radius."""

    @abc.abstractmethod
    def transp(self, x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Parallel transport of ``v in T_x`` to ``T_y`` along the minimising geodesic."""

    @abc.abstractmethod
    def inner(self, x: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The metric ``<u, v>_x`` (shape ``[...]``)."""

    @abc.abstractmethod
    def dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Geodesic distance (shape ``[...]``); finite gradient at ``x = y``."""

    @abc.abstractmethod
    def random_base(
        self, n: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        """``n`` draws of the base distribution (uniform if compact, else a wrapped normal at the origin), made on
        ``generator``'s device (without one, the CPU); a manifold with parameters (the learnable ball) returns them
        on its own device."""

    @abc.abstractmethod
    def base_log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """Log-density of the base distribution w.r.t. the Riemannian volume."""

    @abc.abstractmethod
    def origin(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A reference point ``[D]`` (north pole, centre of the ball, identity rotation, ...)."""

    @abc.abstractmethod
    def origin_tangent(self, coords: torch.Tensor) -> torch.Tensor:
        """Map coordinates ``[..., n]`` in an orthonormal basis of ``T_origin`` to tangent vectors ``[..., D]``."""

    # ------------------------------------------------------------------ generic operations
    def norm2(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Squared metric norm ``<u, u>_x``."""
        return self.inner(x, u, u)

    def sq_dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Squared geodesic distance (smooth at ``x = y``)."""
        return self.dist(x, y).square()

    def pairwise_sq_dist(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``[N, M]`` squared distances between the rows of ``x: [N, D]`` and ``y: [M, D]`` (no gradients needed)."""
        return self.sq_dist(x[:, None, :], y[None, :, :])

    def from_frame(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Read a network output ``u`` as components in a metric-orthonormal frame at ``x`` and return the tangent
        vector in point coordinates (identity for isometric embeddings; ``u / lambda_x`` on the ball)."""
        return u

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Network input features of ``x`` (default: the coordinates themselves)."""
        return x

    @property
    def feature_dim(self) -> int:
        return self.ambient_dim

    def divergence_correction(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``v . grad log sqrt(det g)`` in the point coordinates; zero for isometrically embedded manifolds."""
        return torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)

    def dexp_inv(self, x: torch.Tensor, xi: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``(d exp_x)_xi^{-1} w``: the velocity in normal coordinates at ``x`` of a curve through
        ``y = exp_x(xi)`` with velocity ``w in T_y``.

        For constant curvature ``K`` the Jacobi fields are closed form: transported back to ``x``, the
        component of ``w`` along ``xi`` is unchanged and the orthogonal part is divided by
        ``sin(sqrt(K) r) / (sqrt(K) r)``, ``r = |xi|_x``. Flat spaces: identity. Manifolds without constant
        curvature override this (SO(3)).
        """
        w0 = self.transp(y, x, w)
        if not self.curvature:
            return w0
        r = self.norm2(x, xi).clamp_min(0).unsqueeze(-1)
        r = safe_sqrt(r)
        e = xi / r
        par = self.inner(x, w0, e).unsqueeze(-1) * e
        return par + (w0 - par) / sinc_ratio(r, self.curvature)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


def wrapped_normal_log_prob(r: torch.Tensor, n: int, std: float, curvature: float | torch.Tensor) -> torch.Tensor:
    """Log-density w.r.t. the Riemannian volume of ``exp_mu(xi)``, ``xi ~ N(0, std^2 I_n)`` in an orthonormal
    basis of ``T_mu``, at a point at geodesic distance ``r`` from ``mu`` on a space of constant curvature.

    ``log N(r) - (n - 1) log(sin(sqrt(K) r) / (sqrt(K) r))``: the Jacobian of ``exp_mu`` in geodesic polar
    coordinates (Mathieu et al. 2019; Nagano et al. 2019). Exact for ``K <= 0``; for ``K > 0`` only while
    ``r`` stays inside the injectivity radius (the wrapped tails are ignored).
    """
    log_normal = -0.5 * n * math.log(2 * math.pi * std**2) - r.square() / (2 * std**2)
    return log_normal - (n - 1) * torch.log(sinc_ratio(r, curvature))
