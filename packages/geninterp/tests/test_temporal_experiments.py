"""The synthetic slow-state + event sequences and the slow/fast separation measures."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError
from geninterp.temporal_experiments import (
    boundary_auroc,
    latent_persistence,
    slow_events_sequences,
    state_variance_share,
)


def test_continuous_states_change_only_the_slow_part():
    x_d, b_d, s_d = slow_events_sequences(n_seq=16, length=32, seed=3)
    x_c, b_c, s_c = slow_events_sequences(n_seq=16, length=32, seed=3, slow_states="continuous", slow_scale=2.0)
    assert torch.equal(b_d, b_c)
    assert int(s_d.min()) >= 0 and int(s_d.max()) < 32  # topic indices
    # a new state exactly at the boundaries, and every segment's state is unique across sequences
    changed = s_c[:, 1:] != s_c[:, :-1]
    assert torch.equal(changed, b_c[:, 1:])
    assert torch.unique(s_c).numel() == 16 + int(b_c.sum())
    # events and noise are shared, so the difference of the two is piecewise constant on segments
    diff = x_c - x_d
    same = ~b_c[:, 1:]
    torch.testing.assert_close(diff[:, 1:][same], diff[:, :-1][same], rtol=0, atol=1e-5)
    # the continuous slow part is a unit direction times slow_scale: changing the scale moves x by it
    x_1 = slow_events_sequences(n_seq=16, length=32, seed=3, slow_states="continuous", slow_scale=1.0)[0]
    torch.testing.assert_close((x_c - x_1).norm(dim=-1), torch.ones(16, 32), rtol=0, atol=1e-5)


def test_rejects_an_unknown_slow_state_kind():
    with pytest.raises(ConfigError, match="slow_states"):
        slow_events_sequences(n_seq=2, length=4, slow_states="drifting")


def test_state_variance_share_analytic_cases():
    g = torch.Generator().manual_seed(0)
    state = torch.arange(50).repeat_interleave(400)
    signal = torch.randn(50, 6, generator=g)
    assert state_variance_share(signal[state], state) == pytest.approx(1.0)
    assert state_variance_share(torch.ones(state.numel(), 6), state) == 0.0
    noise = torch.randn(state.numel(), 6, generator=g)
    assert state_variance_share(noise, state) < 0.01  # about (50 - 1) / (20000 - 1)
    # equal signal and noise variance: half of the variance is explained by the state
    signal = signal / signal.std(0)
    share = state_variance_share(signal[state] + noise, state)
    assert share == pytest.approx(0.5, abs=0.05)


def test_latent_persistence_hand_case():
    codes = torch.zeros(1, 6, 3)
    codes[0, :, 0] = 1.0  # always on
    codes[0, ::2, 1] = 2.0  # on, off, on, off, ...
    assert latent_persistence(codes).tolist() == [1.0, 0.0, 0.0]


def test_boundary_auroc_reports_the_separation_measures():
    rec = boundary_auroc(steps=3, width=32, k=4, slow_states="continuous", slow_scale=1.0)
    for key in ("topk_boundary_auroc", "temporal_boundary_auroc"):
        assert 0.0 <= rec[key] <= 1.0
    for key in ("temporal_pred_state_share", "temporal_novel_state_share", "topk_transient_state_share"):
        assert 0.0 <= rec[key] <= 1.0
    assert 0 <= rec["topk_persistent_latents"] <= 32
    assert (rec["topk_persistent_state_share"] is None) == (rec["topk_persistent_latents"] == 0)
    assert rec["slow_states"] == "continuous" and rec["slow_scale"] == 1.0
