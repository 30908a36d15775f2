"""Dense padded batches of graphs: what the networks read and what their samples decode from.

``pack(graphs, n_max)`` gives ``(edges [G, N, N], nodes [G, N], mask [G, N])``: edge classes (0 = no edge,
``k + 1`` = edge of type ``k``, symmetric, zero diagonal), node types, and the node mask, ``N = n_max``.
"""

from __future__ import annotations

import torch

from gencore.errors import InputError
from gencore.rng import draw_device
from gengraph.graph import Graph

__all__ = ["cycle_counts", "graph_spectrum", "laplacian_eigenvectors", "pack", "structural_features", "unpack"]


def pack(graphs: list[Graph], n_max: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    if not graphs:
        raise InputError("pack needs at least one graph, got an empty list.")
    directed = [i for i, g in enumerate(graphs) if g.directed]
    if directed:  # its adjacency is not symmetric, and unpack (which reads above the diagonal) would lose edges
        raise InputError(f"graph {directed[0]} is directed; the dense batches hold undirected graphs.")
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


def _simple_adjacency(adjacency: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``float64 [B, N, N]``: 1 where an edge of any class joins two real nodes, 0 on the diagonal and padding."""
    pair = mask[:, :, None] & mask[:, None, :]
    eye = torch.eye(mask.shape[1], dtype=torch.bool, device=mask.device)
    return ((adjacency > 0) & pair & ~eye).to(torch.float64)


def cycle_counts(adjacency: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Simple cycles of length 3, 4 and 5 through each node ``[B, N, 3]``, and of length 3 to 6 in each graph
    ``[B, 4]`` (float64).

    From closed walks, the diagonals of the powers of the adjacency ``A`` (the cycle features of DiGress,
    Vignac et al. 2023; the closed forms are those of Harary and Manvel 1971). With degrees ``d``, ``W = A^2``
    and ``t_i = (A^3)_ii`` (twice the triangles through ``i``), a node lies on

    * ``t_i / 2`` triangles,
    * ``((A^4)_ii - d_i^2 - sum_j A_ij (d_j - 1)) / 2`` four-cycles (closed 4-walks that go back and forth
      removed; each cycle is walked in two directions),
    * ``((A^5)_ii - 2 d_i t_i - sum_j A_ij t_j - 2 sum_j A_ij W_ij d_j + 5 t_i) / 2`` five-cycles (the closed
      5-walks that are not cycles run round a triangle with one step out and back).

    DiGress's code subtracts only ``2 d_i t_i + sum_j A_ij t_j - t_i`` for the five-cycles, ``2 sum_j A_ij W_ij
    (d_j - 2)`` too few: it miscounts a node on a triangle whose other corners have further neighbours (and so the
    graph's count). The test checks ours against networkx's enumerated cycles. A graph holds a third of its
    nodes' triangles, a quarter of their four-cycles, a fifth of their five-cycles and
    ``(tr A^6 - 3 sum_i t_i^2 + 9 sum_ij A_ij W_ij^2 - 6 sum_i d_i (A^4)_ii + 6 tr A^4 - 4 tr A^3
    + 4 sum_i d_i^3 + 3 sum_ij (A^3)_ij - 12 sum_i d_i^2 + 4 sum_i d_i) / 12`` six-cycles."""
    a = _simple_adjacency(adjacency, mask)
    d = a.sum(-1)
    w = a @ a
    a3 = w @ a
    t = a3.diagonal(dim1=-2, dim2=-1)
    w4 = (w * w).sum(-1)  # (A^4)_ii = sum_j W_ij^2
    c3 = t / 2
    c4 = (w4 - d * d - (a * (d[:, None, :] - 1)).sum(-1)) / 2
    a5 = (a3 * w).sum(-1)  # (A^5)_ii = sum_j (A^3)_ij W_ji
    aw = a * w  # common neighbours of adjacent pairs
    c5 = (a5 - 2 * d * t - (a * t[:, None, :]).sum(-1) - 2 * (aw * d[:, None, :]).sum(-1) + 5 * t) / 2
    node = torch.stack([c3, c4, c5], -1) * mask[..., None]
    six = (
        (a3 * a3).sum((-2, -1))  # tr A^6
        - 3 * (t * t).sum(-1)
        + 9 * (aw * w).sum((-2, -1))
        - 6 * (d * w4).sum(-1)
        + 6 * w4.sum(-1)
        - 4 * t.sum(-1)
        + 4 * (d**3).sum(-1)
        + 3 * a3.sum((-2, -1))
        - 12 * (d**2).sum(-1)
        + 4 * d.sum(-1)
    ) / 12
    sums = node.sum(1)
    return node, torch.stack([sums[:, 0] / 3, sums[:, 1] / 4, sums[:, 2] / 5, six], -1)


def graph_spectrum(
    adjacency: torch.Tensor, mask: torch.Tensor, n_vectors: int, n_values: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Spectral descriptors of each graph's combinatorial Laplacian ``L = D - A`` (real nodes only), float64:

    * ``vectors [B, N, n_vectors]``: unit eigenvectors of the smallest non-zero eigenvalues (zero past a graph's
      spectrum and on padding; signs arbitrary, as ``eigh`` returns them);
    * ``values [B, n_values]``: the smallest non-zero eigenvalues (zero past the spectrum);
    * ``components [B]``: the number of connected components (the multiplicity of the eigenvalue 0);
    * ``largest [B, N]``: 1 on the nodes of a largest connected component (from reachability, not from the
      eigenvectors, whose basis within the eigenvalue 0 is arbitrary).
    """
    a = _simple_adjacency(adjacency, mask)
    b, n = mask.shape
    real = mask.to(torch.float64)
    lap = torch.diag_embed(a.sum(-1)) - a + torch.diag_embed(1e6 * (1 - real))  # padding sorts last
    vals, vecs = torch.linalg.eigh(lap)
    size = mask.sum(-1)
    components = ((vals < 1e-8) & (torch.arange(n, device=mask.device) < size[:, None])).sum(-1)

    def nonzero(count: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = components[:, None] + torch.arange(count, device=mask.device)  # [B, count]
        inside = idx < size[:, None]
        return idx.clamp(max=n - 1), inside

    idx, inside = nonzero(n_values)
    values = vals.gather(1, idx) * inside
    idx, inside = nonzero(n_vectors)
    vectors = vecs.gather(2, idx[:, None, :].expand(b, n, n_vectors)) * inside[:, None, :] * real[..., None]
    reach = ((a + torch.diag_embed(real)) > 0).to(torch.float64)
    for _ in range(max(1, (n - 1).bit_length())):  # paths of length up to 2^steps >= n - 1
        reach = ((reach @ reach) > 0).to(torch.float64)
    comp_size = reach.sum(-1)
    largest = (comp_size == comp_size.amax(-1, keepdim=True)).to(torch.float64) * real
    return vectors, values, components, largest


def laplacian_eigenvectors(adjacency: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """``[B, N, k]``: the eigenvectors of the ``k`` smallest eigenvalues of each graph's normalised Laplacian
    ``I - D^-1/2 A D^-1/2`` (real nodes only), scaled by ``sqrt(n)`` so that entries are O(1); zero on padding
    and in the columns past a graph's own size. Signs (and bases of repeated eigenvalues) are arbitrary: a
    network reading them should be trained with random sign flips (:func:`random_signs`)."""
    a = _simple_adjacency(adjacency, mask)
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
