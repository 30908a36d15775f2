"""Tests of gencore.metrics against closed forms, invariants and reference solvers (POT, scipy)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import ot
import pytest
import scipy.stats
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError, InputError
from gencore.metrics import (
    MMDResult,
    energy_distance,
    median_pairwise_distance,
    mmd,
    sliced_wasserstein,
    wasserstein2,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(n: int, d: int, seed: int) -> torch.Tensor:
    return torch.randn(n, d, generator=_gen(seed), dtype=torch.float64)


# --------------------------------------------------------------------------------------------- W2


def test_w2_of_a_set_with_itself_is_zero_and_permutation_invariant():
    x = _randn(64, 3, 0)
    assert wasserstein2(x, x) == 0.0
    perm = torch.randperm(64, generator=_gen(1))
    assert wasserstein2(x, x[perm]) == 0.0


@settings(max_examples=15, deadline=None)
@given(
    shift=st.lists(st.floats(-5, 5, allow_nan=False), min_size=3, max_size=3),
    seed=st.integers(0, 10_000),
)
def test_w2_of_a_translation_is_the_shift_norm(shift, seed):
    # W2^2(mu, mu + s) = |s|^2 + W2^2(mu, mu) for the identity plan, and no plan does better.
    x = _randn(40, 3, seed)
    s = torch.tensor(shift, dtype=torch.float64)
    assert wasserstein2(x, x + s) == pytest.approx(float(s.norm()), abs=1e-9)


@pytest.mark.parametrize(("n", "d", "seed"), [(5, 1, 0), (30, 2, 1), (50, 5, 2), (80, 3, 3)])
def test_w2_matches_pot_emd2(n, d, seed):
    x = _randn(n, d, seed)
    y = 0.7 * _randn(n, d, seed + 100) + 0.5
    cost = ot.dist(x.numpy(), y.numpy(), metric="sqeuclidean")
    ref = math.sqrt(ot.emd2(np.full(n, 1 / n), np.full(n, 1 / n), cost))
    assert wasserstein2(x, y) == pytest.approx(ref, rel=1e-10)


def test_w2_matches_brute_force_over_permutations():
    x, y = _randn(6, 2, 4), _randn(6, 2, 5) + 1.0
    cost = ((x[:, None] - y[None]) ** 2).sum(-1)
    best = min(float(cost[range(6), list(p)].mean()) for p in itertools.permutations(range(6)))
    assert wasserstein2(x, y) == pytest.approx(math.sqrt(best), rel=1e-12)


def test_w2_is_symmetric_and_accepts_float32():
    x, y = _randn(50, 4, 6), _randn(50, 4, 7) * 2
    assert wasserstein2(x, y) == pytest.approx(wasserstein2(y, x), rel=1e-12)
    assert wasserstein2(x.float(), y.float()) == pytest.approx(wasserstein2(x, y), rel=1e-5)


def test_w2_input_errors():
    x = _randn(10, 2, 0)
    with pytest.raises(InputError, match="equal-size"):
        wasserstein2(x, x[:9])
    with pytest.raises(InputError, match="dimension"):
        wasserstein2(x[:, 0], x[:, 0])
    with pytest.raises(InputError, match="feature shape"):
        wasserstein2(x, _randn(10, 3, 1))
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(InputError, match="NaN or inf"):
        wasserstein2(bad, x)
    with pytest.raises(InputError, match="inf"):
        wasserstein2(x, torch.full((10, 2), float("inf")))
    with pytest.raises(InputError, match="max_points"):
        wasserstein2(x, x, max_points=5)


# -------------------------------------------------------------------------------------- sliced W2


def test_sliced_equals_exact_w2_in_one_dimension():
    # In 1-D the monotone (sorted) coupling is optimal, so SW2 with theta = 1 is W2.
    x, y = _randn(70, 1, 0), _randn(70, 1, 1) ** 2
    one = torch.ones(1, 1)
    assert sliced_wasserstein(x, y, projections=one) == pytest.approx(wasserstein2(x, y), rel=1e-12)


@pytest.mark.parametrize(("n", "m"), [(7, 3), (20, 13), (50, 120)])
def test_sliced_unequal_sizes_is_exact_1d_ot(n, m):
    x, y = _randn(n, 1, n), 2 * _randn(m, 1, m) + 0.3
    ref = math.sqrt(ot.emd2(np.full(n, 1 / n), np.full(m, 1 / m), (x.numpy() - y.numpy().T) ** 2))
    assert sliced_wasserstein(x, y, projections=torch.ones(1, 1)) == pytest.approx(ref, rel=1e-9)


def test_sliced_matches_pot_with_the_same_projections():
    x, y = _randn(90, 3, 0), _randn(61, 3, 1) + torch.tensor([1.0, 0.0, -0.5], dtype=torch.float64)
    theta = _randn(40, 3, 2)
    unit = (theta / theta.norm(dim=1, keepdim=True)).T.numpy()
    ref = ot.sliced_wasserstein_distance(x.numpy(), y.numpy(), projections=unit, p=2)
    assert sliced_wasserstein(x, y, projections=theta) == pytest.approx(float(ref), rel=1e-6)


def test_sliced_is_invariant_to_duplicating_points():
    # y and y repeated twice are the same empirical measure.
    x, y = _randn(30, 2, 3), _randn(17, 2, 4)
    a = sliced_wasserstein(x, y, generator=_gen(0))
    b = sliced_wasserstein(x, y.repeat(2, 1), generator=_gen(0))
    assert a == pytest.approx(b, rel=1e-12)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 6))
def test_sliced_is_at_most_w2(seed, d):
    # Every projection is 1-Lipschitz, so each 1-D W2 <= W2 and hence SW2 <= W2 exactly.
    x, y = _randn(25, d, seed), 1.5 * _randn(25, d, seed + 1) + 0.2
    assert sliced_wasserstein(x, y, n_projections=64, generator=_gen(seed)) <= wasserstein2(x, y) + 1e-12


def test_sliced_of_a_translation_per_projection_and_in_expectation():
    d, p = 4, 4000
    x = _randn(100, d, 0)
    s = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    # For fixed directions: each projected set is shifted by <theta, s>, so SW2^2 = mean <theta, s>^2.
    theta = _randn(25, d, 1)
    unit = theta / theta.norm(dim=1, keepdim=True)
    exact = math.sqrt(float((unit @ s).square().mean()))
    assert sliced_wasserstein(x, x + s, projections=theta) == pytest.approx(exact, rel=1e-10)
    # Over random directions: E <theta, s>^2 = |s|^2 / D; theta_1^2 ~ Beta(1/2, (D-1)/2) has variance
    # 2(D-1) / (D^2 (D+2)), so the mean of p draws of SW2^2 has std |s|^2 sqrt(that / p).
    sw2_sq = sliced_wasserstein(x, x + s, n_projections=p, generator=_gen(2)) ** 2
    s2 = float(s.square().sum())
    tol = 5 * s2 * math.sqrt(2 * (d - 1) / (d**2 * (d + 2)) / p)
    assert abs(sw2_sq - s2 / d) < tol


def test_sliced_is_reproducible_with_a_generator_and_validates():
    x, y = _randn(40, 3, 0), _randn(40, 3, 1)
    a = sliced_wasserstein(x, y, n_projections=16, generator=_gen(7))
    assert a == sliced_wasserstein(x, y, n_projections=16, generator=_gen(7))
    assert a != sliced_wasserstein(x, y, n_projections=16, generator=_gen(8))
    with pytest.raises(InputError, match="n_projections"):
        sliced_wasserstein(x, y, n_projections=0)
    with pytest.raises(InputError, match="projections"):
        sliced_wasserstein(x, y, projections=torch.zeros(2, 3))
    with pytest.raises(InputError, match="projections"):
        sliced_wasserstein(x, y, projections=torch.ones(2, 2))


@pytest.mark.parametrize("bad", [1.9, True, None, "8"])
def test_sliced_rejects_non_integer_projection_counts(bad):
    # int() would silently truncate 1.9 to one direction and accept "8"; None would raise a TypeError
    x, y = _randn(20, 2, 0), _randn(20, 2, 1)
    with pytest.raises(InputError, match="n_projections must be a positive integer"):
        sliced_wasserstein(x, y, n_projections=bad, generator=_gen(0))


def test_transport_rejects_non_tensor_projections_and_bad_max_points():
    x, y = _randn(20, 2, 0), _randn(20, 2, 1)
    with pytest.raises(InputError, match=r"projections must be a torch\.Tensor"):
        sliced_wasserstein(x, y, projections=np.ones((3, 2)))
    for bad in (None, "100", 0):
        with pytest.raises(InputError, match="max_points must be a positive integer"):
            wasserstein2(x, y, max_points=bad)


# -------------------------------------------------------------------------------------------- MMD


def _naive_mmd2(x: np.ndarray, y: np.ndarray, hs, unbiased: bool) -> float:
    def gram(a, b):
        sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return sum(np.exp(-sq / (2 * h * h)) for h in hs)

    kxx, kyy, kxy = gram(x, x), gram(y, y), gram(x, y)
    n, m = len(x), len(y)
    if unbiased:
        return (
            (kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1)) - 2 * kxy.mean()
        )
    return kxx.mean() + kyy.mean() - 2 * kxy.mean()


@pytest.mark.parametrize("estimator", ["unbiased", "biased"])
def test_mmd_matches_naive_unchunked_computation(estimator):
    x, y = _randn(45, 3, 0), _randn(33, 3, 1) + 0.4
    hs = (0.3, 1.0, 2.5)
    ref = _naive_mmd2(x.numpy(), y.numpy(), hs, estimator == "unbiased")
    res = mmd(x, y, bandwidths=hs, estimator=estimator)
    assert res.value == pytest.approx(ref, rel=1e-12, abs=1e-14)
    chunked = mmd(x, y, bandwidths=hs, estimator=estimator, block_rows=4)
    assert chunked.value == pytest.approx(ref, rel=1e-12, abs=1e-14)
    assert res.key == f"mmd2_rbf_{estimator}"
    assert res.as_dict() == {res.key: res.value}
    assert res.bandwidths == hs and (res.n_x, res.n_y) == (45, 33)


def test_mmd_default_bandwidths_are_multiples_of_the_median_distance():
    x, y = _randn(30, 2, 0), _randn(20, 2, 1)
    z = torch.cat([x, y]).numpy()
    d = np.sqrt(((z[:, None] - z[None]) ** 2).sum(-1))[np.triu_indices(50, 1)]
    med = float(np.quantile(d, 0.5, method="lower"))
    assert median_pairwise_distance(x, y) == pytest.approx(med, rel=1e-12)
    res = mmd(x, y)
    assert res.bandwidths == pytest.approx(tuple(c * med for c in (0.25, 0.5, 1.0, 2.0, 4.0)), rel=1e-12)
    assert res.value == pytest.approx(_naive_mmd2(x.numpy(), y.numpy(), res.bandwidths, True), rel=1e-12)


def test_unbiased_mmd_is_centred_at_zero_under_the_null_and_at_the_population_value_when_shifted():
    # Population MMD^2 between N(0, I_d) and N(s, I_d) for k = exp(-|a - b|^2 / (2 h^2)):
    # E k(X, X') = (h^2 / (h^2 + 2))^(d/2), E k(X, Y) = the same times exp(-|s|^2 / (2 (h^2 + 2))).
    h, d, s2 = 1.0, 2, 2.0
    population = 2 * (h**2 / (h**2 + 2)) ** (d / 2) * (1 - math.exp(-s2 / (2 * (h**2 + 2))))
    null, alt = [], []
    for seed in range(20):
        x, y = _randn(80, 2, 2 * seed), _randn(80, 2, 2 * seed + 1)
        null.append(mmd(x, y, bandwidths=(1.0,)).value)
        alt.append(mmd(x, y + 1.0, bandwidths=(1.0,)).value)
    null_arr = np.array(null)
    sem = null_arr.std(ddof=1) / math.sqrt(len(null_arr))
    assert abs(null_arr.mean()) < 4 * sem
    assert (null_arr < 0).any()  # unbiased: no clipping at zero
    alt_arr = np.array(alt)
    assert abs(alt_arr.mean() - population) < 4 * alt_arr.std(ddof=1) / math.sqrt(len(alt_arr))
    assert alt_arr.min() > 5 * null_arr.std(ddof=1)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_biased_mmd_is_nonnegative_and_zero_for_identical_sets(seed):
    x, y = _randn(20, 3, seed), _randn(15, 3, seed + 1)
    assert mmd(x, y, estimator="biased").value >= -1e-12
    assert mmd(x, x, estimator="biased").value == pytest.approx(0.0, abs=1e-12)


def test_mmd_input_errors():
    x = _randn(10, 2, 0)
    with pytest.raises(ConfigError, match="MMD estimator"):
        mmd(x, x, estimator="linear")
    with pytest.raises(InputError, match="bandwidths"):
        mmd(x, x, bandwidths=(1.0, 0.0))
    with pytest.raises(InputError, match="at least 2"):
        mmd(x[:1], x)
    with pytest.raises(InputError, match="feature shape"):
        mmd(x, _randn(10, 3, 1))
    assert isinstance(mmd(x[:1], x, estimator="biased"), MMDResult)


# ---------------------------------------------------------------------------------------- energy


def test_energy_distance_point_masses_closed_form():
    a = torch.tensor([[1.0, 2.0, -1.0]]).repeat(5, 1)
    b = torch.tensor([[4.0, -2.0, -1.0]]).repeat(7, 1)
    assert energy_distance(a, b) == pytest.approx(2 * 5.0, rel=1e-12)


def test_energy_distance_matches_scipy_in_one_dimension():
    x, y = _randn(60, 1, 0), 1.3 * _randn(41, 1, 1) + 0.2
    ref = scipy.stats.energy_distance(x[:, 0].numpy(), y[:, 0].numpy()) ** 2  # scipy returns the root
    assert energy_distance(x, y) == pytest.approx(ref, rel=1e-10)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(1, 5))
def test_energy_distance_is_nonnegative_symmetric_and_zero_on_identical_sets(seed, d):
    x, y = _randn(23, d, seed), _randn(17, d, seed + 1) * 0.5
    e = energy_distance(x, y)
    assert e >= 0.0
    assert e == pytest.approx(energy_distance(y, x), rel=1e-12)
    assert energy_distance(x, x) == 0.0


def test_energy_distance_chunked_equals_unchunked_and_naive():
    x, y = _randn(50, 4, 0), _randn(37, 4, 1) + 0.3
    xn, yn = x.numpy(), y.numpy()

    def mean_dist(a, b):
        return np.sqrt(((a[:, None] - b[None]) ** 2).sum(-1)).mean()

    ref = 2 * mean_dist(xn, yn) - mean_dist(xn, xn) - mean_dist(yn, yn)
    assert energy_distance(x, y) == pytest.approx(ref, rel=1e-12)
    assert energy_distance(x, y, block_rows=3) == pytest.approx(ref, rel=1e-12)
    with pytest.raises(InputError, match="block_rows"):
        energy_distance(x, y, block_rows=0)


def test_large_inputs_are_processed_in_blocks(monkeypatch):
    # Shrink the element budget so that the automatic block size kicks in, and compare.
    import gencore.metrics._pairwise as pw
    import gencore.metrics.transport as tr

    x, y = _randn(300, 2, 0), _randn(280, 2, 1) + 0.5
    base = (mmd(x, y).value, energy_distance(x, y), sliced_wasserstein(x, y, generator=_gen(0)))
    monkeypatch.setattr(pw, "_BLOCK_ELEMENTS", 1000)
    monkeypatch.setattr(tr, "_BLOCK_ELEMENTS", 1000)
    small = (mmd(x, y).value, energy_distance(x, y), sliced_wasserstein(x, y, generator=_gen(0)))
    assert small == pytest.approx(base, rel=1e-12)


# ------------------------------------------------------------------------------- median heuristic


def test_median_heuristic_uses_an_evenly_strided_subset_above_1024_points():
    x, y = _randn(1300, 2, 0), 3.0 * _randn(700, 2, 1)
    z = torch.cat([x, y]).numpy()
    sub = z[np.round(np.linspace(0, len(z) - 1, 1024)).astype(int)]
    d = np.sqrt(((sub[:, None] - sub[None]) ** 2).sum(-1))[np.triu_indices(1024, 1)]
    assert median_pairwise_distance(x, y) == pytest.approx(float(np.quantile(d, 0.5, method="lower")), rel=1e-12)


def test_median_heuristic_strided_subset_is_exact_for_a_million_points():
    # The evenly strided positions must be rounded from float64: in float32 some of them land one point off
    # above ~1e5 points (and past the last point at 2**25). Only the documented subset holds 0 .. 1023 here.
    n = 1_234_567
    pick = np.round(np.linspace(0, n - 1, 1024)).astype(int)
    x = torch.full((n, 1), 1e6, dtype=torch.float64)
    x[pick, 0] = torch.arange(1024, dtype=torch.float64)
    d = np.abs(np.arange(1024.0)[:, None] - np.arange(1024.0)[None])[np.triu_indices(1024, 1)]
    assert median_pairwise_distance(x) == float(np.quantile(d, 0.5, method="lower"))


def test_median_heuristic_falls_back_to_unit_scale_when_all_points_coincide():
    # 6 + 2 coincident points: 16 of the 28 pairwise distances are 0, so the median is 0.
    x, y = torch.ones(6, 3, dtype=torch.float64), torch.full((2, 3), 1.5, dtype=torch.float64)
    assert median_pairwise_distance(x, y) == 0.0
    res = mmd(x, y, bandwidth_multipliers=(0.5, 2.0))
    assert res.bandwidths == (0.5, 2.0)  # 1.0 * multipliers
    assert res.value == pytest.approx(_naive_mmd2(x.numpy(), y.numpy(), (0.5, 2.0), True), rel=1e-12)


def test_mmd_bandwidth_and_block_arguments_are_validated():
    x = _randn(10, 2, 0)
    for kwargs in ({"bandwidths": 1.0}, {"bandwidths": ()}, {"bandwidths": (1.0, float("nan"))}, {"bandwidths": "12"}):
        with pytest.raises(InputError, match="bandwidths must be a non-empty sequence"):
            mmd(x, x, **kwargs)
    for mults in (2.0, (1.0, float("inf")), (0.0,), "24"):
        with pytest.raises(InputError, match="bandwidth_multipliers must be"):
            mmd(x, x, bandwidth_multipliers=mults)
    for rows in (2.5, True, "4"):
        with pytest.raises(InputError, match="block_rows must be a positive integer"):
            mmd(x, x, block_rows=rows)
    assert mmd(x, x + 1, block_rows=np.int64(3)).value == pytest.approx(mmd(x, x + 1).value, rel=1e-12)
