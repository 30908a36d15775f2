"""Metrics against closed forms and reference implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import linalg

from genimage.metrics import (
    frechet_distance,
    frechet_distance_from_stats,
    kernel_inception_distance,
    knn_precision_recall,
    radial_power_spectrum,
    spectral_errors,
)


def test_frechet_closed_form_for_diagonal_gaussians() -> None:
    mu_a, mu_b = np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 0.0])
    va, vb = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 1.0])
    expected = ((mu_a - mu_b) ** 2).sum() + ((np.sqrt(va) - np.sqrt(vb)) ** 2).sum()
    assert frechet_distance_from_stats(mu_a, np.diag(va), mu_b, np.diag(vb)) == pytest.approx(expected)


def test_frechet_matches_scipy_sqrtm_reference() -> None:
    g = np.random.default_rng(0)
    a, b = g.standard_normal((5, 5)), g.standard_normal((5, 5))
    ca, cb = a @ a.T + 0.1 * np.eye(5), b @ b.T + 0.1 * np.eye(5)
    mu_a, mu_b = g.standard_normal(5), g.standard_normal(5)
    covmean = linalg.sqrtm(ca @ cb).real
    ref = ((mu_a - mu_b) ** 2).sum() + np.trace(ca + cb - 2 * covmean)
    assert frechet_distance_from_stats(mu_a, ca, mu_b, cb) == pytest.approx(ref, rel=1e-8)


def test_frechet_of_samples_is_small_for_same_law_and_grows_with_shift() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(4000, 4, generator=g), torch.randn(4000, 4, generator=g)
    same = frechet_distance(a, b)
    shifted = frechet_distance(a, b + 1.0)
    assert same < 0.02
    # a shift moves only the mean term: FD(a, b + 1) = FD(a, b) - |dm|^2 + |dm - 1|^2
    dm = (a.double().mean(0) - b.double().mean(0)).numpy()
    assert shifted == pytest.approx(same - (dm**2).sum() + ((dm - 1) ** 2).sum(), rel=1e-9)


def test_kid_is_unbiased_and_detects_a_shift() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(600, 8, generator=g), torch.randn(600, 8, generator=g)
    same = kernel_inception_distance(a, b, subset_size=200, n_subsets=40)
    assert abs(same.mean) < 3 * same.std / math.sqrt(40) + 1e-3  # unbiased: centred on 0
    moved = kernel_inception_distance(a, b + 0.5, subset_size=200, n_subsets=40)
    # k(x, y) = (x.y/d + 1)^3; a mean shift m changes the MMD by about 3 |m|^2 / d for unit Gaussians
    assert moved.mean > 10 * max(same.std, 1e-4)


def test_knn_precision_recall_extremes() -> None:
    g = torch.Generator().manual_seed(2)
    real = torch.randn(300, 3, generator=g)
    assert knn_precision_recall(real, real.clone(), k=3) == {"precision_knn": 1.0, "recall_knn": 1.0}
    far = knn_precision_recall(real, real + 100.0, k=3)
    assert far == {"precision_knn": 0.0, "recall_knn": 0.0}
    # a generator that covers only half of the data: high precision, recall about one half
    half = real[real[:, 0] > 0]
    pr = knn_precision_recall(real, half, k=3)
    assert pr["precision_knn"] == 1.0 and 0.4 < pr["recall_knn"] < 0.75


def test_power_spectrum_of_white_noise_is_flat_and_of_a_wave_peaks_at_its_frequency() -> None:
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(256, 1, 32, 32, generator=g, dtype=torch.float64).float() * 0.3
    p = radial_power_spectrum(noise)
    assert p.shape == (17,)
    assert torch.allclose(p[1:], torch.full_like(p[1:], 0.09), rtol=0.15)  # E|FFT|^2 / (HW) = variance
    _yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    wave = torch.cos(2 * math.pi * 5 * xx / 32)[None, None] * 0.5
    assert int(radial_power_spectrum(wave)[1:].argmax()) + 1 == 5


def test_blur_raises_the_high_frequency_error_most() -> None:
    g = torch.Generator().manual_seed(4)
    ref = (torch.rand(64, 1, 32, 32, generator=g) * 2 - 1).float()
    other = (torch.rand(64, 1, 32, 32, generator=g) * 2 - 1).float()
    blurred = torch.nn.functional.avg_pool2d(other, 3, stride=1, padding=1)
    same = spectral_errors(other, ref)
    blur = spectral_errors(blurred, ref)
    assert same["hf_spectral_error"] < 0.05
    assert blur["hf_spectral_error"] > 10 * same["hf_spectral_error"]
    assert blur["hf_spectral_error"] > blur["spectral_error"]


def test_efflite0_features_are_deterministic_and_separate_content() -> None:
    from genimage.metrics import efflite0_features

    g = torch.Generator().manual_seed(5)
    flat = torch.zeros(4, 3, 16, 16) + torch.linspace(-0.5, 0.5, 4)[:, None, None, None]
    noisy = torch.rand(4, 3, 16, 16, generator=g) * 2 - 1
    f1 = efflite0_features(torch.cat([flat, noisy]), input_px=64)
    f2 = efflite0_features(torch.cat([flat, noisy]), input_px=64)
    assert f1.shape == (8, 1280) and torch.equal(f1, f2)
    within = torch.cdist(f1[:4], f1[:4]).mean()
    across = torch.cdist(f1[:4], f1[4:]).mean()
    assert across > within
    gray = efflite0_features(flat[:, :1], input_px=64)
    assert torch.allclose(gray, efflite0_features(flat[:, :1].expand(-1, 3, -1, -1), input_px=64))


@pytest.mark.parametrize(("subset_size", "n_subsets"), [(1, 5), (-5, 5), (10, 0)])
def test_kid_refuses_subset_settings_that_give_nan_or_a_wrong_slice(subset_size: int, n_subsets: int) -> None:
    from gencore.errors import ConfigError

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(30, 4, generator=g), torch.randn(30, 4, generator=g)
    with pytest.raises(ConfigError, match="subset"):
        kernel_inception_distance(a, b, subset_size=subset_size, n_subsets=n_subsets)


def test_distances_refuse_non_finite_features() -> None:
    from gencore.errors import InputError

    a = torch.randn(10, 3)
    bad = a.clone()
    bad[2, 1] = float("nan")
    with pytest.raises(InputError, match="finite"):
        frechet_distance(bad, a)
    with pytest.raises(InputError, match="finite"):
        kernel_inception_distance(a, bad)
    with pytest.raises(InputError, match="finite"):
        knn_precision_recall(a, bad)


@pytest.mark.parametrize(("k", "block"), [(0, 8), (-1, 8), (3, 0)])
def test_knn_refuses_non_positive_k_and_block(k: int, block: int) -> None:
    from gencore.errors import ConfigError

    a, b = torch.randn(10, 3), torch.randn(10, 3)
    with pytest.raises(ConfigError, match="k-NN"):
        knn_precision_recall(a, b, k=k, block=block)


def test_spectral_errors_refuse_mismatched_sizes_and_degenerate_images() -> None:
    from gencore.errors import InputError

    with pytest.raises(InputError, match="one size"):
        spectral_errors(torch.zeros(2, 1, 16, 16), torch.zeros(2, 1, 8, 8))
    with pytest.raises(InputError, match="2x2"):
        spectral_errors(torch.zeros(2, 1, 1, 1), torch.zeros(2, 1, 1, 1))
    with pytest.raises(InputError, match="at least one image"):
        radial_power_spectrum(torch.zeros(0, 1, 8, 8))


def test_a_conditional_run_is_sampled_with_every_class_against_an_unlabelled_reference(digits_run, monkeypatch):
    """Against an unlabelled reference set a class-conditional run still gets labels (so --cfg-scale guides);
    with a labelled reference it gets the reference's labels."""
    import genimage.evaluate as ev
    from genimage.data import ImageSet, load_image_set
    from genimage.runs import load_run

    seen = []

    def fake_sample_images(run, n, labels, **kw):
        seen.append(labels)
        return torch.rand(n, *run.image_shape, generator=torch.Generator().manual_seed(0)) * 2 - 1

    monkeypatch.setattr(ev, "sample_images", fake_sample_images)
    run = load_run(digits_run)
    data = load_image_set("digits")
    unlabelled = ImageSet(data.images[:40], None, None, name="mine")
    ev.evaluate_run(run, n=12, input_px=32, bpd_images=0, reference=unlabelled, cache_dir=None, progress=False)
    assert seen[-1] is not None and seen[-1].tolist() == [i % run.num_classes for i in range(12)]
    ev.evaluate_run(run, n=12, input_px=32, bpd_images=0, reference=data, cache_dir=None, progress=False)
    assert seen[-1] is not None and len(seen[-1]) == 12


def test_training_the_classifier_leaves_the_callers_global_rng_alone():
    """Its initial weights come from ``seed``; the caller's random stream is not reseeded by it."""
    from genimage.data import ImageSet
    from genimage.metrics.classifier import train_classifier

    g = torch.Generator().manual_seed(0)
    data = ImageSet(torch.rand(40, 1, 8, 8, generator=g) * 2 - 1, torch.randint(0, 3, (40,), generator=g))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a, _ = train_classifier(data, epochs=1, seed=4, batch_size=16)
    assert torch.equal(torch.rand(3), expected)  # it used to reseed the global generator with the seed
    torch.manual_seed(7)  # another global state: the same network
    b, _ = train_classifier(data, epochs=1, seed=4, batch_size=16)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
