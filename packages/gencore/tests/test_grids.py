"""Time grids: endpoints, monotonicity, the SD3 shift and the Karras sigma <-> t map."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError
from gencore.solvers import karras_grid, shifted_grid, sigma_to_t, t_to_sigma, uniform_grid

DT = torch.float64


def test_uniform_grid() -> None:
    g = uniform_grid(4, dtype=DT)
    torch.testing.assert_close(g, torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0], dtype=DT))
    assert uniform_grid(3).dtype == torch.get_default_dtype()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), shift=st.floats(0.05, 20.0))
def test_shifted_grid_monotone_endpoints_and_formula(n: int, shift: float) -> None:
    g = shifted_grid(n, shift, dtype=DT)
    assert g.shape == (n + 1,)
    assert float(g[0]) == 0.0 and float(g[-1]) == 1.0
    assert bool((g.diff() > 0).all())
    u = uniform_grid(n, dtype=DT)
    s = 1 - u  # SD3's noise level; its shifted value must be 1 - g
    torch.testing.assert_close(1 - g, shift * s / (1 + (shift - 1) * s))
    if shift > 1:  # more resolution near the noise: every interior point moves towards t = 0
        assert bool((g[1:-1] <= u[1:-1]).all())


def test_shifted_grid_identity_and_paths_agreement() -> None:
    torch.testing.assert_close(shifted_grid(7, 1.0, dtype=DT), uniform_grid(7, dtype=DT))
    paths = pytest.importorskip("gencore.paths")
    u = uniform_grid(9, dtype=DT)
    torch.testing.assert_close(shifted_grid(9, 3.0, dtype=DT), paths.time_shift(u, 3.0).to(DT))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(1, 60),
    sigma_min=st.floats(1e-3, 0.5),
    ratio=st.floats(1.5, 1e4),
    rho=st.floats(0.5, 10.0),
    append=st.booleans(),
)
def test_karras_grid_properties(n: int, sigma_min: float, ratio: float, rho: float, append: bool) -> None:
    sigma_max = sigma_min * ratio
    g = karras_grid(n, sigma_min, sigma_max, rho, append_data=append, dtype=DT)
    assert g.shape == (n + 1,)
    assert bool((g.diff() > 0).all()) and bool(((g > 0) & (g <= 1)).all())
    torch.testing.assert_close(g[0], torch.tensor(1 / (1 + sigma_max), dtype=DT))
    last = 1.0 if append else 1 / (1 + sigma_min)
    if n > 1 or not append:
        torch.testing.assert_close(g[-1], torch.tensor(last, dtype=DT))
    # The noise levels are the Karras et al. (2022) eq. 5 sigmas.
    m = n if append else n + 1
    sig = t_to_sigma(g[:m])
    if m > 1:
        i = torch.arange(m, dtype=DT)
        ref = (sigma_max ** (1 / rho) + i / (m - 1) * (sigma_min ** (1 / rho) - sigma_max ** (1 / rho))) ** rho
        torch.testing.assert_close(sig, ref, rtol=1e-9, atol=1e-12)


def test_karras_grid_reference_values() -> None:
    # EDM defaults (sigma 0.002..80, rho 7), 4 noise levels then sigma = 0.
    g = karras_grid(4, dtype=DT)
    sig = t_to_sigma(g)
    ref = torch.tensor([80.0, 9.7232, 0.46998, 0.002, 0.0], dtype=DT)  # by hand from eq. 5
    torch.testing.assert_close(sig, ref, rtol=1e-3, atol=1e-9)


def test_sigma_t_map_roundtrip_and_linear_path() -> None:
    sig = torch.tensor([0.0, 0.002, 0.5, 1.0, 80.0, float("inf")], dtype=DT)
    t = sigma_to_t(sig)
    torch.testing.assert_close(t, torch.tensor([1.0, 1 / 1.002, 1 / 1.5, 0.5, 1 / 81, 0.0], dtype=DT))
    torch.testing.assert_close(t_to_sigma(t[1:-1]), sig[1:-1])
    # Consistency with the linear path x_t = t x1 + (1 - t) x0: x_t / t has noise level sigma_t / alpha_t.
    paths = pytest.importorskip("gencore.paths")
    tt = torch.linspace(0.05, 0.95, 7, dtype=DT)
    s = paths.LinearSchedule()(tt)
    torch.testing.assert_close(t_to_sigma(tt), (s.sigma / s.alpha).to(DT))


def test_grid_errors() -> None:
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ConfigError):
            uniform_grid(bad)
    with pytest.raises(ConfigError):
        shifted_grid(4, 0.0)
    with pytest.raises(ConfigError):
        karras_grid(4, sigma_min=1.0, sigma_max=0.5)
    with pytest.raises(ConfigError):
        karras_grid(4, rho=0.0)


def test_non_finite_grid_parameters_are_rejected() -> None:
    # shift = inf gave [0, ..., 0, nan]; sigma_max = inf made every noise level NaN; rho = inf collapsed them all to 1
    with pytest.raises(ConfigError, match="shift must be a finite number"):
        shifted_grid(4, float("inf"))
    with pytest.raises(ConfigError, match="finite 0 < sigma_min < sigma_max"):
        karras_grid(4, sigma_max=float("inf"))
    with pytest.raises(ConfigError, match="rho must be a finite number"):
        karras_grid(4, rho=float("inf"))
