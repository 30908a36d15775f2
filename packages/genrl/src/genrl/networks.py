"""Small conditional networks shared by the agents.

* :class:`MLP` — LayerNorm MLP (SiLU / GELU), the body of every network here.
* :class:`ActionVelocity` — a flow-matching velocity ``model(a_t, t, obs=...) -> [B, A]`` over actions
  (the BC flow policy), with gencore's sinusoidal time embedding.
* :class:`OneStepPolicy` — ``mu(obs, noise) -> [B, A]``, the one-step policy of FQL.
* :class:`ReturnVelocity` — the return vector field ``v(z_t, t | s, a) -> [B, 1]`` of Value Flows.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.nn import SinusoidalTimeEmbedding, broadcast_time


class MLP(nn.Module):
    """``in_dim -> hidden x depth -> out_dim`` with LayerNorm after each hidden linear layer."""

    def __init__(self, in_dim: int, out_dim: int, hidden: int = 256, depth: int = 3, layer_norm: bool = True) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_dim
        for _ in range(depth):
            layers.append(nn.Linear(width, hidden))
            if layer_norm:
                layers.append(nn.LayerNorm(hidden))
            layers.append(nn.GELU())
            width = hidden
        layers.append(nn.Linear(width, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ActionVelocity(nn.Module):
    """Velocity of a flow over actions conditioned on the observation: ``model(a_t: [B, A], t, obs: [B, O])``."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256, depth: int = 3, time_dim: int = 32) -> None:
        super().__init__()
        self.time_embed = SinusoidalTimeEmbedding(time_dim, scale=100.0)
        self.body = MLP(obs_dim + action_dim + time_dim, action_dim, hidden, depth)

    def forward(self, a_t: torch.Tensor, t: torch.Tensor | float, obs: torch.Tensor) -> torch.Tensor:
        t = broadcast_time(t, a_t)
        return self.body(torch.cat([obs, a_t, self.time_embed(t).to(a_t.dtype)], dim=-1))


class OneStepPolicy(nn.Module):
    """FQL's one-step policy ``mu(obs, noise) -> action`` (unclipped; callers clamp to [-1, 1])."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256, depth: int = 3) -> None:
        super().__init__()
        self.body = MLP(obs_dim + action_dim, action_dim, hidden, depth)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.body(torch.cat([obs, noise], dim=-1))


class ReturnVelocity(nn.Module):
    """Return vector field ``v(z_t: [B, 1], t, obs: [B, O], act: [B, A]) -> [B, 1]`` (Value Flows)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int = 256, depth: int = 3, time_dim: int = 32) -> None:
        super().__init__()
        self.time_embed = SinusoidalTimeEmbedding(time_dim, scale=100.0)
        self.body = MLP(obs_dim + action_dim + 1 + time_dim, 1, hidden, depth)

    def forward(self, z_t: torch.Tensor, t: torch.Tensor | float, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        t = broadcast_time(t, z_t)
        return self.body(torch.cat([obs, act, z_t, self.time_embed(t).to(z_t.dtype)], dim=-1))


class Ensemble(nn.ModuleList):
    """``K`` independently initialised copies of a network; ``forward`` stacks outputs on a new dim 0."""

    def forward(self, *args: torch.Tensor, **kwargs: torch.Tensor) -> torch.Tensor:
        return torch.stack([m(*args, **kwargs) for m in self], dim=0)
