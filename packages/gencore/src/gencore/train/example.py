"""A tiny regression task that exercises the engine end to end (used by tests and as a template).

Data: ``n`` pairs ``(x, y)`` with ``x ~ N(0, I_d)`` and ``y = sin(x) W`` for a fixed random
``W`` (seeded). Model: an MLP ``d -> h -> h -> d`` with SiLU and optional dropout (global
torch RNG). Loss: mean squared error of ``model(x + noise * eps)`` against ``y`` with
``eps`` drawn from the trainer's generator, so both the explicit generator and the global
RNG matter for exact resumption. ``nan_at`` makes the loss NaN at chosen micro-batch calls.

Run as a script (``python -m gencore.train.example --out DIR --steps 40 --nproc 2``); it
writes ``DIR/final.safetensors`` (the trained weights) on completion.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from gencore.io import save_tensors
from gencore.train.config import TrainConfig
from gencore.train.launch import launch
from gencore.train.sharding import is_sharded
from gencore.train.trainer import Trainer


def regression_data(n: int = 256, dim: int = 4, seed: int = 0) -> Dataset:
    """``TensorDataset(x, y)`` with ``y = sin(x) W``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, dim, generator=g) / dim**0.5
    return TensorDataset(x, torch.sin(x) @ w)


class RegressionTask:
    """``model``: MLP with modules ``net.0`` (Linear), ``net.2`` (Linear), ``net.4`` (Linear)."""

    def __init__(
        self,
        dim: int = 4,
        hidden: int = 16,
        *,
        seed: int = 0,
        noise: float = 0.0,
        dropout: float = 0.0,
        nan_at: Sequence[int] = (),
        sleep: float = 0.0,
    ) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.Dropout(dropout),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, dim),
        )
        self.noise = noise
        self.nan_at = set(nan_at)
        self.sleep = sleep
        self.calls = 0

    def loss(self, model: nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict[str, Any]]:
        x, y = batch
        if self.noise:
            x = x + self.noise * torch.randn(x.shape, generator=generator, device=x.device)
        loss = (model(x) - y).pow(2).mean()
        if self.calls in self.nan_at:
            loss = loss * float("nan")
        self.calls += 1
        if self.sleep:
            time.sleep(self.sleep)
        return loss, {"mse": loss.detach()}


def worker(cfg_kwargs: dict[str, Any], task_kwargs: dict[str, Any], n_data: int) -> dict[str, torch.Tensor]:
    """Train the example in this process (one rank of a launch); return the final weights on CPU."""
    cfg = TrainConfig(**cfg_kwargs)
    task = RegressionTask(**task_kwargs)
    result = Trainer(cfg, device="cpu").fit(task, regression_data(n_data))
    if is_sharded(result.model):  # FSDP ranks other than 0 keep only their shards
        return {}
    state = {k: v.detach().cpu().clone() for k, v in result.model.state_dict().items()}
    if not result.interrupted and int(os.environ.get("RANK", "0")) == 0:
        save_tensors(Path(cfg.out_dir) / "final.safetensors", state)
    return state


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--global-batch-size", type=int, default=16)
    p.add_argument("--grad-accum-steps", type=int, default=1)
    p.add_argument("--checkpoint-every", type=int, default=5)
    p.add_argument("--resume", default=None)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per loss call (to time a kill)")
    p.add_argument("--n-data", type=int, default=256)
    a = p.parse_args(argv)
    cfg = {
        "steps": a.steps,
        "global_batch_size": a.global_batch_size,
        "grad_accum_steps": a.grad_accum_steps,
        "checkpoint_every": a.checkpoint_every,
        "resume": a.resume,
        "out_dir": a.out,
        "progress": False,
        "warmup_steps": 3,
        "clip_grad_norm": 1.0,
        "ema_decay": 0.9,
        "log_every": 1,
    }
    task = {"noise": a.noise, "dropout": a.dropout, "sleep": a.sleep}
    launch(worker, cfg, task, a.n_data, nproc=a.nproc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
