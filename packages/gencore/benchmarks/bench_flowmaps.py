"""Few-step flow maps in miniature: CMT vs MeanFlow from scratch, and pi-Flow at 1 NFE.

1. Consistency Mid-Training ("CMT: Mid-Training for Efficient Learning of Consistency, Mean Flow, and
   Flow Map Models", ICLR 2026) claims that initialising flow-map post-training from a map mid-trained on
   a teacher's ODE trajectories cuts post-training cost by a large factor. Here: a checkerboard
   flow-matching teacher; MeanFlow post-training from the CMT initialisation (pairs of states of one
   trajectory, the diagonal on the teacher's velocity; post-training at ``cmt_lr``) vs from scratch
   (at ``lr``), otherwise identical settings; the 1-step W2 of the EMA weights every ``EVAL_EVERY``
   iterations; iterations until the W2 falls below each of several thresholds (the cost of
   mid-training is reported beside it). Two ablations show what the fix is made of: the same pair
   initialisation post-trained at the scratch learning rate, and the endpoint-only mid-training
   (``X_{t_i,1}`` alone, the consistency-model form) post-trained at ``cmt_lr``.
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
import time

import torch

from gencore.command import benchmark_parser
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
THRESHOLDS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.55, 0.5)


def first_below(curve: list[tuple[int, float]], level: float) -> int | None:
    return next((step for step, w2 in curve if w2 <= level), None)


def _saving(scratch: int | None, cmt: int | None, steps: int) -> str:
    if cmt is None:
        return "-"
    alone = "reached by mid-training alone" if cmt == 0 else None
    if scratch is None:
        return f"{alone or 'cmt only'}; scratch not within {steps}"
    return alone or f"{scratch / cmt:.1f}x"


# (name, mid-training targets, post-training learning rate: "cmt" = cfg.cmt_lr, "lr" = cfg.lr)
VARIANTS = (("cmt", "pairs", "cmt"), ("cmt_pairs_at_lr", "pairs", "lr"), ("cmt_endpoint_only", "endpoint", "cmt"))


def cmt_vs_scratch(cfg: FlowMapConfig, teacher, scorer: Scorer) -> tuple[list[dict], dict, list[dict]]:
    noise = evaluation_noise(cfg, teacher.data.shape[1])
    curves: dict[str, list[tuple[int, float]]] = {}
    seconds: dict[str, float] = {}
    mid_seconds: dict[str, float] = {}
    models: dict[str, torch.nn.Module] = {}

    def tracker(name: str):
        curves[name] = []

        def cb(step: int, model: torch.nn.Module) -> None:
            curves[name].append((step, round(scorer.w2(sample_flow_map(model, noise, 1)), 4)))

        return cb

    models["scratch"], seconds["scratch"] = train_meanflow(
        cfg, teacher.data, new_flow_map(cfg, 2), callback=tracker("scratch"), every=EVAL_EVERY, desc="scratch"
    )
    start = time.perf_counter()
    traj = trajectories(cfg, teacher)
    trajectory_seconds = time.perf_counter() - start
    inits = {}
    for name, targets, lr_key in VARIANTS:
        if targets not in inits:
            inits[targets] = mid_train(cfg, traj, new_flow_map(cfg, 2), targets=targets)
        init, mid_seconds[name] = inits[targets]
        post = copy.deepcopy(init).requires_grad_(True).train()
        lr = cfg.cmt_lr if lr_key == "cmt" else cfg.lr
        models[name], seconds[name] = train_meanflow(
            cfg, teacher.data, post, callback=tracker(name), every=EVAL_EVERY, desc=name, lr=lr
        )
    rows = []
    for level in THRESHOLDS:
        a, b = first_below(curves["scratch"], level), first_below(curves["cmt"], level)
        rows.append(
            {
                "w2_threshold": level,
                "scratch_iters": a if a is not None else f">{cfg.steps}",
                "cmt_post_iters": b if b is not None else f">{cfg.steps}",
                "saving": _saving(a, b, cfg.steps),
            }
        )
    info = {
        "curves": curves,
        "variants": {name: {"targets": t, "post_lr": cfg.cmt_lr if k == "cmt" else cfg.lr} for name, t, k in VARIANTS},
        "mid_steps": cfg.cmt_steps,
        "mid_seconds": {k: round(v, 2) for k, v in mid_seconds.items()},
        "trajectory_seconds": round(trajectory_seconds, 2),
        "post_seconds": {k: round(v, 2) for k, v in seconds.items()},
        "rows": rows,
    }
    records = [
        {
            "dataset": cfg.dataset,
            "method": method,
            "nfe": k,
            **scorer(sample_flow_map(models[key], noise, k)),
            "train_steps": cfg.steps,
            "mid_steps": cfg.cmt_steps if key != "scratch" else 0,
            "train_seconds": round(seconds[key] + mid_seconds.get(key, 0.0), 3),
        }
        for method, key in (("meanflow", "scratch"), ("cmt", "cmt"))
        for k in cfg.nfe
    ]
    return rows, info, records


def curve_table(curves: dict[str, list[tuple[int, float]]], steps: int) -> list[dict]:
    marks = sorted({0, 100, 200, 500, 1000, steps} & {i for i, _ in curves["scratch"]})
    return [{"run": name, **{f"it {i}": dict(c)[i] for i in marks}} for name, c in curves.items()]


def main(out_json: str | None = None) -> dict:
    torch.set_num_threads(1)  # tiny MLPs: a second thread barely helps and spins badly on a shared machine
    cfg = FlowMapConfig(steps=2000, teacher_steps=3000, nfe=(1, 2), progress=False)
    start = time.perf_counter()
    teacher = train_teacher(cfg)
    reference = reference_set(cfg)
    scorer = Scorer(cfg, reference)
    floor = scorer.w2(get_dataset(cfg.dataset, cfg.n_eval, seed=cfg.seed + 30_000))
    teacher_mid = scorer(solve_ode(teacher.model, evaluation_noise(cfg, 2), steps=16, method="midpoint").x)
    print(f"teacher: {cfg.teacher_steps} steps; W2 floor (two data samples of {cfg.n_eval}): {floor:.4f}")
    print(f"teacher midpoint 16 steps (32 NFE): W2 {teacher_mid['w2']:.4f}")

    rows, cmt_info, map_records = cmt_vs_scratch(cfg, teacher, scorer)
    mid_s = cmt_info["mid_seconds"]["cmt"]
    print(f"\nCMT ({cfg.cmt_steps} mid-training iterations, {mid_s} s) vs MeanFlow from scratch:")
    print(format_table(rows))
    print("1-step W2 of the EMA weights after n post-training iterations (scratch: n training iterations):")
    print(format_table(curve_table(cmt_info["curves"], cfg.steps)))
    print("seconds: post/scratch training", cmt_info["post_seconds"], "mid-training", cmt_info["mid_seconds"])

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
    parser = benchmark_parser(__doc__)
    args = parser.parse_args()
    main(args.out_json)
