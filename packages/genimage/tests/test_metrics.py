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


def _kid_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Unbiased MMD^2 with k(x, y) = (x . y / d + 1)^3, written out pair by pair (Binkowski et al. 2018, eq. 3)."""
    m, d = x.shape

    def k(p: np.ndarray, q: np.ndarray) -> float:
        return (float(np.dot(p, q)) / d + 1.0) ** 3

    xx = sum(k(x[i], x[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    yy = sum(k(y[i], y[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    xy = sum(k(x[i], y[j]) for i in range(m) for j in range(m)) / (m * m)
    return xx + yy - 2 * xy


def test_kid_matches_a_pairwise_cubic_kernel_mmd_on_one_subset_of_all_points() -> None:
    # one subset holding every point: the subset order does not matter, so the reference needs no generator.
    # Features of norm ~ sqrt(d) and a scaled, shifted second set make x.y/d of order 1, where a quadratic or
    # linear kernel, or a kernel without the 1/d, gives another number
    g = torch.Generator().manual_seed(11)
    a = torch.randn(24, 6, generator=g)
    b = 1.4 * torch.randn(24, 6, generator=g) + 0.3
    res = kernel_inception_distance(a, b, subset_size=24, n_subsets=1, seed=5)
    assert res.subset_size == 24 and res.n_subsets == 1 and res.std == 0.0
    ref = _kid_reference(a.double().numpy(), b.double().numpy())
    assert abs(ref) > 0.1  # far from 0, so a relative tolerance means something
    assert res.mean == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize(("subset_size", "m"), [(12, 12), (100, 20)])
def test_kid_averages_subsets_drawn_as_documented(subset_size: int, m: int) -> None:
    # subsets: per subset one randperm of a, then one of b, from torch.Generator().manual_seed(seed); the subset
    # size is capped at the smaller set; mean and (population) std over the subsets
    g = torch.Generator().manual_seed(12)
    a = torch.randn(30, 5, generator=g)
    b = 0.8 * torch.randn(20, 5, generator=g) - 0.4
    res = kernel_inception_distance(a, b, subset_size=subset_size, n_subsets=4, seed=7)
    assert res.subset_size == m and res.n_subsets == 4
    gen = torch.Generator().manual_seed(7)
    values = []
    for _ in range(4):
        ia = torch.randperm(30, generator=gen)[:m]
        ib = torch.randperm(20, generator=gen)[:m]
        values.append(_kid_reference(a[ia].double().numpy(), b[ib].double().numpy()))
    assert len(set(values)) == 4  # the subsets differ, so the averaging is exercised
    assert res.mean == pytest.approx(float(np.mean(values)), rel=1e-10)
    assert res.std == pytest.approx(float(np.std(values)), rel=1e-8)


def _knn_reference(real: np.ndarray, fake: np.ndarray, k: int) -> tuple[float, float, float]:
    """Brute-force k-NN precision and recall (Kynkaanniemi et al. 2019) and the smallest |distance - radius|."""

    def radii(x: np.ndarray) -> np.ndarray:
        out = []
        for i in range(len(x)):
            others = [float(np.linalg.norm(x[i] - x[j])) for j in range(len(x)) if j != i]
            out.append(sorted(others)[k - 1])  # k-th nearest among the other points
        return np.array(out)

    def covered(queries: np.ndarray, points: np.ndarray, r: np.ndarray) -> tuple[float, float]:
        dist = np.array([[float(np.linalg.norm(q - p)) for p in points] for q in queries])
        return float((dist <= r[None]).any(axis=1).mean()), float(np.abs(dist - r[None]).min())

    precision, gap_p = covered(fake, real, radii(real))
    recall, gap_r = covered(real, fake, radii(fake))
    return precision, recall, min(gap_p, gap_r)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("block", [7, 1024])
def test_knn_precision_recall_match_a_brute_force_reference(k: int, block: int) -> None:
    # overlapping but different laws, so neither metric is 0 or 1 and a radius one neighbour short (the point
    # counted as its own nearest neighbour) or one too far changes the answer
    g = torch.Generator().manual_seed(20 + k)
    real = torch.randn(45, 4, generator=g, dtype=torch.float64)
    fake = 0.8 * torch.randn(38, 4, generator=g, dtype=torch.float64) + 1.0
    precision, recall, gap = _knn_reference(real.numpy(), fake.numpy(), k)
    assert gap > 1e-9  # no ties: the float rounding of the distances cannot decide a point
    assert 0.1 < precision < 0.95 and 0.1 < recall < 0.95
    got = knn_precision_recall(real, fake, k=k, block=block)
    assert got == {"precision_knn": pytest.approx(precision, abs=1e-12), "recall_knn": pytest.approx(recall, abs=1e-12)}


def test_knn_counts_a_point_on_the_boundary_of_a_ball() -> None:
    # on a line, integer coordinates (exact distances): real points 0, 1, 3, 7 with k = 1 have radii 1, 1, 2, 4;
    # fake 11 lies exactly on the ball of 7 (counted, <=), fake 11.5 and -1.5 outside every ball,
    real = torch.tensor([[0.0], [1.0], [3.0], [7.0]])
    fake = torch.tensor([[11.0], [11.5], [-1.5], [2.0]])
    # and fake 2 on the ball of 1; fake radii 0.5, 0.5, 3.5, 3.5 cover real 0, 1 and 3, not 7 (4 from 11)
    assert knn_precision_recall(real, fake, k=1) == {"precision_knn": 0.5, "recall_knn": 0.75}


def _fd_parts(a: torch.Tensor, b: torch.Tensor) -> tuple[float, np.ndarray, np.ndarray]:
    """``|mu_a - mu_b|^2``, and the unbiased (ddof = 1) covariances of two feature sets, in float64."""
    x, y = a.double().numpy(), b.double().numpy()
    xc, yc = x - x.mean(0), y - y.mean(0)
    mean_term = float(((x.mean(0) - y.mean(0)) ** 2).sum())
    return mean_term, xc.T @ xc / (len(x) - 1), yc.T @ yc / (len(y) - 1)


def test_frechet_with_fewer_samples_than_features_matches_scipy_sqrtm() -> None:
    # 40 samples of 64 features: both covariances have rank 39, S_a S_b is singular, with round-off eigenvalues
    # of either sign; the reference is the classic pytorch-fid formula with scipy's sqrtm of S_a S_b
    g = torch.Generator().manual_seed(30)
    a = torch.randn(40, 64, generator=g)
    b = 1.3 * torch.randn(40, 64, generator=g) @ (torch.eye(64) + 0.2 * torch.randn(64, 64, generator=g)) + 0.2
    mean_term, ca, cb = _fd_parts(a, b)
    assert np.linalg.matrix_rank(ca) == 39 and np.linalg.matrix_rank(cb) == 39
    ref = mean_term + np.trace(ca) + np.trace(cb) - 2 * np.trace(linalg.sqrtm(ca @ cb)).real
    fd = frechet_distance(a, b)
    assert fd == pytest.approx(ref, rel=1e-7)
    # symmetric, and FD(a, a) = 0, up to the square roots of the 25 round-off eigenvalues of S_a^{1/2} S_a S_a^{1/2},
    # each about sqrt(eps) * |S_a|; a margin of 4 on top
    tol = 4 * 64 * math.sqrt(np.finfo(np.float64).eps) * max(np.linalg.eigvalsh(ca)[-1], np.linalg.eigvalsh(cb)[-1])
    assert frechet_distance(b, a) == pytest.approx(fd, abs=tol)
    assert abs(frechet_distance(a, a)) < tol and abs(frechet_distance(b, b)) < tol


def test_frechet_with_many_more_features_than_samples() -> None:
    # 40 samples of 256 features, the samples-to-features ratio of an FD-EffLite0 on 200 images (200 x 1280 takes
    # seconds on two busy cores: 0.6 s per FD, 3 s for scipy's sqrtm of the 1280 x 1280 S_a S_b). The reference
    # takes scipy's sqrtm of the same spectrum in 40 dimensions: with A the centred a over sqrt(n - 1),
    # S_a = A^T A, and the nonzero eigenvalues of S_a S_b = A^T (A S_b) are those of A S_b A^T
    g = torch.Generator().manual_seed(31)
    a = torch.rand(40, 256, generator=g) * torch.linspace(0.2, 2.0, 256)  # non-negative, like pooled ReLU6
    b = torch.rand(40, 256, generator=g) * torch.linspace(2.0, 0.2, 256) + 0.05
    mean_term, ca, cb = _fd_parts(a, b)
    x = a.double().numpy()
    big_a = (x - x.mean(0)) / math.sqrt(39)
    np.testing.assert_allclose(big_a.T @ big_a, ca, rtol=1e-9, atol=1e-15)
    ref = mean_term + np.trace(ca) + np.trace(cb) - 2 * np.trace(linalg.sqrtm(big_a @ cb @ big_a.T)).real
    fd = frechet_distance(a, b)
    assert fd == pytest.approx(ref, rel=1e-7)
    tol = 4 * 256 * math.sqrt(np.finfo(np.float64).eps) * max(np.linalg.eigvalsh(ca)[-1], np.linalg.eigvalsh(cb)[-1])
    assert frechet_distance(b, a) == pytest.approx(fd, abs=tol)
    assert abs(frechet_distance(a, a)) < tol
    assert abs(frechet_distance(a, a)) < 1e-9  # the null space's round-off made it -2e-6 here


def test_frechet_of_one_dimensional_features_is_the_closed_form() -> None:
    # 1-D Gaussians: FD = (mu_a - mu_b)^2 + (s_a - s_b)^2 with the ddof = 1 standard deviations; np.cov returns a
    # 0-d array for one feature, which eigh refused (LinAlgError) before
    g = torch.Generator().manual_seed(40)
    a = torch.randn(50, 1, generator=g, dtype=torch.float64)
    b = 2.0 * torch.randn(60, 1, generator=g, dtype=torch.float64) + 1.0
    x, y = a[:, 0].numpy(), b[:, 0].numpy()
    expected = (x.mean() - y.mean()) ** 2 + (x.std(ddof=1) - y.std(ddof=1)) ** 2
    assert frechet_distance(a, b) == pytest.approx(expected, rel=1e-12)


def test_efflite0_input_matches_the_statistics_the_network_was_trained_on() -> None:
    """Photos fed as ``efflite0_features`` feeds them (pixels / 127.5 - 1, resized to 224) give the stem
    convolution the per-channel output variance stored in its batch norm's running statistics (the network's
    ImageNet training inputs, TF-Lite scaled ``(pixel - 127) / 128``): median ratio 0.91 over the seven photos
    shipped with scikit-image, scikit-learn and matplotlib. Pixels in [0, 1] give 0.23, ImageNet mean/std
    normalisation (the architecture package's README) 4.4, twice the range 3.6."""
    from matplotlib import cbook
    from PIL import Image
    from skimage import data
    from sklearn.datasets import load_sample_images

    from genimage.metrics import efflite0_features
    from genimage.metrics.efflite import efficientnet_lite0

    photos = [data.chelsea(), data.coffee(), data.astronaut(), data.rocket(), *load_sample_images().images]
    with cbook.get_sample_data("grace_hopper.jpg") as f:
        photos.append(np.asarray(Image.open(f).convert("RGB")))
    net = efficientnet_lite0()
    seen = []
    hook = net._conv_stem.register_forward_hook(lambda mod, inp, out: seen.append(out.detach().double()))
    try:
        for p in photos:  # each at its own size, resized by efflite0_features
            efflite0_features(torch.from_numpy(np.array(p)).permute(2, 0, 1)[None].float() / 127.5 - 1.0)
    finally:
        hook.remove()
    ratio = torch.cat(seen).var(dim=(0, 2, 3)) / net._bn0.running_var.double()
    assert 0.5 < float(ratio.median()) < 2.0


def test_cached_reference_features_belong_to_the_reference_evaluated(digits_run, monkeypatch, tmp_path) -> None:
    """Two reference sets of one shape and size, evaluated with one cache folder: the second gets its own
    features (the cache key named only the run's data, the shape, n and the seed: it got the first set's)."""
    import genimage.evaluate as ev
    from genimage.data import ImageSet, load_image_set
    from genimage.runs import load_run

    def fake_sample_images(run, n, labels, **kw):
        return torch.rand(n, *run.image_shape, generator=torch.Generator().manual_seed(0)) * 2 - 1

    monkeypatch.setattr(ev, "sample_images", fake_sample_images)
    run = load_run(digits_run)
    data = load_image_set("digits")
    first = ImageSet(data.images[:40], None, None, name="first")
    second = ImageSet(data.images[40:80], None, None, name="second")
    kw = {"n": 12, "input_px": 32, "bpd_images": 0, "progress": False}
    ev.evaluate_run(run, reference=first, cache_dir=tmp_path, **kw)
    cached = ev.evaluate_run(run, reference=second, cache_dir=tmp_path, **kw)
    fresh = ev.evaluate_run(run, reference=second, cache_dir=None, **kw)
    for key in ("fd_efflite0", "kid_efflite0", "precision_knn", "recall_knn"):
        assert cached[key] == fresh[key]


def test_the_cached_classifier_belongs_to_the_labelled_set_evaluated(digits_run, monkeypatch, tmp_path) -> None:
    """A labelled ``reference`` set named like the run's data trains its own classifier; a later evaluation
    against another set of that name, with the same cache folder, does not load it (the folder named only the
    data and the image size, so it did, and scored the second set with the first set's classifier)."""
    import genimage.evaluate as ev
    from genimage.data import ImageSet, load_image_set
    from genimage.runs import load_run

    def fake_sample_images(run, n, labels, **kw):
        return torch.rand(n, *run.image_shape, generator=torch.Generator().manual_seed(0)) * 2 - 1

    monkeypatch.setattr(ev, "sample_images", fake_sample_images)
    run = load_run(digits_run)
    data = load_image_set("digits")
    small = ImageSet(data.images[:200], data.labels[:200], data.class_names, name=data.name)
    other = ImageSet(data.images[200:600], data.labels[200:600], data.class_names, name=data.name)
    kw = {"n": 12, "input_px": 32, "bpd_images": 0, "progress": False}
    ev.evaluate_run(run, reference=small, cache_dir=tmp_path, **kw)
    cached = ev.evaluate_run(run, reference=other, cache_dir=tmp_path, **kw)
    fresh = ev.evaluate_run(run, reference=other, cache_dir=None, **kw)
    assert cached["classifier_accuracy"] == fresh["classifier_accuracy"]
    assert cached["fd_classifier"] == pytest.approx(fresh["fd_classifier"], rel=1e-12)


@pytest.mark.parametrize(
    ("mu_b", "cov_b"),
    [
        (np.zeros(1), np.eye(3)),  # a [1] mean was broadcast against [3]: FD 3.0 of two 3-d Gaussians
        (np.zeros(2), np.eye(2)),  # stats of 2 features against 3 (a matmul traceback)
        (np.zeros(3), np.eye(2)),  # covariance of another D (a matmul traceback)
        (np.zeros(3), np.array(2.0)),  # a 0-d variance (a LinAlgError)
    ],
)
def test_frechet_from_stats_refuses_stats_of_mismatched_shapes(mu_b, cov_b) -> None:
    from gencore.errors import InputError

    with pytest.raises(InputError, match=r"means \[D\] and covariances \[D, D\]"):
        frechet_distance_from_stats(np.zeros(3), np.eye(3), mu_b, cov_b)
    with pytest.raises(InputError, match=r"means \[D\] and covariances \[D, D\]"):
        frechet_distance_from_stats(mu_b, cov_b, np.zeros(3), np.eye(3))


def test_frechet_from_stats_refuses_a_mean_shorter_than_its_covariance() -> None:
    from gencore.errors import InputError

    # means [2] with covariances [3, 3] gave 0.0 for two different Gaussians
    with pytest.raises(InputError, match="covariances"):
        frechet_distance_from_stats(np.zeros(2), np.eye(3), np.ones(2), 4 * np.eye(3))


def test_frechet_from_stats_refuses_non_finite_stats() -> None:
    from gencore.errors import InputError

    bad = np.eye(3)
    bad[1, 2] = np.nan
    with pytest.raises(InputError, match="finite"):
        frechet_distance_from_stats(np.zeros(3), np.eye(3), np.zeros(3), bad)
    with pytest.raises(InputError, match="finite"):
        frechet_distance_from_stats(np.array([0.0, np.inf, 0.0]), np.eye(3), np.zeros(3), np.eye(3))


@pytest.mark.parametrize("batch_size", [0, -2, 1.5])
def test_efflite0_features_refuse_a_batch_size_below_one(batch_size) -> None:
    from gencore.errors import ConfigError
    from genimage.metrics.efflite import efflite0_features

    with pytest.raises(ConfigError, match="batch_size"):  # 0 was a RuntimeError from Tensor.split
        efflite0_features(torch.zeros(2, 3, 32, 32), input_px=32, batch_size=batch_size)


@pytest.mark.parametrize(("n", "bpd_images"), [(12.0, 0), (True, 0), (12, 4.0), (12, True)])
def test_evaluate_refuses_non_integer_counts_before_sampling(digits_run, monkeypatch, n, bpd_images) -> None:
    # bpd_images 4.0 failed slicing the reference (TypeError) only after sampling and every feature metric had run
    import genimage.evaluate as ev
    from gencore.errors import ConfigError
    from genimage.data import load_image_set
    from genimage.runs import load_run

    def no_sampling(*args, **kwargs):
        raise AssertionError("sampled before the counts were checked")

    monkeypatch.setattr(ev, "sample_images", no_sampling)
    run = load_run(digits_run)
    data = load_image_set("digits")
    with pytest.raises(ConfigError, match="n >= 4 images" if bpd_images == 0 else "bpd_images must be"):
        ev.evaluate_run(run, n=n, input_px=32, bpd_images=bpd_images, reference=data, cache_dir=None, progress=False)


@pytest.mark.parametrize("batch_size", [0, -1, 2.0])
def test_classifier_features_refuse_a_batch_size_below_one(batch_size) -> None:
    from gencore.errors import ConfigError
    from genimage.metrics import SmallCNN, classifier_features

    net = SmallCNN(channels=1, num_classes=3).eval()
    with pytest.raises(ConfigError, match="batch_size"):  # 0 was a RuntimeError from Tensor.split
        classifier_features(net, torch.zeros(4, 1, 8, 8), batch_size=batch_size)
    assert classifier_features(net, torch.zeros(5, 1, 8, 8), batch_size=2).shape == (5, 128)


def test_frechet_of_ill_conditioned_covariances_is_the_closed_form() -> None:
    # commuting covariances Q diag(s) Q^T with eigenvalues 1e-4 .. 1e3: FD = sum (sqrt(s_a) - sqrt(s_b))^2 exactly.
    # Cutting round-off in the squared spectrum of S_a^{1/2} S_b S_a^{1/2} dropped the small true eigenvalues
    # (44.299690 for 44.299470, and FD(a, a) = 2e-4)
    g = np.random.default_rng(3)
    q, _ = np.linalg.qr(g.standard_normal((64, 64)))
    s_a = np.logspace(-4, 3, 64)
    s_b = 1.21 * s_a
    ca, cb, mu = (q * s_a) @ q.T, (q * s_b) @ q.T, np.zeros(64)
    expected = ((np.sqrt(s_a) - np.sqrt(s_b)) ** 2).sum()
    assert frechet_distance_from_stats(mu, ca, mu, cb) == pytest.approx(expected, rel=1e-9)
    assert abs(frechet_distance_from_stats(mu, ca, mu, ca)) < 1e-9 * s_a.sum()


def test_each_evaluation_metric_compares_the_generated_images_with_the_chosen_reference(digits_run, monkeypatch):
    """Every score is recomputed here from the two image sets it is documented to compare: the ``n`` reference
    images chosen by ``seed`` and the generated ones. A record that scored the reference against itself, swapped
    precision and recall, took the spectra of one set only, or the classifier FD on the whole data set, misses
    it."""
    import genimage.evaluate as ev
    from genimage.data import ImageSet, load_image_set
    from genimage.metrics import (
        classifier_features,
        classifier_for,
        efflite0_features,
        frechet_distance,
        kernel_inception_distance,
        knn_precision_recall,
        spectral_errors,
    )
    from genimage.runs import load_run

    data = load_image_set("digits")
    data = ImageSet(data.images[:300], data.labels[:300], data.class_names, name=data.name)
    n, seed = 24, 5
    idx = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:n]
    real, real_labels = data.images[idx], data.labels[idx]
    # generated: other digits, blurred (so precision, recall and the two spectra orders all differ)
    fake = torch.nn.functional.avg_pool2d(data.images[-n:], 3, stride=1, padding=1, count_include_pad=False)
    seen = []

    def fake_sample_images(run, count, labels, **kw):
        seen.append(labels)
        return fake[:count].clone()

    monkeypatch.setattr(ev, "sample_images", fake_sample_images)
    run = load_run(digits_run)
    rec = ev.evaluate_run(
        run, n=n, seed=seed, input_px=32, bpd_images=0, reference=data, cache_dir=None, progress=False
    )
    assert torch.equal(seen[-1], real_labels)  # the generated set shares the reference's class mix
    real_f, fake_f = efflite0_features(real, input_px=32), efflite0_features(fake, input_px=32)
    assert rec["fd_efflite0"] == pytest.approx(frechet_distance(real_f, fake_f), rel=1e-9)
    assert rec["fd_efflite0"] > 1e-3 and frechet_distance(real_f, real_f) < 1e-6 * rec["fd_efflite0"]
    assert rec["kid_efflite0"] == pytest.approx(kernel_inception_distance(real_f, fake_f, seed=seed).mean, rel=1e-9)
    pr = knn_precision_recall(real_f, fake_f, k=3)
    assert pr["precision_knn"] != pr["recall_knn"]
    assert (rec["precision_knn"], rec["recall_knn"]) == (pr["precision_knn"], pr["recall_knn"])
    spectra = spectral_errors(fake, real)
    assert spectra != spectral_errors(real, real)
    assert {k: rec[k] for k in spectra} == pytest.approx(spectra, rel=1e-9)
    net, acc = classifier_for(data, None, seed=0)
    expected = frechet_distance(classifier_features(net, real), classifier_features(net, fake))
    assert rec["classifier_accuracy"] == acc and rec["fd_classifier"] == pytest.approx(expected, rel=1e-9)


def test_a_loaded_runs_null_labels_are_the_class_dropped_to_in_training(digits_run) -> None:
    """Label dropout replaces a label by ``num_classes``; that index is the unconditional branch of the run."""
    from genimage.runs import load_run

    run = load_run(digits_run)
    assert run.num_classes and torch.equal(run.null_labels(3), torch.full((3,), run.num_classes, dtype=torch.long))
