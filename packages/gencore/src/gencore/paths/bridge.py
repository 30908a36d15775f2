"""Brownian-bridge conditional path of Schrodinger-bridge conditional flow matching (SB-CFM; Tong et al. 2024,
"Improving and generalizing flow-based generative models with minibatch optimal transport", TMLR, sec. 3.4
and Prop. 3.4; Tong et al. 2024, "Simulation-free Schrodinger bridges via score and flow matching").

For a source sample ``x0`` (noise or any other distribution, ``t = 0``) and a target ``x1`` (``t = 1``),
the bridge of a Brownian motion with diffusion ``sigma`` is Gaussian with

    mu_t = (1 - t) x0 + t x1,        std_t = sigma sqrt(t (1 - t)),        x_t = mu_t + std_t eps,

and its conditional probability-flow velocity is

    u_t = x1 - x0 + (1 - 2t) / (2 t (1 - t)) (x_t - mu_t)
        = x1 - x0 + sigma (1 - 2t) sqrt(t (1 - t)) / (2 t (1 - t)) eps.

This equals ``d x_t / dt`` along a fixed ``eps`` and diverges like ``t^{-1/2}`` at the ends. We evaluate
the second form with the denominator ``t (1 - t)`` clamped below at ``t_eps (1 - t_eps)``: exact for
``t in [t_eps, 1 - t_eps]``, bounded by ``sigma / (2 sqrt(t_eps))`` and continuous elsewhere, and equal to
``x1 - x0`` at ``t = 0`` and ``t = 1`` where ``x_t = mu_t``. ``sigma = 0`` is the linear (CondOT) path.
"""

from __future__ import annotations

import math

import torch

from gencore.errors import ConfigError, InputError
from gencore.nn import broadcast_time, expand_like
from gencore.paths.affine import _check_pair
from gencore.paths.base import PathSample
from gencore.rng import randn_like_with


class BrownianBridgePath:
    """Brownian bridge between ``x0`` and ``x1`` with noise level ``sigma >= 0`` (SB-CFM).

    ``sample(x0, x1, t, generator=None, noise=None)`` draws ``eps ~ N(0, I)`` with ``generator`` unless
    ``noise`` is given; the returned :class:`PathSample` carries ``noise = eps`` and
    ``std = sigma sqrt(t (1 - t))`` (both None when ``sigma == 0``).
    """

    def __init__(self, sigma: float = 1.0, *, t_eps: float = 1e-5) -> None:
        sigma = float(sigma)
        if not (math.isfinite(sigma) and sigma >= 0.0):
            raise ConfigError(f"BrownianBridgePath sigma must be a finite number >= 0, got {sigma}.")
        if not (0.0 < t_eps < 0.5):
            raise ConfigError(f"BrownianBridgePath t_eps must lie in (0, 0.5), got {t_eps}.")
        self.sigma = sigma
        self.t_eps = float(t_eps)

    def __repr__(self) -> str:
        return f"BrownianBridgePath(sigma={self.sigma}, t_eps={self.t_eps})"

    def sample(
        self,
        x0: torch.Tensor,
        x1: torch.Tensor,
        t: torch.Tensor | float,
        *,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> PathSample:
        """Draw ``x_t`` and ``u_t`` for source ``x0: [B, ...]``, target ``x1: [B, ...]`` and ``t: [B]``."""
        _check_pair(x0, x1)
        t = broadcast_time(t, x1)
        tb = expand_like(t, x1)
        mu = (1.0 - tb) * x0 + tb * x1
        if self.sigma == 0.0:
            return PathSample(t=t, x_t=mu, u_t=x1 - x0)
        if noise is None:
            noise = randn_like_with(x1, generator)
        elif noise.shape != x1.shape:
            raise InputError(f"noise must have the shape of x1 {tuple(x1.shape)}, got {tuple(noise.shape)}.")
        var01 = t * (1.0 - t)
        root = torch.sqrt(var01.clamp_min(0.0))
        std = self.sigma * root
        floor = self.t_eps * (1.0 - self.t_eps)
        coef = self.sigma * (1.0 - 2.0 * t) * root / (2.0 * var01.clamp_min(floor))
        x_t = mu + expand_like(std, x1) * noise
        u_t = x1 - x0 + expand_like(coef, x1) * noise
        return PathSample(t=t, x_t=x_t, u_t=u_t, noise=noise, std=std)
