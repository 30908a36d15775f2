"""Edge inputs of the discrete processes: times outside [0, 1], bad class labels, bad guidance scales."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.discrete.ctmc import ctmc_jump
from gencore.discrete.guidance import GuidedDenoiser
from gencore.discrete.masked import MaskedDiffusion
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.uniform import UniformDiffusion
from gencore.discrete.wright_fisher import WrightFisherDiscrete, WrightFisherGaussian
from gencore.errors import ConfigError, InputError


@pytest.mark.parametrize("cls", [MaskedDiffusion, UniformDiffusion])
@pytest.mark.parametrize("t", [-0.5, 1.5, math.nan, [0.5, 1.01]])
def test_marginal_and_corrupt_refuse_times_outside_the_unit_interval(cls, t):
    # before: alpha_t = t was used as is, so marginal(x0, -0.5) had probabilities -0.5 and 1.5
    process = cls(2)
    x0 = torch.tensor([[1, 0], [0, 1]])
    t = torch.tensor(t)
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        process.marginal(x0, t)
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        process.corrupt(x0, t, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("cls", [MaskedDiffusion, UniformDiffusion])
def test_marginal_at_the_end_points_is_noise_and_data(cls):
    process = cls(2)
    x0 = torch.tensor([[1, 0]])
    data = process.marginal(x0, 1.0)
    assert torch.equal(data[..., :2], torch.nn.functional.one_hot(x0, 2).float())
    noise = process.marginal(x0, 0.0)
    expected = torch.tensor([0.0, 0.0, 1.0]) if cls is MaskedDiffusion else torch.tensor([0.5, 0.5])
    assert torch.allclose(noise, expected.expand_as(noise))


@pytest.mark.parametrize("cls", [WrightFisherDiscrete, WrightFisherGaussian])
@pytest.mark.parametrize("t", [-0.5, 1.5])
def test_wright_fisher_forward_sample_refuses_times_outside_the_unit_interval(cls, t):
    # before: t = 1.5 gave a negative tau and a silent draw; t = -0.5 an unrelated "probs" error
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        cls(2).forward_sample(torch.tensor([[1]]), t, generator=torch.Generator().manual_seed(0))


def _net(num_classes: int = 2) -> TokenDenoiser:
    torch.manual_seed(0)
    return TokenDenoiser(3, 2, 1, hidden=8, depth=1, heads=2, num_classes=num_classes)


@pytest.mark.parametrize(
    "y", [torch.tensor([0, 3]), torch.tensor([-1, 0]), torch.tensor([0.0, 1.0]), torch.tensor([0])]
)
def test_token_denoiser_refuses_bad_labels(y):
    # before: an IndexError from the embedding (out of range) or a RuntimeError (float labels)
    with pytest.raises(InputError, match="class labels"):
        _net()(torch.zeros(2, 1, 3), torch.zeros(2), y=y)


def test_token_denoiser_accepts_every_class_and_the_null_label():
    out = _net()(torch.zeros(3, 1, 3), torch.zeros(3), y=torch.tensor([0, 1, 2]))
    assert out.shape == (3, 1, 2) and bool(torch.isfinite(out).all())


def test_guided_sampler_refuses_out_of_range_labels_with_one_error():
    guided = GuidedDenoiser(_net(), 2.0, null_label=2)
    with pytest.raises(InputError, match="class labels"):
        MaskedDiffusion(2).sample(
            guided, 2, 1, steps=2, generator=torch.Generator().manual_seed(0), y=torch.tensor([0, 5])
        )
    with pytest.raises(InputError, match="class labels"):
        guided(torch.zeros(2, 1, 3), torch.zeros(2), y=torch.tensor([0, 1, 1]))
    with pytest.raises(InputError, match="class labels"):
        GuidedDenoiser(_net(), 1.5, null_label=7)(torch.zeros(2, 1, 3), torch.zeros(2), y=torch.tensor([0, 1]))


def test_guided_denoiser_broadcasts_one_label():
    guided = GuidedDenoiser(_net(), 1.0, null_label=2)
    one = guided(torch.zeros(2, 1, 3), torch.zeros(2), y=torch.tensor(1))
    both = guided(torch.zeros(2, 1, 3), torch.zeros(2), y=torch.tensor([1, 1]))
    assert torch.equal(one, both)


@pytest.mark.parametrize("scale", [math.inf, -math.inf, math.nan, True, "2"])
def test_guidance_scale_must_be_a_finite_number(scale):
    # before: an infinite scale gave inf * cond + (-inf) * uncond = NaN logits at sampling time
    with pytest.raises(ConfigError, match="guidance scale"):
        GuidedDenoiser(_net(), scale, null_label=2)


class _TimeRecorder(torch.nn.Module):
    """Uniform logits over ``K`` tokens; records every time it is called with."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k
        self.times: list[list[float]] = []

    def forward(self, features, t, **cond):
        self.times.append(torch.as_tensor(t, dtype=torch.float64).reshape(-1).tolist())
        return torch.zeros(*features.shape[:2], self.k)


@pytest.mark.parametrize(
    "process",
    [
        MaskedDiffusion(2),
        MaskedDiffusion(2, "cosine"),
        UniformDiffusion(2),
        UniformDiffusion(2, sampler="euler"),
        WrightFisherDiscrete(2),
        WrightFisherGaussian(2),
    ],
)
def test_samplers_call_the_denoiser_at_the_left_end_of_each_step_from_noise_to_data(process):
    # t = 0 is noise and t = 1 data: step k of `steps` sees the state at t_k = k / steps (a network trained on
    # x_t ~ q_t must be asked at the time of the state it is given); an off-by-one (k + 1) / steps or the reversed
    # grid 1 - k / steps passes every exact-posterior test, since the masked posterior does not depend on t
    model = _TimeRecorder(2)
    steps, n = 4, 3
    out = process.sample(model, n, 1, steps=steps, generator=torch.Generator().manual_seed(0))
    assert out.nfe == steps and out.tokens.shape == (n, 1)
    assert model.times == [[k / steps] * n for k in range(steps)]


@pytest.mark.parametrize(
    ("intensity", "method", "law"),
    [
        ([0.0, 0.3, 0.2], "euler", [0.5, 0.3, 0.2]),
        ([0.0, 1.5, 0.5], "euler", [0.0, 0.75, 0.25]),  # total above 1: no stay, jumps renormalised
        ([0.0, 0.3, 0.2], "tau-leaping", [math.exp(-0.5), 0.6 * -math.expm1(-0.5), 0.4 * -math.expm1(-0.5)]),
        ([7.0, 0.3, 0.2], "tau-leaping", [math.exp(-0.5), 0.6 * -math.expm1(-0.5), 0.4 * -math.expm1(-0.5)]),
    ],
)
def test_ctmc_jump_draws_the_documented_one_step_law(intensity, method, law):
    # the entry of the current value (0) is ignored; frequencies within 5 standard errors of the law
    n = 40_000
    x = torch.zeros(n, dtype=torch.long)
    out = ctmc_jump(x, torch.tensor(intensity).expand(n, 3), generator=torch.Generator().manual_seed(0), method=method)
    freq = torch.bincount(out, minlength=3).double() / n
    law = torch.tensor(law, dtype=torch.float64)
    assert torch.all((freq - law).abs() <= 5 * (law * (1 - law) / n).sqrt() + 1e-12), (freq, law)


def _processes():
    from gencore.discrete.learnable_forward import LearnableForwardProcess
    from gencore.discrete.wright_fisher import JacobiDirichletSDE, WrightFisherSimplex

    return [
        MaskedDiffusion(3),
        UniformDiffusion(3),
        WrightFisherDiscrete(3),
        WrightFisherGaussian(3),
        WrightFisherSimplex(3),
        JacobiDirichletSDE(3),
        LearnableForwardProcess(3, 4, steps=2),
    ]


@pytest.mark.parametrize("process", _processes(), ids=lambda p: type(p).__name__)
@pytest.mark.parametrize(
    ("kwargs", "name"), [({"steps": 2.5}, "steps"), ({"n": 2.0}, "n"), ({"n": 0}, "n"), ({"steps": True}, "steps")]
)
def test_samplers_refuse_sizes_that_are_not_positive_integers(process, kwargs, name):
    # before: steps=2.5 was a raw TypeError from range() or linspace; the learnable process never checked n
    call = {"n": 2, "steps": 2} | kwargs
    n = call.pop("n")
    with pytest.raises(InputError, match=rf"^{name} must be"):
        process.sample(lambda *a, **k: None, n, 4, **call)
