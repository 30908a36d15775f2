"""Pins found missing by mutation: each molecule sees its own time and its own bonds in every backbone; the joint
sampler draws each token once from the model's distribution and never redraws it; the conformer sampler calls the
model at t_k."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genmol.generation.flow import sample_conformers, sample_joint
from genmol.generation.vocab import AtomVocabulary
from genmol.models import EGNN, CoordinateTransformer

VOCAB = AtomVocabulary([(1, 0), (6, 0), (8, 0)])


def _classes():
    classes = [EGNN, CoordinateTransformer]
    try:
        import e3nn  # noqa: F401
    except ImportError:
        return classes
    from genmol.models import E3NNBackbone

    return [*classes, E3NNBackbone]


def _batch(edges=5):
    g = torch.Generator().manual_seed(0)
    b, n = 3, 6
    mask = torch.ones(b, n, dtype=torch.float64)
    mask[0, 4:] = 0
    mask[2, 5:] = 0
    x = torch.randn(b, n, 3, generator=g, dtype=torch.float64) * mask[..., None]
    tok = torch.nn.functional.one_hot(torch.randint(6, (b, n), generator=g), 6).double()
    e = torch.nn.functional.one_hot(torch.randint(edges, (b, n, n), generator=g), edges).double()
    e = (e + e.transpose(1, 2)) / 2  # symmetric pair features, as bonds are
    return x, torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64), tok, mask, e


@pytest.mark.parametrize("klass", _classes())
def test_every_molecule_of_a_batch_is_computed_at_its_own_time_with_its_own_bonds(klass):
    """Molecule i of a padded batch equals molecule i alone at t[i] with its own pair features (for every i, not only
    the first); its outputs change with its own time and bonds and no other molecule's do."""
    torch.manual_seed(0)
    model = klass(6, 5, hidden=8, layers=2, edge_features=5).double()
    x, t, tok, mask, e = _batch()
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    for i in range(3):
        n = int(mask[i].sum())
        sl = slice(i, i + 1)
        alone_v, alone_logits = model(x[sl, :n], t[sl], tokens=tok[sl, :n], mask=mask[sl, :n], edges=e[sl, :n, :n])
        torch.testing.assert_close(v[sl, :n], alone_v, atol=1e-10, rtol=0)
        torch.testing.assert_close(logits[sl, :n], alone_logits, atol=1e-10, rtol=0)
    # another time for molecule 1 only
    t2 = t.clone()
    t2[1] = 0.3
    v2, logits2 = model(x, t2, tokens=tok, mask=mask, edges=e)
    assert (logits2[1] - logits[1]).abs().max() > 1e-6
    torch.testing.assert_close(logits2[[0, 2]], logits[[0, 2]], atol=0, rtol=0)
    torch.testing.assert_close(v2[[0, 2]], v[[0, 2]], atol=0, rtol=0)
    # other bonds for molecule 1 only
    e3 = e.clone()
    e3[1] = e3[1].roll(1, dims=-1)
    v3, logits3 = model(x, t, tokens=tok, mask=mask, edges=e3)
    assert (logits3[1] - logits[1]).abs().max() > 1e-6
    assert (v3[1] - v[1]).abs().max() > 1e-9
    torch.testing.assert_close(logits3[[0, 2]], logits[[0, 2]], atol=0, rtol=0)
    torch.testing.assert_close(v3[[0, 2]], v[[0, 2]], atol=0, rtol=0)


class _TokenOracle(torch.nn.Module):
    """Zero velocity; logits ``log probs`` (fixed) or, with ``probs=None``, a certain class that changes with every
    call (class ``call % K``). Records the tokens it is shown."""

    def __init__(self, probs=None):
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(1))
        self.probs = probs
        self.seen = []

    def forward(self, x, t, *, tokens, mask, edges=None):
        b, n, _ = x.shape
        self.seen.append(tokens.argmax(-1).clone())
        if self.probs is not None:
            logits = torch.log(self.probs).expand(b, n, len(VOCAB)).clone()
        else:
            logits = torch.full((b, n, len(VOCAB)), -40.0)
            logits[..., (len(self.seen) - 1) % len(VOCAB)] = 40.0
        return torch.zeros_like(x), logits


def test_sample_joint_never_redraws_an_unmasked_token():
    """Ancestral unmasking: a position takes the class the model predicts at the step it is unmasked and keeps it to
    the end (redrawing unmasked tokens every step gives the last step's class everywhere)."""
    steps, sizes = 6, [4] * 30
    oracle = _TokenOracle()
    mols = sample_joint(oracle, VOCAB, sizes, strategy="com", steps=steps, generator=torch.Generator().manual_seed(0))
    mask_index = len(VOCAB)
    seen = torch.stack(oracle.seen)  # [steps, B, N]
    final = torch.tensor([[VOCAB.token(int(z), 0) for z in m.atomic_numbers] for m in mols])
    states = torch.cat([seen, final[None]])
    for k in range(steps):
        before, after = states[k], states[k + 1]
        was_masked = before == mask_index
        assert torch.equal(after[~was_masked], before[~was_masked])  # never redrawn
        newly = was_masked & (after != mask_index)
        assert (after[newly] == k % len(VOCAB)).all()  # the class predicted at the step it was unmasked
    assert (final != mask_index).all()
    assert len(set(final.flatten().tolist())) == len(VOCAB)  # tokens were unmasked at several different steps


def test_sample_joint_draws_tokens_from_the_models_distribution():
    """Each token is one draw from softmax(logits): with fixed logits the decoded types follow those probabilities."""
    probs = torch.tensor([0.2, 0.3, 0.5])
    count, n = 400, 4
    mols = sample_joint(
        _TokenOracle(probs), VOCAB, [n] * count, strategy="com", steps=3, generator=torch.Generator().manual_seed(1)
    )
    z = np.concatenate([m.atomic_numbers for m in mols])
    total = count * n
    for k, (atomic_number, _) in enumerate(VOCAB.pairs):
        p = float(probs[k])
        assert abs((z == atomic_number).mean() - p) < 4 * (p * (1 - p) / total) ** 0.5, atomic_number


def test_sample_conformers_calls_the_model_at_t_k():
    """The conformer ODE sampler evaluates the network at t_k on the step from t_k to t_{k+1}: 0, 1/steps, ..."""
    from conftest import embedded

    graph = embedded("OCC=O", 0)
    vocab = AtomVocabulary.from_molecules([graph])
    times = []

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x, t, *, tokens, mask, edges):
            times.append(t.clone())
            return torch.zeros_like(x), torch.zeros(*x.shape[:2], len(vocab))

    steps = 7
    sample_conformers(Recorder(), vocab, [graph], 2, strategy="com", steps=steps, generator=torch.Generator())
    got = torch.stack(times)
    assert got.shape == (steps, 2)
    torch.testing.assert_close(got, (torch.arange(steps, dtype=got.dtype) / steps)[:, None].expand(steps, 2))


def test_transformer_sees_squared_distances_in_its_attention_bias():
    """With the coordinate embedding switched off, geometry reaches the transformer only through the squared
    distances in the attention bias: its outputs are then invariant under rotations and translations and still
    change when an interatomic distance changes."""
    from genmol.se3 import random_rotations

    torch.manual_seed(0)
    model = CoordinateTransformer(6, 5, hidden=8, layers=2, heads=2, edge_features=5).double()
    with torch.no_grad():
        model.embed.weight[:, -3:] = 0.0  # the embedding's x_i columns (tokens, time, x_i)
    x, t, tok, mask, e = _batch()
    v, logits = model(x, t, tokens=tok, mask=mask, edges=e)
    rot = random_rotations(3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    moved = (x @ rot.transpose(1, 2) + torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)) * mask[..., None]
    v2, logits2 = model(moved, t, tokens=tok, mask=mask, edges=e)
    torch.testing.assert_close(v2, v, atol=1e-10, rtol=0)
    torch.testing.assert_close(logits2 * mask[..., None], logits * mask[..., None], atol=1e-10, rtol=0)
    stretched = x.clone()
    stretched[1, 0] *= 1.5
    _, logits3 = model(stretched, t, tokens=tok, mask=mask, edges=e)
    assert (logits3[1] - logits[1]).abs().max() > 1e-6
