"""Noise schedules of affine Gaussian paths, written in the suite's time convention.

An affine Gaussian path interpolates noise and data as

    x_t = alpha_t * x1 + sigma_t * x0,        x0 ~ N(0, I) (noise, t = 0),  x1 ~ data (t = 1),

and a schedule is a pure function ``t -> (alpha_t, sigma_t, d alpha_t / dt, d sigma_t / dt)``.
Every schedule here is written in the suite's time ``t in [0, 1]`` (``t = 0`` noise, ``t = 1`` data).
Diffusion papers use a *diffusion time* ``s`` running the other way; the mapping used is ``s = 1 - t``.

Schedules (references):

- :class:`LinearSchedule` -- rectified flow / conditional OT (Liu et al. 2023; Lipman et al. 2023):
  ``alpha = t, sigma = 1 - t``.
- :class:`CosineSchedule` -- trigonometric / "cosine" interpolant (Albergo & Vanden-Eijnden 2023;
  Nichol & Dhariwal 2021 without offset): ``alpha = sin(pi t / 2), sigma = cos(pi t / 2)``.
- :class:`VPSchedule` -- continuous-time DDPM, the VP SDE of Song et al. 2021 with linear
  ``beta(s) = beta_min + s (beta_max - beta_min)`` on ``s = 1 - t``:
  ``alpha = exp(-B(s) / 2)`` with ``B(s) = int_0^s beta = beta_min s + (beta_max - beta_min) s^2 / 2``,
  ``sigma = sqrt(1 - alpha^2)``. At ``t = 1`` it is exactly data (``alpha = 1, sigma = 0``); at ``t = 0``
  it keeps a tiny data residual ``alpha_0 = exp(-(beta_min + beta_max) / 4)`` (about 6.6e-3 for the
  defaults), as in DDPM. ``d sigma / dt = -alpha^2 beta / (2 sigma)`` diverges like ``s^{-1/2}`` as
  ``t -> 1`` (it is ``-inf`` at exactly ``t = 1``); train velocity targets on ``t <= 1 - 1e-5`` or so.
  With ``beta_min = 0`` it stays finite and tends to ``-sqrt(beta_max / 2)``.
- :class:`VESchedule` -- variance exploding (Song & Ermon 2019; Song et al. 2021): ``alpha = 1``,
  ``sigma`` geometric from ``sigma_max`` at ``t = 0`` to ``sigma_min`` at ``t = 1``:
  ``sigma_t = sigma_max^(1 - t) * sigma_min^t``.
- :class:`EDMSchedule` -- Karras et al. 2022 ("Elucidating the design space", eq. 5): ``alpha = 1``,
  ``sigma_t = (sigma_max^(1/rho) + t (sigma_min^(1/rho) - sigma_max^(1/rho)))^rho``, i.e. the paper's
  step ``i`` of ``N`` is ``t = i / (N - 1)``.

For VE and EDM the ``t = 0`` marginal is approximately ``N(0, sigma_max^2 I)``, not ``N(0, I)``: a sampler
starts from ``sigma_max * randn``. All tensors returned have the shape of ``t``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import torch

from gencore.errors import ConfigError


@dataclass(frozen=True)
class ScheduleOutput:
    """``(alpha_t, sigma_t)`` and their time derivatives, each a tensor shaped like ``t``."""

    alpha: torch.Tensor
    sigma: torch.Tensor
    d_alpha: torch.Tensor
    d_sigma: torch.Tensor

    def like(self, x: torch.Tensor) -> ScheduleOutput:
        """Reshape ``[B]`` coefficients to ``[B, 1, ..., 1]`` to broadcast against ``x: [B, ...]``."""

        def expand(c: torch.Tensor) -> torch.Tensor:
            return c.reshape(c.shape + (1,) * (x.dim() - c.dim()))

        return ScheduleOutput(expand(self.alpha), expand(self.sigma), expand(self.d_alpha), expand(self.d_sigma))

    @property
    def log_snr(self) -> torch.Tensor:
        """``lambda_t = log(alpha_t^2 / sigma_t^2)`` (Kingma et al. 2021), increasing in ``t``."""
        return 2.0 * (torch.log(self.alpha) - torch.log(self.sigma))


def _as_time(t: torch.Tensor | float) -> torch.Tensor:
    """Return ``t`` as a floating tensor (Python numbers use torch's default dtype)."""
    t = torch.as_tensor(t)
    if not t.is_floating_point():
        t = t.to(torch.get_default_dtype())
    return t


class Schedule(ABC):
    """A pure function of time giving the coefficients of ``x_t = alpha_t x1 + sigma_t x0``."""

    @abstractmethod
    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        """Evaluate the schedule at ``t`` (any shape); returns tensors shaped like ``t``."""


@dataclass(frozen=True)
class LinearSchedule(Schedule):
    """Rectified flow / CondOT: ``alpha = t, sigma = 1 - t``; exact noise at 0 and data at 1."""

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        one = torch.ones_like(t)
        return ScheduleOutput(t, 1.0 - t, one, -one)


@dataclass(frozen=True)
class CosineSchedule(Schedule):
    """Trigonometric path: ``alpha = sin(pi t / 2), sigma = cos(pi t / 2)`` (``alpha^2 + sigma^2 = 1``).

    ``sigma`` is evaluated as ``sin(pi (1 - t) / 2)`` so both endpoints are exact in floating point.
    """

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        half_pi = 0.5 * math.pi
        alpha = torch.sin(half_pi * t)
        sigma = torch.sin(half_pi * (1.0 - t))
        return ScheduleOutput(alpha, sigma, half_pi * sigma, -half_pi * alpha)


@dataclass(frozen=True)
class VPSchedule(Schedule):
    """Continuous-time DDPM (VP SDE, Song et al. 2021) with linear ``beta`` on diffusion time ``s = 1 - t``.

    ``alpha_t = exp(-B(s) / 2)``, ``B(s) = beta_min s + (beta_max - beta_min) s^2 / 2``,
    ``sigma_t = sqrt(1 - alpha_t^2)``; ``d alpha/dt = alpha beta(s) / 2``,
    ``d sigma/dt = -alpha^2 beta(s) / (2 sigma)`` (``-inf`` at ``t = 1``; ``-sqrt(beta_max / 2)`` there when
    ``beta_min = 0``). Residual at ``t = 0``:
    ``alpha_0 = exp(-(beta_min + beta_max) / 4)``.
    """

    beta_min: float = 0.1
    beta_max: float = 20.0

    def __post_init__(self) -> None:
        if not (0.0 <= self.beta_min <= self.beta_max < math.inf) or self.beta_max <= 0.0:
            raise ConfigError(
                f"VPSchedule needs finite 0 <= beta_min <= beta_max with beta_max > 0, "
                f"got beta_min={self.beta_min}, beta_max={self.beta_max}."
            )

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        s = 1.0 - t
        beta = self.beta_min + (self.beta_max - self.beta_min) * s
        integral = self.beta_min * s + 0.5 * (self.beta_max - self.beta_min) * s * s
        alpha = torch.exp(-0.5 * integral)
        sigma = torch.sqrt(-torch.expm1(-integral))  # accurate 1 - alpha^2 near t = 1
        d_alpha = 0.5 * beta * alpha
        # At t = 1 (sigma = 0) the formula is -beta_min / 0 = -inf; with beta_min = 0 it is 0 / 0, whose limit
        # is finite: sigma ~ s sqrt(beta_max / 2), so d sigma / dt -> -sqrt(beta_max / 2).
        at_data = sigma == 0
        limit = -math.inf if self.beta_min > 0 else -math.sqrt(0.5 * self.beta_max)
        safe_sigma = torch.where(at_data, torch.ones_like(sigma), sigma)
        d_sigma = torch.where(at_data, torch.full_like(sigma, limit), -alpha * d_alpha / safe_sigma)
        return ScheduleOutput(alpha, sigma, d_alpha, d_sigma)


@dataclass(frozen=True)
class VESchedule(Schedule):
    """Variance exploding: ``alpha = 1``, ``sigma_t = sigma_max^(1 - t) sigma_min^t`` (geometric)."""

    sigma_min: float = 0.01
    sigma_max: float = 50.0

    def __post_init__(self) -> None:
        if not (0.0 < self.sigma_min < self.sigma_max < math.inf):
            raise ConfigError(
                f"VESchedule needs finite 0 < sigma_min < sigma_max, got sigma_min={self.sigma_min}, "
                f"sigma_max={self.sigma_max}."
            )

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        log_ratio = math.log(self.sigma_min / self.sigma_max)
        sigma = self.sigma_max * torch.exp(t * log_ratio)
        return ScheduleOutput(torch.ones_like(t), sigma, torch.zeros_like(t), log_ratio * sigma)

    def sigma_to_t(self, sigma: torch.Tensor | float) -> torch.Tensor:
        """Inverse map ``sigma -> t`` (``t < 0`` above ``sigma_max``, ``t > 1`` below ``sigma_min``)."""
        sigma = _as_time(sigma)
        return torch.log(sigma / self.sigma_max) / math.log(self.sigma_min / self.sigma_max)


@dataclass(frozen=True)
class EDMSchedule(Schedule):
    """Karras et al. 2022 rho-schedule: ``alpha = 1``,
    ``sigma_t = (sigma_max^(1/rho) + t (sigma_min^(1/rho) - sigma_max^(1/rho)))^rho``.

    ``t = i / (N - 1)`` reproduces the paper's N-step sampling grid (eq. 5). EDM *trains* with
    ``ln sigma ~ N(P_mean, P_std^2)``; draw such sigmas and map them with :meth:`sigma_to_t`.
    """

    sigma_min: float = 0.002
    sigma_max: float = 80.0
    rho: float = 7.0

    def __post_init__(self) -> None:
        if not (0.0 < self.sigma_min < self.sigma_max < math.inf and 0.0 < self.rho < math.inf):
            raise ConfigError(
                f"EDMSchedule needs finite 0 < sigma_min < sigma_max and rho > 0, got sigma_min={self.sigma_min}, "
                f"sigma_max={self.sigma_max}, rho={self.rho}."
            )

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        lo = self.sigma_min ** (1.0 / self.rho)
        hi = self.sigma_max ** (1.0 / self.rho)
        base = hi + t * (lo - hi)
        sigma = base**self.rho
        d_sigma = self.rho * base ** (self.rho - 1.0) * (lo - hi)
        return ScheduleOutput(torch.ones_like(t), sigma, torch.zeros_like(t), d_sigma)

    def sigma_to_t(self, sigma: torch.Tensor | float) -> torch.Tensor:
        """Inverse map ``sigma -> t`` of the rho-schedule."""
        sigma = _as_time(sigma)
        lo = self.sigma_min ** (1.0 / self.rho)
        hi = self.sigma_max ** (1.0 / self.rho)
        return (sigma ** (1.0 / self.rho) - hi) / (lo - hi)


SCHEDULES: dict[str, type[Schedule]] = {
    "linear": LinearSchedule,
    "cosine": CosineSchedule,
    "vp": VPSchedule,
    "ve": VESchedule,
    "edm": EDMSchedule,
}


def make_schedule(name: str, **kwargs: Any) -> Schedule:
    """Build a schedule by name (``"linear"``, ``"cosine"``, ``"vp"``, ``"ve"``, ``"edm"``).

    ``shift=...`` (SD3 time shift) wraps the result in :class:`~gencore.paths.shift.ShiftedSchedule`.
    """
    from gencore.paths.shift import ShiftedSchedule, _check_shift

    if name not in SCHEDULES:
        raise ConfigError(f"unknown schedule {name!r}; expected one of: {', '.join(SCHEDULES)}.")
    shift = kwargs.pop("shift", None)
    try:
        schedule = SCHEDULES[name](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid settings for schedule {name!r}: {exc}.") from exc
    return schedule if shift is None else ShiftedSchedule(schedule, _check_shift(shift))
