"""Wright-Fisher processes on tokens: the discrete mutation chain and its Gaussian limit.

Implements part of "A Unification of Discrete, Gaussian, and Simplicial Diffusion"
(Chandra, Li, Amin, Ali, Rollins, Wilson; ICLR 2026): discrete, Gaussian and simplicial
diffusion are the same Wright-Fisher (WF) population process seen at different population
sizes. Every process here shares

- the mutation model: parent-independent mutation at total rate ``psi`` towards the
  stationary law ``pi`` (uniform by default), generator ``L = (psi / 2) (1 pi^T - I)``,
  so that ``E[x_tau | x0] = pi + exp(-psi tau / 2) (onehot(x0) - pi)`` in all three domains;
- the time map: ``alpha(tau) = exp(-psi tau / 2)`` is linear in ``t`` between ``alpha(tau_max)``
  at ``t = 0`` (noise) and ``alpha(tau_min)`` at ``t = 1`` (data), the "linear" schedule of masked
  and uniform diffusion, so all processes spend training time where the clean token becomes
  identifiable (``tau`` of order 1) rather than on tiny ``tau``, where the likelihood term makes
  the posterior exact anyway;
- the sufficient-statistic input: ``features`` is the posterior of the clean token of each
  position given that position's noisy state under a uniform prior, ``softmax_b log q(x_tau | b)``
  (``[B, L, K]``, on the simplex). It is the same object in every domain (for the chain the
  likelihood of the observed letter, for the Gaussian ``alpha z_b / sigma^2``, for the simplex
  the Dirichlet-mixture likelihood ratio), so one :class:`~gencore.discrete.network.TokenDenoiser`
  with ``input_dim = K`` serves all three;
- the likelihood-augmented posterior: the denoiser's logits ``f`` are combined with the exact
  per-position log-likelihood, ``p(x0_l = b | x_tau) propto exp(f_lb) q(x_tau,l | b)``, which is
  the exact posterior when ``f`` is the posterior from the other positions (the "hollow"
  factorisation); at small ``tau`` the likelihood makes the prediction exact in float64 instead
  of asking the network for astronomically small probabilities;
- the bound: ``-log p(x0) <= KL(q(x_taumax | x0) || prior) + int path-KL rate dtau +
  E[-log p(x0 | x_taumin)]`` per position, with the decoder ``p(b | x) propto q(x | b)``. The
  path-KL rate is the Girsanov / jump-process KL between the reverse process conditioned on
  ``x0`` and the model's reverse process. All bounds are in nats per position.

:class:`WrightFisherDiscrete`: one lineage's type follows the mutation chain, ``exp(tau L) =
e^{-psi tau/2} I + (1 - e^{-psi tau/2}) 1 pi^T``; the rate KL is the CTMC ELBO of Campbell et
al. 2022 with the reverse rates ``R(x -> y) = (psi / 2) pi_x sum_b p(b | x_tau) q(y | b) / q(x | b)``.

:class:`WrightFisherGaussian`: the large-population limit in which the type frequencies fluctuate
like a Gaussian around the mutation mean. It is the Ornstein-Uhlenbeck process
``dz = (psi / 2)(pi - z) dtau + sigma_inf sqrt(psi) dW`` on the one-hot coordinates, with the
WF mean and the WF stationary per-coordinate variance ``sigma_inf^2 = sum_i pi_i (1 - pi_i) /
(K (psi + 1))`` (the state-dependent WF covariance frozen at its stationary value, isotropic).
Its bound is the variational-diffusion bound of Kingma et al. 2021 (VDM) with a categorical
decoder as in CDCD (Dieleman et al. 2022): the latents are continuous but ``p(x0 | z_taumin)``
is a probability mass function, so the ELBO of the joint ``p(x0, z_path)`` bounds the discrete
log-likelihood in nats, no dequantisation involved.

The simplicial process lives in :mod:`gencore.discrete.simplex`.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from gencore.discrete.base import (
    DiscreteProcess,
    DiscreteSample,
    check_logits,
    check_sample_sizes,
    check_tokens,
    check_unit_times,
)
from gencore.discrete.ctmc import evaluations_per_call, sample_categorical, stratified_times
from gencore.errors import ConfigError, InputError

__all__ = ["WrightFisherDiscrete", "WrightFisherGaussian", "WrightFisherProcess"]


class WrightFisherProcess(DiscreteProcess):
    """Shared mutation model, time map, posterior parameterisation and bound of the WF processes.

    A subclass gives the forward marginal (:meth:`forward_sample`), the per-position log-likelihood
    ``log q(x_tau | b)`` (:meth:`log_likelihood`), the path-KL rate per unit ``tau``
    (:meth:`_kl_rate`), the prior KL, the decoder NLL and one reverse step.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        psi: float = 2.0,
        stationary: torch.Tensor | None = None,
        tau_min: float = 1e-4,
        tau_max: float = 10.0,
    ) -> None:
        if vocab_size < 2:
            raise ConfigError(f"a Wright-Fisher process needs vocab_size >= 2, got {vocab_size}.")
        if not psi > 0:
            raise ConfigError(f"the mutation rate psi must be positive, got {psi}.")
        if not 0 < tau_min < tau_max:
            raise ConfigError(f"need 0 < tau_min < tau_max, got tau_min={tau_min}, tau_max={tau_max}.")
        pi = torch.full((vocab_size,), 1.0 / vocab_size, dtype=torch.float64)
        if stationary is not None:
            pi = torch.as_tensor(stationary, dtype=torch.float64).flatten()
            if pi.shape != (vocab_size,) or bool((pi <= 0).any()) or abs(float(pi.sum()) - 1) > 1e-6:
                raise ConfigError(f"stationary must be {vocab_size} positive probabilities summing to 1.")
            pi = pi / pi.sum()
        self.vocab_size = vocab_size
        self.input_dim = vocab_size
        self.psi = float(psi)
        self.pi = pi
        self.tau_min = float(tau_min)
        self.tau_max = float(tau_max)

    # ------------------------------------------------------------------ time map
    def tau(self, t: torch.Tensor) -> torch.Tensor:
        """``tau(t) = -(2/psi) log alpha(t)``, ``alpha(t) = alpha_0 + t (alpha_1 - alpha_0)`` (float64).

        ``alpha = exp(-psi tau / 2)`` runs linearly from ``alpha_0 = alpha(tau_max)`` at ``t = 0`` to
        ``alpha_1 = alpha(tau_min)`` at ``t = 1`` (the "linear" schedule of masked / uniform diffusion).
        """
        t = torch.as_tensor(t, dtype=torch.float64)
        a0, a1 = math.exp(-0.5 * self.psi * self.tau_max), math.exp(-0.5 * self.psi * self.tau_min)
        return -(2.0 / self.psi) * torch.log(a0 + t * (a1 - a0))

    def t_of_tau(self, tau: torch.Tensor | float) -> torch.Tensor:
        """The inverse of :meth:`tau`."""
        tau = torch.as_tensor(tau, dtype=torch.float64)
        a0, a1 = math.exp(-0.5 * self.psi * self.tau_max), math.exp(-0.5 * self.psi * self.tau_min)
        return (self.keep(tau) - a0) / (a1 - a0)

    def dtau_dt(self, t: torch.Tensor) -> torch.Tensor:
        """``|d tau / d t| = (2/psi)(alpha_1 - alpha_0) / alpha(t)``."""
        a0, a1 = math.exp(-0.5 * self.psi * self.tau_max), math.exp(-0.5 * self.psi * self.tau_min)
        return (2.0 / self.psi) * (a1 - a0) * torch.exp(0.5 * self.psi * self.tau(t))

    def keep(self, tau: torch.Tensor) -> torch.Tensor:
        """``alpha(tau) = exp(-psi tau / 2)``, the weight of the clean token in the mean."""
        return torch.exp(-0.5 * self.psi * tau)

    def _tokens_and_times(self, x0: torch.Tensor, t: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        """``x0`` checked and ``t`` (a scalar or one time per sequence) broadcast to ``[B]`` float64."""
        x0 = check_tokens(x0, self.vocab_size)
        t = check_unit_times(torch.as_tensor(t, dtype=torch.float64))
        if t.dim() > 1 or t.numel() not in (1, x0.shape[0]):
            raise InputError(
                f"t must be a scalar or hold one time per sequence ({x0.shape[0]}), got shape {tuple(t.shape)}."
            )
        return x0, t.reshape(-1).expand(x0.shape[0])

    # ------------------------------------------------------------------ interface pieces
    @abstractmethod
    def forward_sample(
        self, x0: torch.Tensor, t: torch.Tensor | float, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A draw of the noisy state ``x_tau(t) | x0`` at ``t`` (scalar or ``[B]``); the representation depends on
        the process."""

    @abstractmethod
    def log_likelihood(self, state: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """``log q(x_tau,l | x0_l = b)`` up to a constant per position, ``[B, L, K]`` float64."""

    def features(self, state: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Network input ``[B, L, K]`` float32: the uniform-prior posterior ``softmax_b log q(x_tau | b)``."""
        return torch.softmax(self.log_likelihood(state, self.tau(t)), dim=-1).float()

    def posterior(self, model: nn.Module, state: torch.Tensor, t: torch.Tensor, **cond: Any) -> torch.Tensor:
        """Log of the model posterior ``p(x0_l = b | x_tau)`` ``[B, L, K]`` float64 (likelihood-augmented)."""
        logits = model(self.features(state, t), t.float(), **cond)
        logits = check_logits(logits, state.shape[:2], self.vocab_size, self.name)
        return torch.log_softmax(logits.to(torch.float64) + self.log_likelihood(state, self.tau(t)), dim=-1)

    # ------------------------------------------------------------------ loss and bound
    @abstractmethod
    def _kl_rate(self, log_post: torch.Tensor, x0: torch.Tensor, state: torch.Tensor, tau: torch.Tensor):
        """Path-KL rate per unit ``tau`` for every position ``[B, L]`` given the model log-posterior."""

    @abstractmethod
    def _prior_kl(self, x0: torch.Tensor, *, generator: torch.Generator | None) -> torch.Tensor:
        """``KL(q(x_taumax | x0) || prior)`` per position ``[B, L]``."""

    @abstractmethod
    def _decoder_nll(self, x0: torch.Tensor, *, generator: torch.Generator | None) -> torch.Tensor:
        """``E[-log p(x0 | x_taumin)]`` per position ``[B, L]`` with the likelihood decoder."""

    def _diffusion_term(
        self, model: nn.Module, x0: torch.Tensor, t: torch.Tensor, generator: torch.Generator | None, cond: dict
    ) -> torch.Tensor:
        """``|dtau/dt| * KL rate`` at times ``t: [B]``, averaged over positions: ``[B]`` float64."""
        state = self.forward_sample(x0, t, generator=generator)
        log_post = self.posterior(model, state, t, **cond)
        rate = self._kl_rate(log_post, x0, state, self.tau(t))
        return self.dtau_dt(t) * rate.mean(dim=1)

    def loss(
        self, model: nn.Module, x0: torch.Tensor, *, generator: torch.Generator | None = None, **cond: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The diffusion part of the negative ELBO (nats per position), one stratified time per sequence."""
        x0 = check_tokens(x0, self.vocab_size)
        t = stratified_times(x0.shape[0], generator=generator, device=x0.device)
        per_seq = self._diffusion_term(model, x0, t, generator, cond)
        loss = per_seq.mean()
        return loss.float(), {"loss": loss.detach()}

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
        """Negative ELBO in nats per position ``[B]``: prior KL + diffusion integral + decoder NLL."""
        x0 = check_tokens(x0, self.vocab_size)
        if n_time < 1:
            raise ConfigError(f"n_time must be >= 1, got {n_time}.")
        total = self._prior_kl(x0, generator=generator).mean(1) + self._decoder_nll(x0, generator=generator).mean(1)
        # one stratified time per stratum, shared by the batch (unbiased for every sequence)
        offset = torch.rand((), generator=generator, dtype=torch.float64)
        for i in range(n_time):
            t = ((i + offset) / n_time).clamp(0.0, 1.0).expand(x0.shape[0])
            total = total + self._diffusion_term(model, x0, t, generator, cond) / n_time
        return total.float()

    # ------------------------------------------------------------------ sampling
    @abstractmethod
    def _prior_sample(self, n: int, length: int, generator: torch.Generator | None) -> torch.Tensor:
        """``n`` draws of the state at ``tau_max`` from the stationary prior."""

    @abstractmethod
    def _reverse_step(self, state, log_post, tau_t, tau_s, generator):
        """One reverse step of the state from ``tau_t`` to ``tau_s < tau_t`` given the model log-posterior."""

    @torch.no_grad()
    def sample(
        self,
        model: nn.Module,
        n: int,
        length: int,
        *,
        steps: int,
        generator: torch.Generator | None = None,
        progress: bool = False,
        **cond: Any,
    ) -> DiscreteSample:
        """Ancestral sampling on the geometric ``tau`` grid from ``tau_max`` to ``tau_min``, then the decoder."""
        n, length, steps = check_sample_sizes(n, length, steps)
        state = self._prior_sample(n, length, generator)
        grid = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)
        for i in tqdm(range(steps), disable=not progress, desc=f"{self.name} sampling"):
            t = torch.full((n,), float(grid[i]), dtype=torch.float64)
            log_post = self.posterior(model, state, t, **cond)
            state = self._reverse_step(state, log_post, self.tau(grid[i]), self.tau(grid[i + 1]), generator)
        tau_end = self.tau(torch.ones(n, dtype=torch.float64))
        decoder = torch.softmax(self.log_likelihood(state, tau_end), dim=-1)
        tokens = sample_categorical(decoder, generator=generator)
        return DiscreteSample(tokens=tokens, nfe=steps * evaluations_per_call(model))


class WrightFisherDiscrete(WrightFisherProcess):
    """Discrete WF process: a single lineage mutating with ``L = (psi/2)(1 pi^T - I)``; state = tokens ``[B, L]``."""

    name = "wf-discrete"

    def transition(self, tau: torch.Tensor) -> torch.Tensor:
        """``exp(tau L)`` in closed form, ``[..., K, K]`` float64 (rows: from, columns: to)."""
        a = self.keep(tau.to(torch.float64))[..., None, None]
        eye = torch.eye(self.vocab_size, dtype=torch.float64, device=tau.device)
        return a * eye + (1 - a) * self.pi.to(tau.device)

    def generator_matrix(self) -> torch.Tensor:
        """The mutation generator ``L`` ``[K, K]`` float64."""
        k = self.vocab_size
        return 0.5 * self.psi * (torch.ones(k, 1, dtype=torch.float64) * self.pi[None, :] - torch.eye(k))

    def forward_sample(self, x0, t, *, generator=None):
        x0, t = self._tokens_and_times(x0, t)
        probs = self.transition(self.tau(t))[torch.arange(x0.shape[0])[:, None], x0]  # [B, L, K]
        return sample_categorical(probs, generator=generator)

    def log_likelihood(self, state, tau):
        q = self.transition(tau)  # [B, K(b), K(x)]
        idx = state[:, None, :].expand(-1, self.vocab_size, -1)  # [B, K, L]
        return torch.gather(q, 2, idx).transpose(1, 2).log()  # [B, L, K(b)]

    def _kl_rate(self, log_post, x0, state, tau):
        q = self.transition(tau)  # [B, b, y]
        pi = self.pi.to(state.device)
        q_x = torch.gather(q, 2, state[:, None, :].expand(-1, self.vocab_size, -1)).transpose(1, 2)  # [B,L,b]
        ratio = q[:, None, :, :] / q_x[..., None]  # q(y|b) / q(x|b): [B, L, b, y]
        r_model = (log_post.exp()[..., None] * ratio).sum(2)  # [B, L, y]
        r_true = torch.gather(ratio, 2, x0[:, :, None, None].expand(-1, -1, 1, self.vocab_size)).squeeze(2)
        term = r_model - r_true + r_true * (r_true.log() - r_model.log())
        term = term.masked_fill(nn.functional.one_hot(state, self.vocab_size).bool(), 0.0)
        return 0.5 * self.psi * pi[state] * term.sum(-1)

    def _prior_kl(self, x0, *, generator):
        q = self.transition(torch.tensor(self.tau_max, dtype=torch.float64))[x0]  # [B, L, K]
        return (q * (q.log() - self.pi.log())).sum(-1)

    def _decoder_nll(self, x0, *, generator):
        q = self.transition(torch.tensor(self.tau_min, dtype=torch.float64))  # [b, x]
        log_dec = torch.log_softmax(q.log(), dim=0)  # p(b | x) over b
        per_x0 = -(q * log_dec).sum(-1)  # sum_x q(x|x0) (-log p(x0|x))
        return per_x0[x0]

    def _prior_sample(self, n, length, generator):
        return sample_categorical(self.pi.expand(n, length, -1), generator=generator)

    def _reverse_step(self, state, log_post, tau_t, tau_s, generator):
        step = self.transition(tau_t - tau_s)  # q(x_t | x_s): [s, t]
        q_s = self.transition(tau_s)  # q(x_s | b): [b, s]
        like = step[:, state].permute(1, 2, 0)  # q(x_t | x_s) for each x_s: [B, L, s]
        joint = q_s[None, None] * like[:, :, None, :]  # [B, L, b, s]
        cond = joint / joint.sum(-1, keepdim=True)
        probs = (log_post.exp()[..., None] * cond).sum(2)
        return sample_categorical(probs, generator=generator)


class WrightFisherGaussian(WrightFisherProcess):
    """Gaussian (OU) limit of the WF process on the one-hot coordinates; state ``z: [B, L, K]`` float64."""

    name = "wf-gaussian"

    def __init__(self, vocab_size: int, **kwargs: Any) -> None:
        super().__init__(vocab_size, **kwargs)
        self.sigma2_inf = float((self.pi * (1 - self.pi)).sum()) / (vocab_size * (self.psi + 1))

    def sigma2(self, tau: torch.Tensor) -> torch.Tensor:
        """Marginal variance ``sigma_inf^2 (1 - alpha^2)`` per coordinate."""
        return -self.sigma2_inf * torch.expm1(-self.psi * tau)

    def mean(self, x0: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        a = self.keep(tau)[:, None, None]
        onehot = nn.functional.one_hot(x0, self.vocab_size).to(torch.float64)
        return self.pi + a * (onehot - self.pi)

    def forward_sample(self, x0, t, *, generator=None):
        x0, t = self._tokens_and_times(x0, t)
        tau = self.tau(t)
        noise = torch.randn((*x0.shape, self.vocab_size), generator=generator, dtype=torch.float64)
        return self.mean(x0, tau) + self.sigma2(tau).sqrt()[:, None, None] * noise

    def log_likelihood(self, state, tau):
        # -|z - mu_b|^2 / (2 s2) up to b-independent terms, mu_b = pi + alpha (e_b - pi)
        a = self.keep(tau)[:, None, None]
        s2 = self.sigma2(tau)[:, None, None]
        return (a * (state - self.pi) - 0.5 * a * a * (1 - 2 * self.pi)) / s2

    def _kl_rate(self, log_post, x0, state, tau):
        a2 = self.keep(tau) ** 2
        coef = 0.5 * self.psi * a2 / (self.sigma2_inf * (-torch.expm1(-self.psi * tau)) ** 2)
        err = log_post.exp() - nn.functional.one_hot(x0, self.vocab_size)
        return coef[:, None] * (err * err).sum(-1)

    def _prior_kl(self, x0, *, generator):
        tau = torch.full((x0.shape[0],), self.tau_max, dtype=torch.float64)
        s2, a = self.sigma2(tau)[:, None], self.keep(tau)[:, None]
        onehot = nn.functional.one_hot(x0, self.vocab_size).to(torch.float64)
        dist2 = ((a[..., None] * (onehot - self.pi)) ** 2).sum(-1)
        k = self.vocab_size
        ratio = s2 / self.sigma2_inf
        return 0.5 * (k * ratio + dist2 / self.sigma2_inf - k - k * ratio.log())

    def _decoder_nll(self, x0, *, generator):
        t = torch.ones(x0.shape[0], dtype=torch.float64)
        z = self.forward_sample(x0, t, generator=generator)
        log_dec = torch.log_softmax(self.log_likelihood(z, self.tau(t)), dim=-1)
        return -torch.gather(log_dec, 2, x0[..., None]).squeeze(-1)

    def _prior_sample(self, n, length, generator):
        noise = torch.randn(n, length, self.vocab_size, generator=generator, dtype=torch.float64)
        return self.pi + math.sqrt(self.sigma2_inf) * noise

    def _reverse_step(self, state, log_post, tau_t, tau_s, generator):
        a_t, a_s = self.keep(tau_t), self.keep(tau_s)
        a_ts = a_t / a_s
        s2_t, s2_s = self.sigma2(tau_t), self.sigma2(tau_s)
        s2_ts = -self.sigma2_inf * torch.expm1(-self.psi * (tau_t - tau_s))
        x0_mean = log_post.exp() - self.pi  # E[e_x0 - pi | x_t]
        mean = self.pi + (s2_ts * a_s / s2_t) * x0_mean + (a_ts * s2_s / s2_t) * (state - self.pi)
        var = s2_s * s2_ts / s2_t
        noise = torch.randn(state.shape, generator=generator, dtype=torch.float64)
        return mean + var.sqrt() * noise


def __getattr__(name: str) -> Any:
    """Lazy re-export of the simplicial classes (they live in :mod:`gencore.discrete.simplex`, which imports this)."""
    if name in ("WrightFisherSimplex", "JacobiDirichletSDE"):
        from gencore.discrete import simplex

        return getattr(simplex, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
