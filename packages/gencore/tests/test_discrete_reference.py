"""The autoregressive reference model: exact normalisation, the autoregressive property, and convergence."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.discrete import all_sequences
from gencore.discrete.reference import ReferenceAR, fit_reference
from gencore.errors import InputError


def _randomised(vocab_size: int, length: int) -> ReferenceAR:
    torch.manual_seed(0)
    model = ReferenceAR(vocab_size, length, hidden=16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 1.0)
    return model


def test_log_prob_is_normalised_over_all_sequences():
    model = _randomised(3, 4)
    with torch.no_grad():
        total = model.log_prob(all_sequences(3, 4)).double().exp().sum()
    assert float(total) == pytest.approx(1.0, abs=1e-5)


def test_conditionals_ignore_the_current_and_later_positions():
    model = _randomised(3, 5)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 3, (64, 5), generator=g)
    for i in range(5):
        y = x.clone()
        y[:, i:] = torch.randint(0, 3, (64, 5 - i), generator=g)
        assert torch.allclose(model.logits(x)[:, : i + 1], model.logits(y)[:, : i + 1])
        if i + 1 < 5:  # and the later conditionals do read position i
            assert not torch.allclose(model.logits(x)[:, i + 1 :], model.logits(y)[:, i + 1 :])


def _markov_chain(n: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples of a binary Markov chain and its exact per-sequence probabilities over all 2^L sequences."""
    p0, stay = torch.tensor([0.3, 0.7]), 0.85
    x = torch.empty(n, length, dtype=torch.long)
    x[:, 0] = torch.multinomial(p0, n, replacement=True, generator=generator)
    for i in range(1, length):
        flip = torch.rand(n, generator=generator) > stay
        x[:, i] = torch.where(flip, 1 - x[:, i - 1], x[:, i - 1])
    seqs = all_sequences(2, length)
    same = (seqs[:, 1:] == seqs[:, :-1]).double()
    logp = p0.double().log()[seqs[:, 0]] + (same * math.log(stay) + (1 - same) * math.log(1 - stay)).sum(1)
    return x, logp


def test_fit_recovers_a_markov_chain():
    g = torch.Generator().manual_seed(0)
    data, true_logp = _markov_chain(20_000, 6, g)
    model = fit_reference(data, 2, hidden=32, steps=1500, batch=512, lr=5e-3, seed=0)
    seqs = all_sequences(2, 6)
    with torch.no_grad():
        fit_logp = model.log_prob(seqs).double()
    kl = float((true_logp.exp() * (true_logp - fit_logp)).sum())
    # the sampling error of 18,000 draws alone is about 63 / (2 * 18,000) = 1.7e-3 nats for a saturated model;
    # the best model without the chain's dependence would be at about 1.3 nats
    assert kl < 5e-3
    entropy = float(-(true_logp.exp() * true_logp).sum()) / 6
    held_out, _ = _markov_chain(20_000, 6, g)
    assert model.nll(held_out) == pytest.approx(entropy, abs=0.01)


def test_bad_tokens_and_lengths_are_refused():
    model = ReferenceAR(2, 4)
    with pytest.raises(InputError, match="length 4"):
        model.log_prob(torch.zeros(3, 5, dtype=torch.long))
    with pytest.raises(InputError, match=r"\[0, 2\)"):
        model.log_prob(torch.full((3, 4), 2))


def test_fitting_leaves_the_callers_global_rng_alone():
    """The model's initial weights come from ``seed``; the caller's random stream is not reseeded."""
    tokens = torch.randint(0, 2, (64, 3), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = fit_reference(tokens, 2, hidden=8, steps=3, batch=16, seed=5)
    assert torch.equal(torch.rand(3), expected)  # it used to reseed the global generator with the seed
    torch.manual_seed(7)
    b = fit_reference(tokens, 2, hidden=8, steps=3, batch=16, seed=5)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
