"""Validity, uniqueness and novelty (V.U.N.; Martinkus et al. 2022, SPECTRE) with per-dataset validity.

- ``planar``: connected and planar. ``tree``: a tree. ``lobster``: a tree that becomes a path after removing
  its leaves twice. ``grid``: isomorphic to an ``r x c`` grid graph with ``r, c >= 2`` (SPECTRE's
  ``is_grid_graph`` compares with every grid of the node count too; "connected with degrees 2-4", used until
  2026-12-07, let cycles and 4-regular graphs pass).
- ``sbm``: SPECTRE's test, written without graph-tool. SPECTRE fits a degree-uncorrected SBM by minimum
  description length with graph-tool, which is not pip-installable; here the blocks are the partition with the
  smallest description-length proxy (BIC of the degree-uncorrected SBM plus ``2 n log k`` for the labels) among
  greedy modularity, Louvain (three seeds) and spectral clusterings of the adjacency into 2-5 blocks. Greedy
  modularity alone merged or split the blocks of 38 of 100 graphs of our own ``sbm`` set (62 valid; 91 with
  the selection). Then there must be 2-5 blocks of 20-40 nodes, and the Wald statistics of the estimated
  intra/inter densities
  against ``p_in = 0.3`` / ``p_out = 0.05`` must have a mean chi-square(1) p-value above 0.9. ``p_out = 0.05`` is
  the inter-block probability SPECTRE generates its SBM data with (and :mod:`gengraph.datasets` too); SPECTRE's
  own check (``is_sbm_graph``) defaults to ``p_inter = 0.005`` instead, a tenth of its data's value, so our
  SBM validity tests against the generating density and is not comparable with numbers computed with that default.
- every other set (community-small, ego-small, users' files): connected.

Directed graphs are read as undirected (:meth:`~gengraph.graph.Graph.to_undirected`), as by the MMD descriptors.

Uniqueness: not isomorphic to an earlier generated graph. Novelty: not isomorphic to any training graph.
Candidates are bucketed by Weisfeiler-Lehman hash, and only graphs in the same bucket are compared with an
exact isomorphism test, VF2++ (``nx.vf2pp_is_isomorphic``; Juttner & Madarasi 2018). SPECTRE's VF2
(``nx.is_isomorphic``) gives the same answers but backtracks exponentially on some relabelled trees: matching 60
random trees and lobsters with relabelled copies, it ran past 3 s on 9 (past 30 s on a 55-node lobster) where
VF2++ takes milliseconds, so V.U.N. of the tree and lobster sets could hang.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict

import networkx as nx
import numpy as np

from gencore.errors import ConfigError, InputError
from gengraph.graph import Graph

__all__ = ["is_grid", "is_lobster", "is_sbm_graph", "is_valid", "vun"]


def is_lobster(g: nx.Graph) -> bool:
    if not nx.is_tree(g):
        return False
    h = g.copy()
    for _ in range(2):
        h.remove_nodes_from([v for v, d in dict(h.degree()).items() if d <= 1])
    return h.number_of_nodes() == 0 or (nx.is_connected(h) and max(dict(h.degree()).values(), default=0) <= 2)


def is_grid(g: nx.Graph) -> bool:
    """Whether ``g`` is isomorphic to an ``r x c`` grid graph with ``r, c >= 2``."""
    n, m = g.number_of_nodes(), g.number_of_edges()
    for r in range(2, math.isqrt(n) + 1):
        c = n // r
        if r * c == n and m == r * (c - 1) + c * (r - 1):
            grid = nx.grid_2d_graph(r, c)
            if nx.faster_could_be_isomorphic(g, grid) and nx.vf2pp_is_isomorphic(g, grid):
                return True
    return False


def is_sbm_graph(g: nx.Graph, p_in: float = 0.3, p_out: float = 0.05) -> bool:
    """Whether ``g`` passes SPECTRE's SBM test (module docstring) against ``p_in`` / ``p_out``.

    ``p_out = 0.05`` is the inter-block probability of SPECTRE's SBM data (and of ``gengraph``'s ``sbm`` set);
    SPECTRE's ``is_sbm_graph`` defaults to ``p_inter = 0.005``, ten times lower, so the two checks differ.
    """
    from scipy.stats import chi2

    if g.number_of_nodes() == 0 or not nx.is_connected(g):
        return False
    adj = nx.to_numpy_array(g, nodelist=list(g.nodes))
    sizes, counts, pairs = _block_counts(adj, min(_partitions(g, adj), key=lambda lab: _sbm_bic(adj, lab)))
    k = len(sizes)
    if not 2 <= k <= 5 or sizes.min() < 20 or sizes.max() > 40:
        return False
    est = counts / pairs
    target = np.full((k, k), p_out)
    np.fill_diagonal(target, p_in)
    w = (est - target) ** 2 / (est * (1 - est) + 1e-6)
    return float((1 - chi2.cdf(np.abs(w), 1)).mean()) > 0.9


def _partitions(g: nx.Graph, adj: np.ndarray):
    """Candidate block labels ``[n]`` (node order of ``adj``): modularity, Louvain and spectral clusterings."""
    from scipy.cluster.vq import kmeans2

    index = {v: i for i, v in enumerate(g.nodes)}

    def labels(blocks) -> np.ndarray:
        out = np.empty(len(index), dtype=np.int64)
        for k, block in enumerate(blocks):
            out[[index[v] for v in block]] = k
        return out

    yield labels(nx.community.greedy_modularity_communities(g, resolution=1.0))
    for seed in range(3):
        yield labels(nx.community.louvain_communities(g, seed=seed))
    w, v = np.linalg.eigh(adj)
    for k in range(2, 6):  # adjacency spectral embedding of an assortative SBM: k leading eigenvectors
        x = v[:, -k:] * np.sqrt(np.abs(w[-k:]))
        for seed in range(2):
            yield kmeans2(x, k, seed=seed, minit="++")[1]


def _block_counts(adj: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block sizes ``[k]``, edge counts and node-pair counts ``[k, k]`` of a partition (empty blocks dropped)."""
    labels = np.unique(labels, return_inverse=True)[1]
    onehot = np.eye(labels.max() + 1)[labels]
    sizes = onehot.sum(0)
    counts = onehot.T @ adj @ onehot
    np.fill_diagonal(counts, np.diag(counts) / 2)
    pairs = np.outer(sizes, sizes)
    np.fill_diagonal(pairs, sizes * (sizes - 1) / 2)
    return sizes, counts, pairs


def _sbm_bic(adj: np.ndarray, labels: np.ndarray) -> float:
    """BIC of the degree-uncorrected SBM with these blocks plus ``2 n log k`` (the labels' description)."""
    sizes, counts, pairs = _block_counts(adj, labels)
    upper = np.triu_indices(len(sizes))
    e, m = counts[upper], pairs[upper]
    p = np.divide(e, m, out=np.zeros_like(e), where=m > 0)
    loglik = np.sum(e * np.log(np.where(e > 0, p, 1.0)) + (m - e) * np.log(np.where(m > e, 1 - p, 1.0)))
    n = adj.shape[0]
    return float(-2 * loglik + e.size * np.log(n * (n - 1) / 2) + 2 * n * np.log(len(sizes)))


def _check_dataset(dataset: str | None) -> None:
    """A misspelt set name (``"trees"``) silently fell back to the connectivity rule of the other sets."""
    from gengraph.datasets import DATASETS

    if dataset is not None and dataset not in DATASETS:
        raise ConfigError(
            f"unknown dataset {dataset!r} for validity; expected one of {', '.join(DATASETS)}, or None (connected)."
        )


def is_valid(g: nx.Graph, dataset: str | None) -> bool:
    _check_dataset(dataset)
    if g.number_of_nodes() == 0:
        return False
    if dataset == "planar":
        return nx.is_connected(g) and nx.check_planarity(g)[0]
    if dataset == "tree":
        return nx.is_tree(g)
    if dataset == "lobster":
        return is_lobster(g)
    if dataset == "sbm":
        return is_sbm_graph(g)
    if dataset == "grid":
        return is_grid(g)
    return nx.is_connected(g)


def _isomorphic_to_any(g: nx.Graph, bucket: list[nx.Graph]) -> bool:
    if g.number_of_nodes() == 0:  # VF2++ calls two graphs without nodes non-isomorphic
        return any(h.number_of_nodes() == 0 for h in bucket)
    return any(nx.faster_could_be_isomorphic(g, h) and nx.vf2pp_is_isomorphic(g, h) for h in bucket)


def _wl_hash(g: nx.Graph) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # networkx notes a hash change across its versions
        return nx.weisfeiler_lehman_graph_hash(g)


def vun(generated: list[Graph], train: list[Graph], dataset: str | None = None) -> dict[str, float]:
    """Fractions ``valid``, ``unique``, ``novel`` and ``vun`` (valid and unique and novel) of ``generated``."""
    _check_dataset(dataset)
    if not generated:  # 0 of 0 graphs was reported as 0 % valid, unique and novel
        raise InputError("the generated set must hold at least one graph for V.U.N.")
    gen = [g.to_undirected().to_networkx() for g in generated]
    seen_train: dict[str, list[nx.Graph]] = defaultdict(list)
    for h in (t.to_undirected().to_networkx() for t in train):
        seen_train[_wl_hash(h)].append(h)
    seen_gen: dict[str, list[nx.Graph]] = defaultdict(list)
    valid = unique = novel = both = 0
    for g in gen:
        key = _wl_hash(g)
        v = is_valid(g, dataset)
        u = not _isomorphic_to_any(g, seen_gen[key])
        seen_gen[key].append(g)
        n = not _isomorphic_to_any(g, seen_train[key])
        valid, unique, novel, both = valid + v, unique + u, novel + n, both + (v and u and n)
    total = len(gen)
    return {"valid": valid / total, "unique": unique / total, "novel": novel / total, "vun": both / total}
