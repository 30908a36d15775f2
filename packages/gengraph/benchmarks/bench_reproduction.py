"""Miniature reproduction of GGBall's central comparison: on community-small, ego-small and tree, degree /
clustering / orbit MMD of GGBall (hyperbolic latent) vs the Euclidean-latent ablation vs a DiGress-style
discrete diffusion baseline, all trained in the same harness with the same main-network step budget.

    python benchmarks/bench_reproduction.py OUT.json [--datasets community-small,ego-small,tree] [--steps 300]
                                                     [--work DIR] [--reuse]

Each model is trained once (seed 0) on the train split; ``FOLDS`` sampling folds (seeds 0..FOLDS-1) of as many
graphs as the test split are scored against it; the table reports mean and standard deviation over folds.
MMDs use the GraphRNN/GDSS kernels that GGBall's tables use (``*_gaussian_emd`` for degree and clustering,
``orbit_mmd_gaussian``) and the GRAN/PolyGraph Gaussian-TV ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from gengraph.datasets import load_dataset
from gengraph.experiment import RunConfig, sample_run, train_run
from gengraph.metrics import graph_mmd

FOLDS = 3
MODELS = ("ggball", "ggball-euclidean", "digress")
KEYS = (
    "degree_mmd_gaussian_emd",
    "clustering_mmd_gaussian_emd",
    "orbit_mmd_gaussian",
    "degree_mmd_gaussian_tv",
    "clustering_mmd_gaussian_tv",
    "orbit_mmd_gaussian_tv",
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--datasets", default="community-small,ego-small,tree")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--work", default="bench-reproduction-runs")
    p.add_argument("--reuse", action="store_true", help="score existing run folders instead of retraining them")
    args = p.parse_args()
    rows = []
    out = Path(args.out)
    for dataset in args.datasets.split(","):
        train, test = load_dataset(dataset, "train"), load_dataset(dataset, "test")
        for model in args.models.split(","):
            run = Path(args.work) / dataset / model
            start = time.perf_counter()
            if not (args.reuse and (run / "run.json").is_file()):
                train_run(RunConfig(model=model, dataset=dataset, steps=args.steps, progress=False), train, run)
            train_s = time.perf_counter() - start
            folds = [graph_mmd(test, sample_run(run, len(test), seed=f), KEYS) for f in range(FOLDS)]
            row = {"dataset": dataset, "model": model, "steps": args.steps, "train_s": round(train_s, 1)}
            for k in KEYS:
                vals = [f[k] for f in folds]
                row[k] = statistics.mean(vals)
                row[k + "_std"] = statistics.stdev(vals)
            print(json.dumps(row), flush=True)
            rows.append(row)
            out.write_text(json.dumps({"folds": FOLDS, "train_seed": 0, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
