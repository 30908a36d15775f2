"""Pins found by mutation-checking the solvers, likelihood, guidance and couplings: each test here fails on a
plausible one-line bug that every other test let through."""

from __future__ import annotations

import pytest
import torch

from gencore.solvers import dopri5

DT = torch.float64


@pytest.mark.parametrize(("t0", "t1"), [(0.0, 0.3), (0.9, 0.1), (0.7, 0.1), (1.0, 0.33), (0.05, 0.95)])
def test_dopri5_lands_exactly_on_t1(t0: float, t1: float) -> None:
    """The last step ends at ``t1`` itself, not at ``t + (t1 - t)``, which rounds to a neighbouring double for some
    intervals (0.9 -> 0.1 ended at 0.1 - 2.8e-17), so a caller comparing ``times[-1] == t1`` would miss it."""
    x0 = torch.ones(2, 2, dtype=DT)
    sol = dopri5(lambda x, t: torch.cos(3 * t) * x, x0, t0, t1, rtol=1e-3, atol=1e-3, return_trajectory=True)
    assert float(sol.times[0]) == t0
    assert float(sol.times[-1]) == t1
    assert sol.trajectory is not None and sol.trajectory.shape[0] == sol.times.shape[0]
