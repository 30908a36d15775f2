"""Shared pieces of the discrete processes: keep-probability schedules, categorical draws and CTMC jumps.

Schedules. Every corrupting process here is written with ``alpha_t``, the probability that a
token still carries its clean value at time ``t`` (the suite's time: ``t = 0`` noise, ``t = 1``
data), so ``alpha_0 = 0``, ``alpha_1 = 1`` and ``alpha'_t >= 0``:

- ``linear``: ``alpha_t = t``, ``alpha'_t = 1``;
- ``cosine``: ``alpha_t = 1 - cos(pi t / 2)``, ``alpha'_t = (pi / 2) sin(pi t / 2)`` (the cosine
  masking schedule of Shi et al. 2024, "Simplified and Generalized Masked Diffusion for Discrete
  Data", written in this time direction).

CTMC jumps. :func:`ctmc_jump` moves every position of a state by one step of a continuous-time
Markov chain given the *integrated* jump intensities ``Lambda_j = int_t^s R(x, j) dr`` to every
other value ``j`` over the step (Campbell et al. 2022, "A Continuous Time Framework for Discrete
Denoising Models"; Gat et al. 2024, "Discrete Flow Matching"):

- ``"euler"``: ``P(j) = Lambda_j`` for ``j != x``, ``P(x) = 1 - sum_j Lambda_j`` (when the sum
  exceeds 1 the stay probability is 0 and the jump probabilities are renormalised);
- ``"tau-leaping"``: at most one jump per position, ``P(stay) = exp(-sum_j Lambda_j)`` and
  ``P(j) = (1 - P(stay)) Lambda_j / sum_j Lambda_j`` -- the first-jump law of a chain whose
  rates are frozen over the step. Campbell et al.'s Poisson tau-leaping adds jump counts, which
  has no meaning for unordered categories; this is its categorical form.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.errors import InputError
from gencore.rng import rand_with

__all__ = [
    "CTMC_METHODS",
    "DISCRETE_SCHEDULES",
    "CosineDiscreteSchedule",
    "DiscreteSchedule",
    "LinearDiscreteSchedule",
    "ctmc_jump",
    "discrete_schedule",
    "evaluations_per_call",
    "model_device",
    "sample_categorical",
    "stratified_bound",
    "stratified_times",
]

CTMC_METHODS: tuple[str, ...] = ("euler", "tau-leaping")


def _time(t: torch.Tensor | float) -> torch.Tensor:
    t = torch.as_tensor(t)
    return t if t.is_floating_point() else t.to(torch.get_default_dtype())


class DiscreteSchedule(ABC):
    """``alpha_t``: probability that a token is still clean at time ``t`` (0 at ``t = 0``, 1 at ``t = 1``)."""

    name: str = "schedule"

    @abstractmethod
    def alpha(self, t: torch.Tensor | float) -> torch.Tensor:
        """``alpha_t`` shaped like ``t``."""

    @abstractmethod
    def alpha_prime(self, t: torch.Tensor | float) -> torch.Tensor:
        """``d alpha_t / dt >= 0`` shaped like ``t``."""


@dataclass(frozen=True)
class LinearDiscreteSchedule(DiscreteSchedule):
    """``alpha_t = t``."""

    name: str = "linear"

    def alpha(self, t: torch.Tensor | float) -> torch.Tensor:
        return _time(t).clone()

    def alpha_prime(self, t: torch.Tensor | float) -> torch.Tensor:
        return torch.ones_like(_time(t))


@dataclass(frozen=True)
class CosineDiscreteSchedule(DiscreteSchedule):
    """``alpha_t = 1 - cos(pi t / 2)``: slow corruption near the data end.

    Computed as ``2 sin(pi t / 4)^2``, the same number without the cancellation: in float32
    ``1 - cos`` is exactly 0 for ``t < 1.7e-4``, which made ``alpha' / alpha`` infinite there.
    """

    name: str = "cosine"

    def alpha(self, t: torch.Tensor | float) -> torch.Tensor:
        return 2.0 * torch.sin(0.25 * math.pi * _time(t)) ** 2

    def alpha_prime(self, t: torch.Tensor | float) -> torch.Tensor:
        return 0.5 * math.pi * torch.sin(0.5 * math.pi * _time(t))


DISCRETE_SCHEDULES: dict[str, type[DiscreteSchedule]] = {
    "linear": LinearDiscreteSchedule,
    "cosine": CosineDiscreteSchedule,
}


def discrete_schedule(schedule: str | DiscreteSchedule) -> DiscreteSchedule:
    """A schedule by name (``linear`` or ``cosine``), or ``schedule`` itself if it already is one."""
    if isinstance(schedule, DiscreteSchedule):
        return schedule
    check_choice(schedule, tuple(DISCRETE_SCHEDULES), "discrete schedule")
    return DISCRETE_SCHEDULES[schedule]()


def stratified_times(
    n: int, *, generator: torch.Generator | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """``n`` times in [0, 1), one uniform draw in each stratum ``[i/n, (i+1)/n)``, in random order."""
    u = torch.rand(n, generator=generator, device=device)
    perm = torch.randperm(n, generator=generator, device=device)
    return (perm.to(u.dtype) + u) / n


def stratified_bound(
    terms: Callable[[torch.Tensor], torch.Tensor],
    batch: int,
    n_time: int,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Time integral over [0, 1] of ``terms(t) -> [B]`` by stratified Monte Carlo, in float64 ``[B]``.

    One uniform time per sequence in each of the ``n_time`` strata ``[j/n, (j+1)/n)``: unbiased for
    every sequence, with far less variance than ``n_time`` independent times.
    """
    if n_time < 1:
        raise InputError(f"n_time must be a positive integer, got {n_time}.")
    total = torch.zeros(batch, dtype=torch.float64, device=device)
    for j in range(n_time):
        u = torch.rand(batch, generator=generator, device=device)
        total += terms((j + u) / n_time).double()
    return total / n_time


def sample_categorical(probs: torch.Tensor, *, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices ``[...]`` drawn from the (not necessarily normalised) non-negative weights ``probs: [..., K]``.

    Inverse-CDF sampling with one uniform per row, so that a seeded ``generator`` reproduces the draw.
    """
    if probs.dim() < 1 or probs.shape[-1] < 1:
        raise InputError(f"probs must have a non-empty last (class) dimension, got shape {tuple(probs.shape)}.")
    cdf = probs.cumsum(-1)
    total = cdf[..., -1:]
    if not bool(((total > 0) & torch.isfinite(total)).all()):  # one host sync per call
        raise InputError("every row of probs must have a positive finite total weight.")
    u = rand_with((*probs.shape[:-1], 1), generator, device=probs.device, dtype=cdf.dtype) * total
    return (cdf <= u).sum(-1).clamp_max(probs.shape[-1] - 1)


def ctmc_jump(
    x: torch.Tensor,
    intensity: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    method: str = "tau-leaping",
) -> torch.Tensor:
    """One CTMC step of every position of ``x: [...]`` (int64) given integrated intensities ``[..., K]``.

    ``intensity[..., j]`` is the expected number of jumps to ``j`` over the step (the rate integrated
    over it); the entry of the current value is ignored. See the module docstring for the methods.
    """
    check_choice(method, CTMC_METHODS, "CTMC step method")
    if intensity.shape[:-1] != x.shape:
        raise InputError(f"intensity must have shape {tuple(x.shape)} + [K], got {tuple(intensity.shape)}.")
    if not bool(((intensity >= 0) & torch.isfinite(intensity)).all()):  # one host sync per step
        raise InputError("CTMC jump intensities must be finite and non-negative.")
    current = torch.nn.functional.one_hot(x, intensity.shape[-1]).bool()
    lam = intensity.masked_fill(current, 0.0)
    total = lam.sum(-1, keepdim=True)
    if method == "euler":
        stay = (1.0 - total).clamp_min(0.0)
        jump = lam / total.clamp_min(1.0)
    else:
        stay = torch.exp(-total)
        jump = lam * torch.where(total > 0, -torch.expm1(-total) / total.clamp_min(1e-30), torch.zeros_like(total))
    probs = torch.where(current, stay.expand_as(lam), jump)
    return sample_categorical(probs, generator=generator)


def model_device(model: object) -> torch.device:
    """The device of ``model``'s first parameter or buffer (CPU for a parameter-free callable)."""
    if isinstance(model, torch.nn.Module):
        for tensor in (*model.parameters(), *model.buffers()):
            return tensor.device
    return torch.device("cpu")


def evaluations_per_call(model: object) -> int:
    """Network evaluations one call of ``model`` costs: its ``nfe_per_call`` attribute (2 for guidance), else 1."""
    return int(getattr(model, "nfe_per_call", 1))
