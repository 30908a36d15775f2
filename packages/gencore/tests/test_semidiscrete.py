"""gencore.couplings.semidiscrete (SD-FM): closed-form potentials, brute-force matching, softmax
sampling, chi-square and mass diagnostics, persistence."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from gencore.couplings import SemidiscreteCoupling, make_coupling, max_inner_product
from gencore.errors import ConfigError, InputError, StorageError


@pytest.fixture(autouse=True)
def _one_thread():
    """These tests loop over tiny tensors, where a second OpenMP thread only adds sync latency."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _skewed_data(n: int, seed: int = 0) -> torch.Tensor:
    """2-D data far from the noise and stretched: most points are never the nearest to N(0, I) noise."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, generator=g) * torch.tensor([3.0, 0.5]) + torch.tensor([2.0, 1.0])


@pytest.fixture(scope="module")
def fitted16() -> SemidiscreteCoupling:
    with torch.random.fork_rng():
        torch.set_num_threads(1)
        sd = SemidiscreteCoupling(_skewed_data(16))
        sd.fit(800, 256, generator=torch.Generator().manual_seed(1))
    return sd


def test_potential_matches_closed_form_in_1d():
    """1-D data {0, 1, 3}: each Laguerre cell must hold 1/3 of N(0, 1), so the cell boundaries are the
    tertiles +-q (q = Phi^-1(2/3)) and, from x (y_k - y_j) = (y_k^2 - y_j^2) / 2 + g_j - g_k,
    g_0 - g_1 = -q - 1/2 and g_1 - g_2 = 2 q - 4."""
    sd = SemidiscreteCoupling(torch.tensor([[0.0], [1.0], [3.0]], dtype=torch.float64))
    diag = sd.fit(600, 256, generator=torch.Generator().manual_seed(1))
    q = float(norm.ppf(2 / 3))
    g = sd.potential
    assert float(g[0] - g[1]) == pytest.approx(-q - 0.5, abs=0.03)
    assert float(g[1] - g[2]) == pytest.approx(2 * q - 4.0, abs=0.05)
    assert diag.ok and abs(diag.chi2) < 2e-3


def test_fit_drives_assignment_frequencies_to_uniform(fitted16):
    """chi^2 = N sum_j (p_j - 1/N)^2 / ... = mean_j (N p_j - 1)^2: 0.005 means a 7 % RMS error in the
    per-point mass. The unfitted potential on this data reads > 1, and sampling noise of the unbiased
    estimate is about sqrt(2 (N - 1)) / M = 7e-4 at M = 8192, so the threshold separates both."""
    sd = fitted16
    gen = torch.Generator().manual_seed(2)
    diag = sd.diagnose(n_samples=8192, generator=gen)
    assert diag.chi2 < 5e-3 and diag.ok
    assert diag.unassigned_fraction == 0.0 and diag.mass_ratio < 1.6
    assert 0.5 < diag.w2_ratio < 1.5
    unfitted = SemidiscreteCoupling(sd.data).diagnose(n_samples=8192, generator=gen, warn=False)
    assert unfitted.chi2 > 1.0
    # the unbiased estimate is unbiased: plug-in minus its null bias (N - 1) / M agrees
    assert diag.chi2 == pytest.approx(diag.chi2_plugin - 15 / 8192, abs=3e-4)


def test_fit_history_decreases_and_matching_is_ot_monotone(fitted16):
    sd = SemidiscreteCoupling(_skewed_data(16))
    diag = sd.fit(200, 256, generator=torch.Generator().manual_seed(3), eval_every=50, warn=False)
    assert diag.chi2_steps == [50, 100, 150, 200]
    assert diag.chi2_history[-1] < diag.chi2_history[0]
    # OT maps are cyclically monotone; for two samples: <x - x', T(x) - T(x')> >= 0
    x = torch.randn(200, 2, generator=torch.Generator().manual_seed(4))
    _, t = fitted16(x, None)
    inner = ((x[:, None] - x[None]) * (t[:, None] - t[None])).sum(-1)
    assert float(inner.min()) >= -1e-5


@settings(max_examples=20, deadline=None)
@given(
    n_data=st.integers(1, 40),
    n_query=st.integers(1, 30),
    query_chunk=st.integers(1, 9),
    key_chunk=st.integers(1, 11),
    seed=st.integers(0, 10_000),
)
def test_chunked_matching_equals_brute_force_argmax(n_data, n_query, query_chunk, key_chunk, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(n_data, 3, generator=g, dtype=torch.float64)
    pot = torch.randn(n_data, generator=g, dtype=torch.float64)
    x = torch.randn(n_query, 3, generator=g, dtype=torch.float64)
    sd = SemidiscreteCoupling(y, query_chunk=query_chunk, data_chunk=key_chunk)
    sd.potential.copy_(pot)
    scores = x @ y.T - 0.5 * (y * y).sum(-1) + pot
    torch.testing.assert_close(sd.assign(x), scores.argmax(1))
    _, paired = sd(x, torch.zeros(n_query, 3))
    torch.testing.assert_close(paired, y[scores.argmax(1)])


def test_fitted_matching_with_tiny_chunks_equals_default(fitted16):
    x = torch.randn(300, 2, generator=torch.Generator().manual_seed(5))
    tiny = SemidiscreteCoupling(fitted16.data, query_chunk=7, data_chunk=3)
    tiny.load_state_dict(fitted16.state_dict())
    torch.testing.assert_close(tiny.assign(x), fitted16.assign(x))


def test_soft_assignment_frequencies_match_softmax():
    """eps > 0: j ~ softmax((<x, y_j> - |y_j|^2 / 2 + g_j) / eps), by Gumbel-max in chunks."""
    g = torch.Generator().manual_seed(6)
    y = torch.randn(5, 2, generator=g, dtype=torch.float64)
    eps = 0.7
    sd = SemidiscreteCoupling(y, epsilon=eps, query_chunk=1000, data_chunk=2)
    sd.potential.copy_(torch.tensor([0.3, -0.2, 0.0, 0.5, -0.4], dtype=torch.float64))
    draws = 20_000
    for x in torch.randn(3, 2, generator=g, dtype=torch.float64):
        p = torch.softmax((y @ x - 0.5 * (y * y).sum(-1) + sd.potential) / eps, 0).numpy()
        idx = sd.assign(x.expand(draws, 2), generator=g)
        freq = np.bincount(idx.numpy(), minlength=5) / draws
        assert np.all(np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / draws) + 1e-4)
    # same function, direct: temperature -> argmax as eps -> 0
    q = torch.randn(50, 2, generator=g, dtype=torch.float64)
    bias = -0.5 * (y * y).sum(-1)
    hard = max_inner_product(q, y, bias)
    cold = max_inner_product(q, y, bias, temperature=1e-9, generator=g, key_chunk=2)
    torch.testing.assert_close(hard, cold)


def test_soft_fit_converges():
    sd = SemidiscreteCoupling(_skewed_data(8, seed=3), epsilon=0.5)
    diag = sd.fit(800, 256, generator=torch.Generator().manual_seed(7))
    assert diag.chi2 < 5e-3 and diag.ok


def test_diagnostics_flag_an_unfitted_potential():
    sd = SemidiscreteCoupling(_skewed_data(64))
    with pytest.warns(UserWarning, match="SemidiscreteCoupling"):
        diag = sd.diagnose(generator=torch.Generator().manual_seed(8))
    assert not diag.ok and len(diag.warnings) == 3
    assert diag.unassigned_fraction > 0.2 and math.isinf(diag.mass_ratio) and diag.w2_ratio > 1.5


def test_w2_check_catches_a_bad_potential_with_moderate_chi2():
    """Data (+-3, +-0.5): by symmetry the optimal potential is constant. Lowering the right pair's
    potential by 3.15 moves the cell boundary to x_1 = 3.15 / 6, so the right pair gets
    P(x_1 > 0.525) = 30 % of the noise instead of 50 %: chi^2 = mean_j (N p_j - 1)^2 = 0.16 only, but
    20 % of the mass moves a distance 6, W2 ~ sqrt(0.2 * 36) = 2.7 against a random-pairing floor of
    ~0.6 at 1024 points."""
    y = torch.tensor([[-3.0, -0.5], [-3.0, 0.5], [3.0, -0.5], [3.0, 0.5]])
    sd = SemidiscreteCoupling(y)
    assert sd.fit(300, 256, generator=torch.Generator().manual_seed(10)).ok
    assert float(sd.potential.max() - sd.potential.min()) < 0.05
    sd.potential.zero_()
    sd.potential[2:] -= 3.15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        diag = sd.diagnose(generator=torch.Generator().manual_seed(11), w2_points=1024, chi2_tol=0.3)
    assert diag.chi2 == pytest.approx(0.16, abs=0.02) and diag.unassigned_fraction == 0.0
    assert diag.w2_ratio > 2.5 and len(diag.warnings) == 1 and "W2" in diag.warnings[0]


def test_save_load_round_trip_gives_identical_assignments(tmp_path, fitted16):
    fitted16.save(tmp_path / "sd")
    back = SemidiscreteCoupling.load(tmp_path / "sd")
    x = torch.randn(500, 2, generator=torch.Generator().manual_seed(12))
    torch.testing.assert_close(back.assign(x), fitted16.assign(x))
    torch.testing.assert_close(back.potential, fitted16.potential)
    soft = SemidiscreteCoupling(fitted16.data, epsilon=0.3, store_data=False)
    soft.potential.copy_(fitted16.potential)
    soft.save(tmp_path / "soft")
    with pytest.raises(InputError, match="without its data"):
        SemidiscreteCoupling.load(tmp_path / "soft")
    soft2 = SemidiscreteCoupling.from_pretrained(tmp_path / "soft", data=fitted16.data)
    a = soft.assign(x, generator=torch.Generator().manual_seed(0))
    b = soft2.assign(x, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(a, b)
    with pytest.raises(StorageError):
        SemidiscreteCoupling.load(tmp_path / "missing")


def test_potential_travels_with_a_parent_model_and_checks_the_data(fitted16):
    parent = torch.nn.Module()
    parent.net = torch.nn.Linear(2, 2)
    parent.coupling = fitted16
    state = parent.state_dict()
    assert {"coupling.potential", "coupling.data", "coupling.data_sha256"} <= set(state)
    fresh = torch.nn.Module()
    fresh.net = torch.nn.Linear(2, 2)
    fresh.coupling = SemidiscreteCoupling(fitted16.data.clone())
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.coupling.potential, fitted16.potential)
    other = torch.nn.Module()
    other.net = torch.nn.Linear(2, 2)
    other.coupling = SemidiscreteCoupling(fitted16.data + 1e-3)
    with pytest.raises(InputError, match="different data set"):
        other.load_state_dict(state)


def test_input_errors():
    y = torch.randn(10, 3)
    sd = make_coupling("semidiscrete", data=y)
    with pytest.raises(InputError, match="match the data"):
        sd.assign(torch.randn(4, 2))
    with pytest.raises(InputError, match="batch size"):
        sd(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(InputError, match="NaN"):
        SemidiscreteCoupling(torch.full((4, 2), float("nan")))
    with pytest.raises(InputError):
        SemidiscreteCoupling(torch.randn(0, 2))
    with pytest.raises(ConfigError):
        SemidiscreteCoupling(y, epsilon=-1.0)
    with pytest.raises(ConfigError):
        sd.fit(10, 8, optimizer="lbfgs")
    images = torch.randn(6, 1, 2, 2)
    sd_img = SemidiscreteCoupling(images)
    _, x1 = sd_img(torch.randn(3, 1, 2, 2), None)
    assert x1.shape == (3, 1, 2, 2) and all(any(torch.equal(r, im) for im in images) for r in x1)


def test_fit_with_identical_data_points_uses_a_positive_default_step():
    """All data points equal: the score spread is 0, which used to become lr = 0 and a ConfigError about an
    lr the caller never gave. Every pairing then sends noise to that one point."""
    sd = SemidiscreteCoupling(torch.ones(4, 2))
    assert sd.score_scale(torch.Generator().manual_seed(0)) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tie cannot give uniform frequencies; the fit says so
        sd.fit(20, 64, generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(sd.potential).all()
    _, x1 = sd(torch.randn(5, 2), torch.ones(5, 2), generator=torch.Generator().manual_seed(1))
    assert torch.equal(x1, torch.ones(5, 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_coupling_fitted_on_the_cpu_pairs_cuda_noise_on_cuda(fitted16: SemidiscreteCoupling) -> None:
    """The engine hands the task CUDA batches and a CUDA generator; the coupling follows them there."""
    sd = SemidiscreteCoupling(fitted16.data.clone())
    sd.load_state_dict(fitted16.state_dict())
    x0 = torch.randn(64, 2, generator=torch.Generator().manual_seed(5))
    want = sd.assign(x0)
    cuda = torch.device("cuda")
    _, got_x1 = sd(x0.to(cuda), generator=torch.Generator(device=cuda).manual_seed(0))
    assert sd.data.device.type == "cuda" and got_x1.device.type == "cuda"
    torch.testing.assert_close(got_x1.cpu(), sd.data.cpu()[want])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_coupling_fits_with_a_cpu_generator() -> None:
    """The noise of the fit is drawn on the generator's device, as everywhere else in gencore: a CPU seed
    drives a CUDA fit (torch.randn with a CPU generator and device="cuda" raised)."""
    data = _skewed_data(8).to("cuda")
    sd = SemidiscreteCoupling(data)
    diag = sd.fit(200, 256, generator=torch.Generator().manual_seed(0), warn=False)
    assert sd.potential.device.type == "cuda" and torch.isfinite(sd.potential).all() and diag.chi2 < 0.05


def test_fit_is_equivariant_to_translating_the_data():
    """The OT map from N(0, I) to data translated by c is the map to the data, translated: fitting on y + c must
    match every noise point to the same index as fitting on y (float64, so only rounding differs). From the zero
    potential with a step scaled to the uncentred scores, data at offset (3, -2) used to end at chi2 ~ 0.2."""
    y = torch.randn(32, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 0.5
    fits = []
    for shift in (0.0, torch.tensor([3.0, -2.0], dtype=torch.float64)):
        sd = SemidiscreteCoupling(y + shift)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            diag = sd.fit(400, 256, generator=torch.Generator().manual_seed(1))
        fits.append((sd, diag))
    (centred, d0), (moved, d1) = fits
    assert d0.ok and d1.ok and abs(d1.chi2) < 5e-3
    x = torch.randn(2000, 2, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    assert float((centred.assign(x) == moved.assign(x)).double().mean()) > 0.995


def test_data_fingerprint_keeps_the_digest_of_saved_potentials():
    """Saved couplings hold sha256("(N, D)|dtype" + bytes) of the flattened data (before gencore.io's
    tensor_fingerprint served it); a changed digest would refuse every potential saved so far."""
    import hashlib

    from gencore.couplings import data_fingerprint

    images = torch.randn(5, 1, 2, 3, generator=torch.Generator().manual_seed(0))
    flat = images.reshape(5, -1)
    want = hashlib.sha256(b"(5, 6)|torch.float32" + flat.numpy().tobytes()).hexdigest()
    assert data_fingerprint(flat) == want
    assert bytes(SemidiscreteCoupling(images).data_sha256.tolist()).hex() == want
