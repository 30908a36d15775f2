"""Graph descriptors against networkx, the EMD kernel against scipy, the MMDs against PolyGraph (oracle)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from gencore.errors import InputError
from gengraph.datasets import generate
from gengraph.graph import Graph
from gengraph.metrics import (
    clustering_histograms,
    degree_histograms,
    gram,
    graph_mmd,
    mmd2_from_gram,
    mmd_bootstrap,
    orbit_counts,
    spectral_histograms,
    vun,
)
from gengraph.metrics.descriptors import clustering_coefficients, normalized_laplacian_eigenvalues


@pytest.fixture(scope="module")
def sets() -> tuple[list[Graph], list[Graph]]:
    return generate("community-small", 12, seed=1), generate("ego-small", 10, seed=2)


def test_descriptors_match_networkx(sets) -> None:
    graphs = sets[0] + sets[1]
    deg = degree_histograms(graphs)
    c, _ = clustering_coefficients(graphs)
    ev = normalized_laplacian_eigenvalues(graphs)
    for i, g in enumerate(graphs):
        h = g.to_networkx()
        ref = np.array(nx.degree_histogram(h)) / g.n_nodes
        np.testing.assert_allclose(deg[i, : len(ref)].numpy(), ref)
        np.testing.assert_allclose(c[i, : g.n_nodes].numpy(), list(nx.clustering(h).values()), atol=1e-12)
        spec = np.linalg.eigvalsh(nx.normalized_laplacian_matrix(h).toarray())
        np.testing.assert_allclose(ev[i].numpy(), spec, atol=1e-10)
    hist = clustering_histograms(graphs)
    for i, g in enumerate(graphs):  # numpy's binning, including values on bin edges (0.7, 0.5, ...)
        h, _ = np.histogram(list(nx.clustering(g.to_networkx()).values()), bins=100, range=(0.0, 1.0))
        np.testing.assert_allclose(hist[i].numpy(), h / h.sum(), atol=1e-15)
        h, _ = np.histogram(ev[i].numpy(), bins=200, range=(-1e-5, 2))
        np.testing.assert_allclose(spectral_histograms([g])[0].numpy(), h / h.sum(), atol=1e-15)


def test_orbit_backends_agree(sets) -> None:
    """orbit-count (C++) and the pure-Python ORCA fallback give the same mean orbit counts."""
    import orbit_count
    from orca import orca_nodes

    g = sets[0][0]
    ours = orbit_counts([g])[0].numpy()
    e = g.edges.numpy()
    fallback = np.asarray(orca_nodes(e, g.n_nodes, graphlet_size=4)).mean(0)
    direct = np.asarray(orbit_count.node_orbit_counts(g.to_networkx(), graphlet_size=4)).mean(0)
    np.testing.assert_allclose(ours, direct)
    np.testing.assert_allclose(ours, fallback)
    assert ours.shape == (15,) and ours[0] == pytest.approx(2 * g.n_edges / g.n_nodes)  # orbit 0 = degree


def test_emd_kernel_is_the_1d_wasserstein_distance() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((3, 7)), rng.random((4, 5))
    x, y = x / x.sum(1, keepdims=True), y / y.sum(1, keepdims=True)
    k = gram(torch.tensor(x), torch.tensor(y), "gaussian_emd", sigma=0.7, scale=2.0).numpy()
    for i in range(3):
        for j in range(4):
            w = wasserstein_distance(np.arange(7) / 2.0, np.arange(5) / 2.0, x[i], y[j])
            assert k[i, j] == pytest.approx(np.exp(-(w**2) / (2 * 0.7**2)), rel=1e-10)


def test_mmd_is_zero_on_identical_sets_and_positive_otherwise(sets) -> None:
    a, b = sets
    same = graph_mmd(a, a)
    assert all(abs(v) < 1e-12 for v in same.values())
    diff = graph_mmd(a, b)
    assert all(v > 0.01 for k, v in diff.items() if "clustering_mmd_gaussian_tv" not in k)


def test_bootstrap_interval_contains_the_point_estimate(sets) -> None:
    a, b = sets
    fa, fb = degree_histograms(a), degree_histograms(b)
    kxx, kyy, kxy = (gram(p, q, "gaussian_tv", 1.0) for p, q in ((fa, fa), (fb, fb), (fa, fb)))
    low, high = mmd_bootstrap(kxx, kyy, kxy, n_boot=300, seed=0)
    assert 0 <= low < float(mmd2_from_gram(kxx, kyy, kxy)) < high
    assert mmd_bootstrap(kxx, kyy, kxy, n_boot=50, seed=1) == mmd_bootstrap(kxx, kyy, kxy, n_boot=50, seed=1)


def test_bootstrap_interval_covers_the_expected_mmd() -> None:
    """90 % intervals from 40 + 40 points of N(0, I) vs N(0.5, I) in 2-D (Gaussian kernel) cover the expected
    biased MMD at these sizes (Monte Carlo over 2,000 fresh pairs) in 86 % of 200 repetitions, and always contain
    their own point estimate (the uncorrected half-set percentile interval missed it in 5 of the 200)."""
    g = torch.Generator().manual_seed(0)

    def grams(n: int) -> tuple[torch.Tensor, ...]:
        x = torch.randn(n, 2, generator=g, dtype=torch.float64)
        y = torch.randn(n, 2, generator=g, dtype=torch.float64) + 0.5
        return tuple(torch.exp(-(torch.cdist(p, q) ** 2) / 2) for p, q in ((x, x), (y, y), (x, y)))

    truth = torch.stack([mmd2_from_gram(*grams(40)) for _ in range(2000)]).mean()
    covered = []
    for rep in range(200):
        kxx, kyy, kxy = grams(40)
        low, high = mmd_bootstrap(kxx, kyy, kxy, n_boot=200, coverage=0.9, seed=rep)
        assert low <= float(mmd2_from_gram(kxx, kyy, kxy)) <= high
        covered.append(low <= truth <= high)
    assert 0.8 <= sum(covered) / len(covered) <= 0.99


def test_bootstrap_refuses_sets_too_small_for_half_draws(sets) -> None:
    """With 2 or 3 graphs a half-set draw holds one graph, has no U-statistic, and the interval's upper end fell
    below its own point estimate (and was 0 wide for one graph): refused in one sentence instead."""
    a, b = sets
    with pytest.raises(InputError, match=r"at least 4 graphs in each set .* got 3 reference and 10 generated"):
        graph_mmd(a[:3], b, ["degree_mmd_gaussian_tv"], n_boot=50)
    fa, fb = degree_histograms(a[:4]), degree_histograms(b[:4])
    kxx, kyy, kxy = (gram(p, q, "gaussian_tv", 1.0) for p, q in ((fa, fa), (fb, fb), (fa, fb)))
    low, high = mmd_bootstrap(kxx, kyy, kxy, n_boot=200, seed=0)
    assert 0 <= low <= float(mmd2_from_gram(kxx, kyy, kxy)) <= high
    with pytest.raises(InputError, match="got 2 reference and 4 generated"):
        mmd_bootstrap(kxx[:2, :2], kyy, kxy[:2], n_boot=10)


def test_directed_and_empty_graphs_are_read_as_undirected() -> None:
    """A directed graph is described by its undirected view in every descriptor (its reciprocal pair counted
    once in the degree too), and V.U.N. reads it the same way; a graph without nodes has zero descriptors."""
    path = Graph(n_nodes=3, edges=[[0, 1], [1, 2]])
    directed = Graph(n_nodes=3, edges=[[0, 1], [1, 0], [2, 1]], directed=True)
    assert directed.to_undirected().edges.tolist() == path.edges.tolist()
    keys = ["degree_mmd_gaussian_tv", "clustering_mmd_gaussian_emd", "spectral_mmd_gaussian_tv"]
    assert all(v == 0 for v in graph_mmd([path], [directed], keys).values())
    assert vun([directed, path], [path], "tree") == {"valid": 1.0, "unique": 0.5, "novel": 0.0, "vun": 0.0}
    empty = Graph(n_nodes=0)
    for rows in (degree_histograms([empty, path]), clustering_histograms([empty, path])):
        assert rows[0].abs().sum() == 0 and rows[1].sum() == pytest.approx(1.0)


def test_vun() -> None:
    train = generate("tree", 5, seed=0)
    path = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [2, 3]])
    cycle = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [2, 3], [3, 0]])
    out = vun([path, path, cycle, train[0]], train, "tree")
    assert out == {"valid": 0.75, "unique": 0.75, "novel": 0.75, "vun": 0.25}


def test_grid_validity_is_isomorphism_to_a_grid() -> None:
    # "connected with degrees 2-4" let cycles and 4-regular graphs pass as grids
    from gengraph.metrics.vun import is_grid, is_valid

    grid = nx.convert_node_labels_to_integers(nx.grid_2d_graph(4, 6))
    shuffled = nx.relabel_nodes(grid, dict(zip(grid, np.random.default_rng(0).permutation(24).tolist())))
    assert is_grid(grid) and is_grid(shuffled) and is_grid(nx.grid_2d_graph(5, 5))
    broken = grid.copy()
    broken.remove_edge(0, 1)
    broken.add_edge(0, 7)  # same node and edge counts, degrees still 2-4, no longer a grid
    for g in (nx.cycle_graph(24), nx.random_regular_graph(4, 24, seed=0), broken, nx.path_graph(6)):
        assert not is_grid(g) and not is_valid(g, "grid")


# ------------------------------------------------------------------ oracle: polygraph-benchmark
@pytest.mark.parametrize(
    ("key", "descriptor", "bw"),
    [
        ("degree_mmd_gaussian_tv", "SparseDegreeHistogram()", 1.0),
        ("clustering_mmd_gaussian_tv", "ClusteringHistogram(bins=100)", 0.1),
        ("orbit_mmd_gaussian_tv", "OrbitCounts()", 30.0),
        ("spectral_mmd_gaussian_tv", "EigenvalueHistogram()", 1.0),
    ],
)
def test_matches_polygraph(key: str, descriptor: str, bw: float) -> None:
    """PolyGraph's GaussianTV benchmark kernels (their bandwidths) and biased MMD estimate, on the same graphs."""
    descriptors = pytest.importorskip("polygraph.utils.descriptors")
    kernels = pytest.importorskip("polygraph.utils.kernels")
    mmd_utils = pytest.importorskip("polygraph.utils.mmd_utils")
    ref = generate("community-small", 15, seed=5) + generate("ego-small", 5, seed=5)
    gen = generate("sbm", 4, seed=6) + generate("community-small", 8, seed=7)
    kernel = kernels.GaussianTV(eval(descriptor, vars(descriptors)), bw=bw)
    fr = kernel.featurize([g.to_networkx() for g in ref])
    fg = kernel.featurize([g.to_networkx() for g in gen])
    expected = mmd_utils.mmd_from_gram(
        kernel.pre_gram_block(fr, fr), kernel.pre_gram_block(fg, fg), kernel.pre_gram_block(fr, fg), "biased"
    )
    assert graph_mmd(ref, gen, [key])[key] == pytest.approx(float(expected), rel=1e-9, abs=1e-12)


def test_kernel_and_bootstrap_arguments_are_checked(sets) -> None:
    from gencore.errors import ConfigError

    x = torch.rand(3, 4, dtype=torch.float64)
    with pytest.raises(ConfigError, match="sigma"):
        gram(x, x, "gaussian_tv", 0.0)  # NaN on the diagonal (0 / 0) before
    with pytest.raises(ConfigError, match="scale"):
        gram(x, x, "gaussian_emd", 1.0, scale=0.0)
    with pytest.raises(InputError, match=r"\[n, d\]"):
        gram(x[0], x, "gaussian_tv", 1.0)
    k = torch.eye(5, dtype=torch.float64)
    with pytest.raises(ConfigError, match="bootstrap draws"):
        mmd_bootstrap(k, k, k, n_boot=0)  # torch.cat of an empty list before
    with pytest.raises(InputError, match="Gram blocks"):
        mmd_bootstrap(k, torch.eye(6, dtype=torch.float64), k, n_boot=5)  # an IndexError before
    ref, gen = sets
    with pytest.raises(ConfigError, match="list of metric keys"):
        graph_mmd(ref, gen, "degree_mmd_gaussian_tv")  # reported its first letter 'd' as unknown before
    with pytest.raises(InputError, match="bootstrap draws"):
        graph_mmd(ref, gen, ["degree_mmd_gaussian_tv"], n_boot=2.5)
    with pytest.raises(InputError, match=r"generated set must hold gengraph Graphs, got a networkx.*from_networkx"):
        graph_mmd(ref, [g.to_networkx() for g in gen], ["degree_mmd_gaussian_tv"])  # an AttributeError before


def test_sbm_validity_tests_against_the_generating_p_out_not_spectres_default() -> None:
    """``p_out = 0.05`` is the inter-block probability the SBM data is generated with; SPECTRE's ``is_sbm_graph``
    defaults to 0.005, against which most graphs of the generating recipe fail (SPECTRE's Wald statistic has no
    sample size, so two-block graphs can still pass). The choice is stated in the docstring."""
    import inspect

    from gengraph.metrics.vun import is_sbm_graph

    assert inspect.signature(is_sbm_graph).parameters["p_out"].default == 0.05
    assert "0.005" in is_sbm_graph.__doc__ and "0.05" in is_sbm_graph.__doc__
    graphs = [g.to_networkx() for g in generate("sbm", 10, seed=0)]
    # the blocks are recovered well enough for almost every true SBM graph to pass (greedy modularity alone
    # merged or split them in about 4 of 10)
    assert sum(is_sbm_graph(g) for g in graphs) >= 8
    assert sum(is_sbm_graph(g, p_out=0.005) for g in graphs) <= 3


def test_emd_and_l2_metrics_match_a_pairwise_oracle() -> None:
    """The keys PolyGraph does not cover, against GraphRNN's recipe computed pair by pair: networkx descriptors
    (histograms normalised), scipy's 1-D Wasserstein distance on the bins ``i / scale`` (degree: sigma 1, scale 1;
    clustering: sigma 0.1, scale 100; spectral: sigma 1, scale 1) and the L2 Gaussian on the mean orbit counts
    (sigma 30), in the biased MMD. Trees are left out: numpy drops their eigenvalue 2 (module docstring)."""
    import orbit_count

    ref = generate("community-small", 6, seed=5) + generate("ego-small", 3, seed=5)
    gen = generate("sbm", 2, seed=6) + generate("community-small", 4, seed=7)

    def hist(values, bins, lo, hi):
        h, _ = np.histogram(values, bins=bins, range=(lo, hi))
        return h / h.sum()

    features = {
        "degree": lambda h: np.array(nx.degree_histogram(h)) / h.number_of_nodes(),
        "clustering": lambda h: hist(list(nx.clustering(h).values()), 100, 0.0, 1.0),
        "spectral": lambda h: hist(np.linalg.eigvalsh(nx.normalized_laplacian_matrix(h).toarray()), 200, -1e-5, 2),
        "orbit": lambda h: np.asarray(orbit_count.node_orbit_counts(h, graphlet_size=4), dtype=float).mean(0),
    }

    def emd(sigma, scale):
        def k(x, y):
            w = wasserstein_distance(np.arange(len(x)) / scale, np.arange(len(y)) / scale, x, y)
            return np.exp(-(w**2) / (2 * sigma**2))

        return k

    def l2(x, y):
        return np.exp(-np.sum((x - y) ** 2) / (2 * 30.0**2))

    cases = {
        "degree_mmd_gaussian_emd": ("degree", emd(1.0, 1.0)),
        "clustering_mmd_gaussian_emd": ("clustering", emd(0.1, 100.0)),
        "spectral_mmd_gaussian_emd": ("spectral", emd(1.0, 1.0)),
        "orbit_mmd_gaussian": ("orbit", l2),
    }
    ours = graph_mmd(ref, gen, list(cases))
    for key, (descriptor, k) in cases.items():
        fx, fy = ([features[descriptor](g.to_networkx()) for g in s] for s in (ref, gen))
        expected = sum(
            sign * np.mean([[k(a, b) for b in q] for a in p]) for sign, p, q in ((1, fx, fx), (1, fy, fy), (-2, fx, fy))
        )
        assert ours[key] == pytest.approx(expected, rel=1e-9, abs=1e-12), key


def test_mmd_values_on_tiny_sets_are_hand_computed() -> None:
    """The biased squared MMD of {a, b} against {a} is ``(1 - k(a, b)) / 2`` (not its square root, nor the
    U-statistic ``-k(a, b)``). Degree histograms: P3 ``[0, 2/3, 1/3]`` and K4 ``[0, 0, 0, 1]`` (TV 1, EMD 5/3);
    clustering: paw ``{0, 1/3, 1, 1}`` and diamond ``{2/3, 2/3, 1, 1}`` in bins 0, 33, 66 and 99 of 100 (TV 1/2, EMD
    24.75 bins / 100); mean orbit counts: P3 ``(4/3, 2/3, 1/3, 0, ...)`` and K4 ``(3, 0, 0, 3, 0, ..., 1)`` (squared
    L2 120/9, TV 10/3)."""
    p3 = Graph(n_nodes=3, edges=[[0, 1], [1, 2]])
    k4 = Graph(n_nodes=4, edges=[[i, j] for i in range(4) for j in range(i + 1, 4)])
    paw = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [0, 2], [0, 3]])
    diamond = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]])

    def half(d2: float, sigma: float) -> float:
        return (1 - np.exp(-d2 / (2 * sigma**2))) / 2

    cases = {
        "degree_mmd_gaussian_tv": ((p3, k4), half(1.0, 1.0)),
        "degree_mmd_gaussian_emd": ((p3, k4), half((5 / 3) ** 2, 1.0)),
        "clustering_mmd_gaussian_tv": ((paw, diamond), half(0.25, 0.1)),
        "clustering_mmd_gaussian_emd": ((paw, diamond), half(0.2475**2, 0.1)),
        "orbit_mmd_gaussian": ((p3, k4), half(120 / 9, 30.0)),
        "orbit_mmd_gaussian_tv": ((p3, k4), half((10 / 3) ** 2, 30.0)),
    }
    for key, ((a, b), expected) in cases.items():
        assert graph_mmd([a, b], [a], [key])[key] == pytest.approx(expected, rel=1e-12), key


def test_isolated_nodes_match_polygraph() -> None:
    """Isolated nodes count in the degree histogram (degree 0), have clustering 0 and Laplacian eigenvalue 0 and
    orbit counts 0, as in PolyGraph's descriptors on the same graphs."""
    descriptors = pytest.importorskip("polygraph.utils.descriptors")
    graphs = [
        Graph(n_nodes=6, edges=[[0, 1], [1, 2], [0, 2]]),
        Graph(n_nodes=5, edges=[[0, 1], [1, 2], [2, 3]]),
        Graph(n_nodes=7, edges=[[0, 1], [0, 2], [0, 3], [3, 4]]),
        Graph(n_nodes=4, edges=[[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]),
    ]
    h = [g.to_networkx() for g in graphs]
    deg = descriptors.SparseDegreeHistogram()(h).toarray()
    ours = degree_histograms(graphs).numpy()
    np.testing.assert_allclose(ours, deg[:, : ours.shape[1]], atol=1e-15)
    assert deg[:, ours.shape[1] :].sum() == 0
    np.testing.assert_allclose(clustering_histograms(graphs).numpy(), descriptors.ClusteringHistogram(100)(h))
    np.testing.assert_allclose(spectral_histograms(graphs).numpy(), descriptors.EigenvalueHistogram()(h))
    np.testing.assert_allclose(orbit_counts(graphs).numpy(), descriptors.OrbitCounts()(h))


def test_uniqueness_and_novelty_are_up_to_isomorphism() -> None:
    """A relabelled copy is neither unique nor novel; two triangles and a hexagon share a Weisfeiler-Lehman hash
    (both 2-regular on 6 nodes) but are not isomorphic, so the exact test keeps them apart. The relabelled
    55-node lobster is one on which VF2 (``nx.is_isomorphic``, used before) backtracked for minutes: the check
    is given 20 s."""
    import signal

    rng = np.random.default_rng(0)
    lobster = nx.random_lobster_graph(20, 0.7, 0.7, seed=3)
    a = Graph.from_networkx(lobster)
    b = Graph(n_nodes=a.n_nodes, edges=torch.from_numpy(rng.permutation(a.n_nodes))[a.edges])
    assert a.edges.tolist() != b.edges.tolist()

    def too_slow(*_):
        raise TimeoutError("the isomorphism test of two relabelled 55-node lobsters ran past 20 s.")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(20)
    try:
        assert vun([a, b], [], "lobster") == {"valid": 1.0, "unique": 0.5, "novel": 1.0, "vun": 0.5}
        assert vun([b], [a], "lobster")["novel"] == 0.0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    triangles = Graph.from_networkx(nx.disjoint_union(nx.cycle_graph(3), nx.cycle_graph(3)))
    hexagon = Graph.from_networkx(nx.cycle_graph(6))
    assert vun([triangles, hexagon], [triangles], None) == {"valid": 0.5, "unique": 1.0, "novel": 0.5, "vun": 0.5}


def test_validity_rules_reject_what_they_should() -> None:
    """Planar: connected and planar (K5 and K3,3 are not, nor two disjoint paths). Tree: a forest or a cycle is
    not one. Lobster: a caterpillar with legs of two edges is one; a spider with three legs of three edges is a
    tree that is not (its backbone after two leaf removals is a star)."""
    from gengraph.metrics import is_valid

    two_paths = nx.disjoint_union(nx.path_graph(3), nx.path_graph(2))
    assert is_valid(nx.path_graph(5), "planar") and is_valid(nx.grid_2d_graph(3, 3), "planar")
    for g in (nx.complete_graph(5), nx.complete_bipartite_graph(3, 3), two_paths):
        assert not is_valid(g, "planar")
    for g in (two_paths, nx.cycle_graph(5)):
        assert not is_valid(g, "tree") and not is_valid(g, "lobster")
    lobster = nx.path_graph(5)
    for v in range(5):  # each backbone node gets a leg of two edges
        lobster.add_edges_from([(v, f"{v}a"), (f"{v}a", f"{v}b")])
    spider = nx.Graph(
        [(0, f"{leg}{i}") if i == 1 else (f"{leg}{i - 1}", f"{leg}{i}") for leg in "xyz" for i in (1, 2, 3)]
    )
    assert nx.is_tree(spider) and is_valid(lobster, "lobster") and is_valid(spider, "tree")
    assert not is_valid(spider, "lobster")
    assert not is_valid(nx.empty_graph(0), None) and not is_valid(nx.empty_graph(2), None)


def test_graphs_without_nodes_are_isomorphic_to_each_other() -> None:
    """Two graphs without nodes are the same graph: VF2++ (``nx.vf2pp_is_isomorphic``) answers False on them, so
    every empty generated graph counted as unique and novel (3 empty graphs against an empty training graph gave
    unique 1 and novel 1 instead of 1/3 and 0)."""
    empty, edge = Graph(n_nodes=0), Graph(n_nodes=2, edges=[[0, 1]])
    assert vun([empty, empty, empty], [empty], None) == {"valid": 0.0, "unique": 1 / 3, "novel": 0.0, "vun": 0.0}
    assert vun([empty, edge, empty], [edge], None) == {"valid": 1 / 3, "unique": 2 / 3, "novel": 2 / 3, "vun": 0.0}


def test_spectral_histograms_of_cycles_and_paths_are_analytic() -> None:
    """The normalised Laplacian of the cycle C_n has eigenvalues ``1 - cos(2 pi k / n)`` and of the path P_n
    ``1 - cos(pi k / (n - 1))``, all in ``[0, 2]``; every one is counted, including the eigenvalue 2 of the even
    cycles and paths, which ``eigvalsh`` puts a few ulps above 2 for C_6."""
    cases = [(nx.cycle_graph(n), 1 - np.cos(2 * np.pi * np.arange(n) / n)) for n in (3, 4, 5, 6, 8, 12)]
    cases += [(nx.path_graph(n), 1 - np.cos(np.pi * np.arange(n) / (n - 1))) for n in (2, 5, 6, 9)]
    rows = spectral_histograms([Graph.from_networkx(g) for g, _ in cases]).numpy()
    for row, (g, eig) in zip(rows, cases, strict=True):
        h, _ = np.histogram(np.clip(eig, 0.0, 2.0), bins=200, range=(-1e-5, 2))
        np.testing.assert_allclose(row, h / g.number_of_nodes(), atol=1e-15, err_msg=str(g))


def test_evaluate_sets_record_keys_and_values(sets) -> None:
    """The record holds the set sizes, each requested MMD (with ``_low`` / ``_high`` when bootstrapped), V.U.N.
    (novelty and V.U.N. only against a training set) and the generated graphs' mean node and edge counts."""
    from gengraph.evaluation import evaluate_sets

    ref, gen = sets
    keys = ["degree_mmd_gaussian_tv", "orbit_mmd_gaussian"]
    record = evaluate_sets(ref, gen, train=ref[:5], dataset="tree", metrics=keys, n_boot=10, seed=3)
    mmd = graph_mmd(ref, gen, keys, n_boot=10, seed=3)
    expected_vun = vun(gen, ref[:5], "tree")
    assert set(record) == {"n_reference", "n_generated", "mean_nodes", "mean_edges", *mmd, *expected_vun}
    assert {k: record[k] for k in mmd} == mmd and {k: record[k] for k in expected_vun} == expected_vun
    assert (record["n_reference"], record["n_generated"]) == (len(ref), len(gen))
    assert record["mean_nodes"] == pytest.approx(np.mean([g.n_nodes for g in gen]))
    assert record["mean_edges"] == pytest.approx(np.mean([g.number_of_edges() for g in map(Graph.to_networkx, gen)]))
    plain = evaluate_sets(ref, gen, metrics=keys)
    assert set(plain) == {"n_reference", "n_generated", "mean_nodes", "mean_edges", *keys, "valid", "unique"}


def test_vun_refuses_unknown_dataset_names_and_empty_generated_sets() -> None:
    """A misspelt set name fell back to the connectivity rule (a cycle counted as a valid "trees" graph), and an
    empty generated set was reported as 0 % valid, unique and novel."""
    from gencore.errors import ConfigError
    from gengraph.metrics import is_valid

    cycle = Graph(n_nodes=4, edges=[[0, 1], [1, 2], [2, 3], [3, 0]])
    assert vun([cycle], [], "tree")["valid"] == 0.0 and vun([cycle], [], None)["valid"] == 1.0
    with pytest.raises(ConfigError, match=r"unknown dataset 'trees' for validity; expected one of .*tree"):
        vun([cycle], [], "trees")
    with pytest.raises(ConfigError, match="unknown dataset 'Planar'"):
        is_valid(nx.cycle_graph(4), "Planar")
    with pytest.raises(InputError, match="at least one graph"):
        vun([], [cycle], "tree")
