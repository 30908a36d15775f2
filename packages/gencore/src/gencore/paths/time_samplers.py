"""Training-time distributions over ``t in [0, 1]`` for flow matching and diffusion losses.

- :class:`UniformTime` -- ``t ~ U[0, 1)`` (Lipman et al. 2023; Liu et al. 2023).
- :class:`LogitNormalTime` -- ``t = sigmoid(loc + scale * n)``, ``n ~ N(0, 1)``; Stable Diffusion 3's
  default (Esser et al. 2024, sec. 3.1, "rf/lognorm(0.00, 1.00)"). Its median is ``sigmoid(loc)``; SD3's
  ``m`` refers to the noise level ``1 - t``, so SD3's ``lognorm(m, s)`` is ``LogitNormalTime(-m, s)`` here.
- :class:`BetaTime` -- ``t ~ Beta(a, b)``, mean ``a / (a + b)``.

Every sampler is ``sampler(n, *, generator=None, device=None, dtype=None) -> Tensor[n]``. Randomness comes
only from ``generator`` (torch's global RNG when None); numbers are drawn on the generator's device and
then moved, so a seed gives the same times whatever ``device`` is asked for. ``t_min``/``t_max``
(keyword-only) rescale the draw affinely to ``[t_min, t_max]``, e.g. to keep VP velocity targets away
from the ``t = 1`` singularity. With ``t_max = 1`` (or a ``t_max`` that rounds to 1 in the output dtype, such as
``1 - 1e-8`` in float32) a draw never equals 1 in the output dtype (a float64 draw
just below 1 rounded to exactly 1 in float32, where ``sigma_t = 0``: for ``Beta(1, 0.1)`` 18 % of the time).
Beta draws use Marsaglia & Tsang's (2000) gamma sampler in log space so
that they can take a ``torch.Generator`` (``torch.distributions.Beta`` cannot).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch

from gencore.checks import check_int
from gencore.errors import ConfigError, ConvergenceError, InputError
from gencore.rng import draw_device


@dataclass(frozen=True)
class TimeSampler(ABC):
    """Base of the time samplers: subclasses implement :meth:`_draw` of values in ``[0, 1]``."""

    t_min: float = field(default=0.0, kw_only=True)
    t_max: float = field(default=1.0, kw_only=True)

    def __post_init__(self) -> None:
        if not (0.0 <= self.t_min < self.t_max <= 1.0):
            raise ConfigError(f"need 0 <= t_min < t_max <= 1, got t_min={self.t_min}, t_max={self.t_max}.")

    @abstractmethod
    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        """``n`` float64 draws in ``[0, 1]`` on ``device``."""

    def __call__(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Draw ``n`` times, a ``[n]`` tensor in ``[t_min, t_max]`` (default dtype unless ``dtype``)."""
        n = check_int(n, "n", low=0, error=InputError)
        if dtype is not None and not dtype.is_floating_point:
            # an integer dtype truncated every draw in [0, 1) to 0 (and failed in the clamp below 1)
            raise InputError(f"time sampler dtype must be a floating-point dtype, got {dtype}.")
        u = self._draw(n, generator, draw_device(generator, device))
        if self.t_min != 0.0 or self.t_max != 1.0:
            u = self.t_min + (self.t_max - self.t_min) * u
        out_device = device if device is not None else u.device
        out = u.to(device=out_device, dtype=dtype or torch.get_default_dtype())
        # a draw just below 1 rounds to exactly 1 in the output dtype (where sigma_t = 0) when t_max is 1 or
        # itself rounds to 1 there (1 - 1e-8 in float32)
        if torch.tensor(self.t_max, dtype=out.dtype) >= 1.0:
            out = out.clamp(max=torch.nextafter(torch.ones((), dtype=out.dtype), torch.zeros((), dtype=out.dtype)))
        return out


@dataclass(frozen=True)
class UniformTime(TimeSampler):
    """``t ~ U[0, 1)``."""

    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        return torch.rand(n, generator=generator, device=device, dtype=torch.float64)


@dataclass(frozen=True)
class LogitNormalTime(TimeSampler):
    """``t = sigmoid(loc + scale * n)`` with ``n ~ N(0, 1)`` (SD3); median ``sigmoid(loc)``."""

    loc: float = 0.0
    scale: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.loc) and math.isfinite(self.scale) and self.scale > 0.0):
            raise ConfigError(f"LogitNormalTime needs finite loc and scale > 0, got {self.loc}, {self.scale}.")

    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        z = torch.randn(n, generator=generator, device=device, dtype=torch.float64)
        return torch.sigmoid(self.loc + self.scale * z)


def _log_gamma(
    k: float, n: int, generator: torch.Generator | None, device: torch.device, max_rounds: int = 64
) -> torch.Tensor:
    """``log G`` for ``n`` draws ``G ~ Gamma(k, 1)`` (Marsaglia & Tsang 2000; ``k < 1`` by the boost
    ``G_k = G_{k+1} U^{1/k}``), in float64, seeded only by ``generator``."""
    kk = k + 1.0 if k < 1.0 else k
    d = kk - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)

    def propose(m: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(m, generator=generator, device=device, dtype=torch.float64)
        u = torch.rand(m, generator=generator, device=device, dtype=torch.float64)
        v = (1.0 + c * x) ** 3
        log_v = torch.log(v.clamp_min(1e-300))
        accept = (v > 0) & (torch.log(u) < 0.5 * x * x + d - d * v + d * log_v)
        return math.log(d) + log_v, accept

    out, accept = propose(n)  # acceptance is >= 95%: one full round, then the few rejected ones
    pending = torch.nonzero(~accept).flatten()
    for _ in range(max_rounds):
        if pending.numel() == 0:
            break
        value, accept = propose(pending.numel())
        out[pending[accept]] = value[accept]
        pending = pending[~accept]
    if pending.numel():
        raise ConvergenceError(f"gamma sampler did not accept all draws in {max_rounds} rounds.")
    if k < 1.0:
        u = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
        out = out + torch.log(u) / k
    return out


@dataclass(frozen=True)
class BetaTime(TimeSampler):
    """``t ~ Beta(a, b)`` with ``a, b > 0``; mean ``a / (a + b)``."""

    a: float = 1.0
    b: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (math.isfinite(self.a) and math.isfinite(self.b) and self.a > 0.0 and self.b > 0.0):
            raise ConfigError(f"BetaTime needs finite a > 0 and b > 0, got a={self.a}, b={self.b}.")

    def _draw(self, n: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
        log_x = _log_gamma(self.a, n, generator, device)
        log_y = _log_gamma(self.b, n, generator, device)
        return torch.sigmoid(log_x - log_y)  # X / (X + Y), stable for tiny a, b


TIME_SAMPLERS: dict[str, type[TimeSampler]] = {
    "uniform": UniformTime,
    "logit_normal": LogitNormalTime,
    "beta": BetaTime,
}


def make_time_sampler(name: str, **kwargs: Any) -> TimeSampler:
    """Build a time sampler by name: ``"uniform"``, ``"logit_normal"``, ``"beta"``."""
    if name not in TIME_SAMPLERS:
        raise ConfigError(f"unknown time sampler {name!r}; expected one of: {', '.join(TIME_SAMPLERS)}.")
    try:
        return TIME_SAMPLERS[name](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid settings for time sampler {name!r}: {exc}.") from exc
