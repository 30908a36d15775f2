"""Networks for manifold flows: an MLP on the manifold's features whose output is read in a metric-orthonormal
frame (``Manifold.from_frame``: divided by ``lambda_x`` on the Poincare ball, so outputs stay O(1) near the
boundary) and projected to the tangent space.

Time is embedded with :class:`gencore.nn.SinusoidalTimeEmbedding` at a moderate frequency scale (``t in
[0, 1]`` spans a few periods), since flow maps are differentiated along time.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.errors import ConfigError
from gencore.manifolds.base import Manifold
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time


class ManifoldMLP(nn.Module):
    """``net(x, *times) -> [B, D]`` tangent at ``x``: SiLU MLP on ``features(x)`` and one embedding per time.

    ``n_times = 1`` gives a velocity field ``v(x, t)``; ``n_times = 2`` a two-time field ``v(x, s, t)``.
    """

    def __init__(
        self, manifold: Manifold, *, n_times: int = 1, hidden: int = 128, depth: int = 3, time_dim: int = 32
    ) -> None:
        super().__init__()
        if n_times not in (1, 2) or hidden < 1 or depth < 1:
            raise ConfigError(
                f"ManifoldMLP needs n_times in (1, 2), hidden, depth >= 1; got {n_times}, {hidden}, {depth}."
            )
        self.manifold, self.n_times = manifold, n_times
        self.time_embed = SinusoidalTimeEmbedding(time_dim, scale=30.0, max_period=30.0)
        layers: list[nn.Module] = []
        width = manifold.feature_dim + n_times * time_dim
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.SiLU()]
            width = hidden
        layers.append(nn.Linear(width, manifold.ambient_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, *times: torch.Tensor | float) -> torch.Tensor:
        if len(times) != self.n_times:
            raise ConfigError(f"this network takes {self.n_times} time argument(s), got {len(times)}.")
        feats = [self.manifold.features(x)]
        feats += [self.time_embed(broadcast_time(t, x)).to(x.dtype) for t in times]
        out = self.manifold.from_frame(x, self.net(torch.cat(feats, dim=-1)))
        return self.manifold.proju(x, out)


class TangentVelocity(nn.Module):
    """Wrap any ``f(x, t) -> [B, D]`` so that its output is projected to ``T_x``."""

    def __init__(self, manifold: Manifold, field: nn.Module) -> None:
        super().__init__()
        self.manifold, self.field = manifold, field

    def forward(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        return self.manifold.proju(x, self.field(x, t))
