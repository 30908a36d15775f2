"""Memorisation tooling: spikiness measures, labels, steering hooks; the DAE transition (slow)."""

from __future__ import annotations

import pytest
import torch

from geninterp.memorization import (
    ReLUVelocity,
    dae_transition,
    duplicated_training_set,
    feature_std,
    hoyer,
    memorised_labels,
    sample_with_reps,
    spikiness,
    top_share,
)


def test_spikiness_measures_on_extremes():
    one_hot = torch.zeros(2, 16)
    one_hot[:, 3] = 2.0
    flat = torch.ones(2, 16)
    torch.testing.assert_close(spikiness(one_hot), torch.ones(2))
    torch.testing.assert_close(spikiness(flat), torch.full((2,), 1 / 16))
    torch.testing.assert_close(hoyer(one_hot), torch.ones(2))
    torch.testing.assert_close(hoyer(flat), torch.zeros(2), atol=1e-6, rtol=0)
    torch.testing.assert_close(top_share(flat, 4), torch.full((2,), 0.25))
    # std of one unit at 2 among 16: sqrt((2 - 1/8)^2 + 15 (1/8)^2) / sqrt(15) = 2 / 4 = 0.5; flat: 0
    torch.testing.assert_close(feature_std(one_hot), torch.full((2,), 0.5))
    torch.testing.assert_close(feature_std(flat), torch.zeros(2))


def test_memorised_labels_ratio_rule():
    train = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    samples = torch.tensor([[0.1, 0.0], [5.0, 0.0], [0.0, 9.0]])
    assert memorised_labels(samples, train).tolist() == [True, False, True]


def test_duplicated_training_set():
    rows, unique, labels, dup = duplicated_training_set(n_unique=20, n_duplicated=3, copies=5)
    assert rows.shape == (20 + 3 * 4, 64) and unique.shape == (20, 64) and labels.shape == (20,)
    assert int(dup.sum()) == 3
    counts = (torch.cdist(rows, unique) < 1e-6).sum(0)
    assert counts[:3].tolist() == [5, 5, 5] and torch.all(counts[3:] == 1)


def test_sampling_with_and_without_steering():
    torch.manual_seed(0)
    model = ReLUVelocity(4, hidden=16).eval()
    noise = torch.randn(5, 4)
    a, spikes = sample_with_reps(model, noise, nfe=4)
    b, _ = sample_with_reps(model, noise, nfe=4, steer=torch.zeros(16))
    c, _ = sample_with_reps(model, noise, nfe=4, steer=torch.ones(16))
    torch.testing.assert_close(a, b)
    assert not torch.allclose(a, c)
    assert set(spikes) == {"max_over_sum", "hoyer", "top8_share", "std"} and spikes["hoyer"].shape == (4, 5)


@pytest.mark.slow
def test_dae_memorisation_transition():
    rows = dae_transition(sizes=(4, 64, 1597), steps=2000)["rows"]
    cos = [r["weight_data_cosine"] for r in rows]
    gap = [r["test_over_train_error"] for r in rows]
    assert cos[0] > cos[1] > cos[2]  # few images: encoder rows are the images themselves
    assert gap[0] > 5 * gap[2] and gap[2] < 1.2  # many images: test error close to training error
