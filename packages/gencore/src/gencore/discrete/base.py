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

from gencore.checks import check_int
from gencore.discrete.ctmc import stratified_bound, stratified_times
from gencore.errors import ConfigError, InputError


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


def check_unit_times(t: torch.Tensor | float, name: str = "t") -> torch.Tensor:
    """Raise :class:`InputError` unless every time in ``t`` lies in ``[0, 1]`` (``t = 0`` noise, ``t = 1`` data)."""
    t = torch.as_tensor(t)
    if t.numel() and not bool(((t >= 0) & (t <= 1)).all()):  # NaN fails too
        raise InputError(
            f"{name} must lie in [0, 1] (0 noise, 1 data), got values in [{float(t.min())}, {float(t.max())}]."
        )
    return t


def check_sample_sizes(n: object, length: object, steps: object) -> tuple[int, int, int]:
    """``n``, ``length`` and ``steps`` of a sampler call as positive ints, else one :class:`InputError` sentence."""
    return tuple(
        check_int(v, name, low=1, error=InputError) for v, name in ((n, "n"), (length, "length"), (steps, "steps"))
    )


def check_logits(logits: torch.Tensor, positions: tuple[int, ...], width: int, process: str) -> torch.Tensor:
    """Raise :class:`ConfigError` unless the denoiser's ``logits`` have shape ``[*positions, width]`` (``[B, L, K]``).

    A denoiser one output too wide (``K + 1``, the masked process's input width) otherwise passes silently:
    masked diffusion would never see a masked position in the loss and report a bound of 0 nats.
    """
    expected = (*positions, width)
    if tuple(logits.shape) != expected:
        raise ConfigError(
            f"the {process} process needs a denoiser returning logits of shape {expected} "
            f"({width} per position), got {tuple(logits.shape)}."
        )
    return logits


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


class ELBOProcess(DiscreteProcess):
    """A process whose loss and likelihood bound are stratified-time estimates of one continuous-time ELBO
    integrand, :meth:`elbo_terms` (nats per position)."""

    @abstractmethod
    def elbo_terms(
        self, model: nn.Module, x0: torch.Tensor, t: torch.Tensor, *, generator: torch.Generator | None = None, **cond
    ) -> torch.Tensor:
        """One-sample estimate of the ELBO integrand at times ``t: [B]``, in nats per position ``[B]``."""

    def loss(
        self, model: nn.Module, x0: torch.Tensor, *, generator: torch.Generator | None = None, **cond: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The NELBO integrand at stratified times, averaged over the batch (nats per position)."""
        t = stratified_times(x0.shape[0], generator=generator, device=x0.device)
        loss = self.elbo_terms(model, x0, t, generator=generator, **cond).mean().float()
        return loss, {"nelbo": loss.detach()}

    @torch.no_grad()
    def nll_bound(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        *,
        n_time: int = 64,
        generator: torch.Generator | None = None,
        **cond: Any,
    ) -> torch.Tensor:
        """Negative ELBO in nats per position ``[B]``: one time in each of ``n_time`` strata per sequence."""
        x0 = check_tokens(x0, self.vocab_size)
        return stratified_bound(
            lambda t: self.elbo_terms(model, x0, t, generator=generator, **cond),
            x0.shape[0],
            n_time,
            generator=generator,
            device=x0.device,
        )
