"""Shared network pieces."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.nn import MLPVelocity, SinusoidalTimeEmbedding, broadcast_time


def test_time_embedding_is_bounded_and_distinguishes_times() -> None:
    emb = SinusoidalTimeEmbedding(16)(torch.tensor([0.0, 0.5, 1.0]))
    assert emb.shape == (3, 16)
    assert emb.abs().max() <= 1.0
    # cos^2 + sin^2 = 1 per frequency
    assert torch.allclose(emb[:, :8] ** 2 + emb[:, 8:] ** 2, torch.ones(3, 8), atol=1e-6)
    assert not torch.allclose(emb[0], emb[1])


def test_scalar_time_broadcasts_like_a_vector() -> None:
    model = MLPVelocity(2, hidden=8, depth=1, time_dim=4)
    x = torch.randn(4, 2)
    assert torch.equal(model(x, 0.3), model(x, torch.full((4,), 0.3)))
    with pytest.raises(InputError, match="t must be a scalar"):
        broadcast_time(torch.zeros(3), x)


def test_bad_sizes_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        SinusoidalTimeEmbedding(3)
    with pytest.raises(ConfigError):
        MLPVelocity(0)
