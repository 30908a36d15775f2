"""Dense padded batches of graphs: what the networks read and what their samples decode from.

``pack(graphs, n_max)`` gives ``(edges [G, N, N], nodes [G, N], mask [G, N])``: edge classes (0 = no edge,
``k + 1`` = edge of type ``k``, symmetric, zero diagonal), node types, and the node mask, ``N = n_max``.
"""

from __future__ import annotations

import torch

from gencore.errors import InputError
from gengraph.graph import Graph

__all__ = ["pack", "unpack"]


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
