"""Target distributions on manifolds, sampled through explicit generators.

- :class:`VonMisesFisherMixture` on ``S^2`` (exact inverse-CDF sampling of the cosine to the mean,
  Wood 1994 specialised to ``S^2``), with its log-density.
- :class:`WrappedNormalMixture` on any manifold with a tangent frame at its origin: ``exp_mu(P_{o -> mu} xi)``,
  ``xi ~ N(0, std^2 I_n)``; log-density exact on the hyperbolic models (constant curvature ``<= 0``).
- :func:`torus_checkerboard`: a 4 x 4 checkerboard of the flat 2-torus ``[-pi, pi)^2``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from gencore.errors import ConfigError
from gencore.manifolds.base import Manifold, wrapped_normal_log_prob
from gencore.manifolds.spaces import Sphere, Torus


def _weights(weights: Sequence[float] | None, k: int) -> torch.Tensor:
    w = (
        torch.full((k,), 1.0 / k, dtype=torch.float64)
        if weights is None
        else torch.as_tensor(weights, dtype=torch.float64)
    )
    if w.shape != (k,) or (w < 0).any() or not w.sum() > 0:
        raise ConfigError(f"mixture weights must be {k} non-negative numbers with a positive sum, got {weights}.")
    return w / w.sum()


class VonMisesFisherMixture:
    """Mixture of von Mises-Fisher distributions on the 2-sphere: ``sum_k w_k C(kappa_k) exp(kappa_k mu_k . x)``."""

    def __init__(self, means: torch.Tensor, kappas: Sequence[float], weights: Sequence[float] | None = None) -> None:
        means = torch.as_tensor(means, dtype=torch.float64)
        if means.dim() != 2 or means.shape[1] != 3:
            raise ConfigError(f"vMF means must have shape [K, 3] (points of S^2), got {tuple(means.shape)}.")
        if not bool((means.norm(dim=-1) > 0).all()) or not bool(torch.isfinite(means).all()):
            raise ConfigError("vMF means must be finite non-zero directions in R^3 (a zero mean gave NaN samples).")
        self.means = means / means.norm(dim=-1, keepdim=True)
        self.kappas = torch.as_tensor(kappas, dtype=torch.float64)
        if self.kappas.shape != (means.shape[0],) or not (self.kappas > 0).all():
            raise ConfigError(f"need {means.shape[0]} positive concentrations, got {kappas}.")
        self.weights = _weights(weights, means.shape[0])
        self.manifold = Sphere(2)

    def sample(self, n: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32):
        comp = torch.multinomial(self.weights, n, replacement=True, generator=generator)
        mu, kappa = self.means[comp], self.kappas[comp]
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        # inverse CDF of w = mu . x on S^2: w = 1 + log(u + (1 - u) exp(-2 kappa)) / kappa
        w = 1 + torch.log1p((1 - u) * torch.expm1(-2 * kappa)) / kappa  # the same, exact as kappa -> 0
        w = w.clamp(-1, 1)
        v = torch.randn(n, 3, generator=generator, dtype=torch.float64)
        v = v - (v * mu).sum(-1, keepdim=True) * mu
        v = v / v.norm(dim=-1, keepdim=True)
        x = w[:, None] * mu + (1 - w.square()).clamp_min(0).sqrt()[:, None] * v
        return x.to(dtype)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        k = self.kappas
        # log C(kappa) = log kappa - log(2 pi) - kappa - log(1 - exp(-2 kappa)), in float64 with expm1: in float32
        # 1 - exp(-2 kappa) rounded to 0 below kappa ~ 3e-8 (an infinite density) and was 3 % off at kappa = 1e-6
        log_c = (torch.log(k) - math.log(2 * math.pi) - k - torch.log(-torch.expm1(-2 * k))).to(x.dtype)
        k = k.to(x.dtype)
        comp = log_c + k * (x @ self.means.to(x.dtype).T) + torch.log(self.weights.to(x.dtype))
        return torch.logsumexp(comp, dim=-1)


class WrappedNormalMixture:
    """Mixture of wrapped normals ``exp_{mu_k}(P_{o -> mu_k} xi)``, ``xi ~ N(0, std_k^2 I_n)`` (orthonormal frame)."""

    def __init__(
        self,
        manifold: Manifold,
        means: torch.Tensor,
        stds: Sequence[float],
        weights: Sequence[float] | None = None,
    ) -> None:
        means = torch.as_tensor(means)
        if means.dim() != 2 or means.shape[1] != manifold.ambient_dim:
            raise ConfigError(f"means must have shape [K, {manifold.ambient_dim}], got {tuple(means.shape)}.")
        on = manifold.projx(means.to(torch.float64))
        if not isinstance(manifold, Torus) and not torch.allclose(on, means.to(torch.float64), rtol=1e-6, atol=1e-6):
            # a mean off the manifold (an unnormalised direction, a point outside the ball) gave wrongly spread or
            # boundary-piled samples and meaningless densities, silently; angles on the torus are wrapped anyway
            raise ConfigError(f"means must be points of the {manifold.name} manifold (unchanged by its projx).")
        self.manifold, self.means = manifold, means
        self.stds = torch.as_tensor(stds, dtype=torch.float64)
        if self.stds.shape != (means.shape[0],) or not (self.stds > 0).all():
            raise ConfigError(f"need {means.shape[0]} positive standard deviations, got {stds}.")
        self.weights = _weights(weights, means.shape[0])

    def sample(self, n: int, *, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32):
        m = self.manifold
        comp = torch.multinomial(self.weights, n, replacement=True, generator=generator)
        xi = torch.randn(n, m.dim, generator=generator, dtype=torch.float64) * self.stds[comp, None]
        mu = self.means.to(torch.float64)[comp]
        o = m.origin(torch.float64).expand(n, -1)
        u = m.transp(o, mu, m.origin_tangent(xi))
        return m.projx(m.expmap(mu, u)).to(dtype)

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        m = self.manifold
        if m.curvature is None or m.curvature > 0 or isinstance(m, Torus):
            raise ConfigError(
                "the wrapped-normal log-density is exact only on simply connected flat or hyperbolic manifolds "
                "(on a torus the density sums over every 2 pi shift of the mean)."
            )
        mu = self.means.to(x.dtype)
        r = m.dist(x[:, None, :], mu[None])
        comp = [
            wrapped_normal_log_prob(r[:, k], m.dim, float(self.stds[k]), m.curvature) + math.log(float(self.weights[k]))
            for k in range(mu.shape[0])
        ]
        return torch.logsumexp(torch.stack(comp, -1), dim=-1)


def torus_checkerboard(
    n: int, *, cells: int = 4, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``n`` uniform points on the dark squares of a ``cells x cells`` checkerboard of ``[-pi, pi)^2``."""
    if cells < 2 or cells % 2:
        raise ConfigError(f"the checkerboard needs an even number of cells >= 2, got {cells}.")
    size = 2 * math.pi / cells
    i = torch.randint(0, cells, (n,), generator=generator)
    j = (2 * torch.randint(0, cells // 2, (n,), generator=generator) + i % 2) % cells
    u = torch.rand(n, 2, generator=generator, dtype=torch.float64)
    pts = torch.stack([i, j], -1).to(torch.float64) + u
    return (pts * size - math.pi).to(dtype)
