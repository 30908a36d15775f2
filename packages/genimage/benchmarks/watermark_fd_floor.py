"""FD-EffLite0's spread between independent unmarked sets of one run: the yardstick for ``--fd``.

    python watermark_fd_floor.py RUN OUT.json [--n 256] [--sets 6] [--steps 20]

``genimage watermark evaluate --fd`` reports, per scheme, FD-EffLite0 between the marked set and a reference
set of ``n`` unmarked images, and the same for an unmarked set (``fd_efflite0_unmarked``). That floor is one
draw. Here ``sets`` unmarked sets of ``n`` images are sampled from independent noise (on the harness's grid,
20 Euler steps) and FD is computed for every pair, so a marked set's FD can be read against the spread of FD
with no mark at all. Records: ``i, j, fd_efflite0``, and a summary (mean, standard deviation, min, max).
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import torch

from gencore.io import write_json
from genimage.metrics.efflite import efflite0_features
from genimage.metrics.frechet import frechet_distance
from genimage.watermark.generators import RunGenerator


def measure(run: str, n: int = 256, sets: int = 6, steps: int = 20, seed: int = 1000) -> dict:
    gen = RunGenerator(run, steps=steps, solver="euler", device="cpu")
    features = []
    for k in range(sets):
        noise = torch.randn(n, *gen.noise_shape, generator=torch.Generator().manual_seed(seed + k))
        images = torch.cat([gen.generate(noise[i : i + 64]) for i in range(0, n, 64)])
        features.append(efflite0_features(images))
        print(f"set {k + 1}/{sets} sampled", flush=True)
    records = [
        {"i": i, "j": j, "fd_efflite0": frechet_distance(features[i], features[j])}
        for i, j in itertools.combinations(range(sets), 2)
    ]
    values = [r["fd_efflite0"] for r in records]
    summary = {
        "run": run,
        "n": n,
        "sets": sets,
        "steps": steps,
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values),
        "min": min(values),
        "max": max(values),
    }
    return {"summary": summary, "records": records}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--sets", type=int, default=6)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if args.sets < 2 or args.n < 2:
        parser.error("--sets and --n must be at least 2.")
    result = measure(args.run, n=args.n, sets=args.sets, steps=args.steps)
    write_json(args.out, result)
    s = result["summary"]
    print(
        f"FD-EffLite0 between {s['sets']} independent unmarked sets of {s['n']}: mean {s['mean']:.2f}, "
        f"sd {s['std']:.2f}, range {s['min']:.2f}-{s['max']:.2f} ({len(result['records'])} pairs); wrote {args.out}"
    )


if __name__ == "__main__":
    main()
