"""FlowMatcher: the torchcfm-style (t, x_t, u_t) surface, coupling-first ordering, seeded reproducibility,
and its loss agreeing with flow_matching_loss on the same draws."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.flow_matching import FlowMatcher
from gencore.losses import flow_matching_loss
from gencore.nn import MLPVelocity
from gencore.paths import (
    AffineGaussianPath,
    BetaTime,
    BrownianBridgePath,
    CosineSchedule,
    LinearSchedule,
    UniformTime,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_defaults_are_rectified_flow() -> None:
    fm = FlowMatcher()
    x0, x1 = torch.randn(32, 2, generator=_gen(0)), torch.randn(32, 2, generator=_gen(1))
    t, x_t, u_t = fm(x0, x1, generator=_gen(2))
    assert t.shape == (32,) and x_t.shape == u_t.shape == (32, 2)
    assert 0 <= t.min() and t.max() < 1
    torch.testing.assert_close(t, UniformTime()(32, generator=_gen(2)))
    torch.testing.assert_close(x_t, t[:, None] * x1 + (1 - t[:, None]) * x0)
    torch.testing.assert_close(u_t, x1 - x0)


def test_seeded_reproducible() -> None:
    fm = FlowMatcher(BrownianBridgePath(0.3), time_sampler=BetaTime(2.0, 2.0))
    x0, x1 = torch.randn(16, 3), torch.randn(16, 3)
    a = fm(x0, x1, generator=_gen(4))
    b = fm(x0, x1, generator=_gen(4))
    for u, v in zip(a, b):
        assert torch.equal(u, v)


def test_coupling_is_applied_before_the_path() -> None:
    calls = []

    def reverse_x0(x0, x1, *, generator=None):
        calls.append(generator)
        return x0.flip(0), x1

    g = _gen(5)
    fm = FlowMatcher(AffineGaussianPath(CosineSchedule()), coupling=reverse_x0)
    x0, x1 = torch.randn(8, 2), torch.randn(8, 2)
    t, x_t, u_t = fm(x0, x1, generator=g)
    assert calls == [g]
    expected = AffineGaussianPath(CosineSchedule()).sample(x0.flip(0), x1, t)
    torch.testing.assert_close(x_t, expected.x_t)
    torch.testing.assert_close(u_t, expected.u_t)


def test_loss_matches_flow_matching_loss_on_same_draws() -> None:
    torch.manual_seed(0)
    model = MLPVelocity(dim=2, hidden=16, depth=2).double()
    path = AffineGaussianPath(LinearSchedule())
    fm = FlowMatcher(path, weighting=lambda t: 1 + t)
    x1 = torch.randn(64, 2, generator=_gen(6), dtype=torch.float64)
    got = fm.loss(model, x1, generator=_gen(7))
    # replay: x0 first, then t, from the same generator
    g = _gen(7)
    x0 = torch.randn(x1.shape, generator=g, dtype=torch.float64)
    t = UniformTime()(64, generator=g, dtype=torch.float64)
    ref = flow_matching_loss(model, path, x0, x1, t, weighting=lambda t: 1 + t)
    torch.testing.assert_close(got, ref)
    got.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_loss_with_given_x0_and_prediction() -> None:
    x1 = torch.randn(16, 2, generator=_gen(8), dtype=torch.float64)
    x0 = torch.randn(16, 2, generator=_gen(9), dtype=torch.float64)
    fm = FlowMatcher(prediction="data")
    assert fm.loss(lambda x_t, t: x1, x1, x0=x0, generator=_gen(1)).item() < 1e-20
    assert fm.loss(lambda x_t, t: x0, x1, x0=x0, generator=_gen(1)).item() > 0


def test_conditioning_and_reordering_coupling() -> None:
    x1 = torch.randn(8, 2)
    labels = torch.arange(8)

    def model(x_t, t, *, y):
        return torch.zeros_like(x_t) + y.reshape(-1, 1).to(x_t.dtype)

    keeps_x1 = FlowMatcher(coupling=lambda a, b, generator=None: (a.flip(0), b))
    assert torch.isfinite(keeps_x1.loss(model, x1, generator=_gen(0), y=labels))
    moves_x1 = FlowMatcher(coupling=lambda a, b, generator=None: (a, b.flip(0)))
    with pytest.raises(ConfigError, match="conditioning"):
        moves_x1.loss(model, x1, generator=_gen(0), y=labels)
    assert torch.isfinite(moves_x1.loss(model, x1, generator=_gen(0), y=torch.tensor(1.0)))


def test_errors() -> None:
    with pytest.raises(ConfigError, match="prediction"):
        FlowMatcher(prediction="x0")
    with pytest.raises(ConfigError, match="sample"):
        FlowMatcher(path=LinearSchedule())  # type: ignore[arg-type]
    with pytest.raises(InputError, match="batch size"):
        FlowMatcher()(torch.randn(4, 2), torch.randn(5, 2))
    bad = FlowMatcher(coupling=lambda a, b, generator=None: (a[:2], b[:2]))
    with pytest.raises(InputError, match="same size"):
        bad(torch.randn(4, 2), torch.randn(4, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_generator_gives_same_numbers_for_cuda_data() -> None:
    fm = FlowMatcher(BrownianBridgePath(0.5))
    x0, x1 = torch.randn(16, 2), torch.randn(16, 2)
    cpu = fm(x0, x1, generator=_gen(11))
    gpu = fm(x0.to("cuda"), x1.to("cuda"), generator=_gen(11))
    for a, b in zip(cpu, gpu):
        assert b.is_cuda
        torch.testing.assert_close(a, b.cpu())


def test_integer_data_is_refused_with_a_clear_error() -> None:
    # t was drawn in the data's dtype before the path's check: a NotImplementedError from deep inside torch
    x0, x1 = torch.zeros(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.long)
    fm = FlowMatcher()
    with pytest.raises(InputError, match="floating-point"):
        fm(x0, x1)
    with pytest.raises(InputError, match="floating-point"):
        fm.loss(lambda x_t, t: x_t, x1)
    with pytest.raises(InputError, match="floating-point"):
        fm.loss(lambda x_t, t: x_t, x1, x0=x0)
