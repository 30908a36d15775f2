"""Few-step flow maps in miniature: CMT vs MeanFlow from scratch, and pi-Flow at 1 NFE.

1. Consistency Mid-Training ("CMT: Mid-Training for Efficient Learning of Consistency, Mean Flow, and
   Flow Map Models", ICLR 2026) claims that initialising flow-map post-training from a map mid-trained on
   a teacher's ODE trajectories cuts post-training cost by a large factor. Here: a checkerboard
   flow-matching teacher; MeanFlow post-training from the CMT initialisation vs from scratch, identical
   settings; the 1-step W2 of the EMA weights every ``EVAL_EVERY`` iterations; iterations until the
   W2 falls below each of several thresholds (the cost of mid-training is reported beside it).
2. pi-Flow ("pi-Flow: Policy-Based Few-Step Generation via Imitation Distillation", ICLR 2026) claims
   1-NFE samples of teacher quality and diversity. Here: W2, MMD and checkerboard mode coverage at NFE 1
   (and 2) for pi-Flow, a student regressing the teacher's clean sample directly, MeanFlow, CMT and the
   teacher at 32 Euler NFE.

W2 is exact on ``n_eval`` points against fresh draws; the W2 between two independent data samples of that
size is printed as the noise floor.

    python bench_flowmaps.py results/bench_flowmaps.json
"""

from __future__ import annotations

import copy
import sys
import time

import torch

from gencore.data import get_dataset
from gencore.flowmaps.experiment import (
    FlowMapConfig,
    Scorer,
    compare,
    config_dict,
    evaluation_noise,
    mid_train,
    new_flow_map,
    reference_set,
    train_meanflow,
    train_teacher,
    trajectories,
)
from gencore.flowmaps.meanflow import sample_flow_map
from gencore.io import write_json
from gencore.solvers import solve_ode
from gencore.tables import format_table

EVAL_EVERY = 100
THRESHOLDS = (0.8, 0.6, 0.5, 0.45, 0.4, 0.35)


def first_below(curve: list[tuple[int, float]], level: float) -> int | None:
    return next((step for step, w2 in curve if w2 <= level), None)


def _saving(scratch: int | None, cmt: int | None) -> str:
    if scratch is None or cmt is None:
        return "-"
    return "reached by mid-training alone" if cmt == 0 else f"{scratch / cmt:.1f}x"


def cmt_vs_scratch(cfg: FlowMapConfig, teacher, scorer: Scorer) -> tuple[list[dict], dict, list[dict]]:
    noise = evaluation_noise(cfg, teacher.data.shape[1])
    curves: dict[str, list[tuple[int, float]]] = {}
    seconds: dict[str, float] = {}

    def tracker(name: str):
        curves[name] = []

        def cb(step: int, model: torch.nn.Module) -> None:
            curves[name].append((step, round(scorer.w2(sample_flow_map(model, noise, 1)), 4)))

        return cb

    scratch, seconds["scratch"] = train_meanflow(
        cfg, teacher.data, new_flow_map(cfg, 2), callback=tracker("scratch"), every=EVAL_EVERY, desc="scratch"
    )
    traj = trajectories(cfg, teacher)
    start = time.perf_counter()
    init, mid_seconds = mid_train(cfg, traj, new_flow_map(cfg, 2))
    mid_total = time.perf_counter() - start
    post = copy.deepcopy(init).requires_grad_(True).train()
    cmt, seconds["cmt"] = train_meanflow(cfg, teacher.data, post, callback=tracker("cmt"), every=EVAL_EVERY, desc="cmt")
    rows = []
    for level in THRESHOLDS:
        a, b = first_below(curves["scratch"], level), first_below(curves["cmt"], level)
        rows.append(
            {
                "w2_threshold": level,
                "scratch_iters": a if a is not None else f">{cfg.steps}",
                "cmt_post_iters": b if b is not None else f">{cfg.steps}",
                "saving": _saving(a, b),
            }
        )
    info = {
        "curves": curves,
        "mid_steps": cfg.cmt_steps,
        "mid_seconds": round(mid_seconds, 2),
        "trajectory_seconds": round(mid_total - mid_seconds, 2),
        "post_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "rows": rows,
    }
    records = [
        {
            "dataset": cfg.dataset,
            "method": name,
            "nfe": k,
            **scorer(sample_flow_map(model, noise, k)),
            "train_steps": cfg.steps,
            "mid_steps": cfg.cmt_steps if name == "cmt" else 0,
            "train_seconds": round(seconds[key] + (mid_seconds if name == "cmt" else 0.0), 3),
        }
        for name, key, model in (("meanflow", "scratch", scratch), ("cmt", "cmt", cmt))
        for k in cfg.nfe
    ]
    return rows, info, records


def main(out_json: str | None = None) -> dict:
    torch.set_num_threads(2)
    cfg = FlowMapConfig(steps=2000, teacher_steps=3000, cmt_steps=500, nfe=(1, 2), progress=False)
    start = time.perf_counter()
    teacher = train_teacher(cfg)
    reference = reference_set(cfg)
    scorer = Scorer(cfg, reference)
    floor = scorer.w2(get_dataset(cfg.dataset, cfg.n_eval, seed=cfg.seed + 30_000))
    teacher_mid = scorer(solve_ode(teacher.model, evaluation_noise(cfg, 2), steps=16, method="midpoint").x)
    print(f"teacher: {cfg.teacher_steps} steps; W2 floor (two data samples of {cfg.n_eval}): {floor:.4f}")
    print(f"teacher midpoint 16 steps (32 NFE): W2 {teacher_mid['w2']:.4f}")

    rows, cmt_info, map_records = cmt_vs_scratch(cfg, teacher, scorer)
    print(f"\nCMT ({cfg.cmt_steps} mid-training iterations, {cmt_info['mid_seconds']} s) vs MeanFlow from scratch:")
    print(format_table(rows))
    print("1-step W2 curves (iteration: scratch / cmt):")
    for (i, a), (_, b) in zip(cmt_info["curves"]["scratch"], cmt_info["curves"]["cmt"]):
        if i % 500 == 0 or i == cfg.steps:
            print(f"  {i:5d}: {a:.4f} / {b:.4f}")

    # meanflow and cmt were trained above with the same settings; the others share the teacher
    others, _, _ = compare(cfg, ("piflow", "regress", "teacher"), teacher=teacher)
    records = map_records + others
    cols = ["method", "nfe", "w2", "mmd2_rbf_unbiased", "modes_covered", "in_support", "train_steps", "train_seconds"]
    print("\nall methods (teacher shared):")
    print(format_table(records, cols))
    result = {
        "config": config_dict(cfg),
        "w2_floor": floor,
        "teacher_midpoint_32nfe": teacher_mid,
        "cmt": cmt_info,
        "records": records,
        "seconds": round(time.perf_counter() - start, 1),
    }
    if out_json:
        write_json(out_json, result)
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
