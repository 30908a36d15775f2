"""Small networks shared by the suite: sinusoidal time embeddings and an MLP
velocity field ``model(x_t, t)`` for vector data."""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.io import load_pretrained, save_pretrained


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
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
        self.register_buffer("freqs", freqs, persistent=False)
        self.scale = scale

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = self.scale * t.float()[:, None] * self.freqs[None, :]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class MLPVelocity(nn.Module):
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

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        save_pretrained(directory, self.state_dict(), {"class": type(self).__name__, **self.config})

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> MLPVelocity:
        state, config = load_pretrained(directory, device)
        config = {k: v for k, v in config.items() if k != "class"}
        model = cls(**config)
        model.load_state_dict(state)
        return model.to(device)
