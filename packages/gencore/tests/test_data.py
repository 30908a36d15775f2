"""Tests of gencore.data: seeded toy distributions and the scikit-learn digits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gencore.data import (
    DATASETS,
    TOY_DATASETS,
    digits_inverse_transform,
    digits_labels,
    get_dataset,
    load_digits,
    sample_8gaussians,
    sample_checkerboard,
    sample_rings,
    sample_spirals,
    toy_dataset,
)
from gencore.errors import ConfigError, InputError

N = 4000


@pytest.mark.parametrize("name", TOY_DATASETS)
def test_toy_shapes_dtype_finite_and_scale(name):
    x = toy_dataset(name, N, seed=0)
    assert x.shape == (N, 2) and x.dtype == torch.float32
    assert torch.isfinite(x).all()
    assert x.abs().max() < 5.0  # FFJORD-like scale
    assert x.mean(0).abs().max() < 0.2  # every set is centred
    assert toy_dataset(name, 0, seed=0).shape == (0, 2)


@pytest.mark.parametrize("name", TOY_DATASETS)
def test_toy_seeded_reproducibility(name):
    a = toy_dataset(name, 500, seed=3)
    assert torch.equal(a, toy_dataset(name, 500, seed=3))
    assert torch.equal(a, toy_dataset(name, 500, generator=torch.Generator().manual_seed(3)))
    assert not torch.equal(a, toy_dataset(name, 500, seed=4))
    torch.manual_seed(11)
    b = toy_dataset(name, 100)
    torch.manual_seed(11)
    assert torch.equal(b, toy_dataset(name, 100))


def test_toy_registry_errors():
    with pytest.raises(ConfigError, match="8gaussians, moons, checkerboard, spirals, rings"):
        toy_dataset("swissroll", 10)
    with pytest.raises(ConfigError, match="either seed or generator"):
        toy_dataset("moons", 10, seed=1, generator=torch.Generator())
    with pytest.raises(InputError, match="non-negative integer"):
        toy_dataset("moons", -1)
    with pytest.raises(InputError, match="non-negative integer"):
        sample_rings(2.5)  # type: ignore[arg-type]
    assert sample_rings(np.int64(3), 0).shape == (3, 2)


def test_checkerboard_points_fall_in_the_even_squares_evenly():
    x = sample_checkerboard(N, 1).double()
    assert (x >= -4).all() and (x < 4).all()
    i, j = torch.floor((x[:, 0] + 4) / 2).long(), torch.floor((x[:, 1] + 4) / 2).long()
    assert ((i + j) % 2 == 0).all()
    counts = torch.bincount(4 * i + j, minlength=16)
    occupied = counts[counts > 0]
    assert len(occupied) == 8
    # multinomial(N, 1/8): each count within 5 standard deviations of N/8
    assert (occupied - N / 8).abs().max() < 5 * math.sqrt(N * (1 / 8) * (7 / 8))


def test_8gaussians_has_8_balanced_modes_with_the_stated_spread():
    x = sample_8gaussians(N, 2).double()
    k = torch.arange(8, dtype=torch.float64) * math.pi / 4
    centres = 2 * math.sqrt(2) * torch.stack([torch.cos(k), torch.sin(k)], 1)
    d = torch.cdist(x, centres)
    nearest = d.argmin(1)
    counts = torch.bincount(nearest, minlength=8)
    assert (counts - N / 8).abs().max() < 5 * math.sqrt(N * (1 / 8) * (7 / 8))
    # distance to own centre is Rayleigh(sigma): mean sigma sqrt(pi / 2), sigma = sqrt(2) / 4
    sigma = math.sqrt(2) / 4
    assert float(d.min(1).values.mean()) == pytest.approx(sigma * math.sqrt(math.pi / 2), rel=0.05)


def test_rings_lie_on_four_circles_with_balanced_counts():
    x = sample_rings(N, 5).double()
    r = x.norm(dim=1)
    radii = torch.tensor([0.75, 1.5, 2.25, 3.0], dtype=torch.float64)
    gap = (r[:, None] - radii).abs()
    assert gap.min(1).values.max() < 6 * 0.08
    counts = torch.bincount(gap.argmin(1), minlength=4)
    assert (counts - N / 4).abs().max() < 5 * math.sqrt(N * 0.25 * 0.75)
    # angles are uniform: the mean of the unit vectors is near 0
    assert (x / r[:, None]).mean(0).norm() < 5 / math.sqrt(N)


def test_spirals_have_two_point_symmetric_arms():
    x = sample_spirals(N, 6).double()
    assert x.norm(dim=1).max() < math.pi + 0.6
    # The distribution is symmetric under x -> -x (second arm = first arm rotated by pi).
    ed = torch.cdist(x[:1000], -x[1000:2000]).min(1).values.median()
    assert ed < 0.15


def test_moons_two_arcs():
    x = toy_dataset("moons", N, seed=7).double()
    # Undo the centring/scaling and check each point is near one of the two unit half circles.
    p = x / 2 + torch.tensor([0.5, 0.25], dtype=torch.float64)
    upper = (p.norm(dim=1) - 1).abs()
    lower = ((p - torch.tensor([1.0, 0.5], dtype=torch.float64)).norm(dim=1) - 1).abs()
    assert torch.minimum(upper, lower).max() < 0.6
    assert float(torch.minimum(upper, lower).median()) < 0.1


# ----------------------------------------------------------------------------------------- digits


def test_digits_shape_range_and_inverse_transform():
    from sklearn.datasets import load_digits as sk_load

    raw = torch.tensor(sk_load().data)
    x = load_digits()
    assert x.shape == (1797, 64) and x.dtype == torch.float32
    assert float(x.min()) == -1.0 and float(x.max()) == 1.0
    assert torch.allclose(digits_inverse_transform(x).double(), raw, atol=1e-5)
    assert torch.equal(load_digits(normalize=False).double(), raw)

    s = load_digits(scaling="standard").double()
    assert float(s.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(s.std(unbiased=False)) == pytest.approx(1.0, abs=1e-6)
    assert torch.allclose(digits_inverse_transform(s, scaling="standard").double(), raw, atol=1e-4)
    with pytest.raises(ConfigError, match="digits scaling"):
        load_digits(scaling="minmax")


def test_digits_labels_and_get_dataset():
    y = digits_labels()
    assert y.shape == (1797,) and y.dtype == torch.int64
    assert set(y.tolist()) == set(range(10))
    assert torch.bincount(y).min() >= 170
    assert "digits" in DATASETS and set(TOY_DATASETS) < set(DATASETS)
    full = get_dataset("digits")
    assert torch.equal(full, load_digits())
    sub = get_dataset("digits", 100, seed=0)
    assert sub.shape == (100, 64)
    assert torch.equal(sub, get_dataset("digits", 100, seed=0))
    # rows are distinct images of the full set (a permutation prefix: no replacement)
    idx = torch.cdist(sub.double(), full.double()).argmin(1)
    assert torch.equal(full[idx], sub) and len(set(idx.tolist())) == 100
    assert torch.equal(get_dataset("moons", 50, seed=1), toy_dataset("moons", 50, seed=1))
    with pytest.raises(ConfigError, match="pass the number of points"):
        get_dataset("moons")
    with pytest.raises(ConfigError, match="unknown dataset"):
        get_dataset("mnist")
    with pytest.raises(InputError, match="between 0 and 1797"):
        get_dataset("digits", 5000)


# ------------------------------------------------------------- toy sets against their documented models


def _documented_sample(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """An independent NumPy sampler written from the parametrisations in gencore.data.toy's docstring."""
    if name == "8gaussians":
        k = rng.integers(0, 8, n) * np.pi / 4
        return 2 * np.sqrt(2) * np.stack([np.cos(k), np.sin(k)], 1) + np.sqrt(2) / 4 * rng.normal(size=(n, 2))
    if name == "moons":
        a, lower = np.pi * rng.random(n), rng.random(n) < 0.5
        p = np.where(lower[:, None], np.stack([1 - np.cos(a), 0.5 - np.sin(a)], 1), np.stack([np.cos(a), np.sin(a)], 1))
        return 2 * (p + 0.1 * rng.normal(size=(n, 2)) - [0.5, 0.25])
    if name == "checkerboard":
        cells = np.array([(i, j) for i in range(4) for j in range(4) if (i + j) % 2 == 0])[rng.integers(0, 8, n)]
        return 2 * cells - 4 + 2 * rng.random((n, 2))
    if name == "spirals":
        r = 3 * np.pi * np.sqrt(rng.random(n))
        a = r + np.pi * rng.integers(0, 2, n)
        return (r / 3)[:, None] * np.stack([np.cos(a), np.sin(a)], 1) + 0.1 * rng.normal(size=(n, 2))
    a = 2 * np.pi * rng.random(n)
    r = rng.choice([0.75, 1.5, 2.25, 3.0], n) + 0.08 * rng.normal(size=n)
    return r[:, None] * np.stack([np.cos(a), np.sin(a)], 1)


def _features(name: str, x: np.ndarray) -> np.ndarray:
    """Test functions whose means pin the documented model: low moments plus the distance to the set's skeleton."""
    x1, x2 = x[:, 0], x[:, 1]
    radius, angle = np.hypot(x1, x2), np.arctan2(x2, x1)
    if name == "8gaussians":
        k = np.arange(8) * np.pi / 4
        centres = 2 * np.sqrt(2) * np.stack([np.cos(k), np.sin(k)], 1)
        extra = [((x[:, None] - centres) ** 2).sum(-1).min(1)]
    elif name == "moons":
        p = x / 2 + [0.5, 0.25]
        extra = [np.minimum(np.abs(np.hypot(*p.T) - 1), np.abs(np.hypot(*(p - [1.0, 0.5]).T) - 1)) ** 2]
    elif name == "checkerboard":
        frac = (x + 4) / 2 % 1
        extra = [frac[:, 0], frac[:, 1], frac[:, 0] ** 2, frac[:, 1] ** 2, (frac > 0.95).any(1)]
    elif name == "spirals":
        extra = [np.cos(2 * (angle - 3 * radius)), np.sin(2 * (angle - 3 * radius))]
    else:
        extra = [np.abs(radius[:, None] - [0.75, 1.5, 2.25, 3.0]).min(1) ** 2, np.cos(angle), np.sin(angle)]
    return np.stack([x1, x2, x1**2, x2**2, x1 * x2, radius, *extra], 1).astype(np.float64)


@pytest.mark.parametrize("name", TOY_DATASETS)
def test_toy_sets_match_their_documented_models(name):
    # Each test function's mean under the sampler agrees with its mean under an independent simulation of the
    # documented model within 5 standard errors (both samples' errors); catches wrong noise scales, radii, arcs.
    f = _features(name, toy_dataset(name, 20_000, seed=0).double().numpy())
    g = _features(name, _documented_sample(name, 200_000, np.random.default_rng(0)))
    se = np.sqrt(f.var(0) / len(f) + g.var(0) / len(g))
    assert (np.abs(f.mean(0) - g.mean(0)) < 5 * se + 1e-12).all(), (f.mean(0) - g.mean(0)) / se


def test_toy_seeds_may_be_numpy_integers():
    assert torch.equal(toy_dataset("moons", 20, seed=np.int64(5)), toy_dataset("moons", 20, seed=5))
    assert torch.equal(sample_spirals(20, np.int32(5)), sample_spirals(20, 5))
    with pytest.raises(ConfigError, match="seed must be an integer"):
        toy_dataset("moons", 20, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"generator must be a torch\.Generator"):
        toy_dataset("moons", 20, generator="0")  # type: ignore[arg-type]


def test_digits_subset_size_is_bounded_by_the_data_set():
    assert get_dataset("digits", 1797, seed=0).shape == (1797, 64)
    with pytest.raises(InputError, match="between 0 and 1797"):
        get_dataset("digits", 1798, seed=0)
