"""``stop_signals`` records SIGTERM/SIGINT instead of dying, restores the handlers, and starts each run afresh."""

from __future__ import annotations

import os
import signal

from gencore.train import interruption, signal_received, stop_signals


def test_a_signal_inside_the_block_is_recorded_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with stop_signals():
        assert signal_received() is None
        os.kill(os.getpid(), signal.SIGTERM)  # would end the test process without the block
        assert signal_received() == signal.SIGTERM
        err = interruption("runs/x")
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert err.signum == signal.SIGTERM and "runs/x" in str(err) and "--resume auto" in str(err)
    with stop_signals():  # a new run in the same process is not stopped by the old signal
        assert signal_received() is None
        os.kill(os.getpid(), signal.SIGINT)
        assert signal_received() == signal.SIGINT
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
