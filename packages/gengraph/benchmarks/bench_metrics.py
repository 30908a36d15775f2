"""Graph-MMD suite time at 40, 200 and 1000 graphs per set: gengraph (batched descriptors, one ``cdist`` per Gram
matrix) vs the reference implementation pattern (GraphRNN/GRAN: networkx descriptors per graph, a Python loop
over every pair of graphs calling the kernel, EMD per pair) vs polygraph-benchmark's GaussianTV kernels.

    python benchmarks/bench_metrics.py OUT.json

The per-pair loop is timed on the first 200 x 200 pairs and extrapolated quadratically above that (marked
``extrapolated``); the ORCA binary is not available here, so the reference pattern counts orbits per graph with
``orbit-count``'s single-graph call. Wall-clock numbers on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import json
import time

import networkx as nx
import numpy as np
import orbit_count
from scipy.stats import wasserstein_distance

from gencore.command import benchmark_parser
from gengraph.datasets import generate
from gengraph.metrics import graph_mmd

SIZES = (40, 200, 1000)
LOOP_CAP = 200


def _ref_descriptors(graphs: list[nx.Graph]) -> dict[str, list[np.ndarray]]:
    out: dict[str, list[np.ndarray]] = {"degree": [], "clustering": [], "orbit": [], "spectral": []}
    for g in graphs:
        out["degree"].append(np.array(nx.degree_histogram(g), dtype=float) / g.number_of_nodes())
        h, _ = np.histogram(list(nx.clustering(g).values()), bins=100, range=(0.0, 1.0))
        out["clustering"].append(h / max(h.sum(), 1))
        out["orbit"].append(np.asarray(orbit_count.node_orbit_counts(g, graphlet_size=4), dtype=float).mean(0))
        ev = np.linalg.eigvalsh(nx.normalized_laplacian_matrix(g).toarray())
        h, _ = np.histogram(ev, bins=200, range=(-1e-5, 2))
        out["spectral"].append(h / h.sum())
    return out


def _tv(x, y, sigma):
    n = max(len(x), len(y))
    x, y = np.pad(x, (0, n - len(x))), np.pad(y, (0, n - len(y)))
    return np.exp(-((np.abs(x - y).sum() / 2) ** 2) / (2 * sigma**2))


def _emd(x, y, sigma, scale):
    n = max(len(x), len(y))
    x, y = np.pad(x, (0, n - len(x))), np.pad(y, (0, n - len(y)))
    support = np.arange(n) / scale
    return np.exp(-(wasserstein_distance(support, support, x, y) ** 2) / (2 * sigma**2))


REF_KERNELS = {
    "degree_mmd_gaussian_tv": ("degree", lambda a, b: _tv(a, b, 1.0)),
    "degree_mmd_gaussian_emd": ("degree", lambda a, b: _emd(a, b, 1.0, 1.0)),
    "clustering_mmd_gaussian_tv": ("clustering", lambda a, b: _tv(a, b, 0.1)),
    "clustering_mmd_gaussian_emd": ("clustering", lambda a, b: _emd(a, b, 0.1, 100.0)),
    "orbit_mmd_gaussian_tv": ("orbit", lambda a, b: _tv(a, b, 30.0)),
    "spectral_mmd_gaussian_tv": ("spectral", lambda a, b: _tv(a, b, 1.0)),
}


def reference_pattern(ref: list[nx.Graph], gen: list[nx.Graph]) -> tuple[float, bool, dict[str, float]]:
    """Seconds for the loop pattern (extrapolated above LOOP_CAP graphs), and its MMDs when not extrapolated."""
    start = time.perf_counter()
    dr, dg = _ref_descriptors(ref), _ref_descriptors(gen)
    desc_time = time.perf_counter() - start
    n = len(ref)
    m = min(n, LOOP_CAP)
    values = {}
    start = time.perf_counter()
    for key, (d, k) in REF_KERNELS.items():
        xs, ys = dr[d][:m], dg[d][:m]
        kxx = np.mean([k(a, b) for a in xs for b in xs])
        kyy = np.mean([k(a, b) for a in ys for b in ys])
        kxy = np.mean([k(a, b) for a in xs for b in ys])
        values[key] = kxx + kyy - 2 * kxy
    loop_time = (time.perf_counter() - start) * (n / m) ** 2
    return desc_time + loop_time, n > m, values


def polygraph_time(ref: list[nx.Graph], gen: list[nx.Graph]) -> float | None:
    try:
        from polygraph.utils import descriptors as d
        from polygraph.utils.kernels import GaussianTV
        from polygraph.utils.mmd_utils import mmd_from_gram
    except ImportError:
        return None
    start = time.perf_counter()
    for desc, bw in (
        (d.SparseDegreeHistogram(), 1.0),
        (d.ClusteringHistogram(bins=100), 0.1),
        (d.OrbitCounts(), 30.0),
        (d.EigenvalueHistogram(), 1.0),
    ):
        k = GaussianTV(desc, bw=bw)
        fr, fg = k.featurize(ref), k.featurize(gen)
        mmd_from_gram(k.pre_gram_block(fr, fr), k.pre_gram_block(fg, fg), k.pre_gram_block(fr, fg), "biased")
    return time.perf_counter() - start


def main(out_path: str) -> None:
    rows = []
    keys = list(REF_KERNELS)
    warm = [g.to_networkx() for g in generate("community-small", 4, seed=0)]
    polygraph_time(warm, warm)  # numba compiles polygraph's sparse kernels on first use: not timed
    graph_mmd(generate("community-small", 4, seed=0), generate("community-small", 4, seed=1), keys)
    for n in SIZES:
        ref = generate("community-small", n, seed=1)
        gen = generate("community-small", n, seed=2)
        start = time.perf_counter()
        ours = graph_mmd(ref, gen, keys)
        ours_time = time.perf_counter() - start
        rn, gn = [g.to_networkx() for g in ref], [g.to_networkx() for g in gen]
        ref_time, extrapolated, ref_values = reference_pattern(rn, gn)
        poly = polygraph_time(rn, gn)
        max_diff = None if extrapolated else max(abs(ours[k] - ref_values[k]) for k in keys)
        row = {
            "graphs_per_set": n,
            "gengraph_s": round(ours_time, 3),
            "reference_loops_s": round(ref_time, 2),
            "reference_extrapolated": extrapolated,
            "polygraph_tv_s": None if poly is None else round(poly, 3),
            "speedup_vs_loops": round(ref_time / ours_time, 1),
            "max_abs_diff_vs_loops": None if max_diff is None else float(max_diff),
        }
        print(row, flush=True)
        rows.append(row)
    with open(out_path, "w") as f:
        json.dump(
            {"benchmark": "graph MMD suite (6 kernel-named metrics; polygraph: its 4 GaussianTV)", "rows": rows},
            f,
            indent=2,
        )


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_metrics.json")
    args = parser.parse_args()
    main(args.out_json)
