"""Temporal SAE vs TopK on the synthetic slow-state + event sequences, over slow-state kinds and seeds.

    python bench_temporal_synthetic.py OUT.json [--steps 150] [--seeds 0,1,2]
        [--settings dictionary:3,dictionary:1,continuous:3,continuous:1]

Each setting is ``slow_states:slow_scale`` (:func:`geninterp.temporal_experiments.slow_events_sequences`);
for each seed both SAEs are trained on the same store by
:func:`~geninterp.temporal_experiments.boundary_auroc` (width 256, k = 8). Prints mean +- sd over the
seeds of the boundary AUROCs and of the slow-state variance shares of the parts each SAE splits a
token into, and writes every record to ``OUT.json``.
"""

from __future__ import annotations

import argparse

from gencore.io import write_json
from gencore.tables import format_table, mean_sd
from geninterp.temporal_experiments import boundary_auroc

COLUMNS = (
    "topk_boundary_auroc",
    "temporal_boundary_auroc",
    "topk_persistent_state_share",
    "topk_transient_state_share",
    "temporal_pred_state_share",
    "temporal_novel_state_share",
    "topk_persistent_latents",
    "topk_fvu",
    "temporal_fvu",
)


def _summary(values: list) -> str:
    """``mean +- sd`` over the seeds that have a value; how many had none (no persistent latents)."""
    vals = [v for v in values if v is not None]
    missing = f" ({len(values) - len(vals)} none)" if vals and len(vals) < len(values) else ""
    return (mean_sd(vals) or "-") + missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--settings", default="dictionary:3,dictionary:1,continuous:3,continuous:1")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = [(kind, float(scale)) for kind, scale in (s.split(":") for s in args.settings.split(","))]
    records = []
    for kind, scale in settings:
        for seed in seeds:
            rec = boundary_auroc(steps=args.steps, seed=seed, slow_states=kind, slow_scale=scale)
            records.append(rec)
            print({k: rec[k] for k in ("slow_states", "slow_scale", "seed", *COLUMNS)}, flush=True)
            write_json(args.out, {"steps": args.steps, "seeds": seeds, "records": records})
    rows = []
    for kind, scale in settings:
        group = [r for r in records if r["slow_states"] == kind and r["slow_scale"] == scale]
        rows.append({"slow states": kind, "slow scale": scale, **{c: _summary([r[c] for r in group]) for c in COLUMNS}})
    print(format_table(rows, markdown=True))


if __name__ == "__main__":
    main()
