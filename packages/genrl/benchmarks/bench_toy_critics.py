"""Toy MDP: return-distribution error of C51, IQN and Value Flows against the analytic bimodal law.

Usage::

    python bench_toy_critics.py OUT.json [--steps 6000] [--seeds 0,1,2] [--eval-at 500,1500,3000,6000]
        [--hidden 128] [--depth 3] [--lr-schedule constant|cosine] [--randomness reward|transition]
        [--eval-samples 10000] [--flow-solvers euler:20,euler:50,midpoint:10] [--bcfm-only-seeds 0]
        [--episodes 2000] [--huber-kappa 0.01] [--return-bound 2]
    python bench_toy_critics.py OUT.json --tables   # print the tables of a saved (or partial) run
    python bench_toy_critics.py OUT.json --exact-field-only [same options]   # add the exact-field rows

Every critic trains with the same network width, optimiser, batches and seed (see :mod:`genrl.toy_experiment`).
The tables report, as mean +- sd over seeds:

* the final scores: W1, expected CRPS above the true law's own CRPS, W1 per number of steps to go, the
  correlation of the estimated with the true return variance, training time (noisy on a shared CPU), and the
  measurement floor (the same scores of as many samples drawn from the true law);
* Value Flows read out with other ODE solvers (the same trained field and noises), and the *exact* field of
  the law read out the same ways (:class:`genrl.toy_mdp.ExactReturnField`): what the read-out alone costs;
* learning curves (W1 after each number of updates in ``--eval-at``).

``--randomness transition`` runs the chain whose last reward is drawn by the transition into the last state
(see :mod:`genrl.toy_mdp`). ``--bcfm-only-seeds`` adds Value Flows trained without the DCFM term (an ablation,
scored with the default solver only) for those seeds. ``--huber-kappa`` and ``--return-bound`` set IQN's Huber
threshold and every critic's return range (C51's support) for runs with the baselines' published settings
(kappa = 1, support +-10) instead of the ones tuned to this toy; such rows name the setting. The JSON is
rewritten after every run, so an interrupted benchmark keeps what it finished.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gencore.io import write_json
from gencore.tables import format_table, mean_sd
from genrl.critics import CriticConfig
from genrl.toy_experiment import CRITICS, ToyCriticConfig, score_exact_field, train_toy_critic
from genrl.toy_mdp import RANDOMNESS

BCFM_ONLY = "value-flows (BCFM only)"
DEFAULT_FLOW_STEPS = CriticConfig().flow_steps
DEFAULTS = ToyCriticConfig()


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s)


def _label(rec: dict[str, Any]) -> str:
    """The critic's row name; settings that differ from the benchmark's defaults are named in it."""
    if rec.get("dcfm_weight") == 0.0:
        return BCFM_ONLY
    extra = []
    if rec.get("huber_kappa", DEFAULTS.huber_kappa) != DEFAULTS.huber_kappa:
        extra.append(f"kappa = {rec['huber_kappa']:g}")
    if rec.get("return_bound", DEFAULTS.return_bound) != DEFAULTS.return_bound:
        extra.append(f"range +-{rec['return_bound']:g}")
    return f"{rec['critic']} ({', '.join(extra)})" if extra else rec["critic"]


def _stat(vals: list[float], digits: int = 4) -> str:
    return mean_sd(vals, f".{digits}f")


def tables(records: list[dict[str, Any]], exact_field: dict[str, Any] | None = None) -> str:
    """The benchmark's three Markdown tables (final scores with the floor, ODE solvers, learning curves)."""
    exact_field = exact_field or {}
    labels = list(dict.fromkeys(_label(r) for r in records))
    groups = {lab: [r for r in records if _label(r) == lab] for lab in labels}
    n_samples = records[0].get("n_eval_samples", "")
    final = []
    for lab, rs in groups.items():
        row = {"critic": lab, "updates": rs[0]["steps"], "seeds": len(rs)}
        row["W1"] = _stat([r["w1"] for r in rs])
        row["CRPS - floor"] = _stat([r["crps"] - r["crps_floor"] for r in rs], 5)
        for j in range(len(rs[0]["w1_by_steps_to_go"])):
            row[f"W1 (j={j})"] = _stat([r["w1_by_steps_to_go"][j] for r in rs])
        row["var_corr"] = _stat([r["var_corr"] for r in rs], 3)
        row["var_corr_samples"] = _stat([r["var_corr_samples"] for r in rs if "var_corr_samples" in r], 3)
        row["train_s"] = f"{statistics.mean(r['train_s'] for r in rs):.0f}"
        final.append(row)
    per_seed = list({r["seed"]: r for r in records}.values())  # the floor depends on the seed only
    final.append(
        {
            "critic": f"floor: true law, {n_samples} samples/state",
            "seeds": len(per_seed),
            "W1": _stat([r["w1_floor"] for r in per_seed]),
            "CRPS - floor": _stat([r["crps_excess_floor"] for r in per_seed], 5),
        }
    )
    out = [format_table(final, markdown=True)]
    solver_rows = []
    for lab, rs in groups.items():
        specs = list(dict.fromkeys(k for r in rs for k in r.get("flow_solvers", {})))
        if specs:  # the default read-out (the solver training uses) first
            row = {"critic": lab, "solver": f"euler:{DEFAULT_FLOW_STEPS} (default)", "NFE": DEFAULT_FLOW_STEPS}
            row["W1"] = _stat([r["w1"] for r in rs])
            row["CRPS - floor"] = _stat([r["crps"] - r["crps_floor"] for r in rs], 5)
            solver_rows.append(row)
        for spec in specs:
            vals = [r["flow_solvers"][spec] for r in rs if spec in r.get("flow_solvers", {})]
            solver_rows.append(
                {
                    "critic": lab,
                    "solver": spec,
                    "NFE": vals[0]["nfe"],
                    "W1": _stat([v["w1"] for v in vals]),
                    "CRPS - floor": _stat([v["crps"] - rs[0]["crps_floor"] for v in vals], 5),
                }
            )
    oracle = list(exact_field.values())
    for spec in dict.fromkeys(k for o in oracle for k in o):
        vals = [o[spec] for o in oracle if spec in o]
        solver_rows.append(
            {
                "critic": "exact field (oracle)",
                "solver": spec,
                "NFE": vals[0]["nfe"],
                "W1": _stat([v["w1"] for v in vals]),
                "CRPS - floor": _stat([v["crps"] - records[0]["crps_floor"] for v in vals], 5),
            }
        )
    if solver_rows:
        out.append(format_table(solver_rows, markdown=True))
    curve_rows = []
    for lab, rs in groups.items():
        steps = list(dict.fromkeys(p["step"] for r in rs for p in r.get("curve", [])))
        if steps:
            row = {"critic": lab}
            for k in steps:
                row[f"W1 @ {k}"] = _stat([p["w1"] for r in rs for p in r.get("curve", []) if p["step"] == k])
            curve_rows.append(row)
    if curve_rows:
        out.append(format_table(curve_rows, markdown=True))
    return "\n\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--lr-schedule", default="constant", choices=("constant", "cosine"))
    p.add_argument("--randomness", default="reward", choices=RANDOMNESS, help="random last reward or transition")
    p.add_argument("--critics", default=",".join(CRITICS))
    p.add_argument("--eval-at", default="500,1500,3000,6000", help="learning-curve checkpoints (updates)")
    p.add_argument("--eval-samples", type=int, default=10000, help="return samples per evaluation state")
    p.add_argument("--episodes", type=int, default=2000, help="episodes in the training data set")
    p.add_argument("--flow-solvers", default="euler:20,euler:50,midpoint:10")
    p.add_argument("--bcfm-only-seeds", default="", help="seeds for Value Flows without the DCFM term")
    p.add_argument(
        "--huber-kappa", type=float, default=DEFAULTS.huber_kappa, help="IQN's Huber threshold (IQN's paper: 1)"
    )
    p.add_argument(
        "--return-bound",
        type=float,
        default=DEFAULTS.return_bound,
        help="return range [-B, B] of every critic: C51's support, the flow's clipping (C51's paper: 10)",
    )
    p.add_argument("--tables", action="store_true", help="only print the tables of an existing OUT.json")
    p.add_argument("--exact-field-only", action="store_true", help="(re)score the exact field into OUT.json")
    args = p.parse_args()
    if args.tables or args.exact_field_only:
        saved = json.loads(Path(args.out).read_text())
        if args.exact_field_only:
            seeds = sorted({r["seed"] for r in saved["records"]})
            saved["exact_field"] = {str(seed): _exact_field(args, seed) for seed in seeds}
            write_json(args.out, saved)
        print(tables(saved["records"], saved.get("exact_field")))
        return
    ablate = _ints(args.bcfm_only_seeds)
    runs = []  # seed by seed, so that an interrupted run leaves complete seeds
    for seed in dict.fromkeys(_ints(args.seeds) + ablate):
        runs += [(seed, name, 1.0) for name in args.critics.split(",") if seed in _ints(args.seeds)]
        runs += [(seed, "value-flows", 0.0)] if seed in ablate else []
    records: list[dict[str, Any]] = []
    exact_field: dict[str, Any] = {}
    t0 = time.perf_counter()
    for seed, name, dcfm_weight in runs:
        if str(seed) not in exact_field:
            exact_field[str(seed)] = _exact_field(args, seed)
        cfg = _config(args, seed)
        cfg = replace(cfg, dcfm_weight=dcfm_weight, flow_solvers=cfg.flow_solvers if dcfm_weight else ())
        _, rec = train_toy_critic(name, cfg)
        records.append({"seed": seed, "n_eval_samples": args.eval_samples, **rec})
        print(f"seed {seed} {_label(rec)}: W1 {rec['w1']:.4f} (floor {rec['w1_floor']:.4f})", flush=True)
        out = {"args": vars(args), "records": records, "exact_field": exact_field}
        write_json(args.out, {**out, "wall_s": time.perf_counter() - t0})
    print(tables(records, exact_field))


def _config(args: argparse.Namespace, seed: int) -> ToyCriticConfig:
    return ToyCriticConfig(
        steps=args.steps,
        seed=seed,
        hidden=args.hidden,
        depth=args.depth,
        lr_schedule=args.lr_schedule,
        randomness=args.randomness,
        n_eval_samples=args.eval_samples,
        n_episodes=args.episodes,
        eval_at=tuple(k for k in _ints(args.eval_at) if k <= args.steps),
        flow_solvers=tuple(s for s in args.flow_solvers.split(",") if s),
        huber_kappa=args.huber_kappa,
        return_bound=args.return_bound,
    )


def _exact_field(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    return score_exact_field(_config(args, seed))


if __name__ == "__main__":
    main()
