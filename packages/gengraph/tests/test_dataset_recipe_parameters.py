"""The procedural recipes' parameters, recorded at the networkx generator each one calls (a changed constant in
``gengraph.datasets`` fails here even where the graphs' statistics would barely move), and the shapes the
recipes promise, checked on the generated graphs themselves."""

from __future__ import annotations

import networkx as nx
import numpy as np

from gengraph.datasets import generate


def _is_path(h: nx.Graph) -> bool:
    """Whether ``h`` is a path (the empty graph counts: a double star pruned twice)."""
    return h.number_of_nodes() == 0 or (nx.is_connected(h) and max(d for _, d in h.degree()) <= 2)


def _prune_leaves(g: nx.Graph) -> nx.Graph:
    h = g.copy()
    h.remove_nodes_from([v for v, d in g.degree() if d <= 1])
    return h


def test_lobster_calls_grans_generator_and_keeps_10_to_100_nodes(monkeypatch) -> None:
    """GRAN's lobsters: ``random_lobster(80, 0.7, 0.7)`` with a fresh seed per draw, kept when they have 10 to 100
    nodes (both ends included), redrawn otherwise."""
    real, calls = nx.random_lobster_graph, []

    def recording(n, p1, p2, seed=None):
        g = real(n, p1, p2, seed=seed)
        calls.append(((n, p1, p2), seed, g.number_of_nodes()))
        return g

    monkeypatch.setattr(nx, "random_lobster_graph", recording)
    graphs = generate("lobster", 10, seed=0)
    assert {args for args, _, _ in calls} == {(80, 0.7, 0.7)}
    assert len({seed for _, seed, _ in calls}) == len(calls)  # a fresh seed per draw
    kept = [size for _, _, size in calls if 10 <= size <= 100]
    assert [g.n_nodes for g in graphs] == kept
    # the mean backbone of 80 nodes makes most lobsters too big (about 9 nodes per backbone node): most are redrawn
    assert len(calls) > 3 * len(graphs)

    sizes = iter([9, 101, 10, 0, 100, 55])  # the bounds: 10 and 100 are kept, 9, 0 and 101 redrawn
    monkeypatch.setattr(nx, "random_lobster_graph", lambda n, p1, p2, seed=None: nx.path_graph(next(sizes)))
    assert [g.n_nodes for g in generate("lobster", 3, seed=0)] == [10, 100, 55]


def test_lobsters_are_lobsters_and_not_caterpillars() -> None:
    """Every graph is a tree that pruning its leaves twice leaves a path (a lobster), and with ``p2 = 0.7`` almost
    none is a caterpillar (pruning once already leaves a path): ``p2 = 0`` would make every one a caterpillar."""
    graphs = [g.to_networkx() for g in generate("lobster", 40, seed=1)]
    assert all(10 <= h.number_of_nodes() <= 100 and nx.is_tree(h) for h in graphs)
    assert all(_is_path(_prune_leaves(_prune_leaves(h))) for h in graphs)
    caterpillars = sum(_is_path(_prune_leaves(h)) for h in graphs)
    assert caterpillars <= 8


def test_ego_small_cuts_radius_one_ego_nets_from_a_3000_node_holme_kim_graph(monkeypatch) -> None:
    """The source is ``powerlaw_cluster_graph(3000, 2, 0.3)`` (Citeseer's order of magnitude, mean degree ~4); every
    ego net has radius 1 around a centre used once, 4 to 18 nodes, and the centre adjacent to all the others."""
    real_source, real_ego = nx.powerlaw_cluster_graph, nx.ego_graph
    sources, egos = [], []

    def source(n, m, p, seed=None):
        sources.append((n, m, p))
        return real_source(n, m, p, seed=seed)

    def ego(g, centre, radius=1, **kw):
        h = real_ego(g, centre, radius=radius, **kw)
        egos.append((centre, radius, kw, h.number_of_nodes()))
        return h

    monkeypatch.setattr(nx, "powerlaw_cluster_graph", source)
    monkeypatch.setattr(nx, "ego_graph", ego)
    graphs = generate("ego-small", 60, seed=0)
    assert sources == [(3000, 2, 0.3)]
    assert all(radius == 1 and kw == {} for _, radius, kw, _ in egos)
    centres = [c for c, *_ in egos]
    assert len(set(centres)) == len(centres)  # each centre at most once
    assert [g.n_nodes for g in graphs] == [size for *_, size in egos if 4 <= size <= 18]
    assert any(size > 18 for *_, size in egos) and any(size < 4 for *_, size in egos)  # both bounds cut something
    for g in graphs:
        h = g.to_networkx()
        assert 4 <= h.number_of_nodes() <= 18 and nx.is_connected(h)
        assert max(d for _, d in h.degree()) == h.number_of_nodes() - 1


def test_sbm_block_counts_sizes_and_probabilities_as_spectre(monkeypatch) -> None:
    """SPECTRE's SBM: 2 to 5 blocks of 20 to 40 nodes (both ends drawn), ``p_in = 0.3`` and ``p_out = 0.05``."""
    from gengraph import datasets

    real, calls = nx.stochastic_block_model, []

    def recording(sizes, p, seed=None, **kw):
        calls.append((list(sizes), np.array(p)))
        return real(sizes, p, seed=seed, **kw)

    monkeypatch.setattr(nx, "stochastic_block_model", recording)
    rng = np.random.default_rng(0)
    for _ in range(40):
        datasets._sbm(rng)
    assert {len(sizes) for sizes, _ in calls} == {2, 3, 4, 5}
    drawn = {s for sizes, _ in calls for s in sizes}
    assert min(drawn) == 20 and max(drawn) == 40 and drawn <= set(range(20, 41))
    for sizes, p in calls:
        k = len(sizes)
        np.testing.assert_array_equal(p, np.where(np.eye(k, dtype=bool), 0.3, 0.05))
