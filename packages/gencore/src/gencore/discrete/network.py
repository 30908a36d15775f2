"""A small transformer denoiser shared by every discrete / simplex process.

``TokenDenoiser(input_dim, vocab_size, length)`` maps per-position features
``[B, L, input_dim]`` and times ``t: [B]`` to clean-token logits ``[B, L, K]``.
An optional class label ``y: [B]`` (with ``num_classes`` set) conditions it; the
label ``num_classes`` is the null label used for classifier-free guidance.
``local_kernel`` (default 5, 0 to disable) adds a residual depthwise convolution over
positions before the attention layers: on synthetic DNA (masked diffusion, hidden 32, 800
steps) it takes the test bound from 1.231 to 1.118 nats per position, where attention alone
had not yet got past the context-free 1.217.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.io import Pretrained
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time


class TokenDenoiser(Pretrained, nn.Module):
    """Transformer encoder over positions, time- and (optionally) class-conditioned by an added embedding."""

    def __init__(
        self,
        input_dim: int,
        vocab_size: int,
        length: int,
        hidden: int = 128,
        depth: int = 3,
        heads: int = 4,
        num_classes: int | None = None,
        local_kernel: int = 5,
    ) -> None:
        super().__init__()
        if min(input_dim, vocab_size, length, hidden, depth, heads) < 1 or hidden % heads:
            raise ConfigError(
                f"TokenDenoiser needs positive sizes and hidden divisible by heads, got input_dim={input_dim}, "
                f"vocab_size={vocab_size}, length={length}, hidden={hidden}, depth={depth}, heads={heads}."
            )
        self.config: dict[str, Any] = {
            "input_dim": input_dim,
            "vocab_size": vocab_size,
            "length": length,
            "hidden": hidden,
            "depth": depth,
            "heads": heads,
            "num_classes": num_classes,
            "local_kernel": local_kernel,
        }
        if local_kernel < 0 or (local_kernel and local_kernel % 2 == 0):
            raise ConfigError(f"local_kernel must be 0 (off) or an odd width, got {local_kernel}.")
        # a residual depthwise-separable convolution over positions: neighbouring tokens mix before attention
        # has learned to find them, which a small model on short budgets otherwise barely manages
        self.local = (
            nn.Sequential(
                nn.Conv1d(hidden, hidden, local_kernel, padding=local_kernel // 2, groups=hidden),
                nn.GELU(),
                nn.Conv1d(hidden, hidden, 1),
            )
            if local_kernel
            else None
        )
        self.embed = nn.Linear(input_dim, hidden)
        self.position = nn.Parameter(torch.randn(length, hidden) * 0.02)
        self.time_embed = nn.Sequential(SinusoidalTimeEmbedding(hidden), nn.Linear(hidden, hidden), nn.SiLU())
        self.class_embed = nn.Embedding(num_classes + 1, hidden) if num_classes else None
        layer = nn.TransformerEncoderLayer(
            hidden, heads, dim_feedforward=4 * hidden, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, features: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        cfg = self.config
        if features.dim() != 3 or features.shape[1:] != (cfg["length"], cfg["input_dim"]):
            raise InputError(
                f"TokenDenoiser expects features of shape [B, {cfg['length']}, {cfg['input_dim']}], "
                f"got {tuple(features.shape)}."
            )
        t = broadcast_time(t, features)
        cond = self.time_embed(t).to(features.dtype)
        if self.class_embed is not None:
            if y is None:
                y = torch.full((features.shape[0],), cfg["num_classes"], dtype=torch.long, device=features.device)
            elif (
                y.is_floating_point()
                or y.shape != (features.shape[0],)
                or (y.numel() and not bool(((y >= 0) & (y <= cfg["num_classes"])).all()))
            ):
                raise InputError(
                    f"class labels y must be integers in [0, {cfg['num_classes']}] ({cfg['num_classes']} = null label) "
                    f"of shape [{features.shape[0]}], got {y.dtype} {tuple(y.shape)}."
                )
            cond = cond + self.class_embed(y)
        h = self.embed(features) + self.position + cond[:, None, :]
        if self.local is not None:
            h = h + self.local(h.transpose(1, 2)).transpose(1, 2)
        return self.out(self.norm(self.encoder(h)))
