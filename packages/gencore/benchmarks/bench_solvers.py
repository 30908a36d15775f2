"""ODE solvers: gencore.solvers vs torchdiffeq.odeint (anchor), measured side by side.

Sampling a random-init ``gencore.nn.MLPVelocity(dim, hidden=256, depth=3)`` from ``t = 0`` to ``t = 1``
for a batch of 4096 N(0, I) points, under ``torch.no_grad()``:

- fixed step: ``solve_ode(f, x0, steps=n, method="euler" | "rk4")`` vs
  ``torchdiffeq.odeint(func, x0, [0, 1], method="euler" | "rk4", options={"step_size": 1/n})``
  (Chen et al. 2018; torchdiffeq's "rk4" is Kutta's 3/8 rule, ours the classical rule: same order and
  NFE, final states differ by O(h^4));
- adaptive: ``dopri5(f, x0, rtol=tol, atol=tol)`` vs ``odeint(..., method="dopri5", rtol=tol, atol=tol)``;
- accuracy: ``err`` / ``err_a`` are the max abs errors of each side on the first 256 rows against a
  float64 dopri5 solve at ``rtol = atol = 1e-8`` (the batch shares one step size, so a subset is still
  solved exactly). Our dopri5 uses the standard Hairer / scipy controller, which may shrink the step after
  an accepted step; torchdiffeq never shrinks after acceptance, so at equal tolerance it can take fewer
  steps with a larger error;
- overhead: our Euler against a bare Python loop of ``n`` model calls (``x = x + h * model(x, t_i)``);
  target: within 5 %.

Runs are interleaved (ours, anchor, ours, ...) so machine drift hits both sides; the table reports the
median wall time (and ``ratio_min`` from the fastest runs, robust to a busy machine), the NFE of
each side, the max abs difference of the final states and
``ratio = anchor_time / our_time`` (> 1: we are faster).

Run: ``python benchmarks/bench_solvers.py [out.json] [--threads N]`` (2 threads by default, about two
minutes on an idle 2-core machine; on a shared, oversubscribed machine ``--threads 1`` gives far steadier
timings, since OpenMP threads then stop fighting other processes for cores).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.nn import MLPVelocity
from gencore.solvers import dopri5, solve_ode

BATCH = 4096
DIMS = (2, 64)
FIXED = (("euler", 32), ("rk4", 8))
TOLS = (1e-3, 1e-4)
REPEATS = 5
N_REF = 256  # rows checked against a float64 reference solve (dopri5, rtol = atol = 1e-8)


class Counted:
    """Wrap ``model(x, t)`` as both ``f(x, t)`` (ours) and ``func(t, x)`` (torchdiffeq), counting calls."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.calls = model, 0

    def ours(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.model(x, t)

    def anchor(self, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.model(x, t)


def _timed(fn: Callable[[], torch.Tensor]) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _compare(
    name: str,
    ours: Callable[[], torch.Tensor],
    anchor: Callable[[], torch.Tensor],
    counter: Counted,
    ref: torch.Tensor | None = None,
    repeats: int = REPEATS,
) -> dict:
    """Warm up once, then interleave ``repeats`` runs of each side; NFE from the last run of each."""
    ours(), anchor()
    t_ours, t_anchor = [], []
    for _ in range(repeats):
        counter.calls = 0
        dt, x_ours = _timed(ours)
        t_ours.append(dt)
        nfe_ours = counter.calls
        counter.calls = 0
        dt, x_anchor = _timed(anchor)
        t_anchor.append(dt)
        nfe_anchor = counter.calls
    m_ours, m_anchor = statistics.median(t_ours), statistics.median(t_anchor)
    errs = {}
    if ref is not None:
        errs = {
            "err_ours": float((x_ours[: len(ref)].double() - ref).abs().max()),
            "err_anchor": float((x_anchor[: len(ref)].double() - ref).abs().max()),
        }
    return {
        "case": name,
        "ours_s": m_ours,
        "anchor_s": m_anchor,
        "ratio": m_anchor / m_ours,
        "ours_min_s": min(t_ours),
        "anchor_min_s": min(t_anchor),
        "ratio_min": min(t_anchor) / min(t_ours),
        "nfe_ours": nfe_ours,
        "nfe_anchor": nfe_anchor,
        "max_abs_diff": float((x_ours - x_anchor).abs().max()),
        **errs,
    }


@torch.no_grad()
def _bench_dim(dim: int) -> list[dict]:
    """All cases for one ``MLPVelocity(dim)``; each record names its anchor."""
    from torchdiffeq import odeint

    torch.manual_seed(0)
    model = MLPVelocity(dim, hidden=256, depth=3).eval().requires_grad_(False)
    x0 = torch.randn(BATCH, dim, generator=torch.Generator().manual_seed(1))
    c = Counted(model)
    span = torch.tensor([0.0, 1.0])
    m64 = MLPVelocity(dim, hidden=256, depth=3).double()
    m64.load_state_dict(model.state_dict())
    ref = dopri5(lambda x, t: m64(x, t), x0[:N_REF].double(), rtol=1e-8, atol=1e-8).x
    records: list[dict] = []

    def add(anchor: str, rec: dict) -> dict:
        records.append({"dim": dim, "batch": BATCH, "anchor": anchor, **rec})
        print(f"  done: dim={dim} {rec['case']}", file=sys.stderr, flush=True)
        return records[-1]

    for method, n in FIXED:
        ours = lambda method=method, n=n: solve_ode(c.ours, x0, steps=n, method=method).x  # noqa: E731
        opts = {"step_size": 1.0 / n}
        anchor = lambda method=method, opts=opts: odeint(c.anchor, x0, span, method=method, options=opts)[-1]  # noqa: E731
        add("torchdiffeq", _compare(f"{method} n={n}", ours, anchor, c, ref))
    for tol in TOLS:
        ours = lambda tol=tol: dopri5(c.ours, x0, 0.0, 1.0, rtol=tol, atol=tol).x  # noqa: E731
        anchor = lambda tol=tol: odeint(c.anchor, x0, span, method="dopri5", rtol=tol, atol=tol)[-1]  # noqa: E731
        add("torchdiffeq", _compare(f"dopri5 tol={tol:g}", ours, anchor, c, ref))

    # Fixed-step overhead: our Euler vs a bare loop of model calls on the same grid.
    n = 32
    grid = torch.linspace(0.0, 1.0, n + 1)
    ts, hs = grid.unbind(0), grid.diff().unbind(0)

    def bare() -> torch.Tensor:
        x = x0
        for i in range(n):
            c.calls += 1
            x = x + hs[i] * model(x, ts[i])
        return x

    rec = add(
        "bare loop",
        _compare(f"euler n={n} vs bare loop", lambda: solve_ode(c.ours, x0, grid).x, bare, c, repeats=2 * REPEATS),
    )
    rec["overhead_pct"] = 100.0 * (rec["ours_s"] / rec["anchor_s"] - 1.0)
    rec["overhead_min_pct"] = 100.0 * (rec["ours_min_s"] / rec["anchor_min_s"] - 1.0)
    return records


def main(out_json: str | None = None, threads: int = 2) -> list[dict]:
    """Run every case; ``threads`` is the intra-op thread count (2 = the suite's reference machine)."""
    torch.set_num_threads(threads)
    records = [r for dim in DIMS for r in _bench_dim(dim)]
    meta = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
    }
    for r in records:
        r.update(meta)
    _print(records)
    if out_json:
        write_json(out_json, records)
    return records


def _print(records: list[dict]) -> None:
    head = (
        f"{'dim':>4} {'case':<26} {'anchor':<12} {'ours s':>8} {'anchor s':>9} {'ratio':>6} "
        f"{'r_min':>6} {'nfe':>5} {'nfe_a':>6} {'max|dx|':>9} {'err':>9} {'err_a':>9}"
    )
    print(head)
    print("-" * len(head))
    for r in records:
        if "err_ours" in r:
            extra = f" {r['err_ours']:>9.2e} {r['err_anchor']:>9.2e}"
        else:
            extra = ""
            if "overhead_pct" in r:
                extra = f"  overhead {r['overhead_pct']:+.1f}% (min {r['overhead_min_pct']:+.1f}%)"
        print(
            f"{r['dim']:>4} {r['case']:<26} {r['anchor']:<12} {r['ours_s']:>8.3f} {r['anchor_s']:>9.3f} "
            f"{r['ratio']:>6.2f} {r['ratio_min']:>6.2f} {r['nfe_ours']:>5} {r['nfe_anchor']:>6} "
            f"{r['max_abs_diff']:>9.2e}{extra}"
        )


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    args = parser.parse_args()
    main(args.out_json, threads=args.threads)
