"""Run metrics: JSON lines always, TensorBoard when it is installed (rank 0 only).

``out_dir/metrics.jsonl`` gets one JSON object per logged step (``step``, ``loss``, ``lr``,
``grad_norm``, ``samples_per_s``, ``peak_memory_mb`` and the task's metrics). On resume the
file is cut back to the records of steps up to the checkpoint's step, so a resumed run's log
reads like an uninterrupted one; TensorBoard is told to hide the earlier events after that step
(``purge_step``). TensorBoard's event file trails the JSON lines by up to
``MetricsLogger.TB_BATCH`` records (plus TensorBoard's own buffering) until the run ends; a
killed run's JSON log is complete up to its last record.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocated accelerator memory (CUDA), else the process's peak resident set size, in MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10


def metrics_to_floats(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``{name: float}`` from values that are Python numbers or one-element tensors, reading every tensor back to
    the host in a single transfer per device (``float(t)`` per tensor would wait for the device once per metric)."""
    out: dict[str, float] = {}
    by_device: dict[torch.device, list[str]] = {}
    for k, v in metrics.items():
        if isinstance(v, torch.Tensor):
            by_device.setdefault(v.device, []).append(k)
        else:
            out[k] = float(v)
    for keys in by_device.values():
        values = torch.stack([metrics[k].detach().reshape(()).to(torch.float64) for k in keys]).tolist()
        out.update(zip(keys, values, strict=True))
    return {k: out[k] for k in metrics}


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else value.detach().tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf
    return value


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` file (``[]`` when there is none), with non-finite values as floats again;
    a line cut by a kill is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records.append({k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in record.items()})
    return records


class MetricsLogger:
    """Append metrics records; a no-op on ranks other than 0 (``enabled=False``).

    Each JSON record is flushed at once. TensorBoard gets one event per record (all its
    scalars), handed to the ``SummaryWriter`` in batches of :attr:`TB_BATCH` records and on
    :meth:`close`: the writer's thread wakes for every event it receives, and on a machine whose
    cores all run the step's kernels those wake-ups slowed every step by several per cent.
    """

    TB_BATCH = 50

    def __init__(self, out_dir: Path, *, enabled: bool, resume_step: int | None = None) -> None:
        self.enabled = enabled
        self.path = Path(out_dir) / "metrics.jsonl"
        self._tb: Any = None
        self._fh: Any = None
        self._pending: list[tuple[Any, int]] = []  # TensorBoard summaries not yet handed to its writer
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            self._truncate(resume_step)
        elif resume_step is None and self.path.exists():
            self.path.unlink()
        self._fh = self.path.open("a", encoding="utf-8")  # kept open; each record is flushed
        try:
            from tensorboard.compat.proto.summary_pb2 import Summary
            from torch.utils.tensorboard import SummaryWriter

            # TensorBoard hides the events an earlier (killed) run wrote after the resumed step, or all of them on a
            # fresh start, as the JSON lines were cut: else it plots those steps twice
            self._tb = SummaryWriter(
                log_dir=str(Path(out_dir) / "tensorboard"),
                max_queue=2 * self.TB_BATCH,
                purge_step=(resume_step or 0) + 1,
            )
            self._summary = Summary
        except ImportError:  # tensorboard not installed
            self._tb = None

    def _truncate(self, step: int) -> None:
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except json.JSONDecodeError:  # a line cut by a kill
                continue
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
        os.replace(tmp, self.path)

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: _jsonable(v) for k, v in record.items()}
        self._fh.write(json.dumps(clean) + "\n")
        self._fh.flush()
        if self._tb is not None:
            values = []
            for k, v in record.items():
                v = clean[k] if isinstance(v, torch.Tensor) else v  # floats as they are: TensorBoard plots NaN/inf
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    values.append(self._summary.Value(tag=k, simple_value=float(v)))
            self._pending.append((self._summary(value=values), int(clean.get("step", 0))))
            if len(self._pending) >= self.TB_BATCH:
                self._flush_tb()

    def _flush_tb(self) -> None:
        writer = self._tb._get_file_writer()
        for summary, step in self._pending:
            writer.add_summary(summary, step)
        self._pending.clear()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._flush_tb()
            self._tb.close()
            self._tb = None
