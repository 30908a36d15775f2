"""Concrete manifolds: Euclidean, Sphere, flat Torus, Poincare ball, Lorentz hyperboloid and SO(3).

Each wraps the matching geoopt manifold (Kochurov et al. 2020, "Geoopt: Riemannian Optimization in
PyTorch") where geoopt has one and its operation is safe, and writes the operation itself where geoopt's
is not: geoopt's ``Sphere.expmap`` / ``Lorentz.expmap`` / ``Lorentz.logmap`` divide by a norm that is zero
at ``u = 0`` / ``x = y`` (NaN gradients through ``torch.where``), and ``Sphere.transp`` is a projection, not
parallel transport. geoopt has no flat torus and no SO(3); those are written here.

- :class:`Sphere` ``S^n`` in ``R^{n+1}``; uniform base.
- :class:`Torus` ``T^n`` as angles in ``[-pi, pi)^n``; uniform base; network features ``(cos, sin)``.
- :class:`PoincareBall` of curvature ``-c`` (``c`` learnable through geoopt's parameter); wrapped-normal base.
  Distances use ``arcosh(1 + 2c|x-y|^2 / ((1 - c|x|^2)(1 - c|y|^2)))`` in the ``log1p`` form, accurate for
  nearby points and near the boundary; points are clipped to norm ``(1 - eps) / sqrt(c)`` with geoopt's
  ``eps`` (4e-3 in float32, 1e-5 in float64).
- :class:`Lorentz` hyperboloid ``<x, x>_L = -k``; wrapped-normal base.
- :class:`SO3` rotation matrices flattened to ``[..., 9]``, metric ``<U, V> = tr(U^T V) / 2`` (distance =
  rotation angle); Rodrigues formulas with small-angle series, logarithm stable up to angle ``pi``.
- :class:`Euclidean` ``R^n``; standard normal base.
"""

from __future__ import annotations

import math

import geoopt
import torch

from gencore.errors import ConfigError
from gencore.manifolds.base import TINY, Manifold, eps_for, safe_norm, safe_sqrt, sinc_ratio, wrapped_normal_log_prob
from gencore.rng import draw_device

__all__ = ["SO3", "Euclidean", "Lorentz", "PoincareBall", "Sphere", "Torus", "wrap_angle"]


def _check_dim(dim: int, low: int = 1) -> int:
    if not isinstance(dim, int) or dim < low:
        raise ConfigError(f"manifold dimension must be an integer >= {low}, got {dim!r}.")
    return dim


def _dot(u: torch.Tensor, v: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    return (u * v).sum(-1, keepdim=keepdim)


def _arcosh1p(z: torch.Tensor) -> torch.Tensor:
    """``arcosh(1 + z)`` for ``z >= 0``, accurate for small ``z`` and with a finite gradient at ``z = 0``."""
    z = z.clamp_min(0)
    return torch.log1p(z + safe_sqrt(z * (z + 2)))


# ---------------------------------------------------------------------------------------------- Euclidean
class Euclidean(Manifold):
    """``R^n`` with the standard metric and a standard normal base."""

    name = "euclidean"
    curvature = 0.0

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = self.ambient_dim = _check_dim(dim)
        self.geo = geoopt.Euclidean(ndim=1)

    def projx(self, x):
        return self.geo.projx(x)

    def proju(self, x, u):
        return self.geo.proju(x, u)

    def expmap(self, x, u):
        return x + u

    def logmap(self, x, y):
        return y - x

    def transp(self, x, y, v):
        return v

    def inner(self, x, u, v):
        return _dot(u, v)

    def dist(self, x, y):
        return safe_norm(y - x, keepdim=False)

    def sq_dist(self, x, y):
        return (y - x).square().sum(-1)

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        return torch.randn(n, self.dim, generator=generator, dtype=dtype, device=draw_device(generator))

    def base_log_prob(self, x):
        return -0.5 * x.square().sum(-1) - 0.5 * self.dim * math.log(2 * math.pi)

    def origin(self, dtype=torch.float32):
        return torch.zeros(self.dim, dtype=dtype)

    def origin_tangent(self, coords):
        return coords


# ---------------------------------------------------------------------------------------------- Sphere
class Sphere(Manifold):
    """The unit sphere ``S^n`` embedded in ``R^{n+1}``, curvature 1, uniform base."""

    name = "sphere"
    curvature = 1.0

    def __init__(self, dim: int = 2) -> None:
        super().__init__()
        self.dim = _check_dim(dim)
        self.ambient_dim = dim + 1
        self.geo = geoopt.Sphere()

    def projx(self, x):
        return x / safe_norm(x)

    def proju(self, x, u):
        return self.geo.proju(x, u)

    def expmap(self, x, u):
        r = safe_norm(u)
        return self.projx(torch.cos(r) * x + sinc_ratio(r, 1.0) * u)

    def dist(self, x, y):
        # 2 atan2(|x - y|, |x + y|): accurate at both small and near-antipodal distances
        return 2 * torch.atan2(safe_norm(x - y, keepdim=False), safe_norm(x + y, keepdim=False))

    def logmap(self, x, y):
        # the direction w = P_x (y - x) has |w| = sin d; near the antipode w is an O(eps) difference, so scaling it by
        # d / sin d put the rounding into the length (float32, d = pi - 1e-4: |log| off by 1.5e-3); normalising w by
        # its own norm keeps |log_x y| = d exact (d / |w| -> 1 and the gradient stays finite at y = x)
        w = self.proju(x, y - x)
        return w * (self.dist(x, y).unsqueeze(-1) / safe_norm(w))

    def pairwise_sq_dist(self, x, y):
        return torch.acos((x @ y.T).clamp(-1, 1)).square()

    def transp(self, x, y, v):
        # v - <y, v> / (1 + <x, y>) (x + y) for v in T_x is the reflection of v in the plane orthogonal to s = x + y
        # (<y, v> = <s, v>, 1 + <x, y> = |s|^2 / 2): an isometry for every rounding of s, where 1 + <x, y> cancelled to
        # 0 near the antipode (float32, d = pi - 1e-4: a unit vector came back with norm 1.5e7)
        s = x + y
        return (
            v - 2 * _dot(s, v, keepdim=True) / s.square().sum(-1, keepdim=True).clamp_min(TINY.get(x.dtype, 1e-30)) * s
        )

    def inner(self, x, u, v):
        return _dot(u, v)

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        return self.projx(
            torch.randn(n, self.ambient_dim, generator=generator, dtype=dtype, device=draw_device(generator))
        )

    def log_area(self) -> float:
        m = self.dim + 1
        return math.log(2) + 0.5 * m * math.log(math.pi) - math.lgamma(0.5 * m)

    def base_log_prob(self, x):
        return torch.full(x.shape[:-1], -self.log_area(), dtype=x.dtype, device=x.device)

    def origin(self, dtype=torch.float32):
        o = torch.zeros(self.ambient_dim, dtype=dtype)
        o[-1] = 1
        return o

    def origin_tangent(self, coords):
        return torch.cat([coords, torch.zeros_like(coords[..., :1])], dim=-1)


# ---------------------------------------------------------------------------------------------- Torus
def wrap_angle(a: torch.Tensor) -> torch.Tensor:
    """Wrap angles to ``[-pi, pi)``."""
    return torch.remainder(a + math.pi, 2 * math.pi) - math.pi


class Torus(Manifold):
    """The flat torus ``T^n = (R / 2 pi Z)^n`` as angles in ``[-pi, pi)``; uniform base.

    Not in geoopt: written here. Network features are ``(cos a, sin a)`` so that fields are periodic.
    """

    name = "torus"
    curvature = 0.0

    def __init__(self, dim: int = 2) -> None:
        super().__init__()
        self.dim = self.ambient_dim = _check_dim(dim)

    def projx(self, x):
        return wrap_angle(x)

    def proju(self, x, u):
        return u

    def expmap(self, x, u):
        return wrap_angle(x + u)

    def logmap(self, x, y):
        return wrap_angle(y - x)

    def transp(self, x, y, v):
        return v

    def inner(self, x, u, v):
        return _dot(u, v)

    def dist(self, x, y):
        return safe_norm(wrap_angle(y - x), keepdim=False)

    def sq_dist(self, x, y):
        return wrap_angle(y - x).square().sum(-1)

    def features(self, x):
        return torch.cat([torch.cos(x), torch.sin(x)], dim=-1)

    @property
    def feature_dim(self) -> int:
        return 2 * self.dim

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        return (
            torch.rand(n, self.dim, generator=generator, dtype=dtype, device=draw_device(generator)) * 2 - 1
        ) * math.pi

    def base_log_prob(self, x):
        return torch.full(x.shape[:-1], -self.dim * math.log(2 * math.pi), dtype=x.dtype, device=x.device)

    def origin(self, dtype=torch.float32):
        return torch.zeros(self.dim, dtype=dtype)

    def origin_tangent(self, coords):
        return coords


# ---------------------------------------------------------------------------------------------- Poincare ball
class PoincareBall(Manifold):
    """The Poincare ball of curvature ``-c``: ``|x| < 1 / sqrt(c)``, metric ``lambda_x^2 I``,
    ``lambda_x = 2 / (1 - c |x|^2)``.

    A learnable ``c`` is geoopt's curvature parameter, so gradients reach it through every operation; a fixed
    ``c`` is kept as the exact number given (geoopt's parameter is a float32 softplus, which would put
    ``c = 0.3`` at 0.30000007 in float64 arithmetic). The base is a wrapped normal at the origin with standard
    deviation ``base_std``.
    """

    name = "ball"

    def __init__(self, dim: int = 2, c: float = 1.0, *, learnable: bool = False, base_std: float = 1.0) -> None:
        super().__init__()
        self.dim = self.ambient_dim = _check_dim(dim)
        if not c > 0:
            raise ConfigError(f"the Poincare ball needs a curvature magnitude c > 0, got {c}.")
        if not base_std > 0:
            raise ConfigError(f"base_std must be positive, got {base_std}.")
        self.geo = geoopt.PoincareBall(c=c, learnable=learnable)
        self._c_fixed = None if learnable else float(c)
        self.base_std = float(base_std)

    @property
    def c(self) -> torch.Tensor:
        """The curvature magnitude: geoopt's parameter when learnable, else the exact ``c`` as a float64 scalar."""
        if self._c_fixed is None:
            return self.geo.c
        return torch.tensor(self._c_fixed, dtype=torch.float64)

    @property
    def curvature(self) -> float:  # type: ignore[override]
        return -float(self.c.detach())

    def _c(self, x: torch.Tensor) -> torch.Tensor:
        return self.c.to(x.dtype)

    def lambda_x(self, x: torch.Tensor, keepdim: bool = True) -> torch.Tensor:
        return 2 / (1 - self._c(x) * x.square().sum(-1, keepdim=keepdim)).clamp_min(eps_for(x))

    def mobius_add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = self._c(x)
        xy, x2, y2 = _dot(x, y, True), x.square().sum(-1, keepdim=True), y.square().sum(-1, keepdim=True)
        num = (1 + 2 * c * xy + c * y2) * x + (1 - c * x2) * y
        return num / (1 + 2 * c * xy + c**2 * x2 * y2).clamp_min(eps_for(x))

    def _gyration(self, u: torch.Tensor, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        c = self._c(u)
        u2, v2 = u.square().sum(-1, keepdim=True), v.square().sum(-1, keepdim=True)
        uv, uw, vw = _dot(u, v, True), _dot(u, w, True), _dot(v, w, True)
        a = -(c**2) * uw * v2 + c * vw + 2 * c**2 * uv * vw
        b = -(c**2) * vw * u2 - c * uw
        d = (1 + 2 * c * uv + c**2 * u2 * v2).clamp_min(eps_for(u))
        return w + 2 * (a * u + b * v) / d

    def projx(self, x):
        return self.geo.projx(x)

    def proju(self, x, u):
        return u

    def inner(self, x, u, v):
        return self.lambda_x(x, keepdim=False).square() * _dot(u, v)

    def expmap(self, x, u):
        sc = self._c(x).sqrt()
        un = safe_norm(u)
        second = torch.tanh(sc * self.lambda_x(x) * un / 2) / (sc * un) * u
        return self.projx(self.mobius_add(x, second))

    def dist(self, x, y):
        c = self._c(x)
        e = eps_for(x)
        den = (1 - c * x.square().sum(-1)).clamp_min(e) * (1 - c * y.square().sum(-1)).clamp_min(e)
        z = 2 * c * (x - y).square().sum(-1) / den
        return _arcosh1p(z) / c.sqrt()

    def pairwise_sq_dist(self, x, y):
        c = self._c(x)
        e = eps_for(x)
        den = (1 - c * x.square().sum(-1)).clamp_min(e)[:, None] * (1 - c * y.square().sum(-1)).clamp_min(e)[None, :]
        return (_arcosh1p(2 * c * torch.cdist(x, y).square() / den) / c.sqrt()).square()

    def logmap(self, x, y):
        w = self.mobius_add(-x, y)
        return (self.dist(x, y).unsqueeze(-1) / (self.lambda_x(x) * safe_norm(w))) * w

    def transp(self, x, y, v):
        return self._gyration(y, -x, v) * self.lambda_x(x) / self.lambda_x(y)

    def from_frame(self, x, u):
        return u / self.lambda_x(x)

    def divergence_correction(self, x, v):
        # sqrt(det g) = lambda^n, grad log lambda = c lambda x
        return self.dim * self._c(x) * self.lambda_x(x, keepdim=False) * _dot(x, v)

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        # drawn on the generator's device (without one, the CPU), then moved to where the curvature lives (the
        # module's device): a training loss's CUDA generator works, a CPU generator gives the same draws anywhere
        xi = torch.randn(n, self.dim, generator=generator, dtype=dtype, device=draw_device(generator))
        xi = xi.to(self.geo.c.device) * self.base_std
        o = self.origin(dtype).expand(n, -1)
        return self.expmap(o, self.origin_tangent(xi))

    def base_log_prob(self, x):
        r = self.dist(self.origin(x.dtype).to(x.device).expand_as(x), x)
        return wrapped_normal_log_prob(r, self.dim, self.base_std, -self._c(x))  # a learnable c gets its gradient

    def origin(self, dtype=torch.float32):
        return torch.zeros(self.dim, dtype=dtype, device=self.geo.c.device)  # where the module was moved

    def origin_tangent(self, coords):
        return coords / 2  # lambda_0 = 2

    def extra_repr(self) -> str:
        return f"dim={self.dim}, c={float(self.c.detach()):.4g}"


# ---------------------------------------------------------------------------------------------- Lorentz
class Lorentz(Manifold):
    """The hyperboloid ``{x in R^{n+1}: <x, x>_L = -k, x_0 > 0}``, curvature ``-1/k``; wrapped-normal base."""

    name = "lorentz"

    def __init__(self, dim: int = 2, k: float = 1.0, *, base_std: float = 1.0) -> None:
        super().__init__()
        self.dim = _check_dim(dim)
        self.ambient_dim = dim + 1
        if not k > 0:
            raise ConfigError(f"the Lorentz model needs k > 0, got {k}.")
        if not base_std > 0:
            raise ConfigError(f"base_std must be positive, got {base_std}.")
        self.geo = geoopt.Lorentz(k=k)
        self.k = float(k)
        self.base_std = float(base_std)
        self.curvature = -1.0 / self.k

    @staticmethod
    def linner(u: torch.Tensor, v: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
        uv = u * v
        return uv[..., 1:].sum(-1, keepdim=keepdim) - (uv[..., 0:1] if keepdim else uv[..., 0])

    def projx(self, x):
        return self.geo.projx(x)

    def proju(self, x, u):
        return u + self.linner(x, u, True) * x / self.k

    def inner(self, x, u, v):
        return self.linner(u, v)

    def expmap(self, x, u):
        sk = math.sqrt(self.k)
        r = safe_sqrt(self.linner(u, u, True))
        return self.projx(torch.cosh(r / sk) * x + sinc_ratio(r, -1.0 / self.k) * u)

    def dist(self, x, y):
        d = x - y
        return math.sqrt(self.k) * _arcosh1p(self.linner(d, d) / (2 * self.k))

    def logmap(self, x, y):
        # with delta = <x - y, x - y>_L / 2k (no cancellation for near points): <x, y>_L = -k (1 + delta), the
        # direction is y + <x, y>_L x / k and its norm is sqrt(k delta (2 + delta)); the norm computed from the
        # direction's own components cancels catastrophically far from the origin (1e6 -> 1e3 in float32)
        d = x - y
        delta = (self.linner(d, d, True) / (2 * self.k)).clamp_min(0)
        w = y - (1 + delta) * x
        dist = math.sqrt(self.k) * _arcosh1p(delta)
        return dist / safe_sqrt(self.k * delta * (2 + delta)) * w

    def transp(self, x, y, v):
        return v + self.linner(y, v, True) / (self.k - self.linner(x, y, True)) * (x + y)

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        xi = torch.randn(n, self.dim, generator=generator, dtype=dtype, device=draw_device(generator)) * self.base_std
        return self.expmap(self.origin(dtype).to(xi.device).expand(n, -1), self.origin_tangent(xi))

    def base_log_prob(self, x):
        r = self.dist(self.origin(x.dtype).to(x.device).expand_as(x), x)
        return wrapped_normal_log_prob(r, self.dim, self.base_std, self.curvature)

    def origin(self, dtype=torch.float32):
        o = torch.zeros(self.ambient_dim, dtype=dtype)
        o[0] = math.sqrt(self.k)
        return o

    def origin_tangent(self, coords):
        return torch.cat([torch.zeros_like(coords[..., :1]), coords], dim=-1)

    def from_frame(self, x, u):
        # Minkowski coordinates are no orthonormal frame away from the origin (a unit output had a tangent norm of
        # up to cosh(r)): read u's spatial components at the origin and transport them to x, an isometry
        o = self.origin(x.dtype).to(x.device).expand_as(x)
        return self.transp(o, x, self.origin_tangent(u[..., 1:]))

    def features(self, x):
        # the point's coordinates grow like exp(r); its log at the origin (in the origin's orthonormal frame) grows
        # like r, so a network sees inputs of the size of the distances it has to model
        return self.logmap(self.origin(x.dtype).to(x.device).expand_as(x), x)[..., 1:]

    @property
    def feature_dim(self) -> int:
        return self.dim


# ---------------------------------------------------------------------------------------------- SO(3)
def hat(w: torch.Tensor) -> torch.Tensor:
    """``[..., 3] -> [..., 3, 3]`` skew-symmetric matrix with ``hat(w) v = w x v``."""
    z = torch.zeros_like(w[..., 0])
    return torch.stack(
        [
            torch.stack([z, -w[..., 2], w[..., 1]], -1),
            torch.stack([w[..., 2], z, -w[..., 0]], -1),
            torch.stack([-w[..., 1], w[..., 0], z], -1),
        ],
        -2,
    )


def vee(a: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`hat` on the skew part: ``[..., 3, 3] -> [..., 3]``."""
    return torch.stack([a[..., 2, 1] - a[..., 1, 2], a[..., 0, 2] - a[..., 2, 0], a[..., 1, 0] - a[..., 0, 1]], -1) / 2


def _small_series(theta: torch.Tensor, exact, series, threshold: float = 1e-2) -> torch.Tensor:
    """``exact(theta)`` away from zero, ``series(theta)`` below ``threshold``; gradients finite in both."""
    small = theta < threshold
    safe = torch.where(small, torch.full_like(theta, threshold * 2), theta)
    return torch.where(small, series(theta), exact(safe))


def rodrigues(w: torch.Tensor) -> torch.Tensor:
    """``Exp(hat(w))`` for ``w: [..., 3]`` with the small-angle series."""
    theta = safe_norm(w)[..., None]
    a = _small_series(theta, lambda t: torch.sin(t) / t, lambda t: 1 - t**2 / 6 + t**4 / 120)
    b = _small_series(theta, lambda t: (1 - torch.cos(t)) / t**2, lambda t: 0.5 - t**2 / 24 + t**4 / 720)
    k = hat(w)
    eye = torch.eye(3, dtype=w.dtype, device=w.device)
    return eye + a * k + b * (k @ k)


def so3_log(q: torch.Tensor) -> torch.Tensor:
    """``vee(Log(q))`` for rotations ``q: [..., 3, 3]``; stable at angle 0 and up to angle ``pi``."""
    s = vee(q)  # sin(theta) * axis
    sn = safe_norm(s)
    cos = ((q.diagonal(dim1=-2, dim2=-1).sum(-1, keepdim=True) - 1) / 2).clamp(-1, 1)
    theta = torch.atan2(sn, cos)
    near_pi = theta > math.pi - 1e-2
    ratio = _small_series(theta, lambda t: t / torch.sin(t), lambda t: 1 + t**2 / 6 + 7 * t**4 / 360)
    regular = ratio * s
    # near pi: (q + q^T)/2 = cos I + (1 - cos) a a^T; read the axis off the largest diagonal entry
    sym = (q + q.transpose(-1, -2)) / 2
    eye = torch.eye(3, dtype=q.dtype, device=q.device)
    aat = (sym - cos[..., None] * eye) / (1 - cos[..., None]).clamp_min(eps_for(q))
    diag = aat.diagonal(dim1=-2, dim2=-1)
    col = torch.gather(aat, -1, diag.argmax(-1)[..., None, None].expand(*aat.shape[:-1], 1))[..., 0]
    axis = col / safe_norm(col)
    axis = torch.where(_dot(axis, s, True) < 0, -axis, axis)
    return torch.where(near_pi, theta * axis, regular)


def _jr_inv(w: torch.Tensor) -> torch.Tensor:
    """Inverse right Jacobian of SO(3): ``I + hat(w)/2 + (1/t^2 - (1 + cos t) / (2 t sin t)) hat(w)^2``."""
    theta = safe_norm(w)[..., None]
    coef = _small_series(
        theta,
        lambda t: 1 / t**2 - (1 + torch.cos(t)) / (2 * t * torch.sin(t)),
        lambda t: 1 / 12 + t**2 / 720 + t**4 / 30240,
    )
    k = hat(w)
    eye = torch.eye(3, dtype=w.dtype, device=w.device)
    return eye + k / 2 + coef * (k @ k)


class SO3(Manifold):
    """Rotations, flattened to ``[..., 9]``, bi-invariant metric ``<U, V>_R = tr(U^T V) / 2``; uniform (Haar) base.

    Tangent vectors at ``R`` are ``R hat(w)``; ``exp_R(R hat(w)) = R Exp(hat(w))`` (Rodrigues). Not in geoopt:
    written here. :meth:`dexp_inv` uses the exact inverse right Jacobian, so Runge-Kutta-Munthe-Kaas keeps its order.
    """

    name = "so3"
    dim = 3
    ambient_dim = 9

    @staticmethod
    def _m(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*x.shape[:-1], 3, 3)

    @staticmethod
    def _f(m: torch.Tensor) -> torch.Tensor:
        return m.reshape(*m.shape[:-2], 9)

    def projx(self, x):
        # the nearest rotation r = U diag(1, 1, det(U V^T)) V^T, from an SVD that is not differentiated: its
        # backward divides by s_i^2 - s_j^2, which vanishes on rotations (NaN gradients through every solver
        # step). The differential of r, from skew(r^T m) = 0, is r hat(w) with (tr(s) I - s) w = vee(r^T dm - dm^T r),
        # s = r^T m = V diag(d sigma) V^T; it is attached through dm = m - sg[m] (value zero), so the value is the
        # SVD's exactly and the gradient is finite wherever the eigenvalues sigma'_j + sigma'_k stay positive.
        m = self._m(x)
        u, sv, vh = torch.linalg.svd(m.detach())
        det = torch.linalg.det(u @ vh)
        d = torch.cat([torch.ones_like(sv[..., :2]), det[..., None]], -1)
        r = u @ torch.diag_embed(d) @ vh
        sd = sv * d
        den = (sd.sum(-1, keepdim=True) - sd).clamp_min(eps_for(m))
        a = r.transpose(-1, -2) @ (m - m.detach())
        k = vee(a - a.transpose(-1, -2))
        w = (vh.transpose(-1, -2) @ ((vh @ k[..., None])[..., 0] / den)[..., None])[..., 0]
        return self._f(r + r @ hat(w))

    def proju(self, x, u):
        a = self._m(x).transpose(-1, -2) @ self._m(u)
        return self._f(self._m(x) @ ((a - a.transpose(-1, -2)) / 2))

    def inner(self, x, u, v):
        return _dot(u, v) / 2

    def expmap(self, x, u):
        r = self._m(x)
        return self._f(r @ rodrigues(vee(r.transpose(-1, -2) @ self._m(u))))

    def logmap(self, x, y):
        r = self._m(x)
        return self._f(r @ hat(so3_log(r.transpose(-1, -2) @ self._m(y))))

    def dist(self, x, y):
        return safe_norm(so3_log(self._m(x).transpose(-1, -2) @ self._m(y)), keepdim=False)

    def sq_dist(self, x, y):
        return so3_log(self._m(x).transpose(-1, -2) @ self._m(y)).square().sum(-1)

    def transp(self, x, y, v):
        # bi-invariant metric: parallel transport along R Exp(t xi) is w -> Ad_{Exp(-xi/2)} w, left-trivialised
        r, s = self._m(x), self._m(y)
        e = rodrigues(so3_log(r.transpose(-1, -2) @ s) / 2)
        omega = r.transpose(-1, -2) @ self._m(v)
        return self._f(s @ e.transpose(-1, -2) @ omega @ e)

    def dexp_inv(self, x, xi, y, w):
        r = self._m(x)
        a = vee(r.transpose(-1, -2) @ self._m(xi))
        b = vee(self._m(y).transpose(-1, -2) @ self._m(w))
        return self._f(r @ hat((_jr_inv(a) @ b[..., None])[..., 0]))

    def random_base(self, n, *, generator=None, dtype=torch.float32):
        q = torch.randn(n, 4, generator=generator, dtype=dtype, device=draw_device(generator))
        q = q / safe_norm(q)
        w, x, y, z = q.unbind(-1)
        m = torch.stack(
            [
                1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
                2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
                2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y),
            ],
            -1,
        )  # fmt: skip
        return m

    def base_log_prob(self, x):
        return torch.full(x.shape[:-1], -math.log(8 * math.pi**2), dtype=x.dtype, device=x.device)

    def origin(self, dtype=torch.float32):
        return torch.eye(3, dtype=dtype).reshape(9)

    def origin_tangent(self, coords):
        return self._f(hat(coords))
