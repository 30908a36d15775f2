"""A small conditional flow-matching front end, in the spirit of torchcfm's ``ConditionalFlowMatcher``
(Tong et al. 2024, "Improving and generalizing flow-based generative models with minibatch optimal
transport"; Lipman et al. 2023).

``FlowMatcher(path, coupling, time_sampler)(x0, x1)`` pairs the batch with the coupling (independent when
None; minibatch OT, Sinkhorn, semidiscrete OT from :mod:`gencore.couplings`), draws ``t: [B]`` from the time
sampler and returns ``(t, x_t, u_t)`` from the path; :meth:`FlowMatcher.loss` does the same and regresses a
model on ``u_t`` with :func:`gencore.losses.flow_matching_loss`::

    fm = FlowMatcher()                                   # linear path, independent coupling, U[0, 1)
    t, x_t, u_t = fm(torch.randn_like(x1), x1, generator=g)
    loss = fm.loss(model, x1, generator=g)                # x0 ~ N(0, I) drawn with g
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.losses import Weighting, flow_matching_loss
from gencore.paths.affine import AffineGaussianPath
from gencore.paths.base import PREDICTIONS, ProbabilityPath
from gencore.paths.schedules import LinearSchedule
from gencore.paths.time_samplers import UniformTime
from gencore.rng import randn_like_with

Coupling = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""``coupling(x0, x1, *, generator=None) -> (x0_paired, x1_paired)``."""


def _check_float(**xs: torch.Tensor) -> None:
    # t is drawn in the data's dtype: integer data would truncate every t in [0, 1) to 0
    for name, x in xs.items():
        if not (torch.is_tensor(x) and x.is_floating_point()):
            kind = x.dtype if torch.is_tensor(x) else type(x).__name__
            raise InputError(f"{name} must be a floating-point tensor, got {kind}.")


class FlowMatcher:
    """Couple, draw times, sample the conditional path.

    Args:
        path: the probability path (default ``AffineGaussianPath(LinearSchedule())``, rectified flow).
        coupling: None (independent pairs, as given) or a coupling callable.
        time_sampler: ``sampler(n, *, generator, device, dtype) -> [n]`` (default ``UniformTime()``).
        prediction: what models trained by :meth:`loss` predict (default ``"velocity"``).
        weighting: time weighting ``w(t)`` for :meth:`loss` (None: uniform).
    """

    def __init__(
        self,
        path: ProbabilityPath | None = None,
        coupling: Coupling | None = None,
        time_sampler: Callable[..., torch.Tensor] | None = None,
        *,
        prediction: str = "velocity",
        weighting: Weighting | None = None,
    ) -> None:
        self.path = path if path is not None else AffineGaussianPath(LinearSchedule())
        if not callable(getattr(self.path, "sample", None)):
            raise ConfigError(f"path must have a sample(x0, x1, t) method, got {type(self.path).__name__}.")
        if coupling is not None and not callable(coupling):
            raise ConfigError(f"coupling must be callable or None, got {type(coupling).__name__}.")
        self.coupling = coupling
        self.time_sampler = time_sampler if time_sampler is not None else UniformTime()
        self.prediction = check_choice(prediction, PREDICTIONS, "prediction")
        self.weighting = weighting

    def __repr__(self) -> str:
        return (
            f"FlowMatcher(path={self.path!r}, coupling={self.coupling!r}, "
            f"time_sampler={self.time_sampler!r}, "
            f"prediction={self.prediction!r})"
        )

    def _pair(
        self, x0: torch.Tensor, x1: torch.Tensor, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _check_float(x0=x0, x1=x1)
        if x0.shape[:1] != x1.shape[:1] or x0.dim() < 1:
            raise InputError(f"x0 and x1 must share the batch size, got {tuple(x0.shape)} and {tuple(x1.shape)}.")
        if self.coupling is None:
            return x0, x1
        y0, y1 = self.coupling(x0, x1, generator=generator)
        if y0.shape[0] != x0.shape[0] or y1.shape[0] != x1.shape[0]:
            raise InputError("the coupling must return batches of the same size B as it was given.")
        return y0, y1

    def _times(self, n: int, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return self.time_sampler(n, generator=generator, device=like.device, dtype=like.dtype)

    def __call__(
        self, x0: torch.Tensor, x1: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(t: [B], x_t: [B, ...], u_t: [B, ...])`` for source ``x0`` and data ``x1``.

        The coupling is applied first, then ``t`` is drawn, then the path is sampled, all with ``generator``.
        """
        x0, x1 = self._pair(x0, x1, generator)
        t = self._times(x1.shape[0], x1, generator)
        s = self.path.sample(x0, x1, t, generator=generator)
        return s.t, s.x_t, s.u_t

    def loss(
        self,
        model: Callable[..., torch.Tensor],
        x1: torch.Tensor,
        *,
        x0: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
        **cond: Any,
    ) -> torch.Tensor:
        """Scalar flow-matching loss of ``model(x_t, t, **cond)`` on data ``x1: [B, ...]``.

        ``x0`` defaults to ``N(0, I)`` noise drawn with ``generator``. A coupling that re-orders or
        replaces ``x1`` cannot carry per-sample conditioning along, so a tensor in ``cond`` with batch size
        ``B`` together with such a coupling raises :class:`ConfigError`.
        """
        if x0 is None:
            _check_float(x1=x1)
            x0 = randn_like_with(x1, generator)
        p0, p1 = self._pair(x0, x1, generator)
        if p1 is not x1 and any(
            torch.is_tensor(v) and v.dim() > 0 and v.shape[0] == x1.shape[0] for v in cond.values()
        ):
            if p1.shape != x1.shape or not torch.equal(p1, x1):
                raise ConfigError(
                    "the coupling re-ordered the data batch, so per-sample conditioning in cond no longer "
                    "lines up; use a coupling that only re-orders x0, or no coupling."
                )
        t = self._times(x1.shape[0], x1, generator)
        return flow_matching_loss(
            model,
            self.path,
            p0,
            p1,
            t,
            prediction=self.prediction,
            weighting=self.weighting,
            generator=generator,
            **cond,
        )
