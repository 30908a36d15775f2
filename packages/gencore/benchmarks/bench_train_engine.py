"""Training-engine overhead: gencore.train vs a bare hand-written loop, and 1- vs 2-process throughput.

The task is the toy flow-matching task (MLP 3 x 256 on 2-D checkerboard, independent coupling,
batch 256, Adam with cosine decay, EMA). The bare loop does the same work by hand (random
minibatch, loss, backward, Adam, scheduler, EMA update, one host sync per step) with no
checkpoints, logging, NaN guard or distributed wrapper. The engine runs with checkpoint_every=0
(one final checkpoint) and metrics every 10 steps (TensorBoard too when it is installed).

The issue's target is on the *step time*: each side runs SHORT and LONG steps, and the
per-step time is (T(LONG) - T(SHORT)) / (LONG - SHORT), which removes one-time costs (process
group, data loader, logger and final checkpoint); those are reported separately as the
engine's fixed set-up cost, and the whole-run ratio at LONG steps is reported too. Best of 5
interleaved rounds for every time.

    python bench_train_engine.py results/bench_train_engine.json
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import math
import sys
import tempfile
import time

import torch

from gencore.io import write_json
from gencore.tables import format_table
from gencore.toy_experiment import ToyConfig, ToyFlowTask, engine_config, training_data
from gencore.train import Trainer, launch

SHORT, LONG = 500, 2500


def _bare(cfg: ToyConfig, data: torch.Tensor) -> float:
    task = ToyFlowTask(cfg, data)
    model, g = task.model, torch.Generator().manual_seed(cfg.seed)
    ema = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / cfg.steps)))
    start = time.perf_counter()
    for step in range(cfg.steps):
        x1 = data[torch.randint(data.shape[0], (cfg.batch_size,), generator=g)]
        loss, _ = task.loss(model, (x1,), g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        decay = min(cfg.ema_decay, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, pm in zip(ema.parameters(), model.parameters()):
                pe.lerp_(pm, 1.0 - decay)
        loss.item()
    return time.perf_counter() - start


def _engine_worker(cfg: ToyConfig, data: torch.Tensor, out: str, threads: int = 2) -> float:
    torch.set_num_threads(threads)
    task = ToyFlowTask(cfg, data)
    train_cfg = engine_config(cfg, out, checkpoint_every=0, log_every=10, progress=False)
    start = time.perf_counter()
    Trainer(train_cfg).fit(task, torch.utils.data.TensorDataset(data))
    return time.perf_counter() - start


def main(out_json: str | None = None, threads: int = 2) -> list[dict]:
    torch.set_num_threads(threads)
    base = ToyConfig(dataset="checkerboard", coupling="independent", steps=LONG, progress=False)
    data = training_data(base)
    cfgs = {n: dataclasses.replace(base, steps=n) for n in (SHORT, LONG)}
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        # interleaved rounds so that machine drift hits both sides; best of 5 for every time
        for i in range(5):
            for n, cfg in cfgs.items():
                times.setdefault(("bare", n), []).append(_bare(cfg, data))
                times.setdefault(("engine", n), []).append(_engine_worker(cfg, data, f"{d1}/run{i}-{n}", threads))
        best = {key: min(v) for key, v in times.items()}
        step = {side: (best[(side, LONG)] - best[(side, SHORT)]) / (LONG - SHORT) for side in ("bare", "engine")}
        fixed = best[("engine", LONG)] - LONG * step["engine"]
        records = [
            {
                "case": "bare loop, 1 process",
                "step_ms": 1e3 * step["bare"],
                "run_s": best[("bare", LONG)],
                "steps_per_s": LONG / best[("bare", LONG)],
            },
            {
                "case": "engine, 1 process",
                "step_ms": 1e3 * step["engine"],
                "step_overhead_pct": 100 * (step["engine"] / step["bare"] - 1),
                "fixed_setup_s": fixed,
                "run_s": best[("engine", LONG)],
                "run_overhead_pct": 100 * (best[("engine", LONG)] / best[("bare", LONG)] - 1),
                "steps_per_s": LONG / best[("engine", LONG)],
            },
        ]
        # 2 processes share the 2 cores: each gets 1 thread, the global batch stays 256.
        two = launch(_engine_worker, cfgs[LONG], data, f"{d2}/run", max(1, threads // 2), nproc=2)
        t2 = max(two.values())
        records.append(
            {
                "case": "engine, 2 processes (gloo)",
                "run_s": t2,
                "steps_per_s": LONG / t2,
                "speedup_vs_1": best[("engine", LONG)] / t2,
            }
        )
    tb = importlib.util.find_spec("tensorboard") is not None
    print(
        f"Training engine vs bare loop, {SHORT} and {LONG} steps, batch 256, MLP 3 x 256, torch {torch.__version__}, "
        f"TensorBoard {'on' if tb else 'not installed'}"
    )
    print(format_table(records))
    if out_json:
        write_json(out_json, records)
    return records


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
