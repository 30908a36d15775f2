"""Guidance for velocity models: classifier-free guidance in a limited interval, and reward
(gradient) guidance.

Classifier-free guidance (Ho & Salimans 2022, "Classifier-Free Diffusion Guidance"), applied
only inside a time interval (Kynkaanniemi et al. 2024, "Applying Guidance in a Limited
Interval Improves Sample and Distribution Quality in Diffusion Models"):

    v_w(x, t) = v(x, t | null) + w (v(x, t | c) - v(x, t | null))    for t in [t_lo, t_hi],
    v_w(x, t) = v(x, t | c)                                           otherwise.

``w = 1`` is the conditional model, ``w = 0`` the unconditional one. In the suite's time
(``t = 0`` noise) the paper's recommendation -- no guidance at the highest noise levels --
is an interval with ``t_lo > 0``; the interval is closed. Without an interval (the default)
guidance applies at every ``t`` and no time is compared: a scalar ``t`` on a GPU is then never
read back to the host, so sampling steps queue without waiting for each other.

Reward guidance (gradient guidance from a differentiable reward ``r``, in the spirit of
Chung et al. 2023 "Diffusion Posterior Sampling" and Bansal et al. 2023 "Universal
Guidance"). For an affine path ``x_t = alpha_t x1 + sigma_t x0`` the denoised estimate is
``x1_hat(x_t) = E[x1 | x_t]``, converted from the velocity by
``AffineGaussianPath(schedule).convert(v, x_t, t, "velocity", "data")``. Tilting the marginal
``p_t(x) -> p_t(x) exp(scale * r(x1_hat(x)))`` adds ``scale * grad_x r(x1_hat(x))`` to the score;
on an affine path a score change ``delta_s`` changes the probability-flow velocity by
``c_t delta_s`` with

    c_t = sigma_t (d_alpha_t sigma_t - alpha_t d_sigma_t) / alpha_t     (linear path: (1 - t) / t),

so the guided velocity is

    v_g(x, t) = v(x, t) + scale * min(c_t, max_factor) * grad_x r(x1_hat(x)).

``c_t`` diverges at pure noise (``alpha_t -> 0``) and at data it vanishes on the linear and cosine paths
and tends to ``beta_min / 2`` on VP (where ``c_t = d_alpha_t / alpha_t`` at every ``t``);
``max_factor`` caps it. ``through_model=True`` differentiates through the model
(``grad_x`` of the composition, as in DPS); ``through_model=False`` uses the cheaper
``(grad r)(x1_hat)`` (the model's Jacobian replaced by the identity).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from gencore.errors import ConfigError, InputError
from gencore.nn import broadcast_time, expand_like
from gencore.paths import AffineGaussianPath, LinearSchedule, Schedule

__all__ = ["ClassifierFreeGuidance", "RewardGuidance", "guidance_mask"]


def _check_interval(interval: tuple[float, float] | None) -> tuple[float, float] | None:
    if interval is None:
        return None
    try:
        lo, hi = (float(v) for v in interval)
    except (TypeError, ValueError):
        # a 3-tuple or a string reached the unpacking as a bare ValueError / TypeError traceback
        raise ConfigError(f"guidance interval must be a pair of numbers (t_lo, t_hi), got {interval!r}.") from None
    if not lo <= hi:
        raise ConfigError(f"guidance interval must satisfy t_lo <= t_hi, got {interval}.")
    return lo, hi


def _finite_number(value: Any, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ConfigError(f"{what} must be a finite number, got {value!r}.")
    return number


def guidance_mask(t: torch.Tensor | float, interval: tuple[float, float] | None) -> torch.Tensor | None:
    """Boolean tensor (shape of ``t``) that is ``True`` where ``t_lo <= t <= t_hi``; ``None`` (guide
    everywhere) without an interval."""
    if interval is None:
        return None
    lo, hi = interval
    t = torch.as_tensor(t)
    return (t >= lo) & (t <= hi)


def _batchable(cond: Mapping[str, Any], null: Mapping[str, Any], batch: int) -> bool:
    if set(cond) != set(null):
        return False
    for k in cond:
        a, b = cond[k], null[k]
        if not (torch.is_tensor(a) and torch.is_tensor(b)):
            return False
        if a.dim() == 0 or a.shape != b.shape or a.shape[0] != batch:
            return False
    return True


def _select(mask: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-sample ``where(mask, a, b)`` with ``mask: [B]``."""
    return torch.where(expand_like(mask.to(x.device), x), a, b)


class ClassifierFreeGuidance:
    """Classifier-free guidance wrapper ``f(x, t) -> v_w`` (see module docstring).

    Args:
        model: ``model(x_t, t, **cond) -> velocity [B, ...]``.
        scale: guidance weight ``w`` (1: conditional, 0: unconditional).
        cond: keyword arguments of the conditional call (e.g. ``{"y": labels}``).
        null_cond: keyword arguments of the unconditional call (e.g. ``{"y": null_labels}``).
        interval: ``(t_lo, t_hi)``; guidance is applied for ``t_lo <= t <= t_hi`` only. ``None`` (default):
            at every ``t``.
        batched: evaluate both branches in one model call by concatenating along the batch
            (used when every conditioning value is a ``[B, ...]`` tensor in both dicts).

    Example:
        >>> guided = ClassifierFreeGuidance(model, 2.0, cond={"y": y}, null_cond={"y": y0})  # doctest: +SKIP
        >>> x1 = solve_ode(guided, x0, steps=50).x  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        scale: float,
        *,
        cond: Mapping[str, Any] | None = None,
        null_cond: Mapping[str, Any] | None = None,
        interval: tuple[float, float] | None = None,
        batched: bool = True,
    ) -> None:
        self.model = model
        self.scale = _finite_number(scale, "the guidance scale")
        self.cond = dict(cond or {})
        self.null_cond = dict(null_cond or {})
        self.interval = _check_interval(interval)
        self.batched = batched

    def _both(self, x: torch.Tensor, t: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        b = x.shape[0]
        if self.batched and _batchable(self.cond, self.null_cond, b):
            tt = torch.as_tensor(t, device=x.device)
            if tt.dim() == 1:
                tt = torch.cat([tt, tt])
            kw = {k: torch.cat([self.cond[k], self.null_cond[k]]) for k in self.cond}
            v = self.model(torch.cat([x, x]), tt, **kw)
            return v[:b], v[b:]
        return self.model(x, t, **self.cond), self.model(x, t, **self.null_cond)

    def __call__(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """Guided velocity ``[B, ...]`` at ``x: [B, ...]`` and ``t`` (scalar or ``[B]``)."""
        mask = guidance_mask(t, self.interval)
        if mask is not None and mask.dim() == 0 and not bool(mask):
            return self.model(x, t, **self.cond)
        v_c, v_u = self._both(x, t)
        v = v_u + self.scale * (v_c - v_u)
        if mask is None or mask.dim() == 0:
            return v
        return _select(mask, x, v, v_c)


class RewardGuidance:
    """Reward-gradient guidance of a velocity model on an affine path (see module docstring).

    Args:
        model: velocity model ``model(x_t, t, **cond)``.
        reward: differentiable ``r(x1: [B, ...]) -> [B]`` (larger is better).
        scale: guidance strength (inverse temperature of the tilt ``exp(scale * r)``).
        schedule: the model's :mod:`gencore.paths` schedule (default ``LinearSchedule()``).
        interval: apply guidance only for ``t_lo <= t <= t_hi``; ``None`` (default): at every ``t``.
        max_factor: cap on the score-to-velocity factor ``c_t`` (a finite number > 0: ``c_t`` is infinite at
            ``alpha_t = 0``).
        through_model: differentiate ``r(x1_hat(x_t))`` through the model (``True``) or use
            ``(grad r)(x1_hat)`` (``False``).
        cond: keyword arguments passed to every model call.

    The returned velocity is detached (this is a sampling-time tool); it works under
    ``torch.no_grad()``.
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        reward: Callable[[torch.Tensor], torch.Tensor],
        scale: float,
        *,
        schedule: Schedule | None = None,
        interval: tuple[float, float] | None = None,
        max_factor: float = 10.0,
        through_model: bool = True,
        cond: Mapping[str, Any] | None = None,
    ) -> None:
        # an infinite cap let c_t = inf through at alpha_t = 0 (t = 0 of the linear path): inf * 0 made the guided
        # velocity NaN at the first step of every sampler
        if not _finite_number(max_factor, "max_factor") > 0:
            raise ConfigError(f"max_factor must be a finite number > 0, got {max_factor!r}.")
        self.model = model
        self.reward = reward
        self.scale = _finite_number(scale, "the reward guidance scale")
        self.schedule = schedule if schedule is not None else LinearSchedule()
        self.path = AffineGaussianPath(self.schedule)
        self.interval = _check_interval(interval)
        self.max_factor = float(max_factor)
        self.through_model = through_model
        self.cond = dict(cond or {})

    def factor(self, t: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
        """``min(c_t, max_factor)`` broadcastable against ``x``; ``c_t`` as in the module docstring."""
        tb = broadcast_time(t, x)
        s = self.schedule(tb)
        alpha, sigma, da, ds = (expand_like(c.to(x.dtype), x) for c in (s.alpha, s.sigma, s.d_alpha, s.d_sigma))
        # sigma d_sigma = -alpha d_alpha where d_sigma is infinite (sigma = 0 on a variance-preserving schedule)
        sigma_ds = torch.where(torch.isinf(ds), -alpha * da, sigma * ds)
        c = (da * sigma * sigma - alpha * sigma_ds) / alpha  # inf (or nan) at alpha = 0, capped below
        return torch.nan_to_num(c, nan=self.max_factor, posinf=self.max_factor).clamp(max=self.max_factor)

    def reward_gradient(self, x: torch.Tensor, t: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        """``(v(x, t), grad_x r(x1_hat(x)))``, both detached, ``[B, ...]`` each."""
        with torch.enable_grad():
            xg = x.detach().requires_grad_(True)
            v = self.model(xg, t, **self.cond)
            x1_hat = self.path.convert(v, xg, t, "velocity", "data")
            if self.through_model:
                target = xg
            else:
                x1_hat = x1_hat.detach().requires_grad_(True)
                target = x1_hat
            r = self.reward(x1_hat)
            if r.shape != (x.shape[0],):
                raise InputError(f"reward must return shape [{x.shape[0]}], got {tuple(r.shape)}.")
            (g,) = torch.autograd.grad(r.sum(), target)
        return v.detach(), g.detach()

    def __call__(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """Guided velocity ``v + scale * min(c_t, max_factor) * grad_x r(x1_hat(x))``, ``[B, ...]``."""
        mask = guidance_mask(t, self.interval)
        if mask is not None and mask.dim() == 0 and not bool(mask):
            return self.model(x, t, **self.cond)
        v, g = self.reward_gradient(x, t)
        guided = v + self.scale * self.factor(t, x) * g
        if mask is None or mask.dim() == 0:
            return guided
        return _select(mask, x, guided, v)
