"""DiGress's extra input features: cycle counts and Laplacian spectra against networkx / numpy."""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch

from gengraph.batch import cycle_counts, graph_spectrum, pack
from gengraph.graph import Graph


def _graphs() -> list[nx.Graph]:
    rng = np.random.default_rng(0)
    out = [nx.gnp_random_graph(int(rng.integers(5, 12)), 0.4, seed=int(rng.integers(1 << 30))) for _ in range(6)]
    out.append(nx.disjoint_union(nx.complete_graph(4), nx.cycle_graph(5)))  # two components, the larger a cycle
    out.append(nx.empty_graph(3))  # no edges: three components, no non-zero eigenvalue
    out.append(nx.complete_graph(7))  # every cycle length, many walks that are not cycles
    out.append(nx.petersen_graph())  # triangle- and four-cycle-free, with five- and six-cycles
    return out


def _batch(gs: list[nx.Graph], n_max: int = 14):
    return pack([Graph.from_networkx(g) for g in gs], n_max)


def test_cycle_counts_match_enumerated_simple_cycles() -> None:
    gs = _graphs()
    edges, _, mask = _batch(gs)
    node, graph = cycle_counts(edges, mask)
    for b, g in enumerate(gs):
        cycles = [c for c in nx.simple_cycles(g, length_bound=6) if len(c) >= 3]
        for k, length in enumerate((3, 4, 5, 6)):
            of_len = [c for c in cycles if len(c) == length]
            assert graph[b, k] == len(of_len)
            if length < 6:  # node counts for 3- to 5-cycles, as in DiGress
                through = [sum(v in c for c in of_len) for v in range(g.number_of_nodes())]
                assert node[b, : g.number_of_nodes(), k].tolist() == through
        assert not node[b, g.number_of_nodes() :].any()


def test_graph_spectrum_matches_numpy_and_networkx() -> None:
    gs = _graphs()
    edges, _, mask = _batch(gs)
    vectors, values, components, largest = graph_spectrum(edges, mask, n_vectors=2, n_values=5)
    for b, g in enumerate(gs):
        n = g.number_of_nodes()
        lap = nx.laplacian_matrix(g, nodelist=range(n)).toarray().astype(float)
        ev = np.linalg.eigvalsh(lap)
        comps = nx.number_connected_components(g)
        assert int(components[b]) == comps
        nonzero = ev[comps:][:5]
        np.testing.assert_allclose(values[b, : len(nonzero)].numpy(), nonzero, atol=1e-9)
        assert not values[b, len(nonzero) :].any()
        for j in range(min(2, n - comps)):  # each returned vector solves L v = lambda v for its eigenvalue
            v = vectors[b, :n, j].numpy()
            np.testing.assert_allclose(lap @ v, nonzero[j] * v, atol=1e-8)
            assert abs(np.linalg.norm(v) - 1) < 1e-9 and not vectors[b, n:, j].any()
        big = max(nx.connected_components(g), key=len)
        sizes = [len(c) for c in nx.connected_components(g)]
        expected = [float(any(v in c and len(c) == max(sizes) for c in nx.connected_components(g))) for v in range(n)]
        assert largest[b, :n].tolist() == expected and largest[b, list(big)].all()
        assert not largest[b, n:].any()


def test_features_do_not_depend_on_padding_or_node_order() -> None:
    gs = _graphs()[:4]
    edges, _, mask = _batch(gs, 12)
    wide = _batch(gs, 20)
    node, graph = cycle_counts(edges, mask)
    node_w, graph_w = cycle_counts(wide[0], wide[2])
    torch.testing.assert_close(node_w[:, :12], node)
    torch.testing.assert_close(graph_w, graph)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    pe, pm = edges[:, perm][:, :, perm], mask[:, perm]
    node_p, graph_p = cycle_counts(pe, pm)
    torch.testing.assert_close(node_p, node[:, perm])
    torch.testing.assert_close(graph_p, graph)
    _, values, components, largest = graph_spectrum(edges, mask, 2, 5)
    _, values_p, components_p, largest_p = graph_spectrum(pe, pm, 2, 5)
    torch.testing.assert_close(values_p, values)
    assert torch.equal(components_p, components) and torch.equal(largest_p, largest[:, perm])


def test_pack_refuses_directed_and_empty_batches() -> None:
    """A directed graph packed into a lower-triangular adjacency: unpack (which reads above the diagonal) returned
    1 -> 0 as a graph without edges. An empty list was a bare ``max()`` ValueError."""
    import pytest

    from gencore.errors import InputError

    with pytest.raises(InputError, match="graph 1 is directed"):
        pack([Graph(n_nodes=2, edges=[[0, 1]]), Graph(n_nodes=2, edges=[[1, 0]], directed=True)])
    with pytest.raises(InputError, match="at least one graph"):
        pack([])


def test_structural_features_match_random_walk_powers_and_pack_keeps_types() -> None:
    """``(P^k)_ii`` for ``P = D^-1 A`` from numpy matrix powers, degree / n; pack writes each graph's node types."""
    from gengraph.batch import structural_features

    gs = _graphs()
    graphs = [Graph(n_nodes=g.number_of_nodes(), edges=list(g.edges), node_types=[v % 3 for v in g]) for g in gs]
    edges, nodes, mask = pack(graphs, 14)
    feats = structural_features(edges, mask, steps=4)
    for b, g in enumerate(gs):
        n = g.number_of_nodes()
        assert nodes[b, :n].tolist() == [v % 3 for v in range(n)] and not nodes[b, n:].any()
        a = nx.to_numpy_array(g, nodelist=range(n))
        d = a.sum(1)
        p = a / np.maximum(d, 1)[:, None]
        expected = [np.diag(np.linalg.matrix_power(p, k)) for k in range(1, 5)] + [d / n]
        np.testing.assert_allclose(feats[b, :n].numpy(), np.stack(expected, -1), atol=1e-6)
        assert not feats[b, n:].any()


def test_graph_spectrum_counts_components_with_small_gaps() -> None:
    """A path on 14 nodes has algebraic connectivity 2 - 2 cos(pi / 14) = 0.050: one component, not two."""
    edges, _, mask = _batch([nx.path_graph(14), nx.disjoint_union(nx.path_graph(7), nx.path_graph(7))])
    _, values, components, _ = graph_spectrum(edges, mask, 1, 1)
    assert components.tolist() == [1, 2]
    np.testing.assert_allclose(values[0, 0].item(), 2 - 2 * np.cos(np.pi / 14), rtol=1e-9)


def test_random_signs_are_plus_or_minus_one() -> None:
    from gengraph.batch import random_signs

    s = random_signs((1000,), torch.Generator().manual_seed(0))
    assert set(s.tolist()) == {-1.0, 1.0} and abs(float(s.mean())) < 0.15 and s.dtype == torch.float32


def test_graph_spectrum_keeps_long_paths_connected() -> None:
    """A 120-node path (the sizes of the lobster and SBM sets) has algebraic connectivity 2 - 2 cos(pi / 120) =
    6.9e-4: still one component, and that eigenvalue the first non-zero one (a cut-off of 1e-3 split it)."""
    edges, _, mask = pack([Graph.from_networkx(nx.path_graph(120))], 120)
    _, values, components, largest = graph_spectrum(edges, mask, 1, 1)
    assert components.tolist() == [1] and bool(largest.all())
    np.testing.assert_allclose(values[0, 0].item(), 2 - 2 * np.cos(np.pi / 120), rtol=1e-6)
