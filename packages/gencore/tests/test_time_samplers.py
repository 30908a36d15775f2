"""Time samplers: analytic moments and quantiles with standard-error tolerances, a KS test of the seeded
Beta sampler against scipy, reproducibility and argument checks."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from gencore.errors import ConfigError, InputError
from gencore.paths import BetaTime, LogitNormalTime, UniformTime, make_time_sampler

N = 50_000
Z = 5.0


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_uniform_moments() -> None:
    t = UniformTime()(N, generator=_gen(0), dtype=torch.float64)
    assert t.shape == (N,) and t.dtype == torch.float64
    assert 0.0 <= t.min() and t.max() < 1.0
    assert abs(t.mean().item() - 0.5) < Z * math.sqrt(1 / 12 / N)
    # Var(t) = 1/12; Var of the sample variance = (mu4 - sigma^4) / n with mu4 = 1/80
    assert abs(t.var().item() - 1 / 12) < Z * math.sqrt((1 / 80 - 1 / 144) / N)


@pytest.mark.parametrize("loc,scale", [(0.0, 1.0), (-0.5, 0.7), (1.0, 2.0)])
def test_logit_normal_median_and_logit_moments(loc: float, scale: float) -> None:
    t = LogitNormalTime(loc, scale)(N, generator=_gen(1), dtype=torch.float64)
    assert 0.0 < t.min() and t.max() < 1.0
    median = 1 / (1 + math.exp(-loc))
    # sample median: se = sqrt(p(1-p)/n) / f(median), f the density at the median
    density = 1 / (scale * math.sqrt(2 * math.pi) * median * (1 - median))
    assert abs(t.median().item() - median) < Z * 0.5 / math.sqrt(N) / density
    z = torch.logit(t)
    assert abs(z.mean().item() - loc) < Z * scale / math.sqrt(N)
    assert abs(z.std().item() - scale) < Z * scale / math.sqrt(2 * N)


@pytest.mark.parametrize("a,b", [(2.0, 3.0), (0.5, 0.5), (0.3, 4.0), (5.0, 1.0), (1.0, 1.0)])
def test_beta_mean_and_distribution(a: float, b: float) -> None:
    t = BetaTime(a, b)(N, generator=_gen(2), dtype=torch.float64)
    assert 0.0 <= t.min() and t.max() <= 1.0
    mean = a / (a + b)
    var = a * b / ((a + b) ** 2 * (a + b + 1))
    assert abs(t.mean().item() - mean) < Z * math.sqrt(var / N)
    ks = stats.kstest(t.numpy(), stats.beta(a, b).cdf)
    assert ks.pvalue > 1e-4, ks


def test_seeded_reproducible_and_dtype_device() -> None:
    for sampler in (UniformTime(), LogitNormalTime(), BetaTime(2.0, 2.0)):
        a = sampler(64, generator=_gen(3))
        b = sampler(64, generator=_gen(3))
        assert torch.equal(a, b) and a.dtype == torch.get_default_dtype()
        assert not torch.equal(a, sampler(64, generator=_gen(4)))
        c = sampler(64, generator=_gen(3), device="cpu", dtype=torch.float64)
        assert c.dtype == torch.float64 and torch.allclose(c.float(), a)
        assert sampler(0).shape == (0,)


def test_range_rescaling() -> None:
    t = BetaTime(2.0, 5.0, t_min=0.1, t_max=0.9)(N, generator=_gen(5), dtype=torch.float64)
    assert 0.1 <= t.min() and t.max() <= 0.9
    assert abs(t.mean().item() - (0.1 + 0.8 * 2 / 7)) < 0.01
    u = UniformTime(t_max=0.999)(1000, generator=_gen(6))
    assert u.max() < 0.999


def test_make_and_errors() -> None:
    assert make_time_sampler("beta", a=2.0, b=1.0) == BetaTime(2.0, 1.0)
    assert make_time_sampler("logit_normal", loc=0.5) == LogitNormalTime(loc=0.5)
    with pytest.raises(ConfigError, match="unknown time sampler"):
        make_time_sampler("cosmap")
    with pytest.raises(ConfigError, match="invalid settings"):
        make_time_sampler("uniform", a=1.0)
    with pytest.raises(ConfigError):
        BetaTime(0.0, 1.0)
    with pytest.raises(ConfigError):
        LogitNormalTime(scale=-1.0)
    with pytest.raises(ConfigError, match="t_min"):
        UniformTime(t_min=0.5, t_max=0.5)
    with pytest.raises(InputError, match="n must"):
        UniformTime()(-1)


def test_draws_stay_below_one_in_the_output_dtype() -> None:
    # Beta(1, 0.1) puts 18 % of its float64 draws within float32's last step below 1, which rounded to 1.0
    t = make_time_sampler("beta", a=1.0, b=0.1)(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    below_one = torch.nextafter(torch.tensor(1.0), torch.tensor(0.0))
    assert float(t.max()) < 1.0 and float((t == below_one).float().mean()) > 0.1


def test_draws_stay_below_one_when_t_max_rounds_to_one_in_the_output_dtype() -> None:
    # 1 - 1e-8 is below 1 in float64 but rounds to 1.0 in float32, so float32 draws near it must be clamped too
    t_max = 1.0 - 1e-8
    assert torch.tensor(t_max, dtype=torch.float32) == 1.0
    t = BetaTime(1.0, 0.1, t_max=t_max)(20000, generator=_gen(0), dtype=torch.float32)
    assert float(t.max()) < 1.0
    t64 = BetaTime(1.0, 0.1, t_max=t_max)(20000, generator=_gen(0), dtype=torch.float64)
    assert float(t64.max()) <= t_max


def test_integer_dtype_is_refused_rather_than_truncating_every_draw_to_zero() -> None:
    # with t_max < 1 an integer dtype silently returned all zeros; with t_max = 1 it failed inside the clamp
    with pytest.raises(InputError, match="floating-point"):
        UniformTime(t_max=0.9)(8, generator=_gen(0), dtype=torch.int64)
    with pytest.raises(InputError, match="floating-point"):
        BetaTime(2.0, 2.0)(8, generator=_gen(0), dtype=torch.int32)
