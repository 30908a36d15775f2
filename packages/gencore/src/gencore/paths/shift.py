"""Resolution-dependent time shift of Stable Diffusion 3 (Esser et al. 2024, "Scaling Rectified Flow
Transformers for High-Resolution Image Synthesis", sec. 5.3.2).

SD3 writes the shift on the noise level ``s`` (``s = 1`` noise, ``s = 0`` data)::

    s' = shift * s / (1 + (shift - 1) * s).

In the suite's time (``t = 1 - s``, ``t = 0`` noise) this is the Moebius map

    t' = t / (shift - (shift - 1) * t),        dt'/dt = shift / (shift - (shift - 1) * t)^2 > 0,

with fixed points 0 and 1, monotone increasing for any ``shift > 0``; ``shift > 1`` spends more time at
high noise (``t' <= t``), ``shift = 1`` is the identity and shifts compose multiplicatively
(``time_shift(time_shift(t, a), b) == time_shift(t, a * b)``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gencore.errors import ConfigError
from gencore.paths.schedules import Schedule, ScheduleOutput, _as_time


def _check_shift(shift: float) -> float:
    try:
        value = float(shift)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0.0):
        raise ConfigError(f"shift must be a finite number > 0, got {shift!r}.")
    return value


def time_shift(t: torch.Tensor | float, shift: float) -> torch.Tensor:
    """SD3 time shift in the suite's convention: ``t' = t / (shift - (shift - 1) t)``; shape of ``t``."""
    shift = _check_shift(shift)
    t = _as_time(t)
    return t / (t + shift * (1.0 - t))  # = t / (shift - (shift - 1) t), exact at 0 and 1, never > 1


def time_shift_derivative(t: torch.Tensor | float, shift: float) -> torch.Tensor:
    """``d time_shift(t, shift) / dt = shift / (shift - (shift - 1) t)^2``; shape of ``t``."""
    shift = _check_shift(shift)
    t = _as_time(t)
    return shift / (t + shift * (1.0 - t)) ** 2


@dataclass(frozen=True)
class ShiftedSchedule(Schedule):
    """``schedule`` at shifted time: ``alpha'(t) = alpha(tau(t))`` with ``tau = time_shift(., shift)``.

    Derivatives follow the chain rule: ``d alpha'/dt = alpha_dot(tau(t)) * tau'(t)`` (same for sigma).
    ``ShiftedSchedule(LinearSchedule(), 3.0)`` is SD3's shifted rectified flow.
    """

    schedule: Schedule
    shift: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.schedule, Schedule):
            raise ConfigError(f"schedule must be a Schedule, got {type(self.schedule).__name__}.")
        _check_shift(self.shift)

    def __call__(self, t: torch.Tensor | float) -> ScheduleOutput:
        t = _as_time(t)
        tau = time_shift(t, self.shift)
        dtau = time_shift_derivative(t, self.shift)
        out = self.schedule(tau)
        return ScheduleOutput(out.alpha, out.sigma, out.d_alpha * dtau, out.d_sigma * dtau)
