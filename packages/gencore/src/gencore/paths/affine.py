"""Affine Gaussian probability paths ``x_t = alpha_t x1 + sigma_t x0`` (Lipman et al. 2023, "Flow Matching
for Generative Modeling"; Liu et al. 2023, rectified flow; Albergo & Vanden-Eijnden 2023, stochastic
interpolants; diffusion schedules in the suite's time as in Kingma et al. 2021).

Given noise ``x0 ~ N(0, I)``, data ``x1`` and ``t: [B]``, the conditional path and its velocity are

    x_t = alpha_t x1 + sigma_t x0,        u_t = d x_t / dt = d_alpha_t x1 + d_sigma_t x0,

so the marginal of ``x_t`` given ``x1`` is ``N(alpha_t x1, sigma_t^2 I)``. The schedule supplies
``(alpha, sigma, d_alpha, d_sigma)``; conversions between velocity / data / noise / score predictions are
in :mod:`gencore.paths.conversions` and exposed here through :meth:`AffineGaussianPath.convert`.
"""

from __future__ import annotations

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.nn import broadcast_time, expand_like
from gencore.paths.base import PREDICTIONS, PathSample
from gencore.paths.conversions import convert_prediction
from gencore.paths.schedules import Schedule, ScheduleOutput


def _check_pair(x0: torch.Tensor, x1: torch.Tensor) -> None:
    if not (torch.is_tensor(x0) and torch.is_tensor(x1)):
        raise InputError("x0 and x1 must be torch tensors.")
    if x1.dim() < 1 or x0.shape != x1.shape:
        raise InputError(
            f"x0 and x1 must be batch-first tensors of the same shape, got {tuple(x0.shape)} and {tuple(x1.shape)}."
        )
    if not (x0.is_floating_point() and x1.is_floating_point()):
        # t takes the dtype of x1: integer data would truncate every t in [0, 1) to 0
        raise InputError(f"x0 and x1 must be floating-point tensors, got {x0.dtype} and {x1.dtype}.")


class AffineGaussianPath:
    """The path ``x_t = alpha_t x1 + sigma_t x0`` of a :class:`~gencore.paths.schedules.Schedule`.

    Example::

        path = AffineGaussianPath(LinearSchedule())
        s = path.sample(torch.randn_like(x1), x1, torch.rand(len(x1)))   # s.t, s.x_t, s.u_t
        x1_hat = path.convert(v_pred, s.x_t, s.t, "velocity", "data")
    """

    def __init__(self, schedule: Schedule) -> None:
        if not isinstance(schedule, Schedule):
            raise ConfigError(f"schedule must be a gencore Schedule, got {type(schedule).__name__}.")
        self.schedule = schedule

    def __repr__(self) -> str:
        return f"AffineGaussianPath({self.schedule!r})"

    def coefficients(self, t: torch.Tensor | float, x: torch.Tensor) -> tuple[torch.Tensor, ScheduleOutput]:
        """Return ``(t: [B], coefficients broadcastable against x: [B, ...])``."""
        t = broadcast_time(t, x)
        return t, self.schedule(t).like(x)

    def sample(
        self,
        x0: torch.Tensor,
        x1: torch.Tensor,
        t: torch.Tensor | float,
        *,
        generator: torch.Generator | None = None,
    ) -> PathSample:
        """Point and conditional velocity at ``t`` for noise ``x0: [B, ...]`` and data ``x1: [B, ...]``.

        ``t`` is ``[B]`` or a scalar. Deterministic given its inputs; ``generator`` is accepted (and unused)
        so that every path has the same call signature.
        """
        del generator
        _check_pair(x0, x1)
        t, c = self.coefficients(t, x1)
        x_t = c.alpha * x1 + c.sigma * x0
        u_t = c.d_alpha * x1 + c.d_sigma * x0
        return PathSample(t=t, x_t=x_t, u_t=u_t, noise=x0, std=c.sigma.reshape(t.shape))

    def target(self, x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor | float, kind: str) -> torch.Tensor:
        """The exact conditional target of kind ``kind``: ``u_t``, ``x1``, ``x0`` or ``-x0 / sigma_t``."""
        check_choice(kind, PREDICTIONS, "prediction")
        if kind == "data":
            return x1
        if kind == "noise":
            return x0
        s = self.sample(x0, x1, t)
        if kind == "velocity":
            return s.u_t
        return -x0 / expand_like(s.std, x0)

    def convert(
        self, pred: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor | float, src: str, dst: str
    ) -> torch.Tensor:
        """Convert a prediction ``pred: [B, ...]`` of kind ``src`` at ``(x_t, t)`` into kind ``dst``.

        Kinds: ``"velocity"``, ``"data"`` (clean ``x1``), ``"noise"`` (``x0``/``eps``), ``"score"``
        (``grad log p_t(x_t) = -eps / sigma_t``). See :mod:`gencore.paths.conversions` for the math.
        """
        if pred.shape != x_t.shape:
            raise InputError(f"pred has shape {tuple(pred.shape)} but x_t has {tuple(x_t.shape)}; they must match.")
        if not (pred.is_floating_point() and x_t.is_floating_point()):
            raise InputError(f"pred and x_t must be floating-point tensors, got {pred.dtype} and {x_t.dtype}.")
        _, c = self.coefficients(t, x_t)
        return convert_prediction(pred, x_t, c, src, dst)
