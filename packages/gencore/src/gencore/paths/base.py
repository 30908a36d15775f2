"""What every probability path returns: a :class:`PathSample`, and the :class:`ProbabilityPath` protocol.

A conditional probability path (Lipman et al. 2023, "Flow Matching for Generative Modeling"; Tong et al.
2024, "Improving and generalizing flow-based generative models with minibatch optimal transport") maps a
pair ``(x0, x1)`` (source/noise at ``t = 0``, data at ``t = 1``) and times ``t: [B]`` to a point ``x_t`` on
the conditional path and its conditional velocity ``u_t = d x_t / dt``. Both are batch-first ``[B, ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

PREDICTIONS: tuple[str, ...] = ("velocity", "data", "noise", "score")
"""What a network may predict: the velocity ``u``, the clean data ``x1``, the noise ``x0`` / ``eps``, or the
score ``grad log p_t(x_t)``."""


@dataclass(frozen=True)
class PathSample:
    """A draw from a conditional path.

    Attributes:
        t: ``[B]`` times.
        x_t: ``[B, ...]`` points on the path.
        u_t: ``[B, ...]`` conditional velocity ``d x_t / dt`` (the flow-matching regression target).
        noise: ``[B, ...]`` the standard normal noise in ``x_t`` (``x0`` for affine Gaussian paths, the
            bridge's ``eps`` for the Brownian bridge), or None.
        std: ``[B]`` the conditional standard deviation multiplying ``noise``, so that the conditional score
            is ``grad log p_t(x_t | x0, x1) = -noise / std``; or None.
    """

    t: torch.Tensor
    x_t: torch.Tensor
    u_t: torch.Tensor
    noise: torch.Tensor | None = None
    std: torch.Tensor | None = None


@runtime_checkable
class ProbabilityPath(Protocol):
    """Anything with ``sample(x0, x1, t, *, generator=None) -> PathSample``."""

    def sample(
        self,
        x0: torch.Tensor,
        x1: torch.Tensor,
        t: torch.Tensor | float,
        *,
        generator: torch.Generator | None = None,
    ) -> PathSample: ...
