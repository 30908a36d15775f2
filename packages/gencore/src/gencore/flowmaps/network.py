"""Two-time networks for flow maps: ``model(x, s, t) -> u`` with ``X_{s,t}(x) = x + (t - s) u(x, s, t)``.

The map's time features are smooth on purpose: the MeanFlow target differentiates the network
in its start time ``s`` (exactly with a JVP, or by a finite difference), and the suite's default
embedding (frequencies up to 1000 per unit time) would make that derivative large and its finite
difference inaccurate. Here the sinusoidal frequencies span ``1 .. time_scale`` per unit time.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gencore.errors import ConfigError
from gencore.io import Pretrained
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time


def mlp(width_in: int, width_out: int, hidden: int, depth: int) -> nn.Sequential:
    """``depth`` SiLU layers of ``hidden`` units, then a linear read-out."""
    if width_in < 1 or width_out < 1 or hidden < 1 or depth < 1:
        raise ConfigError(f"an MLP needs positive widths and depth, got {width_in}, {width_out}, {hidden}, {depth}.")
    layers: list[nn.Module] = []
    width = width_in
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.SiLU()]
        width = hidden
    layers.append(nn.Linear(width, width_out))
    return nn.Sequential(*layers)


def smooth_time_embedding(time_dim: int, time_scale: float) -> SinusoidalTimeEmbedding:
    """Sinusoidal features of ``t`` with angular frequencies from ``time_scale`` down to 1."""
    if not time_scale >= 1.0:
        raise ConfigError(f"time_scale must be >= 1, got {time_scale}.")
    return SinusoidalTimeEmbedding(time_dim, scale=time_scale, max_period=time_scale)


class TwoTimeMLP(Pretrained, nn.Module):
    """Average-velocity MLP ``u(x, s, t) -> [B, dim]`` conditioned on the start time ``s`` and the gap ``t - s``.

    Embedding ``(s, t - s)`` rather than ``(s, t)`` follows MeanFlow's ablation (Geng et al. 2025,
    Table 1c), where the interval length is the most useful second time input.
    """

    def __init__(self, dim: int, hidden: int = 128, depth: int = 3, time_dim: int = 16, time_scale: float = 30.0):
        super().__init__()
        self.config: dict[str, Any] = {
            "dim": dim,
            "hidden": hidden,
            "depth": depth,
            "time_dim": time_dim,
            "time_scale": time_scale,
        }
        self.time_embed = smooth_time_embedding(time_dim, time_scale)
        self.net = mlp(dim + 2 * time_dim, dim, hidden, depth)

    def forward(self, x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float) -> torch.Tensor:
        s = broadcast_time(s, x)
        t = broadcast_time(t, x)
        return self.net(torch.cat([x, self.time_embed(s), self.time_embed(t - s)], dim=-1))
