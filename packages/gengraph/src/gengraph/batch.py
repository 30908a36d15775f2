"""Dense padded batches of graphs: what the networks read and what their samples decode from.

``pack(graphs, n_max)`` gives ``(edges [G, N, N], nodes [G, N], mask [G, N])``: edge classes (0 = no edge,
``k + 1`` = edge of type ``k``, symmetric, zero diagonal), node types, and the node mask, ``N = n_max``.
"""

from __future__ import annotations

import torch

from gencore.errors import InputError
from gencore.rng import draw_device
from gengraph.graph import Graph

__all__ = ["laplacian_eigenvectors", "pack", "structural_features", "unpack"]


def pack(graphs: list[Graph], n_max: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n_max = max(g.n_nodes for g in graphs) if n_max is None else n_max
    big = [i for i, g in enumerate(graphs) if g.n_nodes > n_max]
    if big:
        raise InputError(f"graph {big[0]} has {graphs[big[0]].n_nodes} nodes, more than the model's {n_max}.")
    edges = torch.stack([g.adjacency(n_max, typed=True) for g in graphs])
    nodes = torch.zeros(len(graphs), n_max, dtype=torch.long)
    mask = torch.zeros(len(graphs), n_max, dtype=torch.bool)
    for i, g in enumerate(graphs):
        nodes[i, : g.n_nodes] = g.node_types
        mask[i, : g.n_nodes] = True
    return edges, nodes, mask


def unpack(edges: torch.Tensor, nodes: torch.Tensor, mask: torch.Tensor) -> list[Graph]:
    out = []
    for e, v, m in zip(edges, nodes, mask, strict=True):
        n = int(m.sum())
        keep = m.nonzero().flatten()
        out.append(Graph.from_dense(e[keep][:, keep], node_types=v[keep]) if n else Graph(n_nodes=0))
    return out


def structural_features(adjacency: torch.Tensor, mask: torch.Tensor, steps: int = 6) -> torch.Tensor:
    """``[B, N, steps + 1]``: random-walk return probabilities ``(P^k)_ii``, k = 1..steps (P = D^-1 A), and the
    degree divided by the graph size; permutation-equivariant node descriptors (RRWP-style)."""
    a = (adjacency > 0).to(torch.float32)
    deg = a.sum(-1, keepdim=True)
    p = a / deg.clamp_min(1)
    feats, pk = [], p
    for _ in range(steps):
        feats.append(pk.diagonal(dim1=-2, dim2=-1))
        pk = pk @ p
    n = mask.sum(-1, keepdim=True).clamp_min(1).to(torch.float32)
    feats.append(deg[..., 0] / n)
    return torch.stack(feats, -1) * mask[..., None]


def laplacian_eigenvectors(adjacency: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """``[B, N, k]``: the eigenvectors of the ``k`` smallest eigenvalues of each graph's normalised Laplacian
    ``I - D^-1/2 A D^-1/2`` (real nodes only), scaled by ``sqrt(n)`` so that entries are O(1); zero on padding
    and in the columns past a graph's own size. Signs (and bases of repeated eigenvalues) are arbitrary: a
    network reading them should be trained with random sign flips (:func:`random_signs`)."""
    a = (adjacency > 0).to(torch.float64) * (mask[:, :, None] & mask[:, None, :])
    deg = a.sum(-1)
    inv = torch.where(deg > 0, deg.clamp_min(1).rsqrt(), torch.zeros_like(deg))
    lap = torch.diag_embed(mask.to(torch.float64)) - inv[:, :, None] * a * inv[:, None, :]
    # padding rows get eigenvalue 3 (the real spectrum lies in [0, 2]): their eigenvectors sort last and stay
    # supported on the padding
    lap = lap + torch.diag_embed(3.0 * (~mask).to(torch.float64))
    _, vecs = torch.linalg.eigh(lap)
    n = mask.sum(-1).to(torch.float64)
    out = torch.zeros(*mask.shape, k, dtype=torch.float64, device=adjacency.device)
    m = min(k, mask.shape[1])
    out[..., :m] = vecs[..., :m]
    # [B, k]: columns past the graph's size are padding vectors
    keep = torch.arange(k, device=adjacency.device)[None, :] < n[:, None]
    out = out * keep[:, None, :] * mask[..., None] * n.sqrt()[:, None, None]
    return out.to(torch.float32)


def random_signs(shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
    """Independent uniform +-1 of ``shape`` (float32), drawn on ``generator``'s device (without one, the CPU)."""
    return torch.randint(0, 2, shape, generator=generator, device=draw_device(generator)).to(torch.float32) * 2 - 1
