"""Shared pieces of the miniature reproductions: train one configuration through the genimage engine
path, scoring the EMA model every ``eval_every`` steps with a metric callback."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genimage.config import ImageTrainConfig
from genimage.data import ImageSet
from genimage.runs import LoadedRun
from genimage.training import data_summary, fit_backbone, run_record


def train_with_curve(
    cfg: ImageTrainConfig,
    data: ImageSet,
    score: Callable[[LoadedRun], dict[str, float]],
    eval_every: int,
    work: Path | None = None,
) -> tuple[list[dict[str, Any]], LoadedRun, float]:
    """Train ``cfg`` on ``data``; ``score(run)`` at every ``eval_every`` steps -> ``(curve, final run, seconds)``.

    The run is written to a temporary folder, or to ``work`` when given (a latent run finding ``work/vae``
    there reuses that VAE instead of training one)."""
    record = run_record(cfg, data_summary(data, data.shape[1]))
    curve: list[dict[str, Any]] = []
    last: dict[str, LoadedRun] = {}

    def callback(run: LoadedRun, step: int) -> None:
        t0 = time.perf_counter()
        row = {"step": step, **score(run)}
        row["eval_seconds"] = round(time.perf_counter() - t0, 2)
        curve.append(row)
        last["run"] = run
        print(f"  {cfg.data} layersync={cfg.layersync} lwd={cfg.lwd} step {step}: {row}", flush=True)

    if work is not None:
        _, _, seconds = fit_backbone(cfg, data, record, work, {"sample_every": eval_every}, callback)
        return curve, last["run"], seconds
    with tempfile.TemporaryDirectory() as tmp:
        _, _, seconds = fit_backbone(cfg, data, record, Path(tmp), {"sample_every": eval_every}, callback)
    return curve, last["run"], seconds


def steps_to_reach(curve: list[dict[str, Any]], key: str, target: float) -> int | None:
    """First logged step whose ``key`` is at or below ``target`` (None if never)."""
    for row in curve:
        if row[key] <= target:
            return int(row["step"])
    return None
