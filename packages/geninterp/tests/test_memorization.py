"""Memorisation tooling: spikiness measures, labels, steering hooks; the DAE transition (slow)."""

from __future__ import annotations

import math

import pytest
import torch

from geninterp.memorization import (
    SPIKINESS_MEASURES,
    ReLUVelocity,
    auroc_table,
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
    assert set(spikes) == {"rep"} and set(spikes["rep"]) == {"max_over_sum", "hoyer", "top8_share", "std"}
    assert spikes["rep"]["hoyer"].shape == (4, 5)


def test_sampling_scores_match_the_mlp_reference_loop():
    """Regression: the tap-generic sampler gives, on the MLP's ``rep``, exactly what the original single-tap
    sampler computed (an Euler loop reading ``rep`` with a hook and applying every measure to it)."""
    from geninterp.capture import ActivationCapture

    torch.manual_seed(1)
    model = ReLUVelocity(6, hidden=32).eval()
    noise = torch.randn(7, 6)
    x, spikes = sample_with_reps(model, noise, nfe=5)
    ref_x, ref = noise.clone(), {name: [] for name in SPIKINESS_MEASURES}
    with torch.no_grad():
        for i in range(5):
            with ActivationCapture(model, ["rep"]) as cap:
                v = model(ref_x, torch.tensor(i / 5))
            for name, fn in SPIKINESS_MEASURES.items():
                ref[name].append(fn(cap.outputs["rep"]))
            ref_x = ref_x + v / 5
    torch.testing.assert_close(x, ref_x, rtol=0, atol=0)
    for name in SPIKINESS_MEASURES:
        torch.testing.assert_close(spikes["rep"][name], torch.stack(ref[name]), rtol=0, atol=0)


def test_auroc_table_windows_and_probe_times():
    from sklearn.metrics import roc_auc_score

    g = torch.Generator().manual_seed(0)
    label = torch.tensor([True, False, True, False, False, True, False, False])
    per_step = torch.rand(8, 8, generator=g)  # [nfe, B]
    probe = torch.rand(2, 8, generator=g)  # [times, B]
    table = auroc_table({"tap": {"std": per_step}}, {"tap": {"std": probe}}, label, times=(0.5, 0.9))
    got = {r["window"]: r["auroc"] for r in table}
    assert list(got) == ["early", "middle", "late", "final, t=0.5", "final, t=0.9"]
    expect = {
        "early": per_step[:2].mean(0), "middle": per_step[2:6].mean(0), "late": per_step[6:].mean(0),
        "final, t=0.5": probe[0], "final, t=0.9": probe[1],
    }  # fmt: skip
    for window, score in expect.items():
        assert got[window] == pytest.approx(roc_auc_score(label.numpy(), score.numpy()))
    assert all(r["tap"] == "tap" and r["measure"] == "std" for r in table)


def test_probe_reads_the_representation_of_the_renoised_sample():
    from geninterp.capture import ActivationCapture

    torch.manual_seed(0)
    model = ReLUVelocity(4, hidden=16).eval()
    x = torch.randn(6, 4)
    out = probe_reps(model, x, times=(1.0, 0.5), draws=3, generator=torch.Generator().manual_seed(1))
    assert set(out) == {"rep"} and set(out["rep"]) == {"max_over_sum", "hoyer", "top8_share", "std"}
    assert out["rep"]["std"].shape == (2, 6)
    with torch.no_grad(), ActivationCapture(model, ["rep"]) as cap:
        model(x, torch.tensor(1.0))  # at t = 1 the probe sees the sample itself, whatever the noise
    torch.testing.assert_close(out["rep"]["std"][0], feature_std(cap.outputs["rep"]))
    g = torch.Generator().manual_seed(1)
    expect = torch.zeros(6)
    for _ in range(3):  # the probe draws the noise of t = 1 first (multiplied by 0): skip those draws
        torch.randn(x.shape, generator=g)
    for _ in range(3):
        eps = torch.randn(x.shape, generator=g)
        with torch.no_grad(), ActivationCapture(model, ["rep"]) as cap:
            model(0.5 * x + 0.5 * eps, torch.tensor(0.5))
        expect += hoyer(cap.outputs["rep"]) / 3
    torch.testing.assert_close(out["rep"]["hoyer"][1], expect)


@pytest.mark.slow
def test_dae_memorisation_transition():
    rows = dae_transition(sizes=(4, 64, 1597), steps=2000)["rows"]
    cos = [r["weight_data_cosine"] for r in rows]
    gap = [r["test_over_train_error"] for r in rows]
    assert cos[0] > cos[1] > cos[2]  # few images: encoder rows are the images themselves
    assert gap[0] > 5 * gap[2] and gap[2] < 1.2  # many images: test error close to training error


def test_spikiness_measures_of_an_all_zero_representation_stay_in_range():
    """A silent ReLU layer is not 'maximally spiky': every measure gives 0, none leaves [0, 1]."""
    zero = torch.zeros(3, 16)
    for name, fn in SPIKINESS_MEASURES.items():
        torch.testing.assert_close(fn(zero), torch.zeros(3), msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_experiment_tasks_train_on_cuda_and_hand_back_cpu_models() -> None:
    """The engine trains on CUDA when there is one and hands the losses a CUDA generator: the DAE and EDM losses drew
    their noise on the CPU from it (refused), and the trained networks came back on the GPU while the experiments
    evaluate them on CPU tensors."""
    from geninterp.iem_experiments import DenoiserTask, EDMDenoiser, train_digit_denoiser
    from geninterp.memorization import DAETask, ReLUDAE, _fit

    cuda = torch.device("cuda")
    gen = torch.Generator(device=cuda).manual_seed(0)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    dae, den = ReLUDAE(8, 12).to(cuda), EDMDenoiser(8).to(cuda)
    for task, model in ((DAETask(dae, 0.5), dae), (DenoiserTask(den), den)):
        loss, _ = task.loss(model, (x.to(cuda),), gen)
        assert loss.device.type == "cuda" and torch.isfinite(loss)
    model = _fit(DAETask(ReLUDAE(8, 12), 0.5), x, 3, 64, 1e-3, 0, False)
    assert next(model.parameters()).device.type == "cpu" and torch.isfinite(model(x)).all()
    den = train_digit_denoiser(x, steps=3, seed=0)
    assert next(den.parameters()).device.type == "cpu" and torch.isfinite(den(x, torch.ones(256))).all()


def test_top_share_takes_the_largest_units():
    h = torch.tensor([[4.0, 1.0, 0.0, 3.0, 2.0]])
    torch.testing.assert_close(top_share(h, 2), torch.tensor([0.7]))
    torch.testing.assert_close(hoyer(h), (math.sqrt(5) - 10 / math.sqrt(30)) / (math.sqrt(5) - 1) * torch.ones(1))


def test_memorised_labels_threshold_is_strict_and_one_third():
    train = torch.tensor([[0.0, 0.0], [4.0, 0.0]])
    samples = torch.tensor([[1.0, 0.0], [1.2, 0.0], [0.9, 0.0]])  # distance ratios 1/3, 0.43, 0.29
    assert memorised_labels(samples, train).tolist() == [False, False, True]


def test_steering_adds_the_vector_then_relu_before_steer_until():
    """Against a hand-written Euler loop: ``rep = ReLU(ReLU(inp(x, t)) + e)`` while ``t < steer_until``, plain after."""
    torch.manual_seed(2)
    model = ReLUVelocity(4, hidden=16).eval()
    noise = torch.randn(5, 4)
    e = torch.randn(16) * 2
    got, _ = sample_with_reps(model, noise, nfe=4, steer=e, steer_until=0.5)
    x = noise.clone()
    with torch.no_grad():
        for i in range(4):
            t = torch.tensor(i / 4)
            inner = model.inp(torch.cat([x, model.time_embed(t.expand(5)).to(x.dtype)], -1))
            rep = torch.relu(torch.relu(inner) + e) if i / 4 < 0.5 else torch.relu(inner)
            x = x + model.out(rep) / 4
    torch.testing.assert_close(got, x)


def test_memorised_labels_need_two_training_images():
    from gencore.errors import InputError

    with pytest.raises(InputError, match="at least two training images"):
        memorised_labels(torch.randn(3, 4), torch.randn(1, 4))


def test_memorised_labels_count_a_repeated_training_image_once():
    """Given training rows in which an image repeats (the duplicated set itself), a copy of that image used to be
    'not memorised': its own repeat was the second-nearest image, at the same distance."""
    train = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    samples = torch.tensor([[0.1, 0.0], [5.0, 0.0], [0.0, 9.0]])
    repeated = torch.cat([train, train[:1].repeat(4, 1)])
    assert (
        memorised_labels(samples, repeated).tolist() == memorised_labels(samples, train).tolist() == [True, False, True]
    )
    rows, unique, _, _ = duplicated_training_set(n_unique=20, n_duplicated=3, copies=5)
    assert torch.equal(memorised_labels(rows[:10], rows), memorised_labels(rows[:10], unique))
    assert memorised_labels(rows[:10], rows).all()  # every training image is its own nearest, at distance 0
    from gencore.errors import InputError

    with pytest.raises(InputError, match="at least two training images"):
        memorised_labels(samples, train[:1].repeat(3, 1))


def test_detection_windows_need_four_sampling_steps():
    """With fewer than 4 Euler steps the 'early' window was empty: a NaN score, then an unrelated roc_auc error (or,
    with one class, a silent NaN AUROC)."""
    from gencore.errors import ConfigError
    from geninterp.memorization import detection

    per_step = torch.rand(3, 6, generator=torch.Generator().manual_seed(0))
    label = torch.tensor([True, False, True, False, False, True])
    with pytest.raises(ConfigError, match="nfe >= 4"):
        auroc_table({"rep": {"std": per_step}}, {"rep": {"std": torch.rand(4, 6)}}, label)
    with pytest.raises(ConfigError, match="nfe >= 4"):
        detection(n_samples=8, nfe=3, model=ReLUVelocity(64, hidden=16).eval())
    with pytest.raises(ConfigError, match="nfe >= 1"):
        sample_with_reps(ReLUVelocity(4, hidden=16).eval(), torch.randn(2, 4), nfe=0)


def test_top_share_of_a_representation_with_at_most_k_units_is_all_of_it():
    h = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    torch.testing.assert_close(top_share(h, 8), torch.ones(2))
    torch.testing.assert_close(top_share(h, 1), torch.tensor([0.5, 1.0]))


def test_experiment_sizes_outside_the_data_are_refused():
    """1,797 digits, 200 held out: a DAE size of 2,000 used to train on 1,597 and report n_train = 2000, and a
    duplicated set of more images than exist silently held fewer."""
    from gencore.errors import ConfigError

    with pytest.raises(ConfigError, match=r"must lie in 1\.\.1597"):
        dae_transition(sizes=(4, 2000), steps=1)
    with pytest.raises(ConfigError, match=r"must lie in 1\.\.1597"):
        dae_transition(sizes=(0,), steps=1)
    for kw in ({"n_unique": 2000}, {"n_unique": 5, "n_duplicated": 6}, {"copies": 0}):
        with pytest.raises(ConfigError, match="n_duplicated <= n_unique"):
            duplicated_training_set(**kw)


def test_steering_directions_read_the_path_with_data_at_t_one():
    """The class directions come from ``x_t = (1 - t) x0 + t x`` (t = 0 noise, t = 1 data): the model sees, at
    t = 0.2 and 0.4, the digits plus noise whose standardised part ``(x_t - t x) / (1 - t)`` is N(0, 1)."""
    from geninterp.memorization import digits_scaled, steering

    torch.manual_seed(0)
    net = ReLUVelocity(64, hidden=16).eval()
    seen = []

    class Recorder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rep = net.rep

        def forward(self, x, t):
            seen.append((x.clone(), float(t)))
            return net(x, t)

    steering(Recorder(), n_samples=2, nfe=4, strength=1.0)
    data, _ = digits_scaled()
    probes = [(x, t) for x, t in seen if x.shape[0] == len(data)]
    assert sorted(t for _, t in probes) == pytest.approx([0.2, 0.4])
    for x, t in probes:
        z = (x - t * data) / (1 - t)
        assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1) < 0.02


def test_auroc_table_reports_the_mean_score_of_each_class():
    """``mean_memorised`` averages the score over the memorised samples, ``mean_other`` over the rest."""
    label = torch.tensor([True, False, False, True])
    per_step = torch.tensor([[1.0, 2.0, 4.0, 3.0]]).repeat(4, 1)  # the same score at every step
    probe = torch.tensor([[10.0, 0.0, 2.0, 6.0]])
    table = auroc_table({"tap": {"std": per_step}}, {"tap": {"std": probe}}, label, times=(0.5,))
    by = {r["window"]: r for r in table}
    for window in ("early", "middle", "late"):
        assert by[window]["mean_memorised"] == pytest.approx(2.0) and by[window]["mean_other"] == pytest.approx(3.0)
    assert by["final, t=0.5"]["mean_memorised"] == pytest.approx(8.0)
    assert by["final, t=0.5"]["mean_other"] == pytest.approx(1.0)


def test_memorised_labels_against_brute_force_with_planted_copies_in_any_dtype():
    """Planted near-copies of training images among fresh samples: the labels equal the 1/3 rule computed pair by
    pair; float64 samples against float32 images used to raise a dtype error from ``cdist``, and samples of the wrong
    width an unrelated one."""
    from gencore.errors import InputError

    g = torch.Generator().manual_seed(0)
    train = torch.rand(40, 64, generator=g) * 2 - 1
    samples = torch.cat([train[:8] + 1e-3 * torch.randn(8, 64, generator=g), torch.rand(32, 64, generator=g) * 2 - 1])
    want = []
    for s in samples.double():
        d = sorted(float((s - t).pow(2).sum().sqrt()) for t in train.double())
        want.append(d[0] < d[1] / 3)
    assert sum(want[:8]) == 8 and sum(want[8:]) == 0
    assert memorised_labels(samples, train).tolist() == want
    assert memorised_labels(samples.double(), train).tolist() == want
    assert memorised_labels(train[:5], train).all()  # exact copies
    with pytest.raises(InputError, match=r"samples \[B, 64\]"):
        memorised_labels(samples[:, :10], train)
