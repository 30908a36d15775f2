"""An E(3)-equivariant tensor-product network with small irreps (optional: ``pip install genmol[e3nn]``).

Built from e3nn (Geiger & Smidt 2022, "e3nn: Euclidean neural networks"): per pair, the spherical
harmonics (l <= 1) of ``x_j - x_i`` are combined with the neighbour's features by a fully connected
tensor product whose weights come from a radial MLP on a smooth distance embedding (NequIP-style,
Batzner et al. 2022), summed over all atoms and divided by the square root of the molecule's own
neighbour count (so padding never changes a molecule's output); node features are
``hidden x 0e + hidden/2 x 1o``, with a norm-gated nonlinearity. The velocity is the ``1o`` output, the
logits the ``0e`` outputs.
e3nn's backward pass costs about ten times its forward on CPU, so tests and demos use EGNN.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from gencore.errors import ConfigError
from gencore.nn import SinusoidalTimeEmbedding
from genmol.models.base import Backbone, pair_mask

N_BASIS = 8
CUTOFF = 8.0  # angstrom; the embedding is smooth and zero beyond it


class E3NNBackbone(Backbone):
    """e3nn backbone (see module docstring)."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        hidden: int = 16,
        layers: int = 2,
        edge_features: int = 0,
        time_dim: int = 32,
    ) -> None:
        super().__init__()
        try:
            from e3nn import o3
            from e3nn.nn import FullyConnectedNet, NormActivation
        except ImportError:
            raise ConfigError("the e3nn backbone needs e3nn: pip install genmol[e3nn].") from None
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
        self.sh_irreps = o3.Irreps.spherical_harmonics(1)
        hidden_irreps = o3.Irreps(f"{hidden}x0e + {max(hidden // 2, 1)}x1o")
        irreps = o3.Irreps(f"{hidden}x0e")
        self.tps, self.radials = nn.ModuleList(), nn.ModuleList()
        self.selfs, self.acts = nn.ModuleList(), nn.ModuleList()
        for _ in range(layers):
            tp = o3.FullyConnectedTensorProduct(irreps, self.sh_irreps, hidden_irreps, shared_weights=False)
            self.tps.append(tp)
            self.radials.append(FullyConnectedNet([N_BASIS + edge_features, 32, tp.weight_numel], act=F.silu))
            self.selfs.append(o3.Linear(irreps, hidden_irreps))
            self.acts.append(NormActivation(hidden_irreps, torch.sigmoid))
            irreps = hidden_irreps
        self.velocity = o3.Linear(irreps, o3.Irreps("1x1o"))
        self.logits = o3.Linear(irreps, o3.Irreps(f"{num_classes}x0e"))

    def forward(self, x_t, t, *, tokens, mask, edges=None):
        from e3nn import o3
        from e3nn.math import soft_one_hot_linspace

        x_t, t, tokens, edges = self.check_inputs(x_t, t, tokens, mask, edges)
        b, n, _ = x_t.shape
        m = mask.float()
        temb = self.time_embed(t)
        h = self.embed(torch.cat([tokens, temb[:, None, :].expand(-1, n, -1)], -1)) * m[..., None]
        rel = x_t[:, None, :, :] - x_t[:, :, None, :]  # [B, N(i), N(j), 3]: x_j - x_i
        dist = rel.norm(dim=-1)
        sh = o3.spherical_harmonics(self.sh_irreps, rel, normalize=True, normalization="component")
        emb = soft_one_hot_linspace(dist, 0.0, CUTOFF, N_BASIS, basis="smooth_finite", cutoff=True) * math.sqrt(N_BASIS)
        if edges is not None:
            emb = torch.cat([emb, edges], -1)
        pm = pair_mask(mask)[..., None]
        # each atom's own neighbour count, not the padded width: a molecule's output must not depend on its batch
        norm = (m.sum(1) - 1.0).clamp_min(1.0).sqrt()[:, None, None]  # [B, 1, 1]
        for tp, radial, lin, act in zip(self.tps, self.radials, self.selfs, self.acts, strict=True):
            msg = tp(h[:, None, :, :].expand(b, n, n, h.shape[-1]), sh, radial(emb))
            h = act(lin(h) + (msg * pm).sum(2) / norm) * m[..., None]
        return self.velocity(h) * m[..., None], self.logits(h)
