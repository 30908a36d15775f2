"""GGBall: a hyperbolic vector-quantised graph autoencoder ("GGBall: Graph Generative Model on Poincare Ball",
ICLR 2026), written for this suite from the paper's description.

Encoder: node inputs (one-hot node type, random-walk return probabilities, relative degree, and as positional
inputs the eigenvectors of the ``laplacian_pe`` smallest normalised-Laplacian eigenvalues, with random sign flips
in training, and ``random_features`` i.i.d. standard normal features) are lifted to the ball by ``exp_0`` of a
linear map, then pass HGCN convolutions over the adjacency and hyperbolic transformer blocks
(:mod:`gengraph.hyperbolic.layers`) and a final Poincare linear map to the latent ball ``B^d_c``; each graph's
latents are then moved by the isometry taking their gyromidpoint to the origin (``centre_latents``).

Why the positional inputs: structural inputs and a permutation-equivariant encoder give nodes with the same
local structure (sibling leaves, far-apart nodes with equal neighbourhoods) identical latents, and a decoder
that reads pairs of latents cannot then tell a parent-child pair from a pair of look-alikes: on 64-node trees
such an encoder learned no edge at all (held-out edge recall 0). Laplacian eigenvectors (Dwivedi et al. 2020,
with sign flips) and random node features (Sato et al. 2021; Abboud et al. 2021) break the symmetry; the
encoder stays equivariant in distribution. Why the centring: it fixes the latents' free global position. In a
probe on trees without it (latent width 16, 128 codes), the first quantised steps after the warm-up moved a
whole batch's latents (a tight cluster far from the origin) past the freshly initialised codes, so every node
snapped onto one code within four steps and training fell back on the edge density; centred, the codes in use
stayed at ~100-128.

Typed edges (``n_edge_types > 1``): the structural and positional inputs and the convolutions read the bare
adjacency ``edges > 0``, so the input also holds, for each edge type ``k``, the sum of the neighbours' inputs over
the node's type-``k`` edges divided by its degree (the random features make it say *which* neighbours). Without
it two graphs that differ only in edge types had identical latents, and the decoder's edge classes could only
guess: on 10-node trees with two random edge types (widths 32, 512 codes after a 200-step warm-up) the held-out type
accuracy on true edges stayed at 0.46-0.54 through 600 steps, against 0.82 with the per-type input (0.86 after
300 steps without quantisation). With one edge type the input, and the weights' shapes, are unchanged.

Quantiser: :class:`~gengraph.models.codebook.ManifoldCodebook` (hyperbolic codebook, k-means initialisation,
Frechet-mean EMA, dead-code restart, tangent straight-through). For the first ``vq_warmup`` training steps the
latents bypass the quantiser, so that the k-means initialisation sees an encoder that already separates
nodes (initialising on the untrained encoder's nearly identical latents collapses the codebook to a few
codes).

Decoder: hyperbolic transformer blocks over the quantised node latents give context points ``h_i``; node
types are read from ``log_0 h_i`` by an MLP; edges from pairwise geodesic distances with a Fermi-Dirac
existence term ``(r - d(h_i, h_j)) / tau`` (Krioukov et al. 2010; as in HGCN's link decoder) plus a symmetric
MLP on ``(log_0 h_i * log_0 h_j, |log_0 h_i - log_0 h_j|, d_ij)`` for the edge class logits.

Optional within-graph repulsion (``code_repulsion > 0``, off by default; our addition, not in the paper): the
encoder puts adjacent tree nodes on one code (the decoder joins nodes on one code, so a tree's shared codes
decode as cliques), while the flow prior spreads nodes over distinct codes. The term
:func:`latent_repulsion` pushes apart the ``log_0`` latents of two nodes of one graph closer than
``repulsion_radius``; measured on tree in the README ("The current model (v3)").

With ``geometry = "euclidean"`` every layer and the codebook run in flat space: the Euclidean-latent ablation.
The generative prior over the latent node sets is :mod:`gengraph.models.latent_flow`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from gencore.errors import ConfigError
from gencore.io import Pretrained
from gencore.rng import draw_device
from gengraph.batch import laplacian_eigenvectors, random_signs, structural_features
from gengraph.hyperbolic import HypGraphConv, HypTransformerBlock, PoincareLinear, make_geometry
from gengraph.models.codebook import ManifoldCodebook

__all__ = ["GGBall", "GGBallConfig", "latent_repulsion"]

RW_STEPS = 6


@dataclass(frozen=True, kw_only=True)
class GGBallConfig:
    n_node_types: int = 1
    n_edge_types: int = 1  # edge classes besides "no edge"
    n_max: int = 20
    geometry: str = "ball"  # ball | euclidean (ablation)
    curvature: float = 1.0
    latent_dim: int = 32
    hidden: int = 32
    gnn_layers: int = 2
    transformer_layers: int = 1
    heads: int = 4
    codebook_size: int = 512
    codebook_decay: float = 0.9
    commitment: float = 0.25
    vq_warmup: int = 100  # training steps as a plain autoencoder before the codebook is k-means initialised
    node_loss_weight: float = 1.0
    laplacian_pe: int = 16  # encoder inputs: eigenvectors of the k smallest normalised-Laplacian eigenvalues
    random_features: int = 16  # encoder inputs: i.i.d. standard normal node features (fixed seed in eval mode)
    centre_latents: bool = True  # move each graph's latents so that their gyromidpoint is the origin
    code_repulsion: float = 0.0  # weight of the within-graph latent repulsion (0: off)
    repulsion_radius: float = 0.1  # pairs of one graph closer than this in T_0 (log_0) are pushed apart

    def validate(self) -> GGBallConfig:
        for name in ("n_node_types", "n_edge_types", "n_max", "latent_dim", "hidden", "heads", "codebook_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.hidden % self.heads or self.latent_dim % self.heads:
            raise ConfigError(f"hidden ({self.hidden}) and latent_dim ({self.latent_dim}) must be divisible by heads.")
        if not 0 < self.curvature < math.inf:  # an infinite curvature shrinks the ball to a point: NaN latents
            raise ConfigError(f"curvature must be positive and finite, got {self.curvature}.")
        if not 0 <= self.codebook_decay < 1:  # a decay above 1 moves each code away from its cluster's mean
            raise ConfigError(f"codebook_decay must lie in [0, 1), got {self.codebook_decay}.")
        for name in ("gnn_layers", "transformer_layers", "vq_warmup", "laplacian_pe", "random_features"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {getattr(self, name)}.")
        if not 0 <= self.commitment < math.inf or not 0 <= self.node_loss_weight < math.inf:
            raise ConfigError(  # an infinite weight times the warm-up's zero commitment is a NaN loss
                f"commitment and node_loss_weight must be finite and >= 0, got {self.commitment} and "
                f"{self.node_loss_weight}."
            )
        if not 0 <= self.code_repulsion < math.inf or not 0 < self.repulsion_radius < math.inf:
            raise ConfigError(
                f"code_repulsion must be finite and >= 0 and repulsion_radius finite and > 0, got "
                f"{self.code_repulsion} and {self.repulsion_radius}."
            )
        return self


def latent_repulsion(u: torch.Tensor, pair: torch.Tensor, radius: float) -> torch.Tensor:
    """Mean over the node pairs selected by ``pair [B, N, N]`` of ``(1 - |u_i - u_j|^2 / radius^2)_+^2``.

    ``u [B, N, d]`` are tangent vectors (``log_0`` of the latents); the term is smooth, largest for coinciding
    nodes and zero from ``radius`` on, so it only pushes apart nodes of one graph that would share a code.
    """
    sq = ((u[:, :, None] - u[:, None]) ** 2).sum(-1) / radius**2
    return (F.relu(1 - sq) ** 2 * pair).sum() / pair.sum().clamp_min(1)


class GGBall(Pretrained, nn.Module):
    """``forward(edges, nodes, mask, generator) -> (loss, metrics)``; ``encode``/``quantise``/``decode`` apart."""

    config_class = GGBallConfig

    def __init__(self, config: GGBallConfig) -> None:
        super().__init__()
        self.config = config.validate()
        c = config
        self.hidden_geo = make_geometry(c.geometry, c.hidden, c.curvature)
        self.latent_geo = make_geometry(c.geometry, c.latent_dim, c.curvature)
        width = c.n_node_types + RW_STEPS + 1 + c.laplacian_pe + c.random_features
        typed = c.n_edge_types if c.n_edge_types > 1 else 0  # per-type neighbour means (``encode``)
        self.lift = nn.Linear(width * (1 + typed), c.hidden)
        self.convs = nn.ModuleList(HypGraphConv(self.hidden_geo, c.hidden, c.hidden) for _ in range(c.gnn_layers))
        self.enc_blocks = nn.ModuleList(
            HypTransformerBlock(self.hidden_geo, c.hidden, c.heads) for _ in range(c.transformer_layers)
        )
        self.to_latent = PoincareLinear(self.hidden_geo, c.hidden, c.latent_dim)
        self.codebook = ManifoldCodebook(self.latent_geo, c.codebook_size, decay=c.codebook_decay)
        self.from_latent = PoincareLinear(self.latent_geo, c.latent_dim, c.hidden)
        self.dec_blocks = nn.ModuleList(
            HypTransformerBlock(self.hidden_geo, c.hidden, c.heads) for _ in range(max(1, c.transformer_layers))
        )
        self.node_head = nn.Sequential(nn.Linear(c.hidden, c.hidden), nn.SiLU(), nn.Linear(c.hidden, c.n_node_types))
        self.edge_mlp = nn.Sequential(
            nn.Linear(2 * c.hidden + 1, c.hidden), nn.SiLU(), nn.Linear(c.hidden, 1 + c.n_edge_types)
        )
        self.radius = nn.Parameter(torch.tensor(1.0))
        self.log_tau = nn.Parameter(torch.tensor(-1.0))
        self.register_buffer("train_steps", torch.zeros((), dtype=torch.long))
        self._host_steps: int | None = None  # host copy of train_steps: read once after a (re)load, then counted

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        self._host_steps = None  # the loaded counter is read back on the next training step
        super()._load_from_state_dict(*args, **kwargs)

    def _count_step(self) -> int:
        """Advance ``train_steps`` and return it, with one device read per (re)load instead of one per step."""
        self.train_steps += 1
        self._host_steps = int(self.train_steps) if self._host_steps is None else self._host_steps + 1
        return self._host_steps

    @property
    def geometry(self):
        return self.latent_geo

    # ------------------------------------------------------------------ parts
    def encode(self, edges: torch.Tensor, nodes: torch.Tensor, mask: torch.Tensor, generator=None) -> torch.Tensor:
        """Node latents on the latent ball ``[B, N, d]`` (padding rows are arbitrary)."""
        adj = (edges > 0).to(torch.float32)
        c = self.config
        parts = [F.one_hot(nodes, c.n_node_types).float() * mask[..., None], structural_features(adj, mask, RW_STEPS)]
        if c.laplacian_pe:
            pe = laplacian_eigenvectors(adj, mask, c.laplacian_pe)
            if self.training:
                pe = pe * random_signs((pe.shape[0], 1, pe.shape[2]), generator).to(pe.device)
            parts.append(pe)
        if c.random_features:
            gen = generator if self.training else torch.Generator().manual_seed(0)
            noise = torch.randn(*mask.shape, c.random_features, generator=gen, device=draw_device(gen)).to(mask.device)
            parts.append(noise * mask[..., None])
        feats = torch.cat(parts, -1)
        if c.n_edge_types > 1:  # every other input reads the bare adjacency: without this, edge types are lost
            per_type = F.one_hot(edges, 1 + c.n_edge_types)[..., 1:].to(feats.dtype)  # [B, N, N, K]
            means = torch.einsum("bijk,bjf->bikf", per_type, feats) / adj.sum(-1).clamp_min(1)[..., None, None]
            feats = torch.cat([feats, means.flatten(2)], -1)
        x = self.hidden_geo.expmap0(self.lift(feats))
        for conv in self.convs:
            x = conv(x, adj, mask)
        for blk in self.enc_blocks:
            x = blk(x, mask)
        z = self.to_latent(x)
        if c.centre_latents:
            mu = self.latent_geo.midpoint(mask[:, None, :].to(z.dtype), z)  # [B, 1, d]
            z = self.latent_geo.mobius_add(-mu.expand_as(z), z)
        return z

    def quantise(self, z: torch.Tensor, mask: torch.Tensor, *, update: bool = False, generator=None):
        """``(z_q [B, N, d], codes [B, N], commitment [B, N])``; with ``update`` the real nodes' latents first
        update the codebook (k-means initialisation, then the Frechet EMA)."""
        b, n, d = z.shape
        flat = z.reshape(-1, d)
        if update:
            self.codebook.update(flat[mask.reshape(-1)].detach(), generator)
        elif not bool(self.codebook.initialised):  # its all-zero codes would put every node on one point
            raise ConfigError(
                f"the codebook was never initialised: the autoencoder must train past its vq_warmup "
                f"({self.config.vq_warmup} steps) before it can quantise."
            )
        zq, idx, commit = self.codebook(flat)
        return zq.view(b, n, d), idx.view(b, n), commit.view(b, n)

    def decode(self, zq: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(node logits [B, N, n_node_types], edge logits [B, N, N, 1 + n_edge_types])`` (class 0 = no edge)."""
        g = self.hidden_geo
        h = self.from_latent(zq)
        for blk in self.dec_blocks:
            h = blk(h, mask)
        u = g.logmap0(h)
        dist = g.pairwise_dist(h, h)
        pair = torch.cat([u[:, :, None] * u[:, None], (u[:, :, None] - u[:, None]).abs(), dist[..., None]], -1)
        logits = self.edge_mlp(pair)
        fermi_dirac = (self.radius - dist) / self.log_tau.exp()
        logits = logits + torch.cat(
            [-fermi_dirac[..., None] / 2, (fermi_dirac[..., None] / 2).expand_as(logits[..., 1:])], -1
        )
        return self.node_head(u), logits

    # ------------------------------------------------------------------ training loss
    def forward(self, edges, nodes, mask, generator: torch.Generator | None = None):
        z = self.encode(edges, nodes, mask, generator)
        if self.training and self._count_step() <= self.config.vq_warmup:
            zq, idx, commit = z, torch.zeros_like(mask, dtype=torch.long), torch.zeros_like(mask, dtype=z.dtype)
        else:
            zq, idx, commit = self.quantise(z, mask, update=self.training, generator=generator)
        node_logits, edge_logits = self.decode(zq, mask)
        m = mask.float()
        pair = (m[:, :, None] * m[:, None, :]).triu(1)
        edge_ce = F.cross_entropy(edge_logits.flatten(0, 2), edges.flatten(), reduction="none").view_as(pair)
        edge_loss = (edge_ce * pair).sum() / pair.sum().clamp_min(1)
        node_ce = F.cross_entropy(node_logits.flatten(0, 1), nodes.flatten(), reduction="none").view_as(m)
        node_loss = (node_ce * m).sum() / m.sum()
        commit_loss = (commit * m).sum() / m.sum()
        loss = edge_loss + self.config.node_loss_weight * node_loss + self.config.commitment * commit_loss
        extra = {}
        if self.config.code_repulsion > 0:
            repulsion = latent_repulsion(self.latent_geo.logmap0(z), pair, self.config.repulsion_radius)
            loss = loss + self.config.code_repulsion * repulsion
            extra["repulsion"] = repulsion.detach()
        with torch.no_grad():
            pred = edge_logits.argmax(-1)
            acc = ((pred == edges).float() * pair).sum() / pair.sum().clamp_min(1)
            k = self.config.codebook_size  # slot k takes the padding nodes
            used = torch.zeros(k + 1, device=idx.device).index_fill_(0, torch.where(mask.bool(), idx, k).flatten(), 1.0)
            used = used[:-1].sum()
        # metrics stay on the device: the engine reads them back only on logging steps
        return loss, {"edge_ce": edge_loss.detach(), "node_ce": node_loss.detach(), "commit": commit_loss.detach(),
                      "edge_acc": acc, "codes_used": used, **extra}  # fmt: skip

    @torch.no_grad()
    def decode_graphs(self, zq: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None = None):
        """Sample ``(edges [B, N, N], nodes [B, N])`` from the decoder's categorical outputs (edges symmetric)."""
        node_logits, edge_logits = self.decode(zq, mask)
        nodes = torch.multinomial(node_logits.softmax(-1).flatten(0, 1), 1, generator=generator).view(mask.shape)
        probs = edge_logits.softmax(-1)
        b, n = mask.shape
        e = torch.multinomial(probs.flatten(0, 2), 1, generator=generator).view(b, n, n).triu(1)
        e = e + e.transpose(1, 2)
        keep = mask[:, :, None] & mask[:, None, :]
        return e * keep, nodes * mask

    # ------------------------------------------------------------------ persistence
