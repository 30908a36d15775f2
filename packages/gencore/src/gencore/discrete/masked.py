"""Masked (absorbing-state) diffusion, a.k.a. masked discrete flow matching.

References: Sahoo et al. 2024, "Simple and Effective Masked Diffusion Language Models" (MDLM);
Shi et al. 2024, "Simplified and Generalized Masked Diffusion for Discrete Data" (MD4);
Gat et al. 2024, "Discrete Flow Matching"; Austin et al. 2021 (D3PM, absorbing state).

Forward process (the suite's time, ``t = 0`` all masked, ``t = 1`` data). Every position is
independently clean with probability ``alpha_t`` and the mask token ``m = K`` otherwise:

    q_t(x_t_i | x0_i) = alpha_t [x_t_i = x0_i] + (1 - alpha_t) [x_t_i = m].

The denoiser sees one-hot features over ``K + 1`` values and predicts ``p_theta(x0_i | x_t)``
over the ``K`` clean values (the mask is never predicted; clean positions are carried over,
the "SUBS" parametrisation of MDLM).

Continuous-time ELBO, in nats per position (MDLM eq. 10 / MD4 eq. 5 with the time reversed;
``alpha'_t = d alpha_t / dt >= 0`` here, so the weight is positive):

    NELBO(x0) = (1 / L) int_0^1 alpha'_t / (1 - alpha_t)
                  E_{x_t ~ q_t(.|x0)} [ sum_{i: x_t_i = m} -log p_theta(x0_i | x_t) ] dt.

There is no prior term (``x_0`` is all masks for every ``x0``) and no reconstruction term
(``alpha_1 = 1``). The bound is invariant to the schedule (substitute ``u = alpha_t``); the
schedule only changes the Monte-Carlo variance and the training weighting. ``nll_bound``
integrates with stratified times, one per stratum of ``[0, 1)``.

Sampler: ancestral unmasking on the uniform time grid ``t_k = k / steps``. From ``t`` to
``s > t`` the exact posterior of the absorbing process, with ``x0`` replaced by the model's
factorised prediction, keeps clean positions and unmasks each masked one with probability
``(alpha_s - alpha_t) / (1 - alpha_t)`` to a token drawn from ``p_theta(. | x_t)``. (Tau-leaping
with the reverse rates ``alpha'_t / (1 - alpha_t) p_theta(j | x_t)`` integrated over the step
gives the same stay probability ``(1 - alpha_s) / (1 - alpha_t)``, so it is the same sampler.)
One network call per step, also when no position changes; ``nfe`` counts calls times
``model.nfe_per_call`` (2 for a classifier-free-guided model).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.discrete.base import (
    DiscreteSample,
    ELBOProcess,
    check_logits,
    check_sample_sizes,
    check_tokens,
    check_unit_times,
)
from gencore.discrete.ctmc import (
    DiscreteSchedule,
    discrete_schedule,
    evaluations_per_call,
    model_device,
    sample_categorical,
)
from gencore.errors import ConfigError
from gencore.rng import rand_with

__all__ = ["MaskedDiffusion", "masked_elbo_integrand"]


def masked_elbo_integrand(
    logits: torch.Tensor, x_t: torch.Tensor, x0: torch.Tensor, alpha: torch.Tensor, alpha_prime: torch.Tensor
) -> torch.Tensor:
    """``alpha' / (1 - alpha) * sum_{i masked} -log p_theta(x0_i | x_t)`` per sequence ``[B]`` (summed over positions).

    Args:
        logits: the denoiser's clean-token logits ``[B, L, K]``; the mask token is ``K``.
        x_t: the masked state ``[B, L]``; ``x0``: the clean tokens ``[B, L]``.
        alpha, alpha_prime: ``alpha_t`` and ``d alpha_t / dt`` per sequence ``[B]``, with ``alpha < 1``.
    """
    nll = F.cross_entropy(logits.float().transpose(1, 2), x0, reduction="none")  # [B, L]
    masked = (x_t == logits.shape[-1]).to(nll.dtype)
    return alpha_prime / (1.0 - alpha) * (nll * masked).sum(-1)


class MaskedDiffusion(ELBOProcess):
    """Absorbing-state diffusion over ``K`` tokens plus a mask token ``K`` (see module docstring).

    Args:
        vocab_size: number of clean tokens ``K``.
        schedule: ``"linear"`` (``alpha_t = t``), ``"cosine"`` or a :class:`DiscreteSchedule`.
        t_max: times are clipped to ``[0, t_max]`` where the weight ``alpha' / (1 - alpha)`` is finite.
    """

    name = "masked"

    def __init__(self, vocab_size: int, schedule: str | DiscreteSchedule = "linear", *, t_max: float = 1.0 - 1e-4):
        if vocab_size < 1:
            raise ConfigError(f"vocab_size must be a positive integer, got {vocab_size}.")
        if not 0.0 < t_max < 1.0:
            raise ConfigError(f"t_max must lie in (0, 1), got {t_max}.")
        self.vocab_size = int(vocab_size)
        self.mask_index = self.vocab_size
        self.input_dim = self.vocab_size + 1
        self.schedule = discrete_schedule(schedule)
        self.t_max = float(t_max)

    def __repr__(self) -> str:
        return f"MaskedDiffusion(vocab_size={self.vocab_size}, schedule={self.schedule.name!r})"

    # forward process -------------------------------------------------------------------------
    def features(self, x_t: torch.Tensor) -> torch.Tensor:
        """One-hot features ``[B, L, K + 1]`` of a partly masked state ``x_t: [B, L]``."""
        return F.one_hot(x_t, self.input_dim).float()

    def marginal(self, x0: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """``q_t(x_t_i = v | x0)`` for ``v`` in ``0..K`` (``K`` the mask): ``[B, L, K + 1]``."""
        x0 = check_tokens(x0, self.vocab_size)
        t = check_unit_times(t)
        alpha = self.schedule.alpha(torch.as_tensor(t, dtype=torch.float32, device=x0.device).expand(x0.shape[0]))
        probs = alpha[:, None, None] * F.one_hot(x0, self.input_dim).float()
        probs[..., self.mask_index] = 1.0 - alpha[:, None]
        return probs

    def corrupt(
        self, x0: torch.Tensor, t: torch.Tensor | float, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Draw ``x_t ~ q_t(. | x0)`` (``[B, L]``, the mask is token ``K``) at ``t`` (scalar or ``[B]``)."""
        x0 = check_tokens(x0, self.vocab_size)
        t = check_unit_times(t)
        alpha = self.schedule.alpha(torch.as_tensor(t, dtype=torch.float32, device=x0.device).expand(x0.shape[0]))
        keep = rand_with(x0.shape, generator, device=x0.device) < alpha[:, None]
        return torch.where(keep, x0, torch.full_like(x0, self.mask_index))

    def clean_log_likelihood(self, features: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``log q_t(x_t_i | x0_i = c)`` up to a per-position constant, ``[B, L, K]`` (for exact posteriors)."""
        x_t = features.argmax(-1)
        masked = (x_t == self.mask_index)[..., None]
        match = F.one_hot(x_t.clamp_max(self.vocab_size - 1), self.vocab_size).bool()
        zero = torch.zeros(match.shape, dtype=features.dtype, device=features.device)
        return torch.where(masked | match, zero, torch.full_like(zero, float("-inf")))

    # bound and loss --------------------------------------------------------------------------
    def _clip(self, t: torch.Tensor) -> torch.Tensor:
        return t.clamp(0.0, self.t_max)

    def elbo_terms(
        self, model: nn.Module, x0: torch.Tensor, t: torch.Tensor, *, generator: torch.Generator | None = None, **cond
    ) -> torch.Tensor:
        """One-sample estimate of the ELBO integrand at times ``t: [B]``, in nats per position ``[B]``."""
        x0 = check_tokens(x0, self.vocab_size)
        t = self._clip(t.to(device=x0.device, dtype=torch.float32))
        x_t = self.corrupt(x0, t, generator=generator)
        logits = check_logits(model(self.features(x_t), t, **cond), x_t.shape, self.vocab_size, self.name)
        integrand = masked_elbo_integrand(logits, x_t, x0, self.schedule.alpha(t), self.schedule.alpha_prime(t))
        return integrand / x0.shape[1]

    # sampler ---------------------------------------------------------------------------------
    @torch.no_grad()
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
        """Ancestral unmasking from the all-mask state with ``steps`` uniform time steps."""
        n, length, steps = check_sample_sizes(n, length, steps)
        device = model_device(model)
        x = torch.full((n, length), self.mask_index, dtype=torch.long, device=device)
        grid = torch.linspace(0.0, 1.0, steps + 1)
        alphas = self.schedule.alpha(grid).tolist()
        nfe = 0
        for k in range(steps):
            t = torch.full((n,), float(grid[k]), device=device)
            logits = check_logits(model(self.features(x), t, **cond), x.shape, self.vocab_size, self.name)
            nfe += evaluations_per_call(model)
            a_t, a_s = alphas[k], (1.0 if k == steps - 1 else alphas[k + 1])
            p_unmask = (a_s - a_t) / (1.0 - a_t) if a_t < 1.0 else 1.0
            draw = sample_categorical(torch.softmax(logits.float(), dim=-1), generator=generator)
            unmask = (x == self.mask_index) & (rand_with(x.shape, generator, device=device) < p_unmask)
            x = torch.where(unmask, draw, x)
        return DiscreteSample(tokens=x, nfe=nfe)
