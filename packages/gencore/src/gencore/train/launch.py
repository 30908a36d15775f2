"""Start N worker processes on this machine through torch's own elastic launcher.

``launch(entry, *args, nproc=N)`` runs ``entry(*args)`` in ``N`` processes created by
``torch.distributed.launcher.api.elastic_launch`` (the machinery behind ``torchrun``) with a
c10d rendezvous on ``localhost:0`` (a free port, as ``torchrun --standalone``). Each worker
gets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` in its
environment, which :func:`gencore.train.distributed.setup` (called by ``Trainer.fit``) reads.
With ``nproc == 1``, or when already inside a launched worker (e.g. under ``torchrun``),
``entry`` is called directly in this process. ``entry`` must be a module-level function and
its arguments and return value picklable (workers are spawned).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

from gencore.checks import check_int
from gencore.errors import GenError
from gencore.train.signals import record_signal, signal_received


def in_worker() -> bool:
    """True inside a process started by torchrun / elastic launch (or any env:// multi-process run)."""
    return "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1") or 1) > 1


def _worker(entry: Callable[..., Any], *args: Any) -> Any:
    """A launched worker: run ``entry``; after a SIGTERM/SIGINT, leave at once.

    torch's spawn wrapper makes a finished worker wait for the agent's go-ahead, which an agent
    shutting down after a signal never gives (it SIGKILLs after ``shutdown_timeout``); the
    checkpoint is on disk by now and the launcher returns ``{}`` for an interrupted run anyway.
    """
    value = entry(*args)
    if signal_received() is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return value


def launch(
    entry: Callable[..., Any],
    *args: Any,
    nproc: int = 1,
    max_restarts: int = 0,
    rdzv_endpoint: str = "localhost:0",
    shutdown_timeout: int = 30,
) -> dict[int, Any]:
    """Run ``entry(*args)`` on ``nproc`` local processes; return ``{rank: return value}``.

    Raises :class:`GenError` when a worker fails (the message carries the worker's error). When this
    (launching) process receives SIGTERM/SIGINT, the elastic agent forwards it to the workers, which
    (inside ``Trainer.fit``) finish their step, write a checkpoint and exit; ``launch`` then returns
    ``{}``, and :func:`gencore.train.signals.signal_received` names the signal (for the command's exit
    status). (Workers that already returned wait for the agent, which SIGKILLs them after
    ``shutdown_timeout`` seconds: an interrupted ``launch`` takes that long to return; the checkpoint
    is on disk well before.)
    """
    nproc = check_int(nproc, "nproc", low=1)
    if nproc == 1 or in_worker():
        return {int(os.environ.get("RANK", "0") or 0): entry(*args)}
    record_signal(None)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nproc,
        run_id=f"gencore-{uuid.uuid4().hex[:8]}",
        rdzv_backend="c10d",
        rdzv_endpoint=rdzv_endpoint,
        max_restarts=max_restarts,
        monitor_interval=0.1,
        start_method="spawn",
        shutdown_timeout=shutdown_timeout,
    )
    try:
        return dict(elastic_launch(config, _worker)(entry, *args))
    except ChildFailedError as exc:
        raise GenError(f"{nproc}-process training failed: {exc.format_msg().strip()}") from exc
    except SignalException as exc:
        record_signal(exc.sigval)
        return {}
