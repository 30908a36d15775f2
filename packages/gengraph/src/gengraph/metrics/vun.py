"""Validity, uniqueness and novelty (V.U.N.; Martinkus et al. 2022, SPECTRE) with per-dataset validity.

- ``planar``: connected and planar. ``tree``: a tree. ``lobster``: a tree that becomes a path after removing
  its leaves twice. ``grid``: connected with every degree in 2..4.
- ``sbm``: SPECTRE's test, written without graph-tool: the blocks are recovered by greedy modularity
  maximisation (SPECTRE fits a degree-uncorrected SBM with graph-tool, which is not pip-installable), then
  there must be 2-5 blocks of 20-40 nodes, and the Wald statistics of the estimated intra/inter densities
  against ``p_in = 0.3`` / ``p_out = 0.05`` must have a mean chi-square(1) p-value above 0.9. ``p_out = 0.05`` is
  the inter-block probability SPECTRE generates its SBM data with (and :mod:`gengraph.datasets` too); SPECTRE's
  own check (``is_sbm_graph``) defaults to ``p_inter = 0.005`` instead, a tenth of its data's value, so our
  SBM validity tests against the generating density and is not comparable with numbers computed with that default.
- every other set (community-small, ego-small, users' files): connected.

Directed graphs are read as undirected (:meth:`~gengraph.graph.Graph.to_undirected`), as by the MMD descriptors.

Uniqueness: not isomorphic to an earlier generated graph. Novelty: not isomorphic to any training graph.
Candidates are bucketed by Weisfeiler-Lehman hash, and only graphs in the same bucket are compared with an
exact isomorphism test.
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import networkx as nx
import numpy as np

from gengraph.graph import Graph

__all__ = ["is_lobster", "is_sbm_graph", "is_valid", "vun"]


def is_lobster(g: nx.Graph) -> bool:
    if not nx.is_tree(g):
        return False
    h = g.copy()
    for _ in range(2):
        h.remove_nodes_from([v for v, d in dict(h.degree()).items() if d <= 1])
    return h.number_of_nodes() == 0 or (nx.is_connected(h) and max(dict(h.degree()).values(), default=0) <= 2)


def is_sbm_graph(g: nx.Graph, p_in: float = 0.3, p_out: float = 0.05) -> bool:
    """Whether ``g`` passes SPECTRE's SBM test (module docstring) against ``p_in`` / ``p_out``.

    ``p_out = 0.05`` is the inter-block probability of SPECTRE's SBM data (and of ``gengraph``'s ``sbm`` set);
    SPECTRE's ``is_sbm_graph`` defaults to ``p_inter = 0.005``, ten times lower, so the two checks differ.
    """
    from scipy.stats import chi2

    if g.number_of_nodes() == 0 or not nx.is_connected(g):
        return False
    blocks = [sorted(c) for c in nx.community.greedy_modularity_communities(g, resolution=1.0)]
    sizes = np.array([len(b) for b in blocks])
    if not 2 <= len(blocks) <= 5 or sizes.min() < 20 or sizes.max() > 40:
        return False
    label = {v: k for k, b in enumerate(blocks) for v in b}
    k = len(blocks)
    counts = np.zeros((k, k))
    for u, v in g.edges:
        a, b = label[u], label[v]
        counts[a, b] += 1
        if a != b:
            counts[b, a] += 1
    pairs = np.outer(sizes, sizes).astype(float)
    np.fill_diagonal(pairs, sizes * (sizes - 1) / 2)
    est = counts / pairs
    target = np.full((k, k), p_out)
    np.fill_diagonal(target, p_in)
    w = (est - target) ** 2 / (est * (1 - est) + 1e-6)
    return float((1 - chi2.cdf(np.abs(w), 1)).mean()) > 0.9


def is_valid(g: nx.Graph, dataset: str | None) -> bool:
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
        return nx.is_connected(g) and all(2 <= d <= 4 for _, d in g.degree())
    return nx.is_connected(g)


def _isomorphic_to_any(g: nx.Graph, bucket: list[nx.Graph]) -> bool:
    return any(nx.faster_could_be_isomorphic(g, h) and nx.is_isomorphic(g, h) for h in bucket)


def _wl_hash(g: nx.Graph) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # networkx notes a hash change across its versions
        return nx.weisfeiler_lehman_graph_hash(g)


def vun(generated: list[Graph], train: list[Graph], dataset: str | None = None) -> dict[str, float]:
    """Fractions ``valid``, ``unique``, ``novel`` and ``vun`` (valid and unique and novel) of ``generated``."""
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
    total = max(len(gen), 1)
    return {"valid": valid / total, "unique": unique / total, "novel": novel / total, "vun": both / total}
