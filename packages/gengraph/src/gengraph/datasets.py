"""Seeded procedural graph benchmark sets and real graphs from installed packages.

The original benchmark files (GraphRNN, GRAN, SPECTRE) are download-only, so every set is regenerated here by
its published recipe from a seed: the same ``(name, seed, size)`` gives the same graphs on every machine.

=================  ============================================================================  =========
name               recipe                                                                        default n
=================  ============================================================================  =========
planar             64 uniform points in the unit square, Delaunay triangulation (SPECTRE)         200
sbm                2-5 blocks of 20-40 nodes, p_in 0.3, p_out 0.05, connected (SPECTRE)            200
community-small    2 communities of 6-10 nodes, G(n, 0.7) each, inter-edges w.p. 0.05 (GraphRNN)  100
ego-small          radius-1 ego nets with 4-18 nodes, distinct centres in a 3,000-node graph      200
tree               uniform random labelled trees on 64 nodes (Pruefer sequences)                  200
lobster            random lobsters, p1 = p2 = 0.7, mean backbone 80, 10-100 nodes (GRAN)           100
grid               2-D grids, each shape of 10-19 rows and 10-19 columns once (GraphRNN)          100
=================  ============================================================================  =========

GraphRNN's ego-small is cut from Citeseer, which does not ship offline; the stand-in cuts ego nets from a
seeded Holme-Kim (powerlaw-cluster) graph with Citeseer's order of magnitude (3,000 nodes, mean degree ~4),
so it keeps the hub-and-spokes shape but is not the same distribution.

Real graphs (one graph each, no split): ``karate``, ``les-miserables``, ``florentine`` (networkx), and the
C. elegans connectomes of :mod:`gengraph.connectomes` (``celegans-*``, read from the ``cect`` package's data);
``celegans-witvliet2021`` is Witvliet et al.'s eight animals from L1 to adult, in that order, for any split
(the split name is still checked: a mistyped one is refused).

Splits: a seeded permutation (seed ``split_seed = 42``), then 64 % train, 16 % val, 20 % test (SPECTRE's
128/32/40 for 200 graphs).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import networkx as nx
import numpy as np

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError, InputError
from gengraph.connectomes import CONNECTOMES, SERIES, connectome
from gengraph.graph import Graph

__all__ = ["DATASETS", "REAL_GRAPHS", "SPLITS", "generate", "load_dataset", "real_graph", "split"]

SPLITS = ("train", "val", "test", "all")
SPLIT_SEED = 42


def _planar(rng: np.random.Generator, n: int = 64) -> nx.Graph:
    from scipy.spatial import Delaunay

    pts = rng.random((n, 2))
    tri = Delaunay(pts)
    g = nx.empty_graph(n)
    for a, b, c in tri.simplices:
        g.add_edges_from([(a, b), (b, c), (a, c)])
    return g


def _sbm(rng: np.random.Generator) -> nx.Graph:
    while True:
        k = int(rng.integers(2, 6))
        sizes = [int(s) for s in rng.integers(20, 41, size=k)]
        p = np.full((k, k), 0.05)
        np.fill_diagonal(p, 0.3)
        g = nx.stochastic_block_model(sizes, p.tolist(), seed=int(rng.integers(2**31)))
        if nx.is_connected(g):
            return nx.Graph(g)


def _community_small(rng: np.random.Generator, p_in: float = 0.7, p_out: float = 0.05) -> nx.Graph:
    sizes = [int(s) for s in rng.choice([6, 7, 8, 9, 10], size=2)]
    communities = [nx.gnp_random_graph(s, p_in, seed=int(rng.integers(2**31))) for s in sizes]
    for c in communities:  # GraphRNN bridges a community's pieces (about 1 graph in 150 has one): chain them
        firsts = sorted(min(part) for part in nx.connected_components(c))
        c.add_edges_from(itertools.pairwise(firsts))
    g = nx.disjoint_union_all(communities)
    a, b = range(sizes[0]), range(sizes[0], sum(sizes))
    inter = [(u, v) for u in a for v in b if rng.random() < p_out]
    g.add_edges_from(inter or [(0, sizes[0])])
    return g


def _ego_source(seed: int) -> nx.Graph:
    return nx.powerlaw_cluster_graph(3000, 2, 0.3, seed=seed)


def _ego_small_many(rng: np.random.Generator, n: int) -> list[nx.Graph]:
    source = _ego_source(int(rng.integers(2**31)))
    out: list[nx.Graph] = []
    for centre in rng.permutation(source.number_of_nodes()).tolist():  # each centre once, as GraphRNN
        ego = nx.ego_graph(source, centre, radius=1)
        if 4 <= ego.number_of_nodes() <= 18:
            out.append(nx.convert_node_labels_to_integers(ego))
            if len(out) == n:
                return out
    raise ConfigError(f"ego-small has {len(out)} ego nets (one per centre of 4 to 18 nodes), fewer than the {n} asked.")


def _tree(rng: np.random.Generator, n: int = 64) -> nx.Graph:
    return nx.from_prufer_sequence(rng.integers(0, n, size=n - 2).tolist())


def _lobster(rng: np.random.Generator) -> nx.Graph:
    while True:
        g = nx.random_lobster_graph(80, 0.7, 0.7, seed=int(rng.integers(2**31)))
        if 10 <= g.number_of_nodes() <= 100:
            return g


def _grid_many(rng: np.random.Generator, n: int) -> list[nx.Graph]:
    """GraphRNN's 100 grids, one per shape (10-19 rows, 10-19 columns), in a seeded order; past 100 graphs the
    shapes repeat in that order."""
    shapes = [(r, c) for r in range(10, 20) for c in range(10, 20)]
    order = rng.permutation(len(shapes))
    return [nx.grid_2d_graph(*shapes[order[i % len(shapes)]]) for i in range(n)]


_ONE: dict[str, Callable[[np.random.Generator], nx.Graph]] = {
    "planar": _planar,
    "sbm": _sbm,
    "community-small": _community_small,
    "tree": _tree,
    "lobster": _lobster,
}
_MANY: dict[str, Callable[[np.random.Generator, int], list[nx.Graph]]] = {
    "ego-small": _ego_small_many,
    "grid": _grid_many,
}
DEFAULT_SIZES = {
    "planar": 200, "sbm": 200, "community-small": 100, "ego-small": 200, "tree": 200, "lobster": 100, "grid": 100,
}  # fmt: skip
DATASETS = tuple(DEFAULT_SIZES)


def generate(name: str, n: int | None = None, *, seed: int = 0) -> list[Graph]:
    """``n`` graphs (default: the set's published size) of the procedural set ``name``, deterministic in
    ``(name, n, seed)``."""
    check_choice(name, DATASETS, "graph dataset")
    n = DEFAULT_SIZES[name] if n is None else n
    n = check_int(n, "the number of graphs", low=1)
    seed = check_int(seed, "the data seed", low=0)  # numpy's seed sequence refuses negatives with a bare ValueError
    # the set name enters the seed, so two sets with the same seed are still independent streams
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    graphs = _MANY[name](rng, n) if name in _MANY else [_ONE[name](rng) for _ in range(n)]
    return [Graph.from_networkx(nx.convert_node_labels_to_integers(g)) for g in graphs]


def split(graphs: list[Graph], which: str, *, split_seed: int = SPLIT_SEED) -> list[Graph]:
    """The ``train`` (64 %), ``val`` (16 %) or ``test`` (20 %) part of ``graphs`` (or ``all``)."""
    check_choice(which, SPLITS, "split")
    split_seed = check_int(split_seed, "split_seed", low=0)
    if which == "all":
        return list(graphs)
    n = len(graphs)
    perm = np.random.default_rng(split_seed).permutation(n)
    n_test = math.ceil(0.2 * n)
    n_val = math.ceil(0.2 * (n - n_test))
    parts = {"test": perm[:n_test], "val": perm[n_test : n_test + n_val], "train": perm[n_test + n_val :]}
    return [graphs[i] for i in parts[which]]


REAL_GRAPHS: dict[str, Callable[[], nx.Graph]] = {
    "karate": nx.karate_club_graph,
    "les-miserables": nx.les_miserables_graph,
    "florentine": nx.florentine_families_graph,
}


def real_graph(name: str) -> Graph:
    """One real graph shipped inside an installed package (edge attributes dropped, types 0)."""
    check_choice(name, tuple(REAL_GRAPHS), "real graph")
    g = nx.Graph(REAL_GRAPHS[name]())
    bare = nx.Graph()
    bare.add_nodes_from(g.nodes)
    bare.add_edges_from((u, v) for u, v in g.edges if u != v)
    return Graph.from_networkx(bare)


def load_dataset(name: str, which: str = "train", *, seed: int = 0, n: int | None = None) -> list[Graph]:
    """A split of a procedural set, or the whole of a real one (any split: a one-graph list, or the
    Witvliet developmental series). ``which`` must be one of :data:`SPLITS` for every set, real ones included."""
    check_choice(which, SPLITS, "split")  # before any graph is generated or read
    if name in REAL_GRAPHS:
        return [real_graph(name)]
    if name in CONNECTOMES:
        return [connectome(name).graph]
    if name in SERIES:
        return [connectome(m).graph for m in SERIES[name]]
    if name not in DATASETS:
        raise InputError(
            f"unknown graph dataset {name!r}; expected one of {', '.join(DATASETS + tuple(REAL_GRAPHS))}, "
            "a C. elegans connectome (celegans-*, see 'gengraph data --list') or a .json/.graphml/.edgelist file."
        )
    return split(generate(name, n, seed=seed), which)
