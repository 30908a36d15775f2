"""Schedules and the SD3 time shift: derivatives by finite differences, boundary values, independent
reference formulas (DDPM's discrete product, Karras et al.'s sampling grid, SD3's noise-level shift)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.errors import ConfigError
from gencore.paths import (
    CosineSchedule,
    EDMSchedule,
    LinearSchedule,
    ScheduleOutput,
    ShiftedSchedule,
    VESchedule,
    VPSchedule,
    make_schedule,
    time_shift,
    time_shift_derivative,
)

SCHEDULES = {
    "linear": LinearSchedule(),
    "cosine": CosineSchedule(),
    "vp": VPSchedule(),
    "vp_small": VPSchedule(beta_min=0.5, beta_max=5.0),
    "ve": VESchedule(sigma_min=0.01, sigma_max=50.0),
    "edm": EDMSchedule(),
    "edm_rho3": EDMSchedule(sigma_min=0.01, sigma_max=10.0, rho=3.0),
    "shift_linear": ShiftedSchedule(LinearSchedule(), 3.0),
    "shift_cosine": ShiftedSchedule(CosineSchedule(), 0.4),
    "shift_vp": ShiftedSchedule(VPSchedule(), 2.0),
}


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_derivatives_match_central_differences(name: str) -> None:
    sched = SCHEDULES[name]
    t = torch.linspace(0.01, 0.99, 99, dtype=torch.float64)
    h = 1e-6
    out, hi, lo = sched(t), sched(t + h), sched(t - h)
    for field, deriv in (("alpha", out.d_alpha), ("sigma", out.d_sigma)):
        fd = (getattr(hi, field) - getattr(lo, field)) / (2 * h)
        scale = 1.0 + deriv.abs()
        assert torch.all((fd - deriv).abs() <= 1e-6 * scale), (name, field, (fd - deriv).abs().max())
    assert out.alpha.dtype == torch.float64


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_outputs_have_the_shape_of_t(name: str) -> None:
    out = SCHEDULES[name](torch.rand(3, 4))
    assert isinstance(out, ScheduleOutput)
    for v in (out.alpha, out.sigma, out.d_alpha, out.d_sigma):
        assert v.shape == (3, 4)
    # Python floats are accepted and give 0-dim tensors of the default dtype.
    assert SCHEDULES[name](0.5).alpha.dtype == torch.get_default_dtype()


@pytest.mark.parametrize("name", ["linear", "cosine", "shift_linear", "shift_cosine"])
def test_exact_noise_at_zero_and_data_at_one(name: str) -> None:
    out = SCHEDULES[name](torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert out.alpha.tolist() == [0.0, 1.0]
    assert out.sigma.tolist() == [1.0, 0.0]


def test_trig_and_vp_preserve_variance() -> None:
    t = torch.linspace(0, 1, 101, dtype=torch.float64)
    for sched in (CosineSchedule(), VPSchedule(), VPSchedule(beta_min=1.0, beta_max=3.0)):
        out = sched(t)
        torch.testing.assert_close(out.alpha**2 + out.sigma**2, torch.ones_like(t), rtol=0, atol=1e-14)


def test_vp_boundaries_and_documented_residual() -> None:
    sched = VPSchedule(beta_min=0.1, beta_max=20.0)
    out = sched(torch.tensor([0.0, 1.0], dtype=torch.float64))
    assert out.alpha[1] == 1.0 and out.sigma[1] == 0.0  # exactly data at t = 1
    residual = math.exp(-(0.1 + 20.0) / 4)  # alpha_0 = exp(-(beta_min + beta_max) / 4) ~ 6.6e-3
    assert out.alpha[0].item() == pytest.approx(residual, rel=1e-12)
    assert residual < 7e-3
    assert out.sigma[0].item() == pytest.approx(math.sqrt(1 - residual**2), rel=1e-12)
    assert out.d_sigma[1] == -math.inf  # documented singularity of d sigma / dt at t = 1


def test_vp_sigma_keeps_full_relative_precision_next_to_data() -> None:
    # sigma^2 = 1 - exp(-B(s)); next to t = 1, B(s) ~ beta_min s is tiny and 1 - alpha^2 cancels catastrophically
    # (relative error ~1e-3 at s = 1e-12 in float64). Reference: the series 1 - e^-B = B - B^2/2 + B^3/6.
    sched = VPSchedule(beta_min=0.1, beta_max=20.0)
    t = torch.tensor([1.0 - 1e-12, 1.0 - 1e-9, 1.0 - 1e-7], dtype=torch.float64)
    s = 1.0 - t  # exact (Sterbenz)
    b = 0.1 * s + 0.5 * (20.0 - 0.1) * s * s
    reference = torch.sqrt(b - b * b / 2 + b**3 / 6)
    torch.testing.assert_close(sched(t).sigma, reference, rtol=1e-12, atol=0)


def test_vp_is_the_continuum_limit_of_discrete_ddpm() -> None:
    # DDPM (Ho et al. 2020): alpha_bar_i = prod_{j<=i} (1 - beta_j) with beta_j linear in j; Song et al. 2021:
    # with N steps and beta_j from beta_min / N to beta_max / N this tends to the VP schedule at s = i / N.
    # (N = 1000 is DDPM's 1e-4 .. 0.02; its O(sum beta_j^2) discretisation error is 7% at the end, so we
    # take N = 100000, where it is below 0.1%.)
    n, bmin, bmax = 100_000, 0.1, 20.0
    betas = np.linspace(bmin / n, bmax / n, n)
    alpha_bar = np.cumprod(1 - betas)
    i = np.array([500, 20_000, 50_000, 80_000, n - 1])
    s = (i + 1) / n
    out = VPSchedule(bmin, bmax)(torch.tensor(1 - s, dtype=torch.float64))
    np.testing.assert_allclose(out.alpha.numpy() ** 2, alpha_bar[i], rtol=2e-3)


def test_vp_alpha_integrates_beta() -> None:
    # log alpha_t = -1/2 int_0^{1-t} beta(u) du, checked with an independent quadrature.
    bmin, bmax = 0.3, 7.0
    t = np.array([0.0, 0.25, 0.6, 0.95])
    grid = np.linspace(0, 1, 200001)
    beta = bmin + grid * (bmax - bmin)
    cum = np.concatenate([[0.0], np.cumsum((beta[1:] + beta[:-1]) / 2 * np.diff(grid))])
    expected = np.exp(-0.5 * np.interp(1 - t, grid, cum))
    got = VPSchedule(bmin, bmax)(torch.tensor(t, dtype=torch.float64)).alpha.numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9)


def test_ve_geometric_between_sigma_max_and_sigma_min() -> None:
    sched = VESchedule(sigma_min=0.02, sigma_max=30.0)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    out = sched(t)
    assert torch.all(out.alpha == 1.0) and torch.all(out.d_alpha == 0.0)
    torch.testing.assert_close(out.sigma, torch.tensor([30.0, math.sqrt(0.02 * 30.0), 0.02], dtype=torch.float64))
    torch.testing.assert_close(sched.sigma_to_t(out.sigma), t)


def test_edm_matches_karras_sampling_grid() -> None:
    # Karras et al. 2022, eq. 5: sigma_i = (smax^(1/rho) + i/(N-1) (smin^(1/rho) - smax^(1/rho)))^rho.
    smin, smax, rho, n = 0.002, 80.0, 7.0, 18
    i = np.arange(n)
    ref = (smax ** (1 / rho) + i / (n - 1) * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    sched = EDMSchedule(sigma_min=smin, sigma_max=smax, rho=rho)
    t = torch.tensor(i / (n - 1), dtype=torch.float64)
    out = sched(t)
    np.testing.assert_allclose(out.sigma.numpy(), ref, rtol=1e-12)
    assert torch.all(out.alpha == 1.0)
    assert torch.all(out.sigma[1:] < out.sigma[:-1])
    torch.testing.assert_close(sched.sigma_to_t(out.sigma), t)


def test_log_snr_increases() -> None:
    t = torch.linspace(0.05, 0.95, 50, dtype=torch.float64)
    for sched in SCHEDULES.values():
        lam = sched(t).log_snr
        assert torch.all(lam[1:] > lam[:-1])


# ---------------------------------------------------------------- time shift (Esser et al. 2024)


@settings(max_examples=40, deadline=None)
@given(
    t=st.floats(0.0, 1.0),
    shift=st.floats(0.05, 20.0),
)
def test_time_shift_is_sd3_shift_on_noise_level(t: float, shift: float) -> None:
    s = 1.0 - t  # SD3's noise level
    s_shifted = shift * s / (1 + (shift - 1) * s)
    got = time_shift(torch.tensor(t, dtype=torch.float64), shift).item()
    assert got == pytest.approx(1.0 - s_shifted, abs=1e-12)
    assert 0.0 <= got <= 1.0


@settings(max_examples=40, deadline=None)
@given(
    ts=st.lists(st.floats(0.0, 1.0), min_size=2, max_size=10),
    shift=st.floats(0.05, 20.0),
    other=st.floats(0.1, 10.0),
)
def test_time_shift_monotone_fixed_points_and_group_law(ts: list[float], shift: float, other: float) -> None:
    t = torch.tensor(sorted(ts), dtype=torch.float64)
    out = time_shift(t, shift)
    assert torch.all(out[1:] >= out[:-1])
    ends = time_shift(torch.tensor([0.0, 1.0], dtype=torch.float64), shift)
    assert ends.tolist() == [0.0, 1.0]
    torch.testing.assert_close(time_shift(out, other), time_shift(t, shift * other))
    torch.testing.assert_close(time_shift(out, 1.0 / shift), t)
    assert torch.all(time_shift_derivative(t, shift) > 0)


def test_time_shift_direction_identity_and_derivative() -> None:
    t = torch.linspace(0.01, 0.99, 50, dtype=torch.float64)
    assert torch.all(time_shift(t, 3.0) < t)  # shift > 1: more time at high noise
    assert torch.all(time_shift(t, 0.5) > t)
    torch.testing.assert_close(time_shift(t, 1.0), t)
    h = 1e-6
    fd = (time_shift(t + h, 3.0) - time_shift(t - h, 3.0)) / (2 * h)
    torch.testing.assert_close(time_shift_derivative(t, 3.0), fd, rtol=1e-7, atol=1e-9)


def test_shifted_schedule_is_base_at_shifted_time() -> None:
    t = torch.linspace(0, 1, 11, dtype=torch.float64)
    base, shifted = CosineSchedule(), ShiftedSchedule(CosineSchedule(), 3.0)
    torch.testing.assert_close(shifted(t).alpha, base(time_shift(t, 3.0)).alpha)
    torch.testing.assert_close(shifted(t).sigma, base(time_shift(t, 3.0)).sigma)


def test_make_schedule_and_config_errors() -> None:
    assert make_schedule("vp", beta_min=0.2) == VPSchedule(beta_min=0.2)
    assert make_schedule("linear", shift=2.0) == ShiftedSchedule(LinearSchedule(), 2.0)
    with pytest.raises(ConfigError, match="unknown schedule"):
        make_schedule("sqrt")
    with pytest.raises(ConfigError, match="invalid settings"):
        make_schedule("linear", beta=1)
    with pytest.raises(ConfigError, match="sigma_min < sigma_max"):
        VESchedule(sigma_min=1.0, sigma_max=0.5)
    with pytest.raises(ConfigError):
        EDMSchedule(rho=0.0)
    with pytest.raises(ConfigError):
        VPSchedule(beta_min=-1.0)
    with pytest.raises(ConfigError, match="shift"):
        time_shift(0.5, 0.0)
    with pytest.raises(ConfigError, match="shift"):
        ShiftedSchedule(LinearSchedule(), -2.0)


def test_vp_without_beta_min_has_a_finite_sigma_derivative_at_data() -> None:
    # with beta_min = 0, d sigma / dt = -alpha^2 beta / (2 sigma) is 0 / 0 at t = 1; its limit is -sqrt(beta_max / 2)
    sched = VPSchedule(beta_min=0.0, beta_max=20.0)
    out = sched(torch.tensor([1.0 - 1e-6, 1.0], dtype=torch.float64))
    assert out.sigma[1] == 0.0
    assert out.d_sigma[1].item() == pytest.approx(-math.sqrt(10.0), rel=1e-12)
    assert out.d_sigma[0].item() == pytest.approx(-math.sqrt(10.0), rel=1e-4)  # continuous at t = 1
    assert VPSchedule()(torch.tensor(1.0, dtype=torch.float64)).d_sigma == -math.inf  # beta_min > 0: unchanged


def test_log_snr_is_log_of_alpha_squared_over_sigma_squared() -> None:
    # linear: alpha / sigma = t / (1 - t); cosine: tan(pi t / 2); VE: 1 / sigma
    t = torch.linspace(0.05, 0.95, 7, dtype=torch.float64)
    torch.testing.assert_close(LinearSchedule()(t).log_snr, 2 * torch.log(t / (1 - t)))
    torch.testing.assert_close(CosineSchedule()(t).log_snr, 2 * torch.log(torch.tan(math.pi * t / 2)))
    ve = VESchedule(sigma_min=0.02, sigma_max=30.0)
    torch.testing.assert_close(ve(t).log_snr, -2 * torch.log(ve(t).sigma))


@pytest.mark.parametrize(
    "build",
    [
        lambda: VPSchedule(beta_max=math.inf),
        lambda: VPSchedule(beta_min=math.nan),
        lambda: VESchedule(sigma_max=math.inf),
        lambda: EDMSchedule(sigma_max=math.inf),
        lambda: EDMSchedule(rho=math.nan),
        lambda: EDMSchedule(rho=math.inf),
        lambda: make_schedule("ve", sigma_max=float("inf")),
        lambda: make_schedule("linear", shift="three"),
        lambda: make_schedule("linear", shift=[3.0]),
    ],
)
def test_non_finite_or_non_numeric_settings_are_config_errors(build) -> None:
    # these were accepted and gave NaN coefficients everywhere (EDM rho = nan, VP beta_max = inf) or raised a
    # bare ValueError (VE sigma_max = inf: math.log(0); a shift of "three")
    with pytest.raises(ConfigError, match="finite"):
        build()
