"""Pairing cost per batch: semidiscrete OT (SD-FM) vs minibatch OT, as the batch grows.

The claim of semidiscrete flow matching (SD-FM; Mousavi-Hosseini et al., "Flow Matching with
Semidiscrete Couplings", arXiv:2509.25519, ICLR 2026): once the potential is
fitted, pairing a batch of ``B`` noise samples costs one max-inner-product search over the ``N`` data
points, ``O(B N D)``, linear in ``B``; minibatch OT pays ``O(B^2)`` per Sinkhorn iteration and up
to ``O(B^3)`` for the exact assignment.

Setup: ``N = 4096`` 2-D data points (8 Gaussians on a circle of radius 4, std 0.5), a potential fitted
once (its fit time and chi^2 are reported), then for ``B = 256 ... 4096`` the wall time of one call
``coupling(x0, x1)`` on a fresh noise batch ``x0 ~ N(0, I)`` and data batch ``x1`` (median over
repeats) for

- ``semidiscrete``: :class:`SemidiscreteCoupling` (eps = 0, the fitted potential);
- ``exact``: :class:`ExactOTCoupling` (the exact assignment on the ``B x B`` cost, ``optimal_assignment``);
- ``sinkhorn``: :class:`SinkhornCoupling` (eps = 0.05 x mean cost, tol 1e-4, plan sampled row-wise).

A least-squares fit of ``log time`` against ``log B`` gives each method's empirical exponent (1 for
linear, 2 for quadratic). Also reported: the mean squared pairing distance ``|x0 - x1|^2`` of each
coupling (independent pairing for reference), which is what straighter paths buy.

Run: ``python benchmarks/bench_pairing_cost.py [out.json] [threads]`` (default 2 threads, about two
minutes; see bench_sinkhorn.py on thread counts on a loaded machine).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings

import numpy as np
import torch

from gencore.command import benchmark_parser
from gencore.couplings import ExactOTCoupling, SemidiscreteCoupling, SinkhornCoupling
from gencore.io import write_json

N_DATA = 4096
BATCHES = (256, 512, 1024, 2048, 4096)
FIT_STEPS, FIT_BATCH = 1500, 1024


def eight_gaussians(n: int, generator: torch.Generator) -> torch.Tensor:
    k = torch.randint(8, (n,), generator=generator)
    angle = k * (2 * math.pi / 8)
    return 4.0 * torch.stack([angle.cos(), angle.sin()], 1) + 0.5 * torch.randn(n, 2, generator=generator)


def _repeats(method: str, b: int) -> int:
    if method == "exact":
        return 1 if b >= 2048 else 3
    if method == "sinkhorn":
        return 1 if b >= 4096 else 3
    return 7


def main(out_json: str | None = None, threads: int = 2) -> list[dict]:
    """Run the benchmark with ``threads`` intra-op threads; print the table, write ``out_json``."""
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    data = eight_gaussians(N_DATA, gen)
    sd = SemidiscreteCoupling(data)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        diag = sd.fit(FIT_STEPS, FIT_BATCH, generator=gen)
    fit_time = time.perf_counter() - t0
    couplings = {"semidiscrete": sd, "exact": ExactOTCoupling(), "sinkhorn": SinkhornCoupling(0.05, tol=1e-4)}
    for c in couplings.values():  # warm-up
        c(torch.randn(64, 2, generator=gen), data[:64], generator=gen)
    records = []
    for b in BATCHES:
        x0 = torch.randn(b, 2, generator=gen)
        x1 = data[torch.randint(N_DATA, (b,), generator=gen)]
        records.append(dict(method="independent", B=b, time_s=0.0, mean_sq_dist=float(((x0 - x1) ** 2).sum(1).mean())))
        for name, c in couplings.items():
            times = []
            for _ in range(_repeats(name, b)):
                t = time.perf_counter()
                a, p = c(x0, x1, generator=gen)
                times.append(time.perf_counter() - t)
            records.append(
                dict(
                    method=name,
                    B=b,
                    time_s=statistics.median(times),
                    repeats=len(times),
                    mean_sq_dist=float(((a - p) ** 2).sum(1).mean()),
                )
            )
    slopes = {}
    for name in couplings:
        rows = [r for r in records if r["method"] == name]
        slope, _ = np.polyfit(np.log([r["B"] for r in rows]), np.log([r["time_s"] for r in rows]), 1)
        slopes[name] = float(slope)
        for r in rows:
            r["loglog_slope"] = float(slope)
    for r in records:
        r.update(
            n_data=N_DATA,
            threads=threads,
            dim=2,
            fit_steps=FIT_STEPS,
            fit_batch=FIT_BATCH,
            fit_time_s=fit_time,
            fit_chi2=diag.chi2,
            fit_w2_ratio=diag.w2_ratio,
            fit_warnings=[str(w.message) for w in caught],
        )
    print(f"Pairing cost per batch, N = {N_DATA} 2-D data points, {torch.get_num_threads()} threads")
    print(
        f"semidiscrete potential: {FIT_STEPS} steps x {FIT_BATCH} noise in {fit_time:.1f} s, chi2 = "
        f"{diag.chi2:.4f}, unassigned = {diag.unassigned_fraction:.2%}, W2 ratio = {diag.w2_ratio:.2f}"
    )
    head = f"{'B':>5} {'method':<13} {'time [ms]':>10} {'mean |x0-x1|^2':>15}"
    print(head)
    print("-" * len(head))
    for r in records:
        print(f"{r['B']:>5} {r['method']:<13} {1e3 * r['time_s']:>10.2f} {r['mean_sq_dist']:>15.3f}")
    print("log-log slope of time vs B: " + ", ".join(f"{k} {v:.2f}" for k, v in slopes.items()))
    if out_json:
        write_json(out_json, records)
    return records


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    parser.add_argument("threads", nargs="?", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args()
    main(args.out_json, args.threads)
