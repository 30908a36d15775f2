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
    probe_reps,
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


def test_probe_reads_the_representation_of_the_renoised_sample():
    from geninterp.capture import ActivationCapture

    torch.manual_seed(0)
    model = ReLUVelocity(4, hidden=16).eval()
    x = torch.randn(6, 4)
    out = probe_reps(model, x, times=(1.0, 0.5), draws=3, generator=torch.Generator().manual_seed(1))
    assert set(out) == {"max_over_sum", "hoyer", "top8_share", "std"} and out["std"].shape == (2, 6)
    with torch.no_grad(), ActivationCapture(model, ["rep"]) as cap:
        model(x, torch.tensor(1.0))  # at t = 1 the probe sees the sample itself, whatever the noise
    torch.testing.assert_close(out["std"][0], feature_std(cap.outputs["rep"]))
    g = torch.Generator().manual_seed(1)
    expect = torch.zeros(6)
    for _ in range(3):  # the probe draws the noise of t = 1 first (multiplied by 0): skip those draws
        torch.randn(x.shape, generator=g)
    for _ in range(3):
        eps = torch.randn(x.shape, generator=g)
        with torch.no_grad(), ActivationCapture(model, ["rep"]) as cap:
            model(0.5 * x + 0.5 * eps, torch.tensor(0.5))
        expect += hoyer(cap.outputs["rep"]) / 3
    torch.testing.assert_close(out["hoyer"][1], expect)


@pytest.mark.slow
def test_dae_memorisation_transition():
    rows = dae_transition(sizes=(4, 64, 1597), steps=2000)["rows"]
    cos = [r["weight_data_cosine"] for r in rows]
    gap = [r["test_over_train_error"] for r in rows]
    assert cos[0] > cos[1] > cos[2]  # few images: encoder rows are the images themselves
    assert gap[0] > 5 * gap[2] and gap[2] < 1.2  # many images: test error close to training error
