"""Seeded procedural benchmark sets: determinism by seed, the published recipes, splits."""

from __future__ import annotations

import networkx as nx
import pytest
import torch

from gengraph.datasets import DATASETS, generate, load_dataset, real_graph, split
from gengraph.metrics import is_valid


@pytest.mark.parametrize("name", DATASETS)
def test_deterministic_by_seed(name: str) -> None:
    a, b, c = generate(name, 6, seed=3), generate(name, 6, seed=3), generate(name, 6, seed=4)
    assert all(torch.equal(x.edges, y.edges) and x.n_nodes == y.n_nodes for x, y in zip(a, b, strict=True))
    assert any(x.n_nodes != z.n_nodes or not torch.equal(x.edges, z.edges) for x, z in zip(a, c, strict=True))


def test_recipes() -> None:
    for g in generate("planar", 5):
        h = g.to_networkx()
        assert g.n_nodes == 64 and nx.check_planarity(h)[0] and nx.is_connected(h)
        assert g.n_edges <= 3 * 64 - 6
    for g in generate("tree", 5):
        assert g.n_nodes == 64 and nx.is_tree(g.to_networkx())
    for g in generate("community-small", 20):
        assert 12 <= g.n_nodes <= 20 and nx.is_connected(g.to_networkx())
    for g in generate("ego-small", 20):
        h = g.to_networkx()
        assert 4 <= g.n_nodes <= 18 and max(d for _, d in h.degree()) == g.n_nodes - 1  # the ego sees everyone
    for g in generate("sbm", 3):
        assert 40 <= g.n_nodes <= 200 and nx.is_connected(g.to_networkx())
    for name in ("lobster", "grid", "planar", "tree"):
        assert all(is_valid(g.to_networkx(), name) for g in generate(name, 5))
    assert sum(is_valid(g.to_networkx(), "sbm") for g in generate("sbm", 10)) >= 5


def test_splits_partition_the_set() -> None:
    graphs = generate("community-small", 50)
    parts = {w: split(graphs, w) for w in ("train", "val", "test")}
    assert [len(parts[w]) for w in ("train", "val", "test")] == [32, 8, 10]
    ids = [id(g) for w in parts for g in parts[w]]
    assert len(set(ids)) == 50


def test_real_graph() -> None:
    assert real_graph("karate").n_edges == 78


def test_bad_sizes_and_seeds_are_one_config_error() -> None:
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match="seed"):
        generate("tree", 2, seed=-1)  # numpy's bare "expected non-negative integer" before
    with pytest.raises(ConfigError, match="positive integer"):
        generate("tree", 2.5)
    with pytest.raises(ConfigError, match="positive integer"):
        generate("tree", True)
    with pytest.raises(ConfigError, match="split_seed"):
        split(generate("tree", 5), "test", split_seed=-3)


@pytest.mark.parametrize("name", ["karate", "les-miserables", "community-small"])
def test_a_mistyped_split_is_refused_for_real_and_procedural_sets(name: str) -> None:
    from gencore.errors import ConfigError
    from gengraph.io import load_graphs

    assert len(load_dataset(name, "test", n=10)) >= 1  # every split name is accepted (real sets: the whole graph)
    with pytest.raises(ConfigError, match=r"unknown split 'tset'; expected one of: train, val, test, all"):
        load_dataset(name, "tset", n=10)
    with pytest.raises(ConfigError, match=r"unknown split 'Train'"):
        load_graphs(name, "Train")


def test_published_sizes_and_recipe_parameters() -> None:
    """Default set sizes, grid shapes, lobster and community sizes, and the SBM / community edge probabilities
    (pooled over many graphs, so a changed p_in or p_out shows far outside the sampling noise)."""
    import itertools

    import numpy as np

    from gengraph import datasets

    assert datasets.DEFAULT_SIZES == {
        "planar": 200, "sbm": 200, "community-small": 100, "ego-small": 200, "tree": 200, "lobster": 100, "grid": 100,
    }  # fmt: skip
    for g in generate("grid", 20):
        shapes = [(r, c) for r in range(10, 20) for c in range(10, 20) if r * c == g.n_nodes]
        assert any(2 * r * c - r - c == g.n_edges for r, c in shapes)
    for g in generate("lobster", 10):
        assert 10 <= g.n_nodes <= 100 and nx.is_tree(g.to_networkx())
    community = generate("community-small", 200)
    assert {g.n_nodes for g in community} == set(range(12, 21))
    # E[edges] = 0.7 (C(a, 2) + C(b, 2)) + 0.05 a b + P(no inter-edge: one is added), a, b uniform in 6..10
    expected = np.mean(
        [
            0.7 * (a * (a - 1) + b * (b - 1)) / 2 + 0.05 * a * b + 0.95 ** (a * b)
            for a, b in itertools.product(range(6, 11), repeat=2)
        ]
    )
    assert abs(np.mean([g.n_edges for g in community]) - expected) < 2.5  # p_in 0.5: -11.6, p_out 0.3: +16
    rng = np.random.default_rng(0)
    inside = across = pairs_in = pairs_across = 0
    blocks = set()
    for _ in range(20):
        g = datasets._sbm(rng)
        part = g.graph["partition"]
        blocks.add(len(part))
        assert all(20 <= len(p) <= 40 for p in part)
        block = {v: i for i, p in enumerate(part) for v in p}
        e_in = sum(block[u] == block[v] for u, v in g.edges)
        inside, across = inside + e_in, across + g.number_of_edges() - e_in
        n_in = sum(len(p) * (len(p) - 1) // 2 for p in part)
        pairs_in, pairs_across = (
            pairs_in + n_in,
            pairs_across + g.number_of_nodes() * (g.number_of_nodes() - 1) // 2 - n_in,
        )
    assert blocks == {2, 3, 4, 5}
    assert abs(inside / pairs_in - 0.3) < 0.01 and abs(across / pairs_across - 0.05) < 0.005
    source = datasets._ego_source(0)
    assert 3.8 < 2 * source.number_of_edges() / source.number_of_nodes() < 4.1  # Holme-Kim with m = 2


def test_community_small_joins_a_disconnected_community() -> None:
    """GraphRNN bridges every connected component; bridging only the two communities left about 1 graph in 150
    disconnected (a G(n, 0.7) community with an isolated node), invalid as reference data (validity is
    connectivity). With p_in = 0.2 most communities fall apart, so every graph tests the bridging."""
    import numpy as np

    from gengraph import datasets

    rng = np.random.default_rng(0)
    graphs = [datasets._community_small(rng, p_in=0.2) for _ in range(50)]
    assert all(nx.is_connected(g) for g in graphs)
    assert all(is_valid(g.to_networkx(), "community-small") for g in generate("community-small", 300))


def test_ego_small_takes_each_centre_once(monkeypatch) -> None:
    """Centres were drawn with replacement: 11 of the 200 default ego nets repeated another one's centre, so
    identical graphs sat in both the train and the test split. A source of stars with 3 to 17 leaves has exactly
    15 eligible centres (a leaf's ego net has 2 nodes), with ego nets of 4 to 18 nodes."""
    from gencore.errors import ConfigError
    from gengraph import datasets

    stars = nx.disjoint_union_all([nx.star_graph(k) for k in range(3, 18)])
    monkeypatch.setattr(datasets, "_ego_source", lambda seed: stars)
    assert sorted(g.n_nodes for g in generate("ego-small", 15)) == list(range(4, 19))
    with pytest.raises(ConfigError, match=r"ego-small has 15 ego nets .* fewer than the 16 asked"):
        generate("ego-small", 16)


def test_grid_holds_each_shape_once() -> None:
    """GraphRNN's grid set is the 100 grids of 10-19 rows by 10-19 columns; shapes drawn with replacement
    repeated about a third of them, putting identical grids in train and test."""
    from collections import Counter

    shapes = Counter()
    for g in generate("grid", 100):
        total = 2 * g.n_nodes - g.n_edges  # r + c, from n = r c and E = 2 r c - r - c
        (r,) = [r for r in range(10, 20) if r * (total - r) == g.n_nodes and r <= total - r]
        shapes[(r, total - r)] += 1
    assert shapes == Counter({(r, c): 1 + (r != c) for r in range(10, 20) for c in range(r, 20)})
    graphs = generate("grid", 100)
    train = {(g.n_nodes, tuple(map(tuple, g.edges.tolist()))) for g in split(graphs, "train")}
    assert not any((g.n_nodes, tuple(map(tuple, g.edges.tolist()))) in train for g in split(graphs, "test"))
