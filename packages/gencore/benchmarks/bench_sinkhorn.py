"""Entropic OT: gencore.couplings.sinkhorn vs POT (anchor), measured side by side.

Problem: ``n`` points ``x ~ N(0, I_2)`` against ``n`` points ``y ~ 1.5 N(0, I_2) + 1`` (float32,
torch tensors), uniform weights, squared-Euclidean cost, ``epsilon = 0.05 * mean(C)`` for every
solver, at ``n = 256, 1024, 4096``.

- ours: ``sinkhorn(cost=C, epsilon=eps, tol=1e-6, return_plan=True)`` (absorption engine with
  epsilon scaling; stops on the L1 column-marginal error, checked every 10 iterations);
- ours without epsilon scaling (``eps_scaling=None``), which suits this moderate epsilon;
- ours, low memory: ``sinkhorn(x=x, y=y, ..., low_memory=True, eps_scaling=None)`` (potentials only,
  cost exponents recomputed from the points per chunk; the plan is not built);
- POT ``ot.sinkhorn(a, b, C, eps, method="sinkhorn_log", stopThr=1e-6)`` and ``method="sinkhorn"``
  (torch backend: POT dispatches on the torch tensors). POT stops on the L2 norm of the column-marginal
  error, also checked every 10 iterations; L2 <= L1, so its stopping rule is the looser one.

"Equal accuracy" is checked, not assumed: for every run the plan's L1 column and row marginal errors
are measured afterwards in float64 and reported (for the low-memory run, from the dense plan rebuilt
from its potentials outside the timing). The table reports the median wall time over repeats,
iterations, those errors and ``ratio = POT_log_time / our_time`` (> 1: we are faster). Plain
``ot.sinkhorn`` iterates matrix-vector products with the kernel ``exp(-C / eps)`` (memory-bound, no
log-domain stabilisation): fast, and fine at this epsilon, but its kernel underflows entirely in
float32 once ``eps`` falls below ~1/87 of the row-wise smallest costs, where it returns NaN; the
log-domain ``sinkhorn_log`` is the stable anchor. Its results are reported as they come.

Run: ``python benchmarks/bench_sinkhorn.py [out.json] [threads]`` (default 2 threads, about two
minutes). On a shared, loaded 2-core machine the 2-thread timings of small problems are dominated by
OpenMP barrier waits (a tiny op can take milliseconds); ``threads=1`` gives steadier numbers there.
"""

from __future__ import annotations

import math
import platform
import statistics
import time
import warnings
from collections.abc import Callable

import ot
import torch

from gencore.command import benchmark_parser
from gencore.couplings import sinkhorn
from gencore.couplings.base import sq_euclidean_cost
from gencore.io import write_json

SIZES = (256, 1024, 4096)
REPEATS = {64: 1, 256: 7, 1024: 5, 4096: 3}
REL_EPS = 0.05
OUR_TOL = 1e-6  # L1: stricter than POT's rule, so our plans are at least as accurate
POT_TOL = 1e-6  # L2 (POT's criterion)
MAX_ITERS = 10_000


def _errors(plan: torch.Tensor, n: int) -> tuple[float, float]:
    p = plan.double()
    col = float((p.sum(0) - 1.0 / n).abs().sum())
    row = float((p.sum(1) - 1.0 / n).abs().sum())
    return col, row


def _timed(fn: Callable[[], object], repeats: int) -> tuple[float, object, int]:
    """Median wall time over ``repeats`` runs (a single run when the first takes over 5 s)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        if times[0] > 5.0:
            break
    return statistics.median(times), out, len(times)


def _pot(method: str, a: torch.Tensor, cost: torch.Tensor, eps: float):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, log = ot.sinkhorn(a, a, cost, eps, method=method, numItermax=MAX_ITERS, stopThr=POT_TOL, log=True)
    return plan, int(log["niter"])


def _run_size(n: int) -> list[dict]:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 2, generator=g)
    y = torch.randn(n, 2, generator=g) * 1.5 + 1.0
    cost = sq_euclidean_cost(x, y)
    eps = REL_EPS * float(cost.mean())
    a = torch.full((n,), 1.0 / n)

    def ours(**kw):
        res = sinkhorn(cost=cost, epsilon=eps, tol=OUR_TOL, max_iters=MAX_ITERS, return_plan=True, **kw)
        return res.plan, res.n_iters

    def ours_low(**kw):
        res = sinkhorn(x=x, y=y, epsilon=eps, tol=OUR_TOL, max_iters=MAX_ITERS, low_memory=True, **kw)
        # the dense plan is rebuilt from the potentials outside the timing, only to measure errors
        return (res.f, res.g), res.n_iters

    solvers = {
        "gencore.sinkhorn": ours,
        "gencore.sinkhorn(eps_scaling=None)": lambda: ours(eps_scaling=None),
        "gencore.sinkhorn(low_memory)": lambda: ours_low(eps_scaling=None),
        "POT ot.sinkhorn(sinkhorn_log)": lambda: _pot("sinkhorn_log", a, cost, eps),
        "POT ot.sinkhorn(sinkhorn)": lambda: _pot("sinkhorn", a, cost, eps),
    }
    records = []
    for name, fn in solvers.items():
        t, (out, n_iters), runs = _timed(fn, REPEATS[n])
        if isinstance(out, tuple):
            f, g_pot = out
            out = torch.exp((f[:, None].double() + g_pot[None, :].double() - cost.double()) / eps) / (n * n)
        col, row = _errors(out, n)
        records.append(dict(solver=name, n_iters=n_iters, time_s=t, repeats=runs, col_err_l1=col, row_err_l1=row))
    t_anchor = next(r["time_s"] for r in records if r["solver"] == "POT ot.sinkhorn(sinkhorn_log)")
    for r in records:
        r.update(n=n, dim=2, epsilon=eps, ratio_pot_log_over_this=t_anchor / r["time_s"])
    return records


def main(out_json: str | None = None, threads: int = 2) -> list[dict]:
    """Run the benchmark with ``threads`` intra-op threads; print the table, write ``out_json``."""
    torch.set_num_threads(threads)
    records = []
    _run_size(64)  # warm-up: first-call costs (thread pools, MKL, POT backend dispatch) stay out of the table
    for n in SIZES:
        records.extend(_run_size(n))
    for r in records:
        r["threads"] = threads
    print(
        f"Sinkhorn, 2-D Gaussian clouds, eps = {REL_EPS} x mean cost, float32, "
        f"{torch.get_num_threads()} threads"
        f" ({platform.processor() or platform.machine()}, torch {torch.__version__}, POT {ot.__version__})"
    )
    head = (
        f"{'n':>5} {'solver':<34} {'time [s]':>9} {'iters':>6} {'col err L1':>11} {'row err L1':>11} "
        f"{'POT_log/this':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in records:
        col = "nan" if math.isnan(r["col_err_l1"]) else f"{r['col_err_l1']:.2e}"
        row = "nan" if math.isnan(r["row_err_l1"]) else f"{r['row_err_l1']:.2e}"
        print(
            f"{r['n']:>5} {r['solver']:<34} {r['time_s']:>9.3f} {r['n_iters']:>6} {col:>11} {row:>11} "
            f"{r['ratio_pot_log_over_this']:>12.2f}"
        )
    if out_json:
        write_json(out_json, records)
    return records


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    parser.add_argument("threads", nargs="?", type=int, default=2, help="torch CPU threads (default 2)")
    args = parser.parse_args()
    main(args.out_json, args.threads)
