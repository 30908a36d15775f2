"""E(n)-equivariant graph neural network over dense, padded batches.

Satorras, Hoogeboom & Welling 2021, "E(n) Equivariant Graph Neural Networks", with the refinements of
EDM (Hoogeboom et al. 2022): coordinate messages normalised by ``1 + |x_i - x_j|`` and a ``tanh``
bounded coordinate update. Every atom sees every other atom (fully connected, as in EDM on QM9); bond
features enter the edge messages when given. The velocity is ``x_L - x_0``: rotation-equivariant,
translation-invariant; the logits are invariant.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.nn import SinusoidalTimeEmbedding
from genmol.models.base import Backbone, pair_mask


class EGCL(nn.Module):
    """One equivariant layer: edge messages, coordinate update, feature update.

    The first edge layer acts on ``[h_i, h_j, |x_i - x_j|^2, e_ij]``; it is computed as the sum of
    per-atom projections of ``h_i`` and ``h_j`` plus the pair terms (the same linear map, without
    materialising the concatenation over all pairs).
    """

    def __init__(self, hidden: int, edge_dim: int, coord_range: float = 15.0) -> None:
        super().__init__()
        self.src = nn.Linear(hidden, hidden)
        self.dst = nn.Linear(hidden, hidden, bias=False)
        self.dist = nn.Linear(1, hidden, bias=False)
        self.edge = nn.Linear(edge_dim, hidden, bias=False) if edge_dim else None
        self.edge_out = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.att = nn.Sequential(nn.Linear(hidden, 1), nn.Sigmoid())
        self.node_mlp = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.coord_mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 1, bias=False))
        nn.init.xavier_uniform_(self.coord_mlp[-1].weight, gain=0.001)
        self.coord_range = coord_range
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h, x, pmask, edges):
        diff = x[:, :, None, :] - x[:, None, :, :]  # [B, N, N, 3]
        d2 = (diff * diff).sum(-1, keepdim=True)
        pre = self.src(h)[:, :, None, :] + self.dst(h)[:, None, :, :] + self.dist(d2)
        if self.edge is not None and edges is not None:
            pre = pre + self.edge(edges)
        m = self.edge_out(pre)
        m = m * self.att(m) * pmask[..., None]
        agg = m.sum(2)
        h = h + self.node_mlp(torch.cat([self.norm(h), agg], -1))
        w = torch.tanh(self.coord_mlp(m)) * self.coord_range  # [B, N, N, 1]
        norm = torch.sqrt(d2 + 1e-8) + 1.0
        x = x + (diff / norm * w * pmask[..., None]).sum(2) / (pmask.sum(2)[..., None] + 1.0)
        return h, x


class EGNN(Backbone):
    """EGNN backbone (see module docstring); ``in_features`` per-atom token features, ``num_classes`` logits."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: int = 128,
        layers: int = 4,
        edge_features: int = 0,
        time_dim: int = 32,
    ) -> None:
        super().__init__()
        self.config = {
            "in_features": in_features,
            "num_classes": num_classes,
            "hidden": hidden,
            "layers": layers,
            "edge_features": edge_features,
            "time_dim": time_dim,
        }
        self.time_embed = SinusoidalTimeEmbedding(time_dim)
        self.embed = nn.Linear(in_features + time_dim, hidden)
        self.layers = nn.ModuleList([EGCL(hidden, edge_features) for _ in range(layers)])
        self.head = nn.Sequential(
            nn.LayerNorm(hidden), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x_t, t, *, tokens, mask, edges=None):
        x_t, t, tokens, edges = self.check_inputs(x_t, t, tokens, mask, edges)
        m = mask.float()
        temb = self.time_embed(t)
        h = self.embed(torch.cat([tokens, temb[:, None, :].expand(-1, x_t.shape[1], -1)], -1)) * m[..., None]
        pmask = pair_mask(mask)
        x = x_t
        for layer in self.layers:
            h, x = layer(h, x, pmask, edges)
            h = h * m[..., None]
        velocity = (x - x_t) * m[..., None]
        return velocity, self.head(h)
