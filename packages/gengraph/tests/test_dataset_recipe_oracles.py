"""The procedural recipes against independent computations: the planar set's Delaunay triangulation by Euler's
formula and the empty-circumcircle property (brute force), and the tree set's uniformity over labelled trees
(each label's degree is 1 + Binomial(n - 2, 1 / n) under Pruefer sequences)."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from gengraph import datasets
from gengraph.datasets import generate


def _in_circumcircle(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> bool:
    """Whether ``d`` lies strictly inside the circle through ``a``, ``b``, ``c`` (the in-circle determinant)."""
    m = np.array([[*(p - d), float((p - d) @ (p - d))] for p in (a, b, c)])
    orient = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return float(np.linalg.det(m)) * np.sign(orient) > 0


def test_planar_graphs_are_the_delaunay_triangulation_of_their_points() -> None:
    """A triangulation of ``n`` points with ``h`` on the convex hull has ``3n - 3 - h`` edges and ``2n - 2 - h``
    triangles, and a Delaunay one's triangles have empty circumcircles: among the graph's triangles, exactly
    ``2n - 2 - h`` are empty (each simplex's three edges; keeping two of them left a connected planar graph)."""
    from scipy.spatial import ConvexHull

    for seed in range(3):
        g = datasets._planar(np.random.default_rng(seed))
        pts = np.random.default_rng(seed).random((64, 2))  # the recipe's 64 uniform points, drawn first
        n, h = 64, len(ConvexHull(pts).vertices)
        assert g.number_of_nodes() == n and g.number_of_edges() == 3 * n - 3 - h
        triangles = [t for t in nx.enumerate_all_cliques(g) if len(t) == 3]
        empty = [
            t for t in triangles if not any(_in_circumcircle(*pts[list(t)], pts[d]) for d in range(n) if d not in t)
        ]
        assert len(empty) == 2 * n - 2 - h


def test_trees_are_uniform_over_labelled_trees() -> None:
    """Under a uniform labelled tree on 64 nodes every label is a leaf with probability ``(63/64)^62 = 0.377``;
    a Pruefer sequence drawn from ``0..62`` made node 63 a leaf in every tree."""
    trees = generate("tree", 400, seed=0)
    assert all(nx.is_tree(t.to_networkx()) and t.n_nodes == 64 for t in trees)
    leaf = np.stack([(t.degrees() == 1).numpy() for t in trees]).mean(0)  # [64], per label
    p = (63 / 64) ** 62
    assert abs(leaf.mean() - p) < 0.01  # sd 0.003 pooled
    assert np.abs(leaf - p).max() < 0.12  # sd 0.024 per label, 64 labels
    mean_degree = np.stack([t.degrees().numpy() for t in trees]).mean(0)
    assert np.abs(mean_degree - 2 * 63 / 64).max() < 0.35  # 1 + 62/64 each; sd 0.07


def test_sbm_validity_counts_pairs_and_checks_block_sizes() -> None:
    """The block densities divide by the node pairs counted by brute force (``C(n_k, 2)`` inside a block), and an
    SBM with the right densities but blocks of 50 nodes (outside 20-40) is not valid."""
    from gengraph.metrics.vun import _block_counts, is_sbm_graph

    g = nx.gnp_random_graph(9, 0.5, seed=1)
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    adj = nx.to_numpy_array(g, nodelist=range(9))
    sizes, counts, pairs = _block_counts(adj, labels)
    assert sizes.tolist() == [3, 2, 4]
    for r, s in itertools.product(range(3), repeat=2):
        both = [(u, v) for u, v in itertools.combinations(range(9), 2) if {labels[u], labels[v]} == {r, s}]
        assert pairs[r, s] == len(both) and counts[r, s] == sum(g.has_edge(u, v) for u, v in both)
    big = nx.stochastic_block_model([50, 50], [[0.3, 0.05], [0.05, 0.3]], seed=0)
    assert nx.is_connected(big) and not is_sbm_graph(big)
