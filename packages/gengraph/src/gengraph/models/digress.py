"""A small DiGress-style discrete graph diffusion baseline (Vignac et al. 2023, "DiGress: Discrete Denoising
Diffusion for Graph Generation", ICLR).

Node types and edge classes (0 = no edge) are corrupted independently towards their training marginals with
:class:`gencore.discrete.marginal.MarginalTransitionDiffusion` (edges on the upper triangle, mirrored).
A graph transformer predicts the clean classes from the noisy graph and the time, and is trained with
cross-entropy (edge term weighted by ``edge_weight = 5`` as in DiGress). Sampling starts from the marginals
with a node count drawn from the training sizes and takes ``steps`` ancestral posterior steps.

Simplifications against the paper, kept honest: a few small layers and a cosine ``alpha`` schedule from
gencore. Every node reads the random-walk return probabilities of the noisy graph. DiGress's own extra features
of the noisy graph are ``extra_features=True`` (``gengraph train`` and ``RunConfig`` turn them on by default;
the config's own default stays off, so that model folders written before the option load unchanged): per
node, its 3-, 4- and 5-cycles (divided by 10 and capped at 1, as DiGress does) and whether it lies on a largest
connected component; per graph (given to every node), its 3- to 6-cycles (same scaling),
its number of components divided by 10 and the five smallest non-zero Laplacian eigenvalues divided by the
graph's size; per node pair, ``n u_k(i) u_k(j)`` for the two eigenvectors of the smallest non-zero eigenvalues.
Two departures from DiGress's code: its 5-cycle counts are wrong around triangles (see
:func:`gengraph.batch.cycle_counts`), ours is exact; and it feeds the eigenvectors to the nodes as they come,
so its network depends on the arbitrary signs ``eigh`` returns, while their pair products do not and keep the
denoiser permutation-equivariant.

The denoiser's layers: node states ``h [B, N, H]`` and edge states ``e [B, N, N, H]``; attention scores
``q_i . k_j / sqrt(H/heads)`` plus a per-head linear read of ``e_ij``, padding masked; edges updated by a
symmetric MLP of ``(e_ij, h_i + h_j, h_i * h_j)``. Everything is permutation-equivariant.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from gencore.checks import check_int
from gencore.discrete import model_device
from gencore.discrete.marginal import MarginalTransitionDiffusion
from gencore.errors import ConfigError
from gencore.io import Pretrained
from gencore.nn import SinusoidalTimeEmbedding
from gencore.rng import draw_device, rand_with
from gengraph.batch import cycle_counts, graph_spectrum, structural_features

__all__ = ["DigressConfig", "DigressDenoiser", "digress_loss", "digress_sample", "extra_features"]


@dataclass(frozen=True, kw_only=True)
class DigressConfig:
    n_node_types: int = 1
    n_edge_types: int = 1
    n_max: int = 20
    hidden: int = 64
    layers: int = 3
    heads: int = 4
    edge_weight: float = 5.0
    extra_features: bool = False  # DiGress's cycle and spectral features of the noisy graph (module docstring)


N_EIGENVALUES, N_EIGENVECTORS = 5, 2
NODE_EXTRA = 3 + 1 + 4 + 1 + N_EIGENVALUES  # node cycles, largest component, graph cycles, components, values


def extra_features(edges_t: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DiGress-style features of a noisy graph: node ``[B, N, NODE_EXTRA]`` and pair ``[B, N, N, N_EIGENVECTORS]``
    (float32, zero on padding); see the module docstring."""
    node_cycles, graph_cycles = cycle_counts(edges_t, mask)
    vectors, values, components, largest = graph_spectrum(edges_t, mask, N_EIGENVECTORS, N_EIGENVALUES)
    size = mask.sum(-1, keepdim=True).clamp_min(1).to(torch.float64)
    graph = torch.cat([(graph_cycles / 10).clamp(max=1), components[:, None] / 10, values / size], -1)
    node = torch.cat(
        [(node_cycles / 10).clamp(max=1), largest[..., None], graph[:, None].expand(-1, mask.shape[1], -1)], -1
    )
    pair = size[..., None, None] * vectors[:, :, None, :] * vectors[:, None, :, :]
    return (node * mask[..., None]).float(), pair.float()


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.dh = heads, hidden // heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.edge_bias = nn.Linear(hidden, heads)
        self.proj = nn.Linear(hidden, hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden))
        self.edge_mlp = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.n1, self.n2, self.ne = nn.LayerNorm(hidden), nn.LayerNorm(hidden), nn.LayerNorm(hidden)

    def forward(self, h, e, mask):
        b, n, hid = h.shape
        q, k, v = self.qkv(self.n1(h)).view(b, n, 3, self.heads, self.dh).unbind(2)
        scores = torch.einsum("bihd,bjhd->bhij", q, k) / self.dh**0.5 + self.edge_bias(e).permute(0, 3, 1, 2)
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
        out = torch.einsum("bhij,bjhd->bihd", scores.softmax(-1), v).reshape(b, n, hid)
        h = h + self.proj(out)
        h = h + self.ffn(self.n2(h))
        hs = h[:, :, None] + h[:, None]
        hp = h[:, :, None] * h[:, None]
        e = e + self.edge_mlp(torch.cat([self.ne(e), hs, hp], -1))
        return h * mask[..., None], e


class DigressDenoiser(Pretrained, nn.Module):
    """``model(x_t, t, edges_t=..., mask=...) -> (node logits [B, N, Kx], edge logits [B, N, N, Ke])`` where
    ``x_t`` holds the noisy node types ``[B, N]`` and ``edges_t`` the noisy edge classes ``[B, N, N]``."""

    config_class = DigressConfig

    def __init__(self, config: DigressConfig) -> None:
        super().__init__()
        for name in ("n_node_types", "n_edge_types", "n_max", "hidden", "heads"):
            check_int(getattr(config, name), name, low=1)
        check_int(config.layers, "layers", low=0)
        if config.hidden % config.heads:  # the attention splits the width into heads
            raise ConfigError(f"hidden ({config.hidden}) must be a multiple of heads ({config.heads}).")
        if not config.edge_weight >= 0:
            raise ConfigError(f"edge_weight must be >= 0, got {config.edge_weight}.")
        self.config = c = config
        self.kx, self.ke = c.n_node_types, c.n_edge_types + 1
        self.time = SinusoidalTimeEmbedding(32, scale=30.0, max_period=30.0)
        self.node_in = nn.Linear(self.kx + 7 + 32 + (NODE_EXTRA if c.extra_features else 0), c.hidden)
        self.edge_in = nn.Linear(self.ke + (N_EIGENVECTORS if c.extra_features else 0), c.hidden)
        self.layers = nn.ModuleList(_Layer(c.hidden, c.heads) for _ in range(c.layers))
        self.node_out = nn.Linear(c.hidden, self.kx)
        self.edge_out = nn.Linear(c.hidden, self.ke)

    def forward(self, x_t, t, *, edges_t, mask):
        b, n = x_t.shape
        temb = self.time(t.float())[:, None].expand(b, n, -1)
        feats = [F.one_hot(x_t, self.kx).float(), structural_features(edges_t, mask), temb]
        edge_feats = [F.one_hot(edges_t, self.ke).float()]
        if self.config.extra_features:
            node_extra, pair_extra = extra_features(edges_t, mask)
            feats.append(node_extra)
            edge_feats.append(pair_extra)
        h = self.node_in(torch.cat(feats, -1)) * mask[..., None]
        e = self.edge_in(torch.cat(edge_feats, -1))
        for layer in self.layers:
            h, e = layer(h, e, mask)
        e_logits = self.edge_out(e)
        return self.node_out(h), (e_logits + e_logits.transpose(1, 2)) / 2


def _pairs(mask: torch.Tensor) -> torch.Tensor:
    """The node pairs ``i < j`` of each graph, ``[B, N, N]`` bool."""
    return (mask[:, :, None] & mask[:, None, :]).triu(1)


def _symmetric(upper: torch.Tensor) -> torch.Tensor:
    u = upper.triu(1)
    return u + u.transpose(1, 2)


def noisy_edges(edge_noise, edges: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, generator=None) -> torch.Tensor:
    """Edge classes ``[B, N, N]`` drawn from ``q_t(e_t | e)`` at times ``t: [B]``, symmetric, zero off the graphs.

    One draw per node pair (the upper triangle), mirrored, so the noisy graph stays undirected.
    """
    return _symmetric(edge_noise.sample(edges, t[:, None, None], generator=generator) * _pairs(mask))


def digress_loss(model, node_noise, edge_noise, edges, nodes, mask, generator, edge_weight: float = 5.0):
    b = nodes.shape[0]
    t = rand_with((b,), generator, device=nodes.device)
    xt = node_noise.sample(nodes, t[:, None], generator=generator) * mask
    et = noisy_edges(edge_noise, edges, t, mask, generator)
    node_logits, edge_logits = model(xt, t, edges_t=et, mask=mask)
    m = mask.float()
    node_ce = (F.cross_entropy(node_logits.flatten(0, 1), nodes.flatten(), reduction="none").view_as(m) * m).sum()
    node_ce = node_ce / m.sum()
    pf = _pairs(mask).float()
    edge_ce = F.cross_entropy(edge_logits.flatten(0, 2), edges.flatten(), reduction="none").view_as(pf)
    edge_ce = (edge_ce * pf).sum() / pf.sum().clamp_min(1)
    return node_ce + edge_weight * edge_ce, {"node_ce": node_ce.detach(), "edge_ce": edge_ce.detach()}


def _multinomial(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One class per row of ``probs: [M, K]`` (``[M, 1]``), drawn on the generator's device, on ``probs``' device."""
    return torch.multinomial(probs.to(draw_device(generator, probs.device)), 1, generator=generator).to(probs.device)


@torch.no_grad()
def digress_sample(
    model,
    node_noise: MarginalTransitionDiffusion,
    edge_noise: MarginalTransitionDiffusion,
    mask: torch.Tensor,
    *,
    steps: int = 50,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Ancestral sampling from the marginals: ``(edges [B, N, N], nodes [B, N])``, on the model's device.

    The random draws happen on ``generator``'s device (a CPU generator draws on the CPU and the draws are moved),
    so a seed gives the same graphs whatever the model's device.
    """
    steps = check_int(steps, "the number of sampling steps", low=1)  # 0 steps would return the noise
    device = model_device(model)
    mask = mask.to(device)
    b, n = mask.shape
    pair = _pairs(mask)
    x = node_noise.prior((b, n), generator=generator).to(device) * mask
    e = _symmetric(edge_noise.prior((b, n, n), generator=generator).to(device) * pair)
    grid = torch.linspace(0, 1, steps + 1).tolist()
    for i in range(steps):
        t, s = grid[i], grid[i + 1]
        node_logits, edge_logits = model(x, torch.full((b,), t, device=device), edges_t=e, mask=mask)
        px = node_noise.posterior_probs(x, node_logits.softmax(-1), t, s)
        pe = edge_noise.posterior_probs(e, edge_logits.softmax(-1), t, s)
        x = _multinomial(px.flatten(0, 1).float() + 1e-30, generator).view(b, n) * mask
        e = _multinomial(pe.flatten(0, 2).float() + 1e-30, generator).view(b, n, n)
        e = _symmetric(e * pair)
    return e, x
