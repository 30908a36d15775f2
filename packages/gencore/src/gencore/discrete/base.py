"""The interface every discrete / simplex process in :mod:`gencore.discrete` follows.

Data are integer tokens ``x0: [B, L]`` (int64) over ``K = vocab_size`` classes.
A process turns them into network inputs ``features: [B, L, input_dim]`` at a
time ``t: [B]`` (``t = 0`` noise, ``t = 1`` data, the suite's convention) and a
denoiser ``model(features, t, **cond) -> logits [B, L, K]`` predicts the clean
token of every position. One network class (:class:`TokenDenoiser`) serves all
processes; only ``input_dim`` differs.

Likelihood bounds are reported in one unit across processes: nats per position
(negative ELBO divided by the sequence length, averaged over the batch).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gencore.errors import InputError


@dataclass
class DiscreteSample:
    """Tokens drawn by a sampler and the number of network evaluations it used."""

    tokens: torch.Tensor  # [n, L] int64
    nfe: int
    extras: dict[str, Any] = field(default_factory=dict)


def check_tokens(x0: torch.Tensor, vocab_size: int, name: str = "x0") -> torch.Tensor:
    """Raise :class:`InputError` unless ``x0`` is an integer ``[B, L]`` tensor with values in ``[0, vocab_size)``."""
    if x0.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise InputError(f"{name} must hold integer tokens, got dtype {x0.dtype}.")
    if x0.dim() != 2:
        raise InputError(f"{name} must have shape [batch, length], got {tuple(x0.shape)}.")
    if x0.numel() and (int(x0.min()) < 0 or int(x0.max()) >= vocab_size):
        raise InputError(f"{name} tokens must lie in [0, {vocab_size}), got range [{int(x0.min())}, {int(x0.max())}].")
    return x0.long()


class DiscreteProcess(ABC):
    """A forward noising process over tokens with its training loss, likelihood bound and sampler."""

    name: str = "process"
    vocab_size: int
    input_dim: int  # features per position given to the denoiser

    @property
    def output_dim(self) -> int:
        """Logits per position the denoiser returns: ``vocab_size`` (a clean-token prediction) unless a process
        predicts something else."""
        return self.vocab_size

    @abstractmethod
    def loss(
        self, model: nn.Module, x0: torch.Tensor, *, generator: torch.Generator | None = None, **cond: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """One Monte-Carlo training loss (scalar, differentiable) and a metrics dict."""

    @abstractmethod
    def nll_bound(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        *,
        n_time: int = 64,
        generator: torch.Generator | None = None,
        **cond: Any,
    ) -> torch.Tensor:
        """Negative ELBO per sequence in nats per position, ``[B]``, estimated with ``n_time`` time points."""

    @abstractmethod
    def sample(
        self,
        model: nn.Module,
        n: int,
        length: int,
        *,
        steps: int,
        generator: torch.Generator | None = None,
        **cond: Any,
    ) -> DiscreteSample:
        """Draw ``n`` sequences of ``length`` tokens with ``steps`` reverse steps."""
