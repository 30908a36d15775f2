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
