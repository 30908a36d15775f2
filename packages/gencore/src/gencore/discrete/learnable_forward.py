"""Few-step discrete diffusion with a learnable, non-Markovian forward process.

Reference: "Forward-Learned Discrete Diffusion: Learning how to noise to denoise faster" (FLDD),
ICLR 2026 (arXiv:2605.18204). Instead of a fixed Markov noising chain the forward process is defined
by learnable per-step marginals ``q_phi(z_s | x)`` and, between consecutive steps, the posterior
``q(z_{s-1} | z_s, x)`` given by the *maximum coupling* of the two marginals. The reverse model stays
factorised over positions and is trained jointly with ``phi`` on the usual T-step variational bound.

Discrete steps ``s = 0..T``: ``z_0 = x`` (data) and ``z_T`` = all mask (pure noise). Every position
``i`` has its own marginal ``q_phi(z_s^i | x^i)`` over ``K + 1`` states (the ``K`` tokens and the mask
``K``), one categorical per (step, position, clean token); the marginals of the inner steps
``1..T-1`` are learned and start at the linear masking schedule ``q(z_s = mask | x) = s / T``.
With ``learnable=False`` they *are* the masking schedule, and the maximum-coupling posterior reduces
to masked diffusion's posterior (unmask with probability ``1/s``): the fixed-schedule baseline with the
same T-step bound and sampler.

Maximum coupling. For consecutive marginals ``a = q(z_{s-1} | x)`` and ``b = q(z_s | x)`` the coupling
that maximises ``P(z_{s-1} = z_s)`` keeps the shared mass ``min(a, b)`` on the diagonal and moves the
excess ``a - min(a, b)`` independently; as a conditional (:func:`maximum_coupling_posterior`)::

    q(z_{s-1} = j | z_s = k, x) = r_k [j = k] + (1 - r_k) (a_j - min(a_j, b_j)) / TV(a, b),
    r_k = min(1, a_k / b_k),

so a state is kept with probability ``r_k`` and otherwise jumps to a state drawn from the excess of
``a``. Summed against ``b`` it returns ``a`` exactly and ``P(z_{s-1} = z_s) = sum_k min(a_k, b_k)``.

Reverse model (the x0-parameterisation of masked diffusion, unchanged):
``p_theta(z_{s-1}^i | z_s) = sum_k w_k q(z_{s-1}^i | z_s^i, x^i = k)`` with
``w = softmax(logits_i + log q_phi(z_s^i | x^i = k))``: the denoiser's logits at time
``t = 1 - s / T`` (suite convention, ``t = 1`` data) reweighted by how likely each clean token makes the
observed state. For the masking schedule the reweighting is exactly the usual carry-over of unmasked
tokens; in general it zeroes clean tokens that cannot have produced ``z_s^i``. The optimal denoiser
logits are ``log q(x^i = k | z_s) - log q_phi(z_s^i | x^i = k)``.

Bound (negative ELBO, nats per position): ``sum_{s=1}^{T} E_{z_s ~ q_phi(z_s | x)}
sum_i KL(q(z_{s-1}^i | z_s^i, x^i) || p_theta(z_{s-1}^i | z_s)) / L``; the ``s = 1`` term is the
reconstruction ``-log p_theta(x | z_1)`` and the prior term is zero because ``z_T`` is all mask under
both processes. Each term needs one sample of the *marginal* ``z_s`` only (the forward is
non-Markovian, so no path is simulated).

Gradients for ``phi``: the expectations over ``z_s`` are over discrete states. After an optional
warm-up (``warmup_fraction`` of training, ``phi`` held at its initial masking schedule while the reverse
model learns), for the next ``gumbel_fraction`` of training ``z_s`` is drawn with the straight-through
Gumbel-softmax (the forward value is an exact sample, the backward pass uses the relaxed sample at
temperature ``tau``, annealed geometrically from ``tau_start`` to ``tau_end``; see
:meth:`LearnableForwardProcess.temperature`).
Afterwards gradients are unbiased REINFORCE: each sequence gets ``reinforce_samples`` independent
``z_s`` per step and the score-function term of each uses the leave-one-out mean of the others as
baseline.

The straight-through phase is biased, and for this objective in one direction: it linearises the KL
around the drawn state, so moving position ``i`` to another state is priced with the posterior row of
that state against the reverse prediction made *for the drawn state*. Re-masking a revealed token is
priced at ``-log p_theta(mask | revealed)``, large because a trained reverse model gives that transition
almost no mass, so the estimate pushes the marginals towards revealing everything at the inner steps. On
binarised digits (T = 4, L = 64, reverse model trained 300 steps at masking, then frozen) its mean gradient
on ``SequenceForwardProcess``'s gate is +0.55 where finite differences of the bound give -0.011 and the
REINFORCE mean -0.017; 80 phi-only steps with it raise the bound from 0.393 to 1.02 nats per position
while REINFORCE leaves it at 0.393 (``benchmarks/diag_fldd_phi_gradient.py``). ``gumbel_fraction=0``
goes from the warm-up straight to REINFORCE.

Differences from the paper: marginals here depend on ``(step, position, x^i)`` only, not on
the whole sequence ``x`` through a network, which keeps ``p_theta`` an exact mixture over one
position's clean token; and the time passed to the network is the step index mapped to ``[0, 1]``.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.discrete.base import DiscreteProcess, DiscreteSample, check_logits, check_sample_sizes, check_tokens
from gencore.discrete.ctmc import evaluations_per_call
from gencore.errors import ConfigError, InputError

LOG_FLOOR = -1.0e4  # stands in for log(0) in tables contracted with one-hot states
_P_FLOOR = 1.0e-30


def floored_log(p: torch.Tensor) -> torch.Tensor:
    """``log p`` with ``log 0`` replaced by :data:`LOG_FLOOR` (finite, so it can be contracted with one-hot states)."""
    return torch.log(p.clamp_min(_P_FLOOR)).masked_fill(p <= 0, LOG_FLOOR)


def maximum_coupling_posterior(prev: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
    """Conditional ``q(z_{s-1} = j | z_s = k)`` of the maximum coupling of two categoricals.

    Args:
        prev: ``[..., S]`` probabilities of ``z_{s-1}`` (``a``); cur: ``[..., S]`` probabilities of ``z_s`` (``b``).

    Returns:
        ``[..., S, S]`` with rows indexed by ``k`` (the state of ``z_s``) and columns by ``j``. Rows of
        states with ``b_k = 0`` (never conditioned on) keep the state. Differentiable in both inputs.
    """
    if prev.shape != cur.shape:
        raise InputError(f"marginals must have the same shape, got {tuple(prev.shape)} and {tuple(cur.shape)}.")
    shared = torch.minimum(prev, cur)
    excess = prev - shared
    tv = excess.sum(-1, keepdim=True)
    jump = excess / tv.clamp_min(1e-12)
    positive = cur > 0
    ratio = torch.where(positive, prev / torch.where(positive, cur, torch.ones_like(cur)), torch.ones_like(cur))
    stay = ratio.clamp(max=1.0)
    eye = torch.eye(prev.shape[-1], dtype=prev.dtype, device=prev.device)
    return stay[..., :, None] * eye + (1.0 - stay)[..., :, None] * jump[..., None, :]


def initial_logits(vocab_size: int, steps: int, init_floor: float) -> torch.Tensor:
    """Logits ``[steps - 1, K, K + 1]`` of the initial inner marginals (rows: clean token, columns: state).

    The linear masking schedule (``x`` kept with ``1 - s / T``, masked with ``s / T``) plus a small mass
    ``init_floor * s / T`` on each other token, so that every state can be reached and the other tokens' mass
    *grows* with ``s``. Equal masses at consecutive steps would sit exactly on the kink of the maximum coupling
    (``min(a, b)`` with ``a = b``), where autograd returns neither one-sided derivative: with a constant
    floor the gradient of the bound at the masking schedule came out wrong, for one step with the wrong sign
    (see ``tests/test_learnable_forward.py``), and the warm-up releases phi exactly there.
    """
    k = vocab_size
    frac = torch.arange(1, steps, dtype=torch.float32)[:, None, None] / steps  # [T - 1, 1, 1]
    eye = torch.eye(k)
    tokens = eye * torch.log(1 - frac) + (1 - eye) * torch.log(init_floor * frac)
    return torch.cat([tokens, torch.log(frac).expand(-1, k, 1)], dim=-1)


def repeat_cond(cond: dict[str, Any], times: int) -> dict[str, Any]:
    """Conditioning tensors repeated row-wise ``times`` times (as ``repeat_interleave``); scalars pass through."""
    return {k: v.repeat_interleave(times, dim=0) if torch.is_tensor(v) and v.dim() > 0 else v for k, v in cond.items()}


def masking_marginals(vocab_size: int, length: int, steps: int) -> torch.Tensor:
    """Linear masking schedule as marginals ``[steps + 1, length, K, K + 1]``: ``q(z_s = mask | x) = s / steps``."""
    k = vocab_size
    frac = torch.arange(steps + 1, dtype=torch.float32) / steps
    table = torch.zeros(steps + 1, length, k, k + 1)
    table[..., :k] = (1 - frac)[:, None, None, None] * torch.eye(k)
    table[..., k] = frac[:, None, None]
    return table


class FewStepForward(nn.Module, DiscreteProcess):
    """What every T-step learned-forward process shares: the training phases and the bound's estimators.

    Subclasses define how ``z_s ~ q_phi(z_s | x)`` is drawn and scored (:meth:`_terms`), whether ``phi``
    is learned (:attr:`_learns`), and the sampler. Phases follow ``progress`` (:meth:`update_schedule`):
    warm-up (``phi`` held), straight-through Gumbel-softmax with annealed temperature, then REINFORCE with
    a leave-one-out baseline over ``reinforce_samples`` draws per sequence.
    """

    def __init__(
        self,
        vocab_size: int,
        length: int,
        steps: int,
        *,
        warmup_fraction: float,
        gumbel_fraction: float,
        tau_start: float,
        tau_end: float,
        reinforce_samples: int,
        init_floor: float,
    ) -> None:
        nn.Module.__init__(self)
        kind = type(self).__name__
        if vocab_size < 1 or length < 1 or steps < 1:
            raise ConfigError(f"{kind} needs vocab_size, length and steps >= 1, got {vocab_size}, {length}, {steps}.")
        if not (0.0 <= warmup_fraction <= 1.0 and 0.0 <= gumbel_fraction <= 1.0):
            raise ConfigError(
                f"warmup_fraction and gumbel_fraction must lie in [0, 1], got {warmup_fraction} and {gumbel_fraction}."
            )
        if not (tau_start > 0 and tau_end > 0):
            raise ConfigError(f"Gumbel temperatures must be positive, got tau_start={tau_start}, tau_end={tau_end}.")
        if reinforce_samples < 2:
            raise ConfigError(f"reinforce_samples must be >= 2 (leave-one-out baseline), got {reinforce_samples}.")
        if not 0.0 < init_floor < 1.0:
            raise ConfigError(f"init_floor must lie in (0, 1), got {init_floor}.")
        self.vocab_size = vocab_size
        self.length = length
        self.steps = steps
        self.input_dim = vocab_size + 1
        self.mask_index = vocab_size
        self.warmup_fraction = warmup_fraction
        self.gumbel_fraction = gumbel_fraction
        self.tau_start = tau_start
        self.tau_end = tau_end
        self.reinforce_samples = reinforce_samples
        self.progress = 0.0

    # ----------------------------------------------------------------- schedule
    def update_schedule(self, progress: float) -> None:
        """Set the training progress in ``[0, 1]`` (fraction of optimisation steps done)."""
        if not 0.0 <= float(progress) <= 1.0:
            raise InputError(f"progress must lie in [0, 1], got {progress}.")
        self.progress = float(progress)

    @property
    def phase(self) -> str:
        """``"warmup"``, ``"gumbel"``, ``"reinforce"`` (learnable) or ``"fixed"`` at the current progress."""
        if not self._learns:
            return "fixed"
        if self.progress < self.warmup_fraction:
            return "warmup"
        return "gumbel" if self.progress < self.warmup_fraction + self.gumbel_fraction else "reinforce"

    @property
    def temperature(self) -> float:
        """Gumbel temperature ``tau_start * (tau_end / tau_start) ** frac``, ``frac`` the Gumbel phase's share done."""
        if self.gumbel_fraction == 0.0:
            return self.tau_end
        frac = min(max(self.progress - self.warmup_fraction, 0.0) / self.gumbel_fraction, 1.0)
        return self.tau_start * (self.tau_end / self.tau_start) ** frac

    def _draw(
        self, logq: torch.Tensor, generator: torch.Generator | None, tau: float | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Gumbel-max sample of ``softmax(logq)``: hard indices and the state features.

        With ``tau`` the features are straight-through (one-hot forward, relaxed gradient at ``tau``).
        """
        u = torch.rand(logq.shape, generator=generator, device=logq.device).clamp_(1e-20, 1.0 - 1e-7)
        perturbed = logq - torch.log(-torch.log(u))
        idx = perturbed.argmax(-1)
        hard = F.one_hot(idx, logq.shape[-1]).to(logq.dtype)
        if tau is None:
            return idx, hard
        soft = torch.softmax(perturbed / tau, dim=-1)
        return idx, hard + soft - soft.detach()

    # ---------------------------------------------------------- DiscreteProcess
    def loss(
        self, model: nn.Module, x0: torch.Tensor, *, generator: torch.Generator | None = None, **cond: Any
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Differentiable surrogate of the T-step bound (nats per position) and metrics.

        Each sequence draws one step ``s`` uniformly from ``1..T`` (the bound is ``T`` times the mean
        term, so one network call per sequence and replicate). The value's gradient is an unbiased
        estimate of the bound's gradient for theta in every phase; for phi it is a straight-through
        Gumbel estimate (Gumbel phase) or an unbiased REINFORCE estimate whose ``reinforce_samples``
        replicates of ``z_s`` (same ``s``) serve as each other's leave-one-out baseline.
        ``metrics["bound"]`` is the batch's estimate of the bound (nats per position), ``metrics["temperature"]``
        the Gumbel temperature (0 outside the Gumbel phase) and ``metrics["reinforce"]`` 1 in the REINFORCE phase.
        """
        x0 = self._check_x0(x0)
        phase = self.phase
        tau = self.temperature if phase == "gumbel" else None
        repeats = self.reinforce_samples if phase == "reinforce" else 1
        steps = torch.randint(1, self.steps + 1, (x0.shape[0], 1), generator=generator, device=x0.device)
        kl, logprob = self._terms(model, x0, steps, repeats, generator, tau, cond)
        kl, logprob = self.steps * kl[..., 0], logprob[..., 0]  # [B, repeats]
        objective = kl
        if phase == "reinforce":
            value = kl.detach()
            baseline = (value.sum(1, keepdim=True) - value) / (repeats - 1)
            objective = kl + (value - baseline) * logprob
        loss = objective.mean() / self.length
        bound = kl.detach().mean() / self.length
        metrics = {
            "loss": bound,
            "bound": bound,
            "temperature": float(tau) if tau is not None else 0.0,  # 0: no relaxation in this phase
            "reinforce": 1.0 if phase == "reinforce" else 0.0,
        }
        return loss, metrics

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
        """Exact T-step bound, nats per position ``[B]``; the expectations over ``z_s`` use ``n_time`` draws each."""
        x0 = self._check_x0(x0)
        if n_time < 1:
            raise ConfigError(f"n_time must be >= 1, got {n_time}.")
        rows_per_chunk = max(1, 65536 // (self.steps * n_time * self.length))  # ~65k tokens per network call
        out = []
        for start in range(0, x0.shape[0], rows_per_chunk):
            sl = slice(start, start + rows_per_chunk)
            ccond = {k: (v[sl] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in cond.items()}
            xs = x0[sl]
            steps = torch.arange(1, self.steps + 1, device=x0.device).expand(xs.shape[0], -1)
            kl, _ = self._terms(model, xs, steps, n_time, generator, None, ccond)
            out.append(kl.sum(-1).mean(1) / self.length)
        return torch.cat(out)

    def _check_x0(self, x0: torch.Tensor) -> torch.Tensor:
        """Tokens in ``[0, K)`` of the length the process was built for."""
        x0 = check_tokens(x0, self.vocab_size)
        if x0.shape[1] != self.length:
            raise InputError(f"x0 must have length {self.length}, got {x0.shape[1]}.")
        return x0

    def _check_sample(self, steps: int | None, length: int) -> None:
        """The sampler runs exactly the ``T`` steps and the length the process was built for."""
        if steps is not None and steps != self.steps:
            raise ConfigError(f"this process was built for {self.steps} steps and samples with exactly that many.")
        if length != self.length:
            raise ConfigError(f"this process was built for length {self.length}, got {length}.")

    @torch.no_grad()
    def sample(
        self,
        model: nn.Module,
        n: int,
        length: int,
        *,
        steps: int | None = None,
        generator: torch.Generator | None = None,
        **cond: Any,
    ) -> DiscreteSample:
        """Ancestral sampling ``z_T = mask -> ... -> z_0`` with the factorised reverse model (T network calls)."""
        n, length, _ = check_sample_sizes(n, length, self.steps if steps is None else steps)
        self._check_sample(steps, length)
        tensors = itertools.chain(model.parameters(), model.buffers(), self.parameters(), self.buffers())
        device = next(tensors, torch.empty(0)).device  # the model's, else the process's (a model may hold none)
        z = torch.full((n, length), self.mask_index, dtype=torch.long, device=device)
        reverse = self._reverse_sampler(model, cond)
        for s in range(self.steps, 0, -1):
            p = reverse(z, s).reshape(-1, self.input_dim).clamp_min(0)
            z = torch.multinomial(p, 1, generator=generator).view(n, length)
        nfe = self.steps * evaluations_per_call(model)
        return DiscreteSample(tokens=z, nfe=nfe, extras={"process": self.name, **self._sample_extras()})

    def _sample_extras(self) -> dict[str, Any]:
        """What a subclass adds to :attr:`DiscreteSample.extras` (e.g. calls of a forward network)."""
        return {}

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, length={self.length}, steps={self.steps}, learnable={self.learnable}, "
            f"warmup_fraction={self.warmup_fraction}, gumbel_fraction={self.gumbel_fraction}, "
            f"tau={self.tau_start}->{self.tau_end}"
        )

    def reverse_probs(self, model: nn.Module, z: torch.Tensor, step: int | torch.Tensor, **cond: Any) -> torch.Tensor:
        """Per-position reverse transition ``p_theta(z_{s-1}^i | z_s)`` ``[N, L, K + 1]`` at states ``z`` ``[N, L]``."""
        return self._reverse_sampler(model, cond)(z, step)

    @abstractmethod
    def _reverse_sampler(
        self, model: nn.Module, cond: dict[str, Any]
    ) -> Callable[[torch.Tensor, int | torch.Tensor], torch.Tensor]:
        """``(z, step) -> reverse_probs``; what every step shares (e.g. the forward tables) is computed once here."""

    @property
    @abstractmethod
    def _learns(self) -> bool:
        """Whether the forward process has parameters ``phi`` that training moves."""

    @abstractmethod
    def _terms(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        steps: torch.Tensor,
        repeats: int,
        generator: torch.Generator | None,
        tau: float | None,
        cond: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """KL terms ``[B, repeats, n]`` of steps ``[B, n]`` at fresh ``z_s ~ q_phi(z_s | x)``, with their log-probs."""


class LearnableForwardProcess(FewStepForward):
    """T-step discrete diffusion whose forward marginals are learned (FLDD) or fixed to masking.

    Args:
        vocab_size: ``K``; the mask is state ``K`` and the network input is the one-hot of ``z_s`` over
            ``K + 1`` states (``input_dim = K + 1``).
        length: sequence length ``L`` (the marginals are per position).
        steps: number of discrete steps ``T >= 1`` (the method is meant for 2 to 10); sampling uses ``T``
            network evaluations.
        learnable: learn the inner marginals (True) or keep the linear masking schedule (False).
        warmup_fraction: share of training (``progress`` in :meth:`update_schedule`) during which the
            marginals stay at their initial masking schedule and only the reverse model learns. On digits,
            without it (and with the straight-through phase at the start) the marginals drift towards
            revealing almost everything at the inner steps, leaving the whole generation to the first
            reverse step, and training locks into that schedule.
        gumbel_fraction: share of training, after the warm-up, that uses straight-through
            Gumbel-softmax gradients before switching to REINFORCE. Biased towards revealing (see the
            module docstring), so off by default: with REINFORCE only the grid (T = 2, 2 seeds) reaches a
            test bound of 2.109 nats per position instead of 2.118, and digits (T = 4, 600 steps) 0.379
            where the code before the initialisation fix, with 20 % straight-through, reached 0.385.
        tau_start, tau_end: Gumbel temperature, annealed geometrically over the Gumbel phase.
        reinforce_samples: ``z`` samples per sequence and step in the REINFORCE phase (>= 2, the
            leave-one-out baseline needs two).
        logit_scale: the learned logits are ``init + logit_scale * (raw + shift)`` so that the optimiser's
            step size moves the marginals at a useful rate; ``raw`` ``[T-1, L, K, K+1]`` holds one set
            of logits per (step, position, clean token) and ``shift`` adds a per-(step, position)
            parameter to the mask logit of every clean token: the same family of marginals, with one
            strong-signal direction per position (how much of that position is still hidden).
        init_floor: probability given at initialisation to the tokens other than ``x^i`` and the mask is
            ``init_floor * s / T`` at step ``s`` (:func:`initial_logits`).
    """

    def __init__(
        self,
        vocab_size: int,
        length: int,
        steps: int = 4,
        learnable: bool = True,
        *,
        warmup_fraction: float = 0.0,
        gumbel_fraction: float = 0.0,
        tau_start: float = 2.0,
        tau_end: float = 0.5,
        reinforce_samples: int = 2,
        logit_scale: float = 10.0,
        init_floor: float = 1e-3,
    ) -> None:
        super().__init__(
            vocab_size,
            length,
            steps,
            warmup_fraction=warmup_fraction,
            gumbel_fraction=gumbel_fraction,
            tau_start=tau_start,
            tau_end=tau_end,
            reinforce_samples=reinforce_samples,
            init_floor=init_floor,
        )
        self.learnable = learnable
        self.name = "learned-forward" if learnable else "fixed-mask-forward"
        self.logit_scale = logit_scale
        base = masking_marginals(vocab_size, length, steps)
        self.register_buffer("fixed_marginals", base, persistent=False)
        if learnable and steps > 1:
            init = initial_logits(vocab_size, steps, init_floor)[:, None].expand(-1, length, -1, -1).contiguous()
            self.register_buffer("init_logits", init, persistent=False)
            self.raw = nn.Parameter(torch.zeros_like(init))
            self.raw_position = nn.Parameter(torch.zeros(steps - 1, length))
        else:
            self.register_buffer("init_logits", None, persistent=False)
            self.raw = None
            self.raw_position = None

    @property
    def _learns(self) -> bool:
        return self.learnable and self.raw is not None

    # ---------------------------------------------------------------- marginals
    def marginals(self) -> torch.Tensor:
        """``q_phi(z_s^i = j | x^i = k)`` for ``s = 0..T``: ``[T + 1, L, K, K + 1]`` (differentiable in phi)."""
        if self.raw is None:
            return self.fixed_marginals
        raw, raw_position = self.raw, self.raw_position
        if self.phase == "warmup":  # the forward process is held where it is: no gradient reaches phi
            raw, raw_position = raw.detach(), raw_position.detach()
        shift = torch.zeros_like(self.init_logits)
        shift[..., self.mask_index] = raw_position[:, :, None]
        inner = torch.softmax(self.init_logits + self.logit_scale * (raw + shift), dim=-1)
        return torch.cat([self.fixed_marginals[:1], inner, self.fixed_marginals[-1:]], dim=0)

    def tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Marginals ``[T+1, L, K, S]``, their logs (``log 0`` floored) and posteriors ``[T, L, K, S, S]``.

        ``posteriors[s - 1, i, k, a, b] = q(z_{s-1}^i = b | z_s^i = a, x^i = k)``.
        """
        marg = self.marginals()
        logm = floored_log(marg)
        post = maximum_coupling_posterior(marg[:-1], marg[1:])
        return marg, logm, post

    # ------------------------------------------------------------------ helpers
    def _states(self, z: torch.Tensor) -> torch.Tensor:
        """Hard states ``[N, L]`` (long) to one-hot floats; float ``[N, L, S]`` passes through."""
        if z.dtype.is_floating_point:
            return z
        return F.one_hot(z, self.input_dim).float()

    def _reverse(
        self,
        model: nn.Module,
        zfeat: torch.Tensor,
        step: torch.Tensor,
        logm: torch.Tensor,
        post: torch.Tensor,
        cond: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``p_theta(z_{s-1} | z_s)`` ``[N, L, S]`` and the posterior rows ``[N, L, K, S]`` at ``z_s``."""
        t = 1.0 - step.to(zfeat.dtype) / self.steps
        logits = check_logits(model(zfeat, t, **cond), zfeat.shape[:2], self.vocab_size, self.name)
        lik = torch.einsum("nlkj,nlj->nlk", logm[step], zfeat)  # log q(z_s^i | x^i = k)
        weights = torch.softmax(logits + lik, dim=-1)
        rows = torch.einsum("nlj,nlkjm->nlkm", zfeat, post[step - 1])
        return torch.einsum("nlk,nlkm->nlm", weights, rows), rows

    def _kl(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        zfeat: torch.Tensor,
        step: torch.Tensor,
        logm: torch.Tensor,
        post: torch.Tensor,
        cond: dict[str, Any],
    ) -> torch.Tensor:
        """``sum_i KL(q(z_{s-1}^i | z_s^i, x^i) || p_theta(z_{s-1}^i | z_s))`` per row ``[N]``."""
        p, rows = self._reverse(model, zfeat, step, logm, post, cond)
        q = torch.gather(rows, 2, x0[:, :, None, None].expand(-1, -1, 1, rows.shape[-1])).squeeze(2)
        q_safe = torch.where(q > 0, q, torch.ones_like(q))  # keeps d/dq of q log q finite where q = 0
        kl = torch.xlogy(q, q_safe) - q * torch.log(p.clamp_min(_P_FLOOR))
        return kl.sum(dim=(1, 2))

    def step_terms(
        self, model: nn.Module, x0: torch.Tensor, z: torch.Tensor, step: int | torch.Tensor, **cond: Any
    ) -> torch.Tensor:
        """Summed KL term of step ``s`` at given states ``z_s`` ``[N, L]`` (nats per sequence, ``[N]``)."""
        x0 = check_tokens(x0, self.vocab_size)
        step_t = torch.as_tensor(step, device=x0.device).long().expand(x0.shape[0])
        _, logm, post = self.tables()
        return self._kl(model, x0, self._states(z), step_t, logm, post, cond)

    def _reverse_sampler(
        self, model: nn.Module, cond: dict[str, Any]
    ) -> Callable[[torch.Tensor, int | torch.Tensor], torch.Tensor]:
        _, logm, post = self.tables()  # once for all the steps of a sampling run

        def probs(z: torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
            step_t = torch.as_tensor(step, device=z.device).long().expand(z.shape[0])
            return self._reverse(model, self._states(z), step_t, logm, post, cond)[0]

        return probs

    def _terms(
        self,
        model: nn.Module,
        x0: torch.Tensor,
        steps: torch.Tensor,
        repeats: int,
        generator: torch.Generator | None,
        tau: float | None,
        cond: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """KL terms ``[B, repeats, n]`` of steps ``[B, n]`` at fresh ``z_s ~ q_phi(z_s | x)``, with log-probs."""
        b, length = x0.shape
        n = steps.shape[1]
        _, logm, post = self.tables()
        xr = x0[:, None, None, :].expand(b, repeats, n, length).reshape(-1, length)
        sr = steps[:, None, :].expand(b, repeats, n).reshape(-1)
        logq = torch.gather(logm[sr], 2, xr[:, :, None, None].expand(-1, -1, 1, self.input_dim)).squeeze(2)
        idx, zfeat = self._draw(logq, generator, tau)
        logprob = torch.gather(logq, 2, idx[:, :, None]).squeeze(2).sum(1)
        rcond = repeat_cond(cond, repeats * n)
        kl = self._kl(model, xr, zfeat, sr, logm, post, rcond)
        return kl.view(b, repeats, n), logprob.view(b, repeats, n)
