"""Shared network pieces."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.nn import BiasedAttentionBlock, MLPVelocity, SinusoidalTimeEmbedding, broadcast_time


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


def test_biased_attention_block_matches_a_written_out_attention_and_masks_padding() -> None:
    torch.manual_seed(0)
    blk = BiasedAttentionBlock(8, 2).eval()
    h = torch.randn(2, 5, 8)
    bias = torch.randn(2, 2, 5, 5)
    bias[1, :, :, 3:] = -1e9  # graph 1 has 3 real tokens
    # written out: per-head softmax(q k^T / sqrt(d) + bias) v, residuals, pre-norm MLP
    q, k, v = blk.qkv(blk.norm1(h)).view(2, 5, 3, 2, 4).unbind(2)
    logits = torch.einsum("bihd,bjhd->bhij", q, k) / 2.0 + bias
    a = torch.einsum("bhij,bjhd->bihd", logits.softmax(-1), v).reshape(2, 5, 8)
    mid = h + blk.out(a)
    torch.testing.assert_close(blk(h, bias), mid + blk.mlp(blk.norm2(mid)), rtol=1e-5, atol=1e-6)
    moved = h.clone()
    moved[1, 3:] = 100 * torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(blk(moved, bias)[1, :3], blk(h, bias)[1, :3], rtol=1e-5, atol=1e-6)
    perm = torch.tensor([2, 0, 4, 1, 3])
    torch.testing.assert_close(
        blk(h[:, perm], bias[:, :, perm][:, :, :, perm])[0], blk(h, bias)[0, perm], rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ConfigError, match="multiple of the number of heads"):
        BiasedAttentionBlock(10, 4)


def test_time_embedding_is_the_transformer_sinusoid_of_the_scaled_time() -> None:
    """Vaswani et al. (2017): feature i pairs cos and sin of ``scale * t / max_period ** (i / half)``; the other
    checks hold for any frequencies, so a wrong exponent (``i / (half - 1)``, a missing ``scale``) passed them."""
    dim, scale, max_period = 12, 1000.0, 10000.0
    t = torch.tensor([0.0, 0.013, 0.5, 0.999, 1.0])
    half = dim // 2
    i = torch.arange(half, dtype=torch.float64)
    args = scale * t.double()[:, None] / max_period ** (i / half)[None, :]
    expected = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    got = SinusoidalTimeEmbedding(dim)(t)
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=2e-4)
    torch.testing.assert_close(SinusoidalTimeEmbedding(4, scale=1.0, max_period=100.0)(t)[:, 1], torch.cos(t / 10))


def test_a_float64_time_embedding_keeps_float64_phases_and_a_float32_one_stays_float32() -> None:
    # before: t and the frequencies were rounded to float32 (phase errors ~1e-5 at scale 1000), even in a float64
    # model, whose derivative checks need float64
    dim, half = 8, 4
    t = torch.tensor([0.1234567890123, 0.75], dtype=torch.float64)
    i = torch.arange(half, dtype=torch.float64)
    args = 1000.0 * t[:, None] / 10000.0 ** (i / half)[None, :]
    expected = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    got = SinusoidalTimeEmbedding(dim).double()(t)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert SinusoidalTimeEmbedding(dim)(t).dtype == torch.float32  # a float32 model's features stay float32
    assert SinusoidalTimeEmbedding(dim).to(torch.bfloat16)(t.to(torch.bfloat16)).dtype == torch.float32
