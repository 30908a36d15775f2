"""A transformer on global coordinates: not equivariant by construction.

Each atom is a token carrying its coordinates (a linear embedding of ``x_i``), its atom-type/charge
features and the time; pair features (bond orders, when given) and the squared distances enter each
head's attention logits as a learned additive bias. Such networks have to learn the behaviour of
the group action from data, which is where the SE(3) strategy matters (the quotient-space loss asks
nothing of the vertical component of the output). Training applies random rotations to the data.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.nn import BiasedAttentionBlock, SinusoidalTimeEmbedding
from genmol.models.base import Backbone


class CoordinateTransformer(Backbone):
    """Transformer backbone (see module docstring)."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: int = 128,
        layers: int = 4,
        heads: int = 4,
        edge_features: int = 0,
        time_dim: int = 32,
    ) -> None:
        super().__init__()
        self.config = {
            "in_features": in_features,
            "num_classes": num_classes,
            "hidden": hidden,
            "layers": layers,
            "heads": heads,
            "edge_features": edge_features,
            "time_dim": time_dim,
        }
        self.time_embed = SinusoidalTimeEmbedding(time_dim)
        self.embed = nn.Linear(in_features + time_dim + 3, hidden)
        self.pair = nn.Linear(edge_features + 1, heads * layers)
        self.blocks = nn.ModuleList([BiasedAttentionBlock(hidden, heads) for _ in range(layers)])
        self.norm = nn.LayerNorm(hidden)
        self.velocity = nn.Linear(hidden, 3)
        self.logits = nn.Linear(hidden, num_classes)

    def forward(self, x_t, t, *, tokens, mask, edges=None):
        x_t, t, tokens, edges = self.check_inputs(x_t, t, tokens, mask, edges)
        b, n, _ = x_t.shape
        m = mask.float()
        temb = self.time_embed(t)
        h = self.embed(torch.cat([tokens, temb[:, None, :].expand(-1, n, -1), x_t], -1))
        d2 = ((x_t[:, :, None] - x_t[:, None]) ** 2).sum(-1, keepdim=True)
        pair = torch.cat([d2, edges], -1) if edges is not None else d2
        bias = self.pair(pair).view(b, n, n, len(self.blocks), -1).permute(3, 0, 4, 1, 2)  # [L, B, H, N, N]
        pad = torch.zeros(b, 1, 1, n, dtype=h.dtype, device=h.device).masked_fill(~mask.bool()[:, None, None], -1e9)
        for blk, bi in zip(self.blocks, bias, strict=True):
            h = blk(h, bi + pad)
        h = self.norm(h)
        return self.velocity(h) * m[..., None], self.logits(h)
