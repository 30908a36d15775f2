"""Stopping a run cleanly on SIGTERM/SIGINT, and telling the command line that it stopped.

Inside :func:`stop_signals`, SIGTERM (a scheduler's preemption) and SIGINT (Ctrl-C) no longer kill the
process: they are recorded, and the training loop that polls :func:`signal_received` finishes its step,
writes a checkpoint and returns. :func:`gencore.train.launch` records the signal its workers got in the
launching process too. A command then raises :func:`interruption`, which
:func:`gencore.command.run` turns into one line and the exit status ``128 + signal`` (130 for Ctrl-C, 143
for SIGTERM), as a shell reports a process killed by that signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from gencore.errors import Interrupted

_SIGNALLED: int | None = None  # the SIGTERM/SIGINT that stopped the latest run in this process, if any


def signal_received() -> int | None:
    """The signal that stopped the latest run in this process, or a launch from it (None if none did)."""
    return _SIGNALLED


def record_signal(signum: int | None) -> None:
    """Note that ``signum`` stopped this process's run (None: a new run starts, nothing stopped it yet)."""
    global _SIGNALLED
    _SIGNALLED = None if signum is None else int(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """Within this block SIGTERM/SIGINT are recorded (see :func:`signal_received`) instead of stopping the process.

    Outside the main thread, where Python cannot install handlers, the signals keep their usual effect.
    """
    record_signal(None)
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, lambda signum, frame: record_signal(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def interruption(out_dir: str | os.PathLike, resume_flag: str = "--resume auto") -> Interrupted:
    """The error a command raises for a run stopped by a signal: where its checkpoints are and how to go on."""
    return Interrupted(
        f"checkpoints are saved under {out_dir}; continue with the same command and {resume_flag}",
        signal_received() or signal.SIGINT,
    )
