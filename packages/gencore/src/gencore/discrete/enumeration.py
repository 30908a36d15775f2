"""Exact clean-token posteriors of small enumerable token distributions (references for tests).

For a known joint law ``p(x0)`` over all ``K^L`` sequences and a process whose corruption
factorises over positions, ``q_t(features | x0) = prod_i q_t(features_i | x0_i)``, the
Bayes-optimal denoiser is

    p(x0_i = c | x_t) = sum_{x0 : x0_i = c} p(x0) prod_j q_t(x_t_j | x0_j) / sum_{x0} (same),

computed here by enumerating every sequence. A process supplies the per-position likelihood
through ``clean_log_likelihood(features, t) -> [B, L, K]`` (``log q_t(features_i | x0_i = c)`` up
to a constant per position). With this denoiser the reverse process of a masked or uniform
CTMC is the true time reversal, so its ELBO equals ``-log p(x0)`` and its samplers recover
``p`` as the step size goes to zero.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gencore.errors import InputError

__all__ = ["ExactDenoiser", "all_sequences", "product_space_elbo_integrand", "sequence_index"]


def all_sequences(vocab_size: int, length: int) -> torch.Tensor:
    """Every sequence ``[K^L, L]`` (int64) in lexicographic order (the last position varies fastest)."""
    grids = torch.meshgrid(*[torch.arange(vocab_size)] * length, indexing="ij")
    return torch.stack([g.reshape(-1) for g in grids], dim=1)


def sequence_index(x: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The row of each sequence ``x: [B, L]`` in :func:`all_sequences` (``[B]``, int64)."""
    powers = vocab_size ** torch.arange(x.shape[1] - 1, -1, -1, device=x.device)
    return (x.long() * powers).sum(-1)


def empirical_tv(tokens: torch.Tensor, probs: torch.Tensor, vocab_size: int) -> float:
    """Total variation between the empirical law of ``tokens: [n, L]`` and ``probs: [K^L]`` over all sequences."""
    counts = torch.bincount(sequence_index(tokens, vocab_size), minlength=probs.numel()).double()
    return 0.5 * float((counts / tokens.shape[0] - probs.double()).abs().sum())


class ExactDenoiser(nn.Module):
    """``model(features, t) -> log p(x0_i = c | x_t)`` for a known joint ``probs: [K^L]`` (see module docstring)."""

    def __init__(
        self,
        probs: torch.Tensor,
        vocab_size: int,
        length: int,
        log_likelihood: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        super().__init__()
        if probs.shape != (vocab_size**length,) or bool((probs < 0).any()) or not float(probs.sum()) > 0:
            raise InputError(f"probs must be non-negative weights of shape [{vocab_size**length}].")
        self.register_buffer("log_probs", torch.log(probs.double() / probs.double().sum()))
        self.register_buffer("states", all_sequences(vocab_size, length))
        self.vocab_size = vocab_size
        self.log_likelihood = log_likelihood

    def forward(self, features: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        t = torch.as_tensor(t, dtype=features.dtype, device=features.device).expand(features.shape[0])
        loglik = self.log_likelihood(features, t).double()  # [B, L, K]
        positions = torch.arange(self.states.shape[1], device=features.device)
        per_state = loglik[:, positions, self.states].sum(-1) + self.log_probs  # [B, S]
        weights = torch.softmax(per_state, dim=-1)
        onehot = nn.functional.one_hot(self.states, self.vocab_size).double()  # [S, L, K]
        marginals = torch.einsum("bs,slk->blk", weights, onehot)
        return torch.log(marginals.clamp_min(1e-300)).to(features.dtype)


def product_space_elbo_integrand(
    x0: torch.Tensor, forward_rate: torch.Tensor, marginal: torch.Tensor, posterior: torch.Tensor
) -> torch.Tensor:
    """The generic CTMC ELBO integrand at one time, by brute force over the product space (a test reference).

    For a noising chain that moves one position at a time with per-position rates ``forward_rate: [V, V]``
    (``[u, v]``: from ``u`` to ``v``, in noising time), marginals ``marginal: [K, V]`` (``q_t(v | c)``) and a
    denoiser ``posterior: [V^L, L, K]`` (``p_theta(x0_i = c | x_t)`` for every state ``x_t`` in the order of
    :func:`all_sequences` over ``V`` values), the reverse rates from ``x`` to ``y`` (``y`` differing at ``i``) are

        true:   Q(y_i, x_i) q_t(y | x0) / q_t(x | x0),
        model:  Q(y_i, x_i) sum_c p_theta(x0_i = c | x) q_t(y_i | c) / q_t(x_i | c),

    and the integrand is ``E_{x ~ q_t(.|x0)} sum_{y != x} [R_theta - R + R log(R / R_theta)]`` (Girsanov
    for CTMCs; Campbell et al. 2022). Returns one value per clean sequence ``x0: [B, L]`` ``[B]``, summed
    over positions, float64.
    """
    n_values = forward_rate.shape[0]
    length = x0.shape[1]
    states = all_sequences(n_values, length)  # [S, L]
    q = marginal.double()
    rate = forward_rate.double()
    post = posterior.double()
    out = []
    for seq in x0:
        q_state = q[seq[None, :], states].prod(-1)  # q_t(x | x0) for every state, [S]
        total = torch.zeros((), dtype=torch.float64)
        for s, x in enumerate(states):
            if q_state[s] == 0:
                continue
            for i in range(length):
                for v in range(n_values):
                    if v == x[i] or rate[v, x[i]] == 0:
                        continue
                    y = x.clone()
                    y[i] = v
                    true_rate = rate[v, x[i]] * q_state[sequence_index(y[None], n_values)[0]] / q_state[s]
                    q_x = q[:, x[i]]
                    ratio = torch.where(q_x > 0, q[:, v] / q_x.clamp_min(1e-300), torch.zeros_like(q_x))
                    model_rate = rate[v, x[i]] * (post[s, i] * ratio).sum()
                    term = model_rate - true_rate
                    if true_rate > 0:
                        term = term + true_rate * torch.log(true_rate / model_rate)
                    total = total + q_state[s] * term
        out.append(total)
    return torch.stack(out)
