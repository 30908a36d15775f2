"""An exact-likelihood autoregressive reference model for scoring samples of token sequences.

Few-step samplers are judged, besides their bound, by how likely their samples are under an independent
model of the data: the "generative perplexity" of MDLM (Sahoo et al. 2024), ReMDM and FLDD (ICLR 2026),
which score text samples with GPT-2. For short sequences a reference that is fitted in seconds does the
same job: :class:`ReferenceAR` is a MADE (Germain, Gregor, Murray & Larochelle, "MADE: Masked Autoencoder
for Distribution Estimation", ICML 2015) over one-hot tokens in the natural position order, with one masked
hidden layer and a masked direct connection (so it contains the fully visible sigmoid belief network).
``log_prob`` is exact and normalised over all ``K ** L`` sequences (the tests enumerate it).

:func:`fit_reference` trains it on data with Adam and keeps the parameters of the best held-out NLL;
:meth:`ReferenceAR.nll` scores samples in nats per position. A low sample NLL alone rewards a sampler that
collapses onto the most likely sequences, so read it beside a coverage measure such as the test bound.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn import functional as F

from gencore.discrete.base import check_tokens
from gencore.errors import ConfigError, InputError
from gencore.rng import seeded_init


class ReferenceAR(nn.Module):
    """MADE over ``[B, L]`` tokens in ``0..K-1``: ``p(x) = prod_i p(x_i | x_<i)``."""

    def __init__(self, vocab_size: int, length: int, hidden: int = 256) -> None:
        super().__init__()
        if min(vocab_size, length, hidden) < 1 or vocab_size < 2:
            raise ConfigError(
                f"ReferenceAR needs vocab_size >= 2 and positive length and hidden, got vocab_size={vocab_size}, "
                f"length={length}, hidden={hidden}."
            )
        self.vocab_size, self.length = vocab_size, length
        k, n = vocab_size, length
        pos_in = torch.arange(n).repeat_interleave(k)  # input unit -> its position
        # hidden degrees cycle through 0..L-2: a unit of degree d sees positions <= d, feeds positions > d
        degree = torch.arange(hidden) % max(n - 1, 1)
        self.register_buffer("mask_in", (pos_in[None, :] <= degree[:, None]).float())  # [H, L*K]
        self.register_buffer("mask_out", (pos_in[:, None] > degree[None, :]).float())  # [L*K, H]
        self.register_buffer("mask_direct", (pos_in[:, None] > pos_in[None, :]).float())  # [L*K, L*K]
        self.hidden = nn.Linear(n * k, hidden)
        self.out = nn.Linear(hidden, n * k)
        self.direct = nn.Linear(n * k, n * k, bias=False)
        nn.init.zeros_(self.direct.weight)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L, K]`` logits of ``p(x_i | x_<i)``."""
        x = F.one_hot(tokens, self.vocab_size).flatten(1).float()
        h = torch.relu(F.linear(x, self.hidden.weight * self.mask_in, self.hidden.bias))
        out = F.linear(h, self.out.weight * self.mask_out, self.out.bias)
        out = out + F.linear(x, self.direct.weight * self.mask_direct)
        return out.view(-1, self.length, self.vocab_size)

    def log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """Exact ``log p(x)`` per sequence ``[B]`` in nats."""
        tokens = check_tokens(tokens, self.vocab_size, "tokens")
        if tokens.shape[1] != self.length:
            raise InputError(f"ReferenceAR was built for length {self.length}, got sequences of {tokens.shape[1]}.")
        logp = self.logits(tokens).log_softmax(-1)
        return logp.gather(-1, tokens[..., None]).squeeze(-1).sum(-1)

    @torch.no_grad()
    def nll(self, tokens: torch.Tensor, batch: int = 4096) -> float:
        """Mean NLL in nats per position."""
        total = sum(float(-self.log_prob(chunk).sum()) for chunk in tokens.split(batch))
        return total / (tokens.shape[0] * self.length)


def fit_reference(
    tokens: torch.Tensor,
    vocab_size: int,
    *,
    hidden: int = 256,
    steps: int = 3000,
    batch: int = 256,
    lr: float = 2e-3,
    weight_decay: float = 1e-4,
    holdout: float = 0.1,
    eval_every: int = 50,
    seed: int = 0,
) -> ReferenceAR:
    """Fit a :class:`ReferenceAR` to ``tokens [N, L]``; returns the parameters of the best held-out NLL.

    A seeded ``holdout`` share of ``tokens`` is kept out of training and decides which checkpoint is kept.
    """
    tokens = check_tokens(tokens, vocab_size, "tokens")
    if not 0 < holdout < 1 or tokens.shape[0] < 10:
        raise ConfigError(
            f"fit_reference needs at least 10 sequences and 0 < holdout < 1, got {tokens.shape[0]} and {holdout}."
        )
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(tokens.shape[0], generator=g)
    n_val = max(1, int(holdout * tokens.shape[0]))
    val, train = tokens[order[:n_val]], tokens[order[n_val:]]
    with seeded_init(seed):
        model = ReferenceAR(vocab_size, tokens.shape[1], hidden)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state = float("inf"), copy.deepcopy(model.state_dict())
    for step in range(1, steps + 1):
        idx = torch.randint(0, train.shape[0], (min(batch, train.shape[0]),), generator=g)
        loss = -model.log_prob(train[idx]).mean() / tokens.shape[1]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % eval_every == 0 or step == steps:
            val_nll = model.nll(val)
            if val_nll < best:
                best, best_state = val_nll, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    return model.eval()
