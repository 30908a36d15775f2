"""Classifier-free guidance for discrete denoisers: exact at scale 1, log-linear tilt, NFE counting."""

from __future__ import annotations

import pytest
import torch

from gencore.discrete import (
    ExactDenoiser,
    GuidedDenoiser,
    MaskedDiffusion,
    TokenDenoiser,
    UniformDiffusion,
    guided_logits,
    sequence_index,
)
from gencore.errors import ConfigError, InputError

K, L, C = 3, 2, 2


def conditional_laws() -> torch.Tensor:
    """Two class-conditional laws over the 9 sequences (rows), equally likely classes."""
    p = torch.tensor(
        [
            [0.30, 0.02, 0.08, 0.05, 0.25, 0.01, 0.10, 0.04, 0.15],
            [0.02, 0.20, 0.05, 0.20, 0.03, 0.20, 0.05, 0.20, 0.05],
        ],
        dtype=torch.float64,
    )
    return p / p.sum(1, keepdim=True)


class ExactConditional(torch.nn.Module):
    """Bayes denoisers of p(x | y) for y < C and of the class mixture for the null label C."""

    def __init__(self, process) -> None:
        super().__init__()
        laws = conditional_laws()
        self.branches = torch.nn.ModuleList(
            [ExactDenoiser(q, K, L, process.clean_log_likelihood) for q in (*laws, laws.mean(0))]
        )
        self.calls = 0

    def forward(self, features, t, y=None):
        self.calls += 1
        t = torch.as_tensor(t, dtype=features.dtype).expand(features.shape[0])
        out = torch.empty(features.shape[0], L, K, dtype=features.dtype)
        for label, branch in enumerate(self.branches):
            rows = y == label
            if bool(rows.any()):
                out[rows] = branch(features[rows], t[rows])
        return out


def test_scale_one_is_exactly_the_conditional_model_and_zero_the_unconditional():
    torch.manual_seed(0)
    model = TokenDenoiser(K + 1, K, 6, hidden=16, depth=1, heads=2, num_classes=C).eval()
    features = torch.nn.functional.one_hot(torch.randint(0, K + 1, (5, 6)), K + 1).float()
    t = torch.rand(5)
    y = torch.tensor([0, 1, 1, 0, 1])
    with torch.no_grad():
        cond = model(features, t, y=y)
        uncond = model(features, t, y=torch.full_like(y, C))
        assert torch.equal(GuidedDenoiser(model, 1.0, C)(features, t, y=y), cond)
        assert torch.equal(GuidedDenoiser(model, 0.0, C)(features, t, y=y), uncond)
        guided = GuidedDenoiser(model, 3.0, C)(features, t, y=y)
        batched = GuidedDenoiser(model, 3.0, C, batched=True)(features, t, y=y)
    torch.testing.assert_close(guided, uncond + 3.0 * (cond - uncond))
    torch.testing.assert_close(batched, guided)


def test_guided_posterior_is_the_normalised_geometric_tilt():
    cond = torch.log(torch.tensor([[[0.6, 0.3, 0.1]]]))
    uncond = torch.log(torch.tensor([[[0.2, 0.5, 0.3]]]))
    w = 2.5
    probs = torch.softmax(guided_logits(cond + 7.0, uncond - 3.0, w), -1)  # per-position constants cancel
    tilt = cond.exp() ** w * uncond.exp() ** (1 - w)
    torch.testing.assert_close(probs, tilt / tilt.sum(-1, keepdim=True))
    with pytest.raises(InputError):
        guided_logits(cond, uncond[..., :2], w)


@pytest.mark.parametrize("process", [MaskedDiffusion(K), UniformDiffusion(K)], ids=["masked", "uniform"])
def test_samplers_count_two_evaluations_per_guided_step(process):
    exact = ExactConditional(process)
    guided = GuidedDenoiser(exact, 1.0, C)
    y = torch.tensor([0, 1]).repeat(3000)
    out = process.sample(guided, y.shape[0], L, steps=10, generator=torch.Generator().manual_seed(1), y=y)
    assert out.nfe == 20 and exact.calls == 20
    plain = process.sample(exact, y.shape[0], L, steps=10, generator=torch.Generator().manual_seed(1), y=y)
    assert plain.nfe == 10
    # scale 1 is the conditional model, so the same seed gives the same tokens
    assert torch.equal(out.tokens, plain.tokens)


def test_guidance_at_scale_one_samples_the_class_conditional_law():
    process = MaskedDiffusion(K)
    exact = ExactConditional(process)
    laws = conditional_laws()
    y = torch.tensor([0, 1]).repeat(10000)
    out = process.sample(
        GuidedDenoiser(exact, 1.0, C), y.shape[0], L, steps=32, generator=torch.Generator().manual_seed(2), y=y
    )
    for label in range(C):
        tokens = out.tokens[y == label]
        freq = torch.bincount(sequence_index(tokens, K), minlength=K**L).double() / tokens.shape[0]
        assert 0.5 * float((freq - laws[label]).abs().sum()) < 0.03


def test_stronger_guidance_sharpens_towards_the_class():
    """w > 1 raises the class-conditional likelihood of the samples (mode seeking)."""
    process = MaskedDiffusion(K)
    exact = ExactConditional(process)
    laws = conditional_laws()
    y = torch.zeros(10000, dtype=torch.long)
    loglik = []
    for w in (1.0, 3.0):
        out = process.sample(
            GuidedDenoiser(exact, w, C), 10000, L, steps=16, generator=torch.Generator().manual_seed(3), y=y
        )
        loglik.append(float(laws[0][sequence_index(out.tokens, K)].log().mean()))
    assert loglik[1] > loglik[0] + 0.05


def test_guidance_input_errors():
    model = TokenDenoiser(K, K, L, hidden=8, depth=1, heads=2, num_classes=C)
    with pytest.raises(InputError):
        GuidedDenoiser(model, 2.0, C)(torch.zeros(1, L, K), 0.5)
    with pytest.raises(ConfigError):
        GuidedDenoiser(model, float("nan"), C)
