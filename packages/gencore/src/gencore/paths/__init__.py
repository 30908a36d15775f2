"""Probability paths of flow matching and diffusion in the suite's time convention (``t = 0`` noise,
``t = 1`` data): schedules, the SD3 time shift, affine Gaussian and Brownian-bridge paths, the graph-shaped
harmonic prior, conversions between velocity / data / noise / score predictions, and training-time samplers."""

from __future__ import annotations

from gencore.paths.affine import AffineGaussianPath
from gencore.paths.base import PREDICTIONS, PathSample, ProbabilityPath
from gencore.paths.bridge import BrownianBridgePath
from gencore.paths.conversions import convert_prediction, from_data_and_noise, to_data_and_noise
from gencore.paths.harmonic import harmonic_noise, harmonic_noise_transform
from gencore.paths.schedules import (
    SCHEDULES,
    CosineSchedule,
    EDMSchedule,
    LinearSchedule,
    Schedule,
    ScheduleOutput,
    VESchedule,
    VPSchedule,
    make_schedule,
)
from gencore.paths.shift import ShiftedSchedule, time_shift, time_shift_derivative
from gencore.paths.time_samplers import (
    TIME_SAMPLERS,
    BetaTime,
    LogitNormalTime,
    TimeSampler,
    UniformTime,
    make_time_sampler,
)

__all__ = [
    "PREDICTIONS",
    "SCHEDULES",
    "TIME_SAMPLERS",
    "AffineGaussianPath",
    "BetaTime",
    "BrownianBridgePath",
    "CosineSchedule",
    "EDMSchedule",
    "LinearSchedule",
    "LogitNormalTime",
    "PathSample",
    "ProbabilityPath",
    "Schedule",
    "ScheduleOutput",
    "ShiftedSchedule",
    "TimeSampler",
    "UniformTime",
    "VESchedule",
    "VPSchedule",
    "convert_prediction",
    "from_data_and_noise",
    "harmonic_noise",
    "harmonic_noise_transform",
    "make_schedule",
    "make_time_sampler",
    "time_shift",
    "time_shift_derivative",
    "to_data_and_noise",
]
