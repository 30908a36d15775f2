"""The exact assignment solvers behind :func:`gencore.couplings.optimal_assignment`, side by side.

For minibatch OT the cost is ``C_ij = |x0_i - x1_j|^2`` between ``n`` standard-normal noise points and ``n``
data points. Data sets: ``gaussian`` (N(0, I) in 2-D, no structure), ``8gaussians`` and ``checkerboard``
(gencore's 2-D toys: clustered, many near-tied costs) and ``clusters-64d`` (10 Gaussian clusters in 64-D).
Both solvers run on the same matrix (float64, one thread), best of ``repeats`` wall times:

- ``augmenting-path``: scipy's ``linear_sum_assignment`` (Crouse 2016);
- ``network-simplex``: POT's ``ot.emd`` on uniform weights, its plan read as a permutation.

Each record also checks that both reach the same total cost (both are exact). ``auto`` uses the network
simplex from ``NETWORK_SIMPLEX_MIN_SIZE`` rows on.

Run: ``python benchmarks/bench_assignment.py [out.json]`` (one thread, about a minute).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from gencore.command import benchmark_parser
from gencore.couplings import optimal_assignment, sq_euclidean_cost
from gencore.couplings.assignment import NETWORK_SIMPLEX_MIN_SIZE
from gencore.data import toy_dataset
from gencore.io import write_json

SIZES = (64, 256, 1024)
DATASETS = ("gaussian", "8gaussians", "checkerboard", "clusters-64d")
METHODS = ("augmenting-path", "network-simplex")


def _data(name: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    if name == "gaussian":
        return torch.randn(n, 2, generator=g), torch.randn(n, 2, generator=g)
    if name == "clusters-64d":
        centres = 3.0 * torch.randn(10, 64, generator=g)
        x1 = centres[torch.randint(0, 10, (n,), generator=g)] + 0.3 * torch.randn(n, 64, generator=g)
        return torch.randn(n, 64, generator=g), x1
    return torch.randn(n, 2, generator=g), toy_dataset(name, n, seed=n)


def _best_ms(cost: np.ndarray, method: str, repeats: int) -> tuple[float, float]:
    times, total = [], 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        sigma = optimal_assignment(cost, method=method)
        times.append(time.perf_counter() - start)
        total = float(cost[np.arange(len(sigma)), sigma].sum())
    return 1e3 * min(times), total


def main(out_json: str | None = None) -> list[dict]:
    torch.set_num_threads(1)
    optimal_assignment(np.zeros((2, 2)), method="network-simplex")  # POT's import outside the timings
    records = []
    for name in DATASETS:
        for n in SIZES:
            x0, x1 = _data(name, n)
            cost = sq_euclidean_cost(x0.double(), x1.double()).numpy()
            repeats = 5 if n <= 256 else 3
            row: dict = {"data": name, "n": n, "dim": int(x1.shape[1]), "repeats": repeats}
            for method in METHODS:
                row[f"{method}_ms"], row[f"{method}_cost"] = _best_ms(cost, method, repeats)
            row["speedup"] = row["augmenting-path_ms"] / row["network-simplex_ms"]
            row["same_cost"] = bool(np.isclose(row["augmenting-path_cost"], row["network-simplex_cost"], rtol=1e-12))
            row["auto"] = "network-simplex" if n >= NETWORK_SIMPLEX_MIN_SIZE else "augmenting-path"
            records.append(row)
            print(
                f"{name:<14} n={n:<5} augmenting path {row['augmenting-path_ms']:8.2f} ms   network simplex "
                f"{row['network-simplex_ms']:8.2f} ms   ratio {row['speedup']:5.2f}   same cost {row['same_cost']}"
            )
    if out_json:
        write_json(out_json, {"loadavg_1min": round(os.getloadavg()[0], 2), "records": records})
    return records


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    args = parser.parse_args()
    main(args.out_json)
