"""Poincare-ball operations: gengraph's origin maps, pairwise distances and gyromidpoint vs geoopt's, in time
(forward + backward) and in float32 accuracy near the boundary (against a float64 evaluation of the same
formula's exact value).

    python benchmarks/bench_ball.py OUT.json
"""

from __future__ import annotations

import json
import time

import geoopt
import torch

from gencore.command import benchmark_parser
from gengraph.hyperbolic import BallGeometry


def _time(fn, reps: int = 20) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps * 1e3


def main(out_path: str) -> None:
    torch.manual_seed(0)
    ours, ref = BallGeometry(16), geoopt.PoincareBall(c=1.0)
    u = torch.randn(4096, 16, requires_grad=True)
    x = ours.expmap0(torch.randn(512, 16) * 2).detach().requires_grad_(True)
    y = ours.expmap0(torch.randn(512, 16) * 2).detach()

    def fb(f):
        def run():
            out = f()
            out.sum().backward()

        return run

    rows = [
        {
            "op": "expmap0 [4096,16]",
            "gengraph_ms": _time(fb(lambda: ours.expmap0(u))),
            "geoopt_ms": _time(fb(lambda: ref.expmap0(u))),
        },
        {
            "op": "logmap0 [512,16]",
            "gengraph_ms": _time(fb(lambda: ours.logmap0(x))),
            "geoopt_ms": _time(fb(lambda: ref.logmap0(x))),
        },
        {
            "op": "pairwise dist 512x512",
            "gengraph_ms": _time(fb(lambda: ours.pairwise_dist(x, y))),
            "geoopt_ms": _time(fb(lambda: ref.dist(x[:, None], y[None]))),
        },
        {
            "op": "mobius_add [512,16]",
            "gengraph_ms": _time(fb(lambda: ours.mobius_add(x, y))),
            "geoopt_ms": _time(fb(lambda: ref.mobius_add(x, y))),
        },
    ]
    # float32 accuracy near the boundary: points at sqrt(c)|x| = 1 - 1e-3 .. 1 - 5e-3, distances of nearby pairs
    r = 1 - torch.logspace(-3, -2.3, 256, dtype=torch.float64)
    dirs = torch.nn.functional.normalize(torch.randn(256, 16, dtype=torch.float64), dim=-1)
    a64 = dirs * r[:, None]
    b64 = torch.nn.functional.normalize(a64 + 1e-3 * torch.randn(256, 16, dtype=torch.float64), dim=-1) * r[:, None]
    exact = BallGeometry(16).double().manifold.dist(a64, b64)
    a32, b32 = a64.float(), b64.float()
    err_ours = ((BallGeometry(16).manifold.dist(a32, b32).double() - exact).abs() / exact).max().item()
    err_geo = ((ref.dist(a32, b32).double() - exact).abs() / exact).max().item()
    rows.append({"op": "float32 dist rel. error near boundary (max)", "gengraph": err_ours, "geoopt": err_geo})
    for row in rows:
        print(row)
    with open(out_path, "w") as f:
        json.dump({"benchmark": "Poincare-ball ops vs geoopt (ms per forward+backward)", "rows": rows}, f, indent=2)


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_ball.json")
    args = parser.parse_args()
    main(args.out_json)
