"""Classifier-free guidance in an interval and reward-gradient guidance."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.guidance import ClassifierFreeGuidance, RewardGuidance, guidance_mask
from gencore.solvers import solve_ode

DT = torch.float64


class CondModel:
    """v(x, t | y) = y * x + t (y a [B, 1] tensor); counts calls and batch sizes."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def __call__(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.batches.append(x.shape[0])
        tt = torch.as_tensor(t, dtype=x.dtype)
        tt = tt.reshape(-1, 1) if tt.dim() == 1 else tt
        return y * x + tt


X = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
Y = torch.full((4, 1), 2.0, dtype=DT)
NULL = torch.zeros(4, 1, dtype=DT)


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("w", [0.0, 1.0, 3.5])
def test_cfg_formula(batched: bool, w: float) -> None:
    model = CondModel()
    cfg = ClassifierFreeGuidance(model, w, cond={"y": Y}, null_cond={"y": NULL}, batched=batched)
    t = torch.tensor(0.3, dtype=DT)
    v = cfg(X, t)
    v_c, v_u = Y * X + 0.3, NULL * X + 0.3
    torch.testing.assert_close(v, v_u + w * (v_c - v_u))
    if w == 1.0:
        torch.testing.assert_close(v, v_c)
    if w == 0.0:
        torch.testing.assert_close(v, v_u)
    assert model.batches == ([8] if batched else [4, 4])


def test_cfg_identity_outside_interval_scalar_and_per_sample() -> None:
    model = CondModel()
    cfg = ClassifierFreeGuidance(model, 4.0, cond={"y": Y}, null_cond={"y": NULL}, interval=(0.2, 0.7))
    for t in (0.1, 0.9):
        model.batches.clear()
        torch.testing.assert_close(cfg(X, torch.tensor(t, dtype=DT)), Y * X + t)
        assert model.batches == [4]  # one conditional call, no unconditional one
    # closed interval
    v_edge = cfg(X, torch.tensor(0.7, dtype=DT))
    torch.testing.assert_close(v_edge, 4.0 * (Y * X + 0.7) - 3.0 * (0.7 + 0 * X))
    t = torch.tensor([0.1, 0.5, 0.7, 0.95], dtype=DT)
    v = cfg(X, t)
    v_c = Y * X + t[:, None]
    v_g = 4.0 * v_c - 3.0 * (NULL * X + t[:, None])
    inside = torch.tensor([False, True, True, False])
    torch.testing.assert_close(v[inside], v_g[inside])
    torch.testing.assert_close(v[~inside], v_c[~inside])
    assert guidance_mask(t, (0.2, 0.7)).tolist() == inside.tolist()


def test_cfg_non_tensor_condition_falls_back_and_errors() -> None:
    calls = []

    def model(x, t, label):
        calls.append(label)
        return x * (2.0 if label == "cat" else 1.0)

    cfg = ClassifierFreeGuidance(model, 2.0, cond={"label": "cat"}, null_cond={"label": None})
    torch.testing.assert_close(cfg(X, torch.tensor(0.5)), 3.0 * X)
    assert calls == ["cat", None]
    with pytest.raises(ConfigError):
        ClassifierFreeGuidance(model, 2.0, interval=(0.8, 0.2))
    for scale in (float("nan"), float("inf")):  # would turn every sample into NaN
        with pytest.raises(ConfigError, match="guidance scale must be a finite number"):
            ClassifierFreeGuidance(model, scale)


def test_cfg_in_solver_no_grad_and_grad() -> None:
    model = CondModel()
    cfg = ClassifierFreeGuidance(model, 1.0, cond={"y": Y}, null_cond={"y": NULL})
    plain = solve_ode(lambda x, t: model(x, t, y=Y), X, steps=5, method="heun").x
    torch.testing.assert_close(solve_ode(cfg, X, steps=5, method="heun").x, plain)
    x0 = X.clone().requires_grad_(True)
    solve_ode(cfg, x0, steps=3).x.sum().backward()
    assert x0.grad is not None


# ------------------------------------------------------------------ reward guidance

MU = torch.tensor([1.0, -1.0], dtype=DT)
S = 0.5


def gaussian_velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Exact velocity of the linear path N(0, I) -> N(MU, S^2 I); t scalar or [B]."""
    t = t[:, None] if t.dim() == 1 else t
    var = (1 - t) ** 2 + t**2 * S**2
    return MU + (t * S**2 - (1 - t)) / var * (x - t * MU)


def posterior_mean(x: torch.Tensor, t: float) -> torch.Tensor:
    """E[x1 | x_t] for that Gaussian: MU + t S^2 / var_t (x - t MU)."""
    var = (1 - t) ** 2 + t**2 * S**2
    return MU + t * S**2 / var * (x - t * MU)


C = torch.tensor([2.0, 1.0], dtype=DT)


def reward(x: torch.Tensor) -> torch.Tensor:
    return -((x - C) ** 2).sum(-1)


def test_reward_gradient_and_factor_closed_form() -> None:
    x = torch.randn(5, 2, generator=torch.Generator().manual_seed(1), dtype=DT)
    t = 0.4
    tt = torch.tensor(t, dtype=DT)
    x1_hat = posterior_mean(x, t)
    var = (1 - t) ** 2 + t**2 * S**2
    jac = t * S**2 / var  # d x1_hat / dx (isotropic)
    for through, expected_g in ((True, -2 * (x1_hat - C) * jac), (False, -2 * (x1_hat - C))):
        rg = RewardGuidance(gaussian_velocity, reward, 0.7, through_model=through)
        v, g = rg.reward_gradient(x, tt)
        torch.testing.assert_close(v, gaussian_velocity(x, tt))
        torch.testing.assert_close(g, expected_g)
        with torch.no_grad():
            out = rg(x, tt)
        torch.testing.assert_close(out, v + 0.7 * (1 - t) / t * expected_g)  # linear path: c_t = (1 - t) / t
    rg = RewardGuidance(gaussian_velocity, reward, 1.0, max_factor=3.0)
    f = rg.factor(torch.tensor([0.0, 0.1, 0.5, 1.0], dtype=DT), torch.zeros(4, 2, dtype=DT)).squeeze(1)
    torch.testing.assert_close(f, torch.tensor([3.0, 3.0, 1.0, 0.0], dtype=DT))


def test_reward_guidance_increases_reward_and_interval() -> None:
    x0 = torch.randn(2000, 2, generator=torch.Generator().manual_seed(2), dtype=DT)
    with torch.no_grad():
        base = solve_ode(gaussian_velocity, x0, steps=40, method="heun").x
        rewards = [float(reward(base).mean())]
        for scale in (0.1, 0.3):
            guided = RewardGuidance(gaussian_velocity, reward, scale)
            rewards.append(float(reward(solve_ode(guided, x0, steps=40, method="heun").x).mean()))
    assert rewards[0] < rewards[1] < rewards[2], rewards
    # outside the interval the guided field is the model itself
    rg = RewardGuidance(gaussian_velocity, reward, 5.0, interval=(0.5, 1.0))
    tt = torch.tensor(0.2, dtype=DT)
    torch.testing.assert_close(rg(x0[:3], tt), gaussian_velocity(x0[:3], tt))
    per = rg(x0[:2], torch.tensor([0.2, 0.6], dtype=DT))
    torch.testing.assert_close(per[0], gaussian_velocity(x0[:1], tt)[0])
    assert not torch.allclose(per[1], gaussian_velocity(x0[1:2], torch.tensor(0.6, dtype=DT))[0])


def test_reward_guidance_other_schedule_and_errors() -> None:
    paths = pytest.importorskip("gencore.paths")
    sched = paths.CosineSchedule()
    rg = RewardGuidance(lambda x, t: -x, reward, 1.0, schedule=sched, max_factor=1e6)
    tt = torch.tensor(0.5, dtype=DT)
    s = sched(tt)
    c = s.sigma * (s.d_alpha * s.sigma - s.alpha * s.d_sigma) / s.alpha
    # cross-check c_t with the path's own score -> velocity conversion (affine: v = a x + c s)
    x = torch.zeros(1, 2, dtype=DT)
    ds = torch.ones(1, 2, dtype=DT)
    path = paths.AffineGaussianPath(sched)
    c_path = path.convert(ds, x, tt, "score", "velocity")
    torch.testing.assert_close(c_path, (c * ds).to(DT))
    torch.testing.assert_close(rg.factor(tt, x), c.to(DT).expand(1, 1))
    bad = RewardGuidance(lambda x, t: -x, lambda x: x, 1.0)
    with pytest.raises(InputError):
        bad(x, tt)
    with pytest.raises(ConfigError):
        RewardGuidance(lambda x, t: -x, reward, 1.0, max_factor=0.0)


def test_reward_guidance_on_vp_reaches_t1_with_the_factors_limit() -> None:
    # on VP, c_t = d_alpha / alpha at every t, beta_min / 2 at t = 1 (where d_sigma = -inf); Heun evaluates
    # the field at t = 1, which made every guided sample NaN before the conversion took its limit there
    from gencore.paths import VPSchedule

    sched = VPSchedule()
    rg = RewardGuidance(lambda x, t: -x, reward, 0.1, schedule=sched, max_factor=1e6)
    t = torch.tensor([0.3, 0.7, 0.999, 1.0], dtype=DT)
    c = sched(t)
    f = rg.factor(t, torch.zeros(4, 2, dtype=DT)).squeeze(1)
    torch.testing.assert_close(f, c.d_alpha / c.alpha)
    assert float(f[-1]) == pytest.approx(sched.beta_min / 2)
    x0 = torch.randn(64, 2, generator=torch.Generator().manual_seed(4), dtype=DT)
    with torch.no_grad():
        for method in ("heun", "rk4"):
            assert torch.isfinite(solve_ode(rg, x0, steps=10, method=method).x).all()


def test_guidance_without_an_interval_never_reads_the_time_back() -> None:
    """With no interval there is nothing to compare, so a device scalar ``t`` is never synchronised to the
    host; a ``meta`` tensor, which has no value to read, stands in for a CUDA scalar."""

    def model(x, t, label):
        return x * (2.0 if label == "cat" else 1.0)

    t = torch.empty((), device="meta")
    cfg = ClassifierFreeGuidance(model, 3.0, cond={"label": "cat"}, null_cond={"label": None})
    assert guidance_mask(t, cfg.interval) is None
    torch.testing.assert_close(cfg(X, t), 4.0 * X)  # 1 + 3 * (2 - 1)
    rg = RewardGuidance(lambda x, t, label: x, lambda x1: x1.sum(1), 0.0, through_model=False, cond={"label": "cat"})
    torch.testing.assert_close(rg(X, 0.5), X)
    with pytest.raises((RuntimeError, NotImplementedError)):  # an interval must read t to compare it
        ClassifierFreeGuidance(model, 3.0, cond={"label": "cat"}, null_cond={"label": None}, interval=(0.0, 1.0))(X, t)


def test_reward_guidance_rejects_a_non_finite_scale() -> None:
    for scale in (float("nan"), float("inf")):  # would turn every sample into NaN
        with pytest.raises(ConfigError, match="scale must be a finite number"):
            RewardGuidance(lambda x, t: -x, reward, scale)


def test_cfg_interval_is_closed_at_its_lower_end_too() -> None:
    # t == t_lo is inside the closed interval [t_lo, t_hi]: guided, not the plain conditional velocity
    model = CondModel()
    cfg = ClassifierFreeGuidance(model, 4.0, cond={"y": Y}, null_cond={"y": NULL}, interval=(0.25, 0.75))
    guided = 4.0 * (Y * X + 0.25) - 3.0 * (NULL * X + 0.25)
    torch.testing.assert_close(cfg(X, torch.tensor(0.25, dtype=DT)), guided)
    per = cfg(X, torch.tensor([0.25, 0.2, 0.25, 0.75], dtype=DT))
    torch.testing.assert_close(per[[0, 2]], guided[[0, 2]])
    torch.testing.assert_close(per[1], (Y * X + 0.2)[1])


def test_reward_guidance_rejects_an_infinite_cap_that_made_t0_nan() -> None:
    # c_t = inf at t = 0 of the linear path; an infinite cap let inf * grad reach the velocity as NaN there
    with pytest.raises(ConfigError, match="max_factor must be a finite number"):
        RewardGuidance(lambda x, t: -x, reward, 1.0, max_factor=float("inf"))
    with pytest.raises(ConfigError, match="max_factor must be a finite number"):
        RewardGuidance(lambda x, t: -x, reward, 1.0, max_factor="big")
    rg = RewardGuidance(lambda x, t: -x, reward, 1.0, max_factor=1e12)
    assert torch.isfinite(rg(X[:, :2], torch.tensor(0.0, dtype=DT))).all()


def test_guidance_settings_of_the_wrong_kind_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="guidance scale must be a finite number"):
        ClassifierFreeGuidance(CondModel(), "strong")
    with pytest.raises(ConfigError, match="guidance interval must be a pair of numbers"):
        ClassifierFreeGuidance(CondModel(), 2.0, interval=(0.1, 0.2, 0.3))
    with pytest.raises(ConfigError, match="guidance interval must be a pair of numbers"):
        RewardGuidance(lambda x, t: -x, reward, 1.0, interval=("a", 1.0))
