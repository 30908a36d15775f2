"""Toy MDP: return-distribution error of C51, IQN and Value Flows against the analytic bimodal law.

Usage: ``python bench_toy_critics.py OUT.json [--steps 3000] [--seeds 0,1,2]``. Every critic trains with
the same network width, optimiser, batches and seed (see :mod:`genrl.toy_experiment`); the table reports
W1, expected CRPS (its floor is the true law's own CRPS), the correlation of the estimated with the true
return variance, and training time (noisy on a shared CPU).
"""

from __future__ import annotations

import argparse
import statistics
import time

from gencore.io import write_json
from gencore.tables import format_table
from genrl.toy_experiment import CRITICS, ToyCriticConfig, train_toy_critic


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--hidden", type=int, default=128)
    args = p.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    records = []
    t0 = time.perf_counter()
    for seed in seeds:
        for name in CRITICS:
            _, rec = train_toy_critic(name, ToyCriticConfig(steps=args.steps, seed=seed, hidden=args.hidden))
            records.append({"seed": seed, **rec})
            print(format_table([records[-1]]), flush=True)
    keys = ("w1", "crps", "crps_floor", "var_corr", "var_corr_samples", "train_s")
    summary = []
    for name in CRITICS:
        rs = [r for r in records if r["critic"] == name]
        row = {"critic": name, "steps": args.steps, "seeds": len(rs)}
        for k in keys:
            vals = [r[k] for r in rs if k in r]
            if vals:
                row[k] = statistics.mean(vals)
        summary.append(row)
    print(format_table(summary, markdown=True))
    write_json(args.out, {"records": records, "summary": summary, "wall_s": time.perf_counter() - t0})


if __name__ == "__main__":
    main()
