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


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"n_topics": 1}, "n_topics must be an integer of at least 2"),
        ({"mean_segment": 0}, "mean_segment must be a finite number of tokens of at least 1"),
        ({"mean_segment": 0.5}, "mean_segment must be a finite number of tokens of at least 1"),
        ({"events_per_token": 9, "n_events": 8}, "events_per_token \\(9\\) must not exceed n_events \\(8\\)"),
        ({"length": 2.5}, "length must be an integer of at least 1"),
        ({"noise": float("nan")}, "noise must be a non-negative finite number"),
        ({"slow_scale": float("inf")}, "slow_scale must be a non-negative finite number"),
    ],
)
def test_slow_events_settings_are_checked(setting, message):
    """One topic (no other topic to switch to), a zero mean segment and more events per token than events used to be
    RuntimeError/ZeroDivisionError tracebacks; a segment shorter than a token silently switched at every token."""
    with pytest.raises(ConfigError, match=message):
        slow_events_sequences(**({"n_seq": 2, "length": 4} | setting))


def _signed_identity(arch: str, d: int = 2):
    """Atoms ``[I; -I]``, encoder their transpose, ``k = d``, zero biases: the codes of ``u`` are ``ReLU([u, -u])``."""
    from geninterp.saes import make_sae

    extra = {"n_heads": 2, "attn_dim": 4} if arch == "temporal" else {}
    sae = make_sae(arch, d_in=d, width=2 * d, k=d, **extra).double()
    signed = torch.cat([torch.eye(d), -torch.eye(d)]).double()
    with torch.no_grad():
        sae.W_dec.copy_(signed)
        sae.W_enc.copy_(signed.T)
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    return sae


def test_topk_novelty_is_the_code_energy_of_latents_silent_at_the_previous_token():
    from geninterp.temporal_experiments import novelty_scores

    sae = _signed_identity("topk")
    x = torch.tensor([[[1.0, 2.0], [3.0, -1.0], [3.0, -1.0], [-2.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    # codes: [1, 2, 0, 0], [3, 0, 0, 1] (latent 3 new: 1 of 10), the same again, [0, 0, 2, 0] (all new), none
    torch.testing.assert_close(novelty_scores(sae, x), torch.tensor([[1.0, 0.1, 0.0, 1.0, 0.0]], dtype=torch.float64))


def test_temporal_novelty_is_the_novel_share_of_the_energy():
    """No prediction (the output map's ReLU is off): every token is all novel (1); no novel code (encoder bias far
    below zero) while the past predicts a direction: nothing is novel (0)."""
    from geninterp.temporal_experiments import novelty_scores

    x = torch.randn(2, 5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    sae = _signed_identity("temporal")
    with torch.no_grad():
        sae.o_proj.weight.zero_()
        sae.o_proj.bias.fill_(-1.0)
    torch.testing.assert_close(novelty_scores(sae, x), torch.ones(2, 5, dtype=torch.float64))
    with torch.no_grad():
        sae.o_proj.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))  # predicts atom 0 at every token
        sae.b_enc.fill_(-100.0)
    out = sae(x)
    assert not out.codes.any() and out.pred_recon.abs().sum() > 0
    torch.testing.assert_close(novelty_scores(sae, x), torch.zeros(2, 5, dtype=torch.float64))


def test_latent_persistence_conditions_on_the_previous_token_against_brute_force():
    """P(on at t | on at t-1): the denominator counts activity at t-1, so a latent switching on at the last two
    tokens persists with probability 1 (counting activity at t instead would give 1/2)."""
    codes = torch.zeros(1, 4, 1)
    codes[0, 2:, 0] = 1.0
    assert latent_persistence(codes).tolist() == [1.0]
    z = torch.relu(torch.randn(3, 7, 5, generator=torch.Generator().manual_seed(0)))
    want = []
    for j in range(5):
        prev = [(b, t) for b in range(3) for t in range(1, 7) if z[b, t - 1, j] > 0]
        want.append(sum(bool(z[b, t, j] > 0) for b, t in prev) / max(len(prev), 1))
    torch.testing.assert_close(latent_persistence(z), torch.tensor(want, dtype=torch.float64))
