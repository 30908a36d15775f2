"""Manifold flows: gencore.manifolds beside the anchors, measured side by side in the same run.

1. RFM target: our closed-form conditional velocity ``u_t = log_{x_t}(x1) / (1 - t)``
   (``gencore.manifolds.geodesic_interpolant``) vs the target as the reference code of Chen & Lipman 2024
   computes it: ``torch.func.vmap`` over ``torch.func.jvp`` of ``t -> exp_{x0}(t log_{x0}(x1))`` (autodiff
   through the geodesic), with geoopt's operations on the sphere and the ball and the wrap-around geodesic on
   the torus. Batch 4096, float32; ``max|du|`` is the largest difference of the two targets (ambient
   coordinates), ``max|du| f64`` the same in float64 (agreement up to rounding).
2. Poincare-ball operations: our ``expmap`` / ``logmap`` / ``dist`` (``gencore.manifolds.PoincareBall``: the
   ``log1p``-arcosh distance and a logarithm that reuses it) vs ``geoopt.PoincareBall``, forward and
   forward + backward, batch 65536, dim 2 and 16, float32, on interior points (wrapped normal) and on points
   within 2e-3 of geoopt's float32 clip radius ``1 - 4e-3``; ``v = log_x(y) / 2``. ``err`` / ``err_a``: each
   side's float32 result against geoopt's float64 result on the same inputs: for ``expmap`` the largest
   geodesic distance between the two points, for ``logmap`` and ``dist`` the largest relative error.

Runs are interleaved (ours, anchor, ours, ...); the table shows median wall times and
``ratio = anchor_time / our_time`` (> 1: we are faster). Timings on a shared machine are noisy.

Run: ``python benchmarks/bench_manifolds.py [out.json] [--threads N]`` (about a minute on an idle 2-core machine).
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable

import geoopt
import torch

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.manifolds import PoincareBall, Sphere, Torus, geodesic_interpolant
from gencore.manifolds.spaces import wrap_angle

REPEATS = 7


def _median_times(fns: list[Callable[[], object]], repeats: int = REPEATS) -> list[float]:
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


# ------------------------------------------------------------------------------------------ 1. RFM target
def _anchor_geodesic(name: str, dtype: torch.dtype):
    """Per-sample geodesic ``t -> exp_{x0}(t log_{x0}(x1))`` with the anchor's operations."""
    if name == "sphere":
        geo = geoopt.Sphere()
        return lambda x0, x1, t: geo.expmap(x0, t * geo.logmap(x0, x1))
    if name == "ball":
        geo = geoopt.PoincareBall(c=1.0).to(dtype)
        return lambda x0, x1, t: geo.expmap(x0, t * geo.logmap(x0, x1))
    return lambda x0, x1, t: wrap_angle(x0 + t * wrap_angle(x1 - x0))


def _jvp_target(geodesic):
    def one(x0, x1, t):
        return torch.func.jvp(lambda tt: geodesic(x0, x1, tt), (t,), (torch.ones_like(t),))

    return torch.func.vmap(one)


def bench_targets(batch: int = 4096) -> list[dict]:
    records = []
    for name, m in (("sphere", Sphere(2)), ("torus", Torus(2)), ("ball", PoincareBall(2))):
        diffs = {}
        for dtype in (torch.float64, torch.float32):
            g = torch.Generator().manual_seed(0)
            x0, x1 = m.random_base(batch, generator=g, dtype=dtype), m.random_base(batch, generator=g, dtype=dtype)
            t = torch.rand(batch, generator=g, dtype=dtype) * 0.98
            anchor = _jvp_target(_anchor_geodesic(name, dtype))

            def ours(x0=x0, x1=x1, t=t, m=m):
                return geodesic_interpolant(m, x0, x1, t)

            def ref(x0=x0, x1=x1, t=t, anchor=anchor):
                return anchor(x0, x1, t)

            (_, u_ours), (_, u_ref) = ours(), ref()
            diffs[dtype] = float((u_ours - u_ref).abs().max())
        t_ours, t_ref = _median_times([ours, ref])
        records.append(
            {
                "bench": "rfm_target",
                "case": f"{name} u_t",
                "anchor": "vmap(jvp) through geodesic",
                "ours_s": t_ours,
                "anchor_s": t_ref,
                "ratio": t_ref / t_ours,
                "max_abs_diff_f32": diffs[torch.float32],
                "max_abs_diff_f64": diffs[torch.float64],
                "batch": batch,
            }
        )
        print(f"  done: targets {name}", file=sys.stderr, flush=True)
    return records


# ------------------------------------------------------------------------------------------ 2. ball ops
def _ball_points(n: int, dim: int, regime: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if regime == "interior":
        return PoincareBall(dim).random_base(n, generator=g, dtype=torch.float64)
    d = torch.nn.functional.normalize(torch.randn(n, dim, generator=g, dtype=torch.float64), dim=-1)
    return d * (1 - 4e-3 - 2e-3 * torch.rand(n, 1, generator=g, dtype=torch.float64))


_BALL64 = PoincareBall(2).double()


def _error(op: str, out: torch.Tensor, ref: torch.Tensor) -> float:
    """expmap: largest geodesic distance to the float64 point; logmap: largest relative error of the tangent
    vector (the conformal factor cancels); dist: largest relative error."""
    out = out.double()
    if op == "expmap":
        return float(_BALL64.dist(out, ref).max())
    if op == "logmap":
        return float(((out - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)).max())
    return float(((out - ref).abs() / ref.abs().clamp_min(1e-300)).max())


def bench_ball_ops(n: int = 65536) -> list[dict]:
    records = []
    anchor_m = geoopt.PoincareBall(c=1.0)
    anchor64 = geoopt.PoincareBall(c=1.0).to(torch.float64)
    for dim in (2, 16):
        ours_m = PoincareBall(dim)
        for regime in ("interior", "boundary"):
            x64, y64 = _ball_points(n, dim, regime, 1), _ball_points(n, dim, regime, 2)
            v64 = anchor64.logmap(x64, y64) * 0.5
            x, y, v = x64.float(), y64.float(), v64.float()
            ops = {
                "expmap": (lambda m, a, b, u: m.expmap(a, u), anchor64.expmap(x64, v64)),
                "logmap": (lambda m, a, b, u: m.logmap(a, b), anchor64.logmap(x64, y64)),
                "dist": (lambda m, a, b, u: m.dist(a, b), anchor64.dist(x64, y64)),
            }
            for op, (fn, ref64) in ops.items():
                for mode in ("forward", "backward"):

                    def run(m, fn=fn, mode=mode, x=x, y=y, v=v):
                        if mode == "forward":
                            with torch.no_grad():
                                return fn(m, x, y, v)
                        a, b, u = (z.detach().requires_grad_(True) for z in (x, y, v))
                        out = fn(m, a, b, u)
                        out.sum().backward()
                        return out

                    out_ours, out_anchor = run(ours_m), run(anchor_m)
                    t_ours, t_anchor = _median_times(
                        [lambda run=run, m=ours_m: run(m), lambda run=run, m=anchor_m: run(m)]
                    )
                    rec = {
                        "bench": "ball_ops",
                        "case": f"{op} {mode} d={dim} {regime}",
                        "anchor": "geoopt.PoincareBall",
                        "ours_s": t_ours,
                        "anchor_s": t_anchor,
                        "ratio": t_anchor / t_ours,
                        "err_ours": _error(op, out_ours.detach(), ref64),
                        "err_anchor": _error(op, out_anchor.detach(), ref64),
                        "batch": n,
                    }
                    records.append(rec)
            print(f"  done: ball ops d={dim} {regime}", file=sys.stderr, flush=True)
    return records


def main(out_json: str | None = None, threads: int = 2) -> list[dict]:
    torch.set_num_threads(threads)
    records = bench_targets() + bench_ball_ops()
    meta = {
        "torch": torch.__version__,
        "geoopt": geoopt.__version__,
        "python": platform.python_version(),
        "threads": threads,
    }
    for r in records:
        r.update(meta)
    _print(records)
    if out_json:
        write_json(out_json, records)
    return records


def _print(records: list[dict]) -> None:
    head = f"{'case':<34} {'anchor':<28} {'ours s':>9} {'anchor s':>9} {'ratio':>6} {'agreement / error':>30}"
    print(head)
    print("-" * len(head))
    for r in records:
        if r["bench"] == "rfm_target":
            extra = f"max|du| f32 {r['max_abs_diff_f32']:.1e} f64 {r['max_abs_diff_f64']:.1e}"
        else:
            extra = f"err {r['err_ours']:.1e} err_a {r['err_anchor']:.1e}"
        print(
            f"{r['case']:<34} {r['anchor']:<28} {r['ours_s']:>9.4f} {r['anchor_s']:>9.4f} {r['ratio']:>6.2f} "
            f"{extra:>30}"
        )


if __name__ == "__main__":
    parser = benchmark_parser(__doc__)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    args = parser.parse_args()
    main(args.out_json, threads=args.threads)
