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

``reverse="posterior"`` is the other reverse parameterisation offered, masked diffusion's x0-mixture carried
over: the network's ``K`` logits per position give ``x_hat = softmax(logits)`` and

    p_theta(z_{s-1}^i | z_s) = sum_k w_k q_phi(z_{s-1}^i | z_s^i, x^i = k, x^{-i} ~ x_hat),
    w = softmax(logits^i + log q_phi(z_s^i | x^i = k, x^{-i} ~ x_hat)),

where the forward network reads the soft ``x_hat`` as the other positions' clean tokens (a mean-field plug-in of
the exact mixture over clean sequences; any valid reverse keeps the bound a bound). At masking it *is* masked
diffusion's x0-mixture; with learned marginals the transition structure (when to reveal) follows phi, so the
reverse network only predicts clean tokens and does not have to re-learn the schedule whenever phi moves. It is
not the paper's choice: sampling also calls the forward network (``T`` reverse calls plus ``T`` batched
forward-network calls, ``DiscreteSample.extras["forward_calls"]``), and it costs ``O(L K^2)`` per call (one
coupling per candidate clean token), so it suits small vocabularies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.discrete.base import check_tokens
from gencore.discrete.learnable_forward import (
    LOG_FLOOR,
    FewStepForward,
    floored_log,
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
        reverse: ``"direct"`` (the paper's: ``K + 1`` logits give ``p_theta(z_{s-1} | z_s)``) or ``"posterior"``
            (``K`` logits give ``x_hat``; the reverse is the forward posterior at ``x_hat``, see the module).
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
        reverse: str = "direct",
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
        if reverse not in ("direct", "posterior"):
            raise ConfigError(f"reverse must be 'direct' or 'posterior', got {reverse!r}.")
        self.learnable = learnable
        self.reverse = reverse
        self.init_floor = init_floor
        self.name = ("learned-forward-net" if learnable else "fixed-mask-net") + (
            "-posterior" if reverse == "posterior" else ""
        )
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
        return self.vocab_size + 1 if self.reverse == "direct" else self.vocab_size

    @property
    def _learns(self) -> bool:
        return self.forward_net is not None

    # ---------------------------------------------------------------- marginals
    def marginals(self, x0: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """``q_phi(z_s^i | x)`` ``[N, L, K + 1]`` for clean sequences ``x0`` ``[N, L]`` at steps ``step`` ``[N]``."""
        rows = self.token_marginals(F.one_hot(x0, self.vocab_size).float(), step)  # [N, L, K, K + 1]
        return torch.gather(rows, 2, x0[:, :, None, None].expand(-1, -1, 1, rows.shape[-1])).squeeze(2)

    def token_marginals(self, context: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        """``q_phi(z_s^i | x^i = k, context)`` ``[N, L, K, K + 1]`` for every clean token ``k`` of every position.

        ``context`` ``[N, L, K]`` is what the forward network reads: the one-hot clean sequence (:meth:`marginals`)
        or the reverse model's predicted distribution (``reverse="posterior"``). Inner steps: ``softmax(log m_s(k)
        + g f_phi(context, t_s))`` with the floored masking logits of
        :func:`~gencore.discrete.learnable_forward.initial_logits`; steps 0 and T (and ``learnable=False``): the
        masking schedule.
        """
        n, length, k = context.shape
        frac = (step.to(context.dtype) / self.steps)[:, None, None, None]  # [N, 1, 1, 1]
        eye = torch.eye(k, dtype=context.dtype, device=context.device)
        fixed = torch.cat([(1 - frac) * eye, frac.expand(n, 1, k, 1)], dim=-1).expand(n, length, k, k + 1)
        if self.forward_net is None:
            return fixed
        held = self.phase == "warmup"  # phi held: no gradient reaches the gate or the forward network
        if held and not bool(self.gate.detach().any()):
            shift = torch.zeros(n, length, k + 1, dtype=context.dtype, device=context.device)  # gate 0: no call
        else:
            gate = self.gate.detach() if held else self.gate
            shift = gate * self._forward_shift(context, 1.0 - frac[:, 0, 0, 0])  # [N, L, K + 1]
        inner = ((step > 0) & (step < self.steps))[:, None, None, None]
        f = torch.where(inner, frac, torch.full_like(frac, 0.5))  # endpoints: any finite logits, replaced below
        tokens = eye * torch.log(1 - f) + (1 - eye) * torch.log(self.init_floor * f)
        logits = torch.cat([tokens, torch.log(f).expand(n, 1, k, 1)], dim=-1)
        return torch.where(inner, torch.softmax(logits + shift[:, :, None, :], dim=-1), fixed)

    def _forward_shift(self, xprob: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``f_phi(x_hat, t)``; during the warm-up phi's parameters get no gradient (``x_hat`` still does)."""
        if self.phase != "warmup":
            return self.forward_net(xprob, t)
        held = {name: p.detach() for name, p in self.forward_net.named_parameters()}
        return torch.func.functional_call(self.forward_net, held, (xprob, t))

    # ------------------------------------------------------------------ reverse
    def _reverse_log_probs(
        self, model: nn.Module, zfeat: torch.Tensor, step: torch.Tensor, cond: dict[str, Any]
    ) -> torch.Tensor:
        """``log p_theta(z_{s-1} | z_s)`` ``[N, L, K + 1]`` from the network's logits at ``t = 1 - s / T``."""
        logits = model(zfeat, 1.0 - step.to(zfeat.dtype) / self.steps, **cond)
        if logits.shape[-1] != self.output_dim:
            raise ConfigError(
                f"{self.name} needs a reverse network with {self.output_dim} outputs per position "
                f"({'K tokens + mask' if self.reverse == 'direct' else 'K clean-token logits'}), "
                f"got {logits.shape[-1]}."
            )
        if self.reverse == "posterior":
            # mixture over position i's clean token k of the forward posteriors q(z_{s-1}^i | z_s^i, x^i = k),
            # the other positions' clean tokens read as x_hat; weights as in masked diffusion's x0-mixture
            both = self.token_marginals(torch.softmax(logits, -1).repeat(2, 1, 1), torch.cat([step - 1, step]))
            prev, cur = both.chunk(2)
            rows = torch.einsum("nlj,nlkjm->nlkm", zfeat, maximum_coupling_posterior(prev, cur))  # [N, L, K, S]
            weights = torch.softmax(logits + floored_log(torch.einsum("nlj,nlkj->nlk", zfeat, cur)), dim=-1)
            return floored_log(torch.einsum("nlk,nlkm->nlm", weights, rows))
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

    def _reverse_sampler(
        self, model: nn.Module, cond: dict[str, Any]
    ) -> Callable[[torch.Tensor, int | torch.Tensor], torch.Tensor]:
        def probs(z: torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
            step_t = torch.as_tensor(step, device=z.device).long().expand(z.shape[0])
            return self._reverse_log_probs(model, F.one_hot(z, self.input_dim).float(), step_t, cond).exp()

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

    def _sample_extras(self) -> dict[str, Any]:
        if self.reverse == "posterior" and self.forward_net is not None:
            return {"forward_calls": self.steps}  # one batched forward-network call (steps s - 1 and s) per step
        return {}

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, reverse={self.reverse!r}"
