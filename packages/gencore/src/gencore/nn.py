"""Small networks shared by the suite: sinusoidal time embeddings, an MLP
velocity field ``model(x_t, t)`` for vector data, and a pre-norm transformer
block whose attention takes an additive bias (pair features, distances, padding)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from gencore.errors import ConfigError, InputError
from gencore.io import Pretrained


def broadcast_time(t: torch.Tensor | float, x: torch.Tensor) -> torch.Tensor:
    """Return ``t`` as a ``[B]`` tensor matching the batch of ``x`` (scalar ``t`` is repeated)."""
    t = torch.as_tensor(t, dtype=x.dtype, device=x.device)
    if t.dim() == 0:
        return t.expand(x.shape[0])
    if t.dim() != 1 or t.shape[0] != x.shape[0]:
        raise InputError(f"t must be a scalar or have shape [{x.shape[0]}], got {tuple(t.shape)}.")
    return t


def expand_like(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Reshape a per-sample ``[B]`` tensor to broadcast against ``x: [B, ...]``."""
    return t.reshape(t.shape + (1,) * (x.dim() - t.dim()))


class SinusoidalTimeEmbedding(nn.Module):
    """Fixed sinusoidal features of ``t in [0, 1]`` (Vaswani et al. 2017; DDPM).

    ``t: [B] -> [B, dim]``. Frequencies span ``1 .. max_period`` geometrically;
    ``t`` is scaled by ``scale`` (1000 by default) so that [0, 1] covers many periods.
    """

    def __init__(self, dim: int, scale: float = 1000.0, max_period: float = 10000.0) -> None:
        super().__init__()
        if dim < 2 or dim % 2:
            raise ConfigError(f"time embedding dim must be an even number >= 2, got {dim}.")
        self.half, self.scale, self.max_period = dim // 2, scale, max_period
        # follows the module's dtype and device (model.to(...)); the frequencies are computed afresh in forward
        self.register_buffer("_dtype", torch.zeros(()), persistent=False)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """Features in the module's precision, at least float32: a float64 model's keep their phases exact to
        float64 (they were rounded to float32), a bf16 model's are float32 (phases ``scale * t`` in bf16 are coarse)."""
        dtype = torch.promote_types(self._dtype.dtype, torch.float32)
        freqs = torch.arange(self.half, dtype=dtype, device=t.device) * (-math.log(self.max_period) / self.half)
        args = self.scale * t.to(dtype)[:, None] * freqs.exp()[None, :]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class MLPVelocity(Pretrained, nn.Module):
    """An MLP ``model(x_t, t) -> [B, dim]`` for flat vector data.

    The time embedding is concatenated to the input; SiLU activations.
    ``save_pretrained(dir)`` / ``MLPVelocity.from_pretrained(dir)`` round-trip
    through safetensors and a JSON config.
    """

    def __init__(self, dim: int, hidden: int = 256, depth: int = 3, time_dim: int = 32) -> None:
        super().__init__()
        if dim < 1 or hidden < 1 or depth < 1:
            raise ConfigError(f"MLPVelocity needs dim, hidden, depth >= 1, got {dim}, {hidden}, {depth}.")
        self.config: dict[str, Any] = {"dim": dim, "hidden": hidden, "depth": depth, "time_dim": time_dim}
        self.time_embed = SinusoidalTimeEmbedding(time_dim)
        layers: list[nn.Module] = []
        width = dim + time_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        layers.append(nn.Linear(width, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        t = broadcast_time(t, x)
        return self.net(torch.cat([x, self.time_embed(t).to(x.dtype)], dim=-1))


class BiasedAttentionBlock(nn.Module):
    """A pre-norm transformer block over ``h: [B, N, F]`` whose attention logits get an additive
    ``bias: [B, H, N, N]`` (or anything broadcasting to it; ``-1e9`` at padded keys masks them).

    ``h + Attn(LN h)``, then ``+ MLP(LN h)`` (GELU, width ``mlp_ratio * F``), the same in training and inference.
    Why not ``nn.TransformerEncoderLayer`` with a ``[B * H, N, N]`` float mask: under ``torch.no_grad()`` in eval
    mode its fast path returns all-NaN outputs for such a mask (torch 2.13, CPU), while training runs correctly.
    """

    def __init__(self, hidden: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        if hidden % heads:
            raise ConfigError(f"the width {hidden} must be a multiple of the number of heads {heads}.")
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, mlp_ratio * hidden), nn.GELU(), nn.Linear(mlp_ratio * hidden, hidden)
        )

    def forward(self, h: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        b, n, f = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, n, 3, self.heads, f // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        h = h + self.out(a.transpose(1, 2).reshape(b, n, f))
        return h + self.mlp(self.norm2(h))
