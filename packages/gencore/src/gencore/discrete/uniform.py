"""Uniform-noise discrete diffusion: a CTMC that resamples tokens uniformly.

References: Austin et al. 2021, "Structured Denoising Diffusion Models in Discrete State-Spaces"
(D3PM, uniform transitions); Campbell et al. 2022, "A Continuous Time Framework for Discrete
Denoising Models" (CTMC ELBO, tau-leaping); Lou et al. 2024, "Discrete Diffusion Modeling by
Estimating the Ratios of the Data Distribution" (SEDD); Schiff et al. 2024, "Simple Guidance
Mechanisms for Discrete Diffusion Models" (UDLM, the closed-form uniform ELBO).

Forward process (``t = 0`` noise, ``t = 1`` data). Every position keeps its clean value with
probability ``alpha_t`` and is otherwise uniform over the ``K`` tokens:

    q_t(v | c) = alpha_t [v = c] + (1 - alpha_t) / K.

As a CTMC run from data (``t = 1``) to noise (``t = 0``), each position jumps to each other
token at rate ``sigma_t / K`` with ``sigma_t = alpha'_t / alpha_t`` (then ``exp(-int sigma) = alpha``).

Reverse rates. The time reversal jumps from ``x_t`` to ``y`` (one position ``i`` changed from
``v`` to ``j``) at rate ``(sigma_t / K) q_t(y) / q_t(x_t)``, and the ratio is a posterior mean
over the clean token of that position alone:

    q_t(y) / q_t(x_t) = sum_c p(x0_i = c | x_t) q_t(j | c) / q_t(v | c).

The model replaces ``p(x0_i | x_t)`` by the denoiser's ``p_theta``; writing ``u = (1 - alpha_t) / K``,

    r_theta(j) = p_theta(v) u / (alpha_t + u) + 1 - p_theta(v) + p_theta(j) alpha_t / u     (j != v),

and the conditional (true, given ``x0``) ratio is ``r(j) = q_t(j | x0_i) / q_t(v | x0_i)``.

ELBO. The path-space KL between the conditional reversal and the model (Girsanov for CTMCs;
Campbell et al. 2022, Prop. 2) with an exact prior (``x_0`` is uniform for every ``x0``) gives,
in nats per position,

    NELBO(x0) = (1 / L) int_0^1 E_{x_t ~ q_t(.|x0)} [ (sigma_t / K) sum_i sum_{j != x_t_i}
                    ( r_theta(j) - r(j) + r(j) log(r(j) / r_theta(j)) ) ] dt,

every summand being non-negative. This is the closed form of UDLM/SEDD written in this time
direction; ``tests/test_discrete_uniform.py`` checks it against a brute-force evaluation of the
generic CTMC ELBO on the full product space of a tiny problem. With the exact posterior the
model rates are the true reversal and the bound is tight. It is computed in float64 because the
summand is a difference of nearly equal terms at small ``t``.

Samplers, on the uniform time grid ``t_k = k / steps``, one network call per step:

- ``"ancestral"``: the exact discrete-time posterior ``q(x_s | x_t, x0)`` (``s > t``) averaged
  over ``p_theta(x0_i | x_t)``, per position:
  ``p(x_s_i = j) = sum_c p_theta(c) q(v | j; t<-s) q_s(j | c) / q_t(v | c)`` with the noising
  transition ``q(v | j; t<-s) = (alpha_t / alpha_s) [v = j] + (1 - alpha_t / alpha_s) / K``;
- ``"tau-leaping"`` / ``"euler"``: :func:`gencore.discrete.ctmc.ctmc_jump` with the model's reverse
  rates frozen at the start of the step and ``sigma`` integrated exactly over it
  (``int_t^s sigma = log(alpha_s / alpha_t)``; ``alpha`` is floored at ``1e-12`` in the log so the
  first step from ``t = 0`` is finite).

The last step of every sampler draws ``x_1`` from ``p_theta(. | x_t)``, which is the ``s = 1``
case of the ancestral posterior.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.checks import check_choice
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
    ctmc_jump,
    discrete_schedule,
    evaluations_per_call,
    model_device,
    sample_categorical,
)
from gencore.errors import ConfigError

__all__ = ["UNIFORM_SAMPLERS", "UniformDiffusion", "uniform_elbo_integrand"]

UNIFORM_SAMPLERS: tuple[str, ...] = ("ancestral", "tau-leaping", "euler")


def uniform_elbo_integrand(
    probs: torch.Tensor, x_t: torch.Tensor, x0: torch.Tensor, alpha: torch.Tensor, alpha_prime: torch.Tensor
) -> torch.Tensor:
    """The NELBO integrand of the uniform CTMC summed over positions ``[B]`` (float64; see module docstring).

    Args:
        probs: the denoiser's ``p_theta(x0_i = c | x_t)``, ``[B, L, K]``.
        x_t: the noisy state ``[B, L]``; ``x0``: the clean tokens ``[B, L]``.
        alpha, alpha_prime: ``alpha_t`` and ``d alpha_t / dt`` per sequence, ``[B]``, with ``0 < alpha < 1``.
    """
    k = probs.shape[-1]
    p = probs.double()
    a = alpha.double()[:, None, None]
    u = (1.0 - a) / k
    onehot_v = F.one_hot(x_t, k).double()
    onehot_c = F.one_hot(x0, k).double()
    p_v = (p * onehot_v).sum(-1, keepdim=True)
    r_model = p_v * u / (a + u) + 1.0 - p_v + p * (a / u)  # [B, L, K], meaningful for j != v
    q_j = a * onehot_c + u
    q_v = (q_j * onehot_v).sum(-1, keepdim=True)
    r_true = q_j / q_v
    summand = r_model - r_true + r_true * (torch.log(r_true) - torch.log(r_model))
    summand = summand.masked_fill(onehot_v.bool(), 0.0)
    sigma = alpha_prime.double() / alpha.double()
    return sigma / k * summand.sum(dim=(1, 2))


class UniformDiffusion(ELBOProcess):
    """Uniform-noise CTMC over ``K`` tokens (see module docstring).

    Args:
        vocab_size: number of tokens ``K`` (at least 2).
        schedule: ``"linear"``, ``"cosine"`` or a :class:`DiscreteSchedule`.
        sampler: default sampler, one of :data:`UNIFORM_SAMPLERS`.
        t_range: times used in the bound are clipped to this interval, inside ``(0, 1)``.
    """

    name = "uniform"

    def __init__(
        self,
        vocab_size: int,
        schedule: str | DiscreteSchedule = "linear",
        *,
        sampler: str = "ancestral",
        t_range: tuple[float, float] = (1e-4, 1.0 - 1e-4),
    ) -> None:
        if vocab_size < 2:
            raise ConfigError(f"uniform diffusion needs vocab_size >= 2, got {vocab_size}.")
        lo, hi = (float(v) for v in t_range)
        if not 0.0 < lo < hi < 1.0:
            raise ConfigError(f"t_range must satisfy 0 < lo < hi < 1, got {t_range}.")
        self.vocab_size = int(vocab_size)
        self.input_dim = self.vocab_size
        self.schedule = discrete_schedule(schedule)
        self.sampler = check_choice(sampler, UNIFORM_SAMPLERS, "uniform sampler")
        self.t_range = (lo, hi)

    def __repr__(self) -> str:
        return (
            f"UniformDiffusion(vocab_size={self.vocab_size}, schedule={self.schedule.name!r}, sampler={self.sampler!r})"
        )

    # forward process -------------------------------------------------------------------------
    def features(self, x_t: torch.Tensor) -> torch.Tensor:
        """One-hot features ``[B, L, K]``."""
        return F.one_hot(x_t, self.vocab_size).float()

    def _alpha(self, t: torch.Tensor | float, batch: int, device: torch.device) -> torch.Tensor:
        t = check_unit_times(t)
        return self.schedule.alpha(torch.as_tensor(t, dtype=torch.float32, device=device).expand(batch))

    def marginal(self, x0: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        """``q_t(x_t_i = v | x0)``: ``[B, L, K]``."""
        x0 = check_tokens(x0, self.vocab_size)
        alpha = self._alpha(t, x0.shape[0], x0.device)[:, None, None]
        return alpha * F.one_hot(x0, self.vocab_size).float() + (1.0 - alpha) / self.vocab_size

    def corrupt(
        self, x0: torch.Tensor, t: torch.Tensor | float, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Draw ``x_t ~ q_t(. | x0)`` at ``t`` (scalar or ``[B]``)."""
        x0 = check_tokens(x0, self.vocab_size)
        alpha = self._alpha(t, x0.shape[0], x0.device)
        keep = torch.rand(x0.shape, generator=generator, device=x0.device) < alpha[:, None]
        noise = torch.randint(0, self.vocab_size, x0.shape, generator=generator, device=x0.device)
        return torch.where(keep, x0, noise)

    def clean_log_likelihood(self, features: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``log q_t(x_t_i | x0_i = c)``, ``[B, L, K]`` (for exact posteriors)."""
        alpha = self._alpha(t, features.shape[0], features.device)[:, None, None]
        onehot = F.one_hot(features.argmax(-1), self.vocab_size).to(features.dtype)
        return torch.log(alpha * onehot + (1.0 - alpha) / self.vocab_size)

    # bound and loss --------------------------------------------------------------------------
    def elbo_terms(
        self, model: nn.Module, x0: torch.Tensor, t: torch.Tensor, *, generator: torch.Generator | None = None, **cond
    ) -> torch.Tensor:
        """One-sample estimate of the ELBO integrand at times ``t: [B]``, nats per position ``[B]`` (float64)."""
        x0 = check_tokens(x0, self.vocab_size)
        t = t.to(device=x0.device, dtype=torch.float32).clamp(*self.t_range)
        x_t = self.corrupt(x0, t, generator=generator)
        logits = check_logits(model(self.features(x_t), t, **cond), x_t.shape, self.vocab_size, self.name)
        probs = torch.softmax(logits.double(), dim=-1)
        integrand = uniform_elbo_integrand(probs, x_t, x0, self.schedule.alpha(t), self.schedule.alpha_prime(t))
        return integrand / x0.shape[1]

    # samplers --------------------------------------------------------------------------------
    def ancestral_probs(self, probs: torch.Tensor, x_t: torch.Tensor, alpha_t: float, alpha_s: float) -> torch.Tensor:
        """``p(x_s_i = j | x_t)`` ``[B, L, K]`` for ``s > t``: the exact posterior averaged over ``probs = p_theta``."""
        k = self.vocab_size
        onehot_v = F.one_hot(x_t, k).to(probs.dtype)
        q_v_given_c = alpha_t * onehot_v + (1.0 - alpha_t) / k  # q_t(v | c) over c
        w = probs / q_v_given_c
        mixed = alpha_s * w + (1.0 - alpha_s) / k * w.sum(-1, keepdim=True)  # sum_c q_s(j | c) w_c
        ratio = alpha_t / alpha_s
        q_v_given_j = ratio * onehot_v + (1.0 - ratio) / k
        return q_v_given_j * mixed

    def reverse_intensity(self, probs: torch.Tensor, x_t: torch.Tensor, alpha_t: float, alpha_s: float) -> torch.Tensor:
        """Expected jumps ``[B, L, K]`` from ``x_t`` to each token over ``[t, s]`` with rates frozen at ``t``."""
        k = self.vocab_size
        a, u = alpha_t, (1.0 - alpha_t) / k
        p_v = (probs * F.one_hot(x_t, k).to(probs.dtype)).sum(-1, keepdim=True)
        ratio = p_v * u / (a + u) + 1.0 - p_v + probs * (a / u)
        integrated_sigma = math.log(max(alpha_s, 1e-12)) - math.log(max(alpha_t, 1e-12))
        return integrated_sigma / k * ratio

    @torch.no_grad()
    def sample(
        self,
        model: nn.Module,
        n: int,
        length: int,
        *,
        steps: int,
        generator: torch.Generator | None = None,
        method: str | None = None,
        **cond: Any,
    ) -> DiscreteSample:
        """Run ``steps`` reverse steps from uniform noise with ``method`` (default: the process's ``sampler``)."""
        method = check_choice(method or self.sampler, UNIFORM_SAMPLERS, "uniform sampler")
        n, length, steps = check_sample_sizes(n, length, steps)
        device = model_device(model)
        x = torch.randint(0, self.vocab_size, (n, length), generator=generator, device=device)
        grid = torch.linspace(0.0, 1.0, steps + 1)
        alphas = self.schedule.alpha(grid).tolist()
        nfe = 0
        for k in range(steps):
            t = torch.full((n,), float(grid[k]), device=device)
            logits = check_logits(model(self.features(x), t, **cond), x.shape, self.vocab_size, self.name)
            probs = torch.softmax(logits.double(), dim=-1)
            nfe += evaluations_per_call(model)
            a_t = alphas[k]
            if k == steps - 1:
                x = sample_categorical(probs, generator=generator)
            elif method == "ancestral":
                x = sample_categorical(self.ancestral_probs(probs, x, a_t, alphas[k + 1]), generator=generator)
            else:
                intensity = self.reverse_intensity(probs, x, a_t, alphas[k + 1])
                x = ctmc_jump(x, intensity, generator=generator, method=method)
        return DiscreteSample(tokens=x, nfe=nfe)
