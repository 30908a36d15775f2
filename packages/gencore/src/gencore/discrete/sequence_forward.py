"""FLDD with sequence-conditioned forward marginals and a directly parameterised reverse model.

Reference: "Forward-Learned Discrete Diffusion: Learning how to noise to denoise faster" (FLDD), ICLR 2026
(arXiv:2605.18204). This is the paper's own parameterisation; :class:`~gencore.discrete.learnable_forward.
LearnableForwardProcess` is the restricted variant whose marginals depend on one position's clean token.

Steps ``s = 0..T``, ``z_0 = x``, ``z_T`` = all mask (state ``K``). The forward marginals of the inner steps
come from a network of the *whole* clean sequence,

    q_phi(z_s^i | x) = softmax(log m_s(x^i) + g * f_phi(x, t_s)^i),      t_s = 1 - s / T,

where ``m_s`` is the linear masking schedule (``q(z_s = mask) = s / T``; the other tokens get
``init_floor * s / T``) and ``g`` a scalar gate that starts at 0, so training starts from masked diffusion and
``f_phi`` (a :class:`~gencore.discrete.network.TokenDenoiser` over the one-hot clean sequence, ``K + 1``
logits per position) moves it. Between consecutive steps the posterior ``q(z_{s-1} | z_s, x)`` is the
maximum coupling of ``q_phi(z_{s-1} | x)`` and ``q_phi(z_s | x)``, per position
(:func:`~gencore.discrete.learnable_forward.maximum_coupling_posterior`). Because the marginals of one
position depend on the others' clean tokens, the reverse model cannot be the x0-mixture of masked
diffusion; as in the paper it predicts the transition directly: the network's ``K + 1`` logits per
position give ``p_theta(z_{s-1}^i | z_s)`` (:attr:`output_dim` ``= K + 1``), with the mask excluded at the
last step (``z_0`` is data). The forward process can then make the reverse target nearly factorised, which
is what a few-step factorised sampler needs.

Bound (nats per position) and estimators are those of
:class:`~gencore.discrete.learnable_forward.FewStepForward`: ``sum_s E_{z_s ~ q_phi(z_s | x)}
sum_i KL(q(z_{s-1}^i | z_s^i, x) || p_theta(z_{s-1}^i | z_s)) / L`` (the ``s = 1`` term is
``-log p_theta(x | z_1)``, the prior term is 0), warm-up with ``phi`` held, optionally straight-through
Gumbel-softmax with annealed temperature (off by default: biased towards revealing, see
:mod:`~gencore.discrete.learnable_forward`), then REINFORCE with a leave-one-out baseline. With
``learnable=False`` the marginals stay at the masking schedule: masked diffusion with the same direct
reverse parameterisation (the ablation that isolates the learned forward process).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.discrete.base import DiscreteSample, check_tokens
from gencore.discrete.learnable_forward import (
    LOG_FLOOR,
    FewStepForward,
    floored_log,
    initial_logits,
    masking_marginals,
    maximum_coupling_posterior,
    repeat_cond,
)
from gencore.discrete.network import TokenDenoiser
from gencore.errors import ConfigError


class SequenceForwardProcess(FewStepForward):
    """T-step discrete diffusion with forward marginals ``q_phi(z_s | x)`` from a network of the whole sequence.

    Args:
        vocab_size: ``K``; the mask is state ``K``; the reverse network reads the one-hot of ``z_s`` over
            ``K + 1`` states (``input_dim``) and returns ``K + 1`` logits per position (``output_dim``).
        length: sequence length ``L``.
        steps: number of steps ``T`` (2 to 10 intended); sampling costs ``T`` reverse-network calls.
        learnable: learn the marginals (True) or keep the masking schedule (False).
        forward_net: the network ``f_phi(x_onehot [N, L, K], t [N]) -> [N, L, K + 1]``; default a
            ``TokenDenoiser(K, K + 1, L, hidden, depth, heads, local_kernel=0)``.
        hidden, depth, heads: size of the default forward network.
        warmup_fraction, gumbel_fraction, tau_start, tau_end, reinforce_samples: training phases, see
            :class:`~gencore.discrete.learnable_forward.LearnableForwardProcess`. ``gumbel_fraction``
            defaults to 0 (REINFORCE straight after the warm-up): the straight-through estimate is
            biased towards revealing, and on digits (T = 4) a 10 % straight-through phase collapsed the
            marginals to revealing everything at the inner steps.
        init_floor: the initial marginals give each token other than ``x^i`` probability ``init_floor * s / T``
            at step ``s`` (:func:`~gencore.discrete.learnable_forward.initial_logits`).
    """

    def __init__(
        self,
        vocab_size: int,
        length: int,
        steps: int = 4,
        learnable: bool = True,
        *,
        forward_net: nn.Module | None = None,
        hidden: int = 64,
        depth: int = 2,
        heads: int = 4,
        warmup_fraction: float = 0.0,
        gumbel_fraction: float = 0.0,
        tau_start: float = 2.0,
        tau_end: float = 0.5,
        reinforce_samples: int = 2,
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
        self.name = "learned-forward-net" if learnable else "fixed-mask-net"
        table = masking_marginals(vocab_size, 1, steps)[:, 0]  # [T + 1, K, K + 1], the same for every position
        self.register_buffer("schedule", table, persistent=False)
        logits = torch.zeros_like(table)  # rows 0 and T are never used: the endpoints are fixed
        logits[1:-1] = initial_logits(vocab_size, steps, init_floor)
        self.register_buffer("schedule_logits", logits, persistent=False)
        if learnable and steps > 1:
            self.forward_net = forward_net or TokenDenoiser(
                vocab_size, vocab_size + 1, length, hidden=hidden, depth=depth, heads=heads, local_kernel=0
            )
            self.gate = nn.Parameter(torch.zeros(()))
        else:
            self.forward_net = None
            self.gate = None

    @property
    def output_dim(self) -> int:
        return self.vocab_size + 1

    @property
    def _learns(self) -> bool:
        return self.forward_net is not None

    # ---------------------------------------------------------------- marginals
    def marginals(self, x0: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """``q_phi(z_s^i | x)`` ``[N, L, K + 1]`` for clean sequences ``x0`` ``[N, L]`` at steps ``step`` ``[N]``."""
        rows = torch.arange(x0.shape[0], device=x0.device)[:, None]
        fixed = self.schedule[step][rows, x0]  # [N, L, K + 1]
        if self.forward_net is None:
            return fixed
        t = 1.0 - step.float() / self.steps
        held = self.phase == "warmup"  # phi held at its initial schedule: no gradient reaches it
        with torch.no_grad() if held else contextlib.nullcontext():
            shift = self.forward_net(F.one_hot(x0, self.vocab_size).float(), t)
        gate = self.gate.detach() if held else self.gate
        logits = self.schedule_logits[step][rows, x0]
        learned = torch.softmax(logits + gate * shift, dim=-1)
        inner = ((step > 0) & (step < self.steps))[:, None, None]
        return torch.where(inner, learned, fixed)

    # ------------------------------------------------------------------ reverse
    def _reverse_log_probs(
        self, model: nn.Module, zfeat: torch.Tensor, step: torch.Tensor, cond: dict[str, Any]
    ) -> torch.Tensor:
        """``log p_theta(z_{s-1} | z_s)`` ``[N, L, K + 1]`` from the network's logits at ``t = 1 - s / T``."""
        logits = model(zfeat, 1.0 - step.to(zfeat.dtype) / self.steps, **cond)
        if logits.shape[-1] != self.output_dim:
            raise ConfigError(
                f"{self.name} needs a reverse network with {self.output_dim} outputs per position (K tokens + mask), "
                f"got {logits.shape[-1]}."
            )
        last = (step == 1)[:, None]  # z_0 is data: the mask is impossible at the last step
        mask_logit = logits[..., self.mask_index].masked_fill(last, LOG_FLOOR)
        logits = torch.cat([logits[..., : self.mask_index], mask_logit[..., None]], dim=-1)
        return torch.log_softmax(logits, dim=-1)

    def _kl(
        self,
        model: nn.Module,
        zfeat: torch.Tensor,
        step: torch.Tensor,
        post: torch.Tensor,
        cond: dict[str, Any],
    ) -> torch.Tensor:
        """``sum_i KL(q(z_{s-1}^i | z_s^i, x) || p_theta(z_{s-1}^i | z_s))`` per row ``[N]``.

        ``post`` ``[N, L, S, S]`` is ``q(z_{s-1} | z_s, x)`` with rows indexed by the state of ``z_s``.
        """
        q = torch.einsum("nlj,nljm->nlm", zfeat, post)  # the posterior's row at z_s (straight-through: a mixture)
        logp = self._reverse_log_probs(model, zfeat, step, cond)
        q_safe = torch.where(q > 0, q, torch.ones_like(q))  # keeps d/dq of q log q finite where q = 0
        return (torch.xlogy(q, q_safe) - q * logp).sum(dim=(1, 2))

    def _posterior(self, x0: torch.Tensor, step: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``q_phi(z_s | x)`` ``[N, L, S]`` and the maximum-coupling ``q(z_{s-1} | z_s, x)`` ``[N, L, S, S]``."""
        cur = self.marginals(x0, step)
        return cur, maximum_coupling_posterior(self.marginals(x0, step - 1), cur)

    def step_terms(
        self, model: nn.Module, x0: torch.Tensor, z: torch.Tensor, step: int | torch.Tensor, **cond: Any
    ) -> torch.Tensor:
        """Summed KL term of step ``s`` at given states ``z_s`` ``[N, L]`` (nats per sequence, ``[N]``)."""
        x0 = check_tokens(x0, self.vocab_size)
        step_t = torch.as_tensor(step, device=x0.device).long().expand(x0.shape[0])
        _, post = self._posterior(x0, step_t)
        return self._kl(model, F.one_hot(z, self.input_dim).float(), step_t, post, cond)

    def reverse_probs(self, model: nn.Module, z: torch.Tensor, step: int | torch.Tensor, **cond: Any) -> torch.Tensor:
        """``p_theta(z_{s-1}^i | z_s)`` ``[N, L, K + 1]`` at states ``z`` ``[N, L]``."""
        step_t = torch.as_tensor(step, device=z.device).long().expand(z.shape[0])
        return self._reverse_log_probs(model, F.one_hot(z, self.input_dim).float(), step_t, cond).exp()

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
        b, length = x0.shape
        n = steps.shape[1]
        xs = x0[:, None, :].expand(b, n, length).reshape(-1, length)
        cur, post = self._posterior(xs, steps.reshape(-1))  # once per (sequence, step), shared by the repeats

        def rep(t: torch.Tensor) -> torch.Tensor:  # [b n, ...] -> [b repeats n, ...] in (b, repeats, n) order
            return t.view(b, 1, n, *t.shape[1:]).expand(b, repeats, n, *t.shape[1:]).reshape(-1, *t.shape[1:])

        logq = rep(floored_log(cur))
        idx, zfeat = self._draw(logq, generator, tau)
        logprob = torch.gather(logq, 2, idx[:, :, None]).squeeze(2).sum(1)
        rcond = repeat_cond(cond, repeats * n)
        kl = self._kl(model, zfeat, rep(steps.reshape(-1)), rep(post), rcond)
        return kl.view(b, repeats, n), logprob.view(b, repeats, n)

    # ------------------------------------------------------------------ sampler
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
        """Ancestral sampling ``z_T = mask -> ... -> z_0`` from ``p_theta(z_{s-1} | z_s)`` (NFE = T)."""
        self._check_sample(steps, length)
        device = self.schedule.device
        z = torch.full((n, length), self.mask_index, dtype=torch.long, device=device)
        for s in range(self.steps, 0, -1):
            step = torch.full((n,), s, dtype=torch.long, device=device)
            logp = self._reverse_log_probs(model, F.one_hot(z, self.input_dim).float(), step, cond)
            z = torch.multinomial(logp.exp().reshape(-1, self.input_dim), 1, generator=generator).view(n, length)
        return DiscreteSample(tokens=z, nfe=self.steps, extras={"process": self.name})

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, length={self.length}, steps={self.steps}, learnable={self.learnable}, "
            f"warmup_fraction={self.warmup_fraction}, gumbel_fraction={self.gumbel_fraction}, "
            f"tau={self.tau_start}->{self.tau_end}"
        )
