"""Flow-matching and denoising score-matching losses: zero exactly at the conditional target in every
prediction space, positive elsewhere, the irreducible loss of the Bayes-optimal field for Gaussian data,
analytic gradients, weighting and reduction semantics."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError, InputError
from gencore.losses import denoising_score_matching_loss, flow_matching_loss
from gencore.nn import MLPVelocity, expand_like
from gencore.paths import (
    PREDICTIONS,
    AffineGaussianPath,
    BrownianBridgePath,
    CosineSchedule,
    LinearSchedule,
    VESchedule,
    VPSchedule,
)

F64 = torch.float64
PATHS = {
    "linear": AffineGaussianPath(LinearSchedule()),
    "cosine": AffineGaussianPath(CosineSchedule()),
    "vp": AffineGaussianPath(VPSchedule()),
    "ve": AffineGaussianPath(VESchedule(0.01, 20.0)),
}


def _batch(seed: int, b: int = 16, d: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x0, x1 = torch.randn(b, d, generator=g, dtype=F64), torch.randn(b, d, generator=g, dtype=F64)
    t = 0.05 + 0.9 * torch.rand(b, generator=g, dtype=F64)
    return x0, x1, t


def _oracle(path: AffineGaussianPath, x0: torch.Tensor, x1: torch.Tensor, kind: str, bias: float = 0.0):
    """A 'model' returning the exact conditional target of ``kind`` (plus ``bias``)."""

    def model(x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return path.target(x0, x1, t, kind) + bias

    return model


@pytest.mark.parametrize("name", list(PATHS))
@pytest.mark.parametrize("prediction", PREDICTIONS)
def test_fm_loss_zero_at_conditional_target_positive_otherwise(name: str, prediction: str) -> None:
    path = PATHS[name]
    x0, x1, t = _batch(0)
    exact = flow_matching_loss(_oracle(path, x0, x1, prediction), path, x0, x1, t, prediction=prediction)
    assert exact.item() < 1e-20
    off = flow_matching_loss(_oracle(path, x0, x1, prediction, 0.1), path, x0, x1, t, prediction=prediction)
    assert off.item() > 1e-6
    # velocity-space loss = c(t)^2 * prediction-space loss, c the slope of the conversion (here a bias of 0.1)
    per = flow_matching_loss(
        _oracle(path, x0, x1, prediction, 0.1), path, x0, x1, t, prediction=prediction, reduction="none"
    )
    zeros = torch.zeros_like(x1)
    v_bias = path.convert(zeros + 0.1, zeros, t, prediction, "velocity") - path.convert(
        zeros, zeros, t, prediction, "velocity"
    )
    torch.testing.assert_close(per, v_bias[:, 0] ** 2)


@pytest.mark.parametrize("name", list(PATHS))
@pytest.mark.parametrize("prediction", PREDICTIONS)
@pytest.mark.parametrize("weighting", [None, "sigma2"])
def test_dsm_loss_zero_at_conditional_score(name: str, prediction: str, weighting) -> None:
    path = PATHS[name]
    x0, x1, t = _batch(1)
    kw = {"prediction": prediction, "weighting": weighting}
    exact = denoising_score_matching_loss(_oracle(path, x0, x1, prediction), path, x0, x1, t, **kw)
    assert exact.item() < 1e-18
    off = denoising_score_matching_loss(_oracle(path, x0, x1, prediction, 0.1), path, x0, x1, t, **kw)
    assert off.item() > 1e-6


def test_dsm_sigma2_is_noise_prediction_mse_and_matches_callable() -> None:
    path = PATHS["vp"]
    x0, x1, t = _batch(2)
    eps_hat = torch.randn(x0.shape, generator=torch.Generator().manual_seed(9), dtype=F64)

    def model(x_t, tt):
        return eps_hat

    got = denoising_score_matching_loss(model, path, x0, x1, t, prediction="noise", weighting="sigma2")
    torch.testing.assert_close(got, ((eps_hat - x0) ** 2).mean())
    sigma2 = denoising_score_matching_loss(
        model, path, x0, x1, t, prediction="noise", weighting=lambda tt: path.schedule(tt).sigma ** 2
    )
    torch.testing.assert_close(got, sigma2)
    plain = denoising_score_matching_loss(model, path, x0, x1, t, prediction="noise", reduction="none")
    sig = path.schedule(t).sigma
    torch.testing.assert_close(plain, ((eps_hat - x0) ** 2).mean(1) / sig**2)


def test_fm_loss_of_bayes_optimal_field_is_irreducible_variance() -> None:
    """x1 ~ N(m, c^2), x0 ~ N(0, 1), linear path at fixed t: u = x1 - x0, and the minimiser E[u | x_t]
    leaves Var(u | x_t) = Var(u) - Cov(u, x_t)^2 / Var(x_t) per coordinate."""
    n, d, c, t0 = 40_000, 2, 0.5, 0.6
    g = torch.Generator().manual_seed(3)
    m = torch.tensor([1.0, -2.0], dtype=F64)
    x1 = m + c * torch.randn(n, d, generator=g, dtype=F64)
    x0 = torch.randn(n, d, generator=g, dtype=F64)
    path = PATHS["linear"]
    var_xt = t0**2 * c**2 + (1 - t0) ** 2

    def denoiser(x_t, t):  # E[x1 | x_t]
        return m + t0 * c**2 / var_xt * (x_t - t0 * m)

    t = torch.full((n,), t0, dtype=F64)
    per = flow_matching_loss(denoiser, path, x0, x1, t, prediction="data", reduction="none")
    expected = (c**2 + 1) - (t0 * c**2 - (1 - t0)) ** 2 / var_xt
    # per-sample losses are means of d squared Gaussians: Var = 2 expected^2 / d
    assert abs(per.mean().item() - expected) < 5 * math.sqrt(2 * expected**2 / d / n)
    worse = flow_matching_loss(lambda x_t, tt: denoiser(x_t, tt) * 1.05, path, x0, x1, t, prediction="data")
    assert worse.item() > per.mean().item()


def test_fm_loss_gradient_is_analytic_for_constant_field() -> None:
    x0, x1, t = _batch(4, b=32, d=5)
    path = PATHS["cosine"]
    c = torch.zeros(5, dtype=F64, requires_grad=True)
    loss = flow_matching_loss(lambda x_t, tt: c.expand_as(x_t), path, x0, x1, t)
    loss.backward()
    u = path.sample(x0, x1, t).u_t
    torch.testing.assert_close(loss.detach(), (u**2).mean())
    torch.testing.assert_close(c.grad, 2.0 / 5 * (c.detach() - u.mean(0)))


def test_fm_loss_gradient_flows_through_network() -> None:
    torch.manual_seed(0)
    model = MLPVelocity(dim=2, hidden=16, depth=2)
    g = torch.Generator().manual_seed(5)
    x1, x0 = torch.randn(64, 2, generator=g), torch.randn(64, 2, generator=g)
    t = torch.rand(64, generator=g)
    loss = flow_matching_loss(model, PATHS["linear"], x0, x1, t, prediction="data")
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(gr is not None and torch.isfinite(gr).all() for gr in grads)
    assert all(gr.abs().sum() > 0 for gr in grads)


def test_weighting_reduction_and_cond() -> None:
    path = PATHS["linear"]
    x0, x1, t = _batch(6)
    seen = {}

    def model(x_t, tt, *, label):
        seen["label"] = label
        return torch.zeros_like(x_t)

    per = flow_matching_loss(model, path, x0, x1, t, reduction="none", label=3)
    assert seen["label"] == 3 and per.shape == (16,)
    torch.testing.assert_close(per, ((x1 - x0) ** 2).mean(1))
    weighted = flow_matching_loss(model, path, x0, x1, t, weighting=lambda tt: 1 - tt, label=3)
    torch.testing.assert_close(weighted, ((1 - t) * per).mean())
    doubled = flow_matching_loss(model, path, x0, x1, t, weighting=lambda tt: torch.tensor(2.0), label=3)
    torch.testing.assert_close(doubled, 2 * per.mean())
    with pytest.raises(InputError, match="weighting"):
        flow_matching_loss(model, path, x0, x1, t, weighting=lambda tt: tt[:3], label=3)


def test_losses_on_brownian_bridge() -> None:
    path = BrownianBridgePath(0.5)
    x0, x1, t = _batch(7)

    def velocity_oracle(x_t, tt):
        mu = (1 - tt[:, None]) * x0 + tt[:, None] * x1
        return x1 - x0 + expand_like((1 - 2 * tt) / (2 * tt * (1 - tt)), x_t) * (x_t - mu)

    def score_oracle(x_t, tt):
        mu = (1 - tt[:, None]) * x0 + tt[:, None] * x1
        return -(x_t - mu) / expand_like(0.25 * tt * (1 - tt), x_t)

    g = torch.Generator().manual_seed(0)
    assert flow_matching_loss(velocity_oracle, path, x0, x1, t, generator=g).item() < 1e-20
    assert denoising_score_matching_loss(score_oracle, path, x0, x1, t, generator=g).item() < 1e-18
    with pytest.raises(ConfigError, match="cannot convert"):
        flow_matching_loss(velocity_oracle, path, x0, x1, t, prediction="data")
    with pytest.raises(ConfigError, match="no Gaussian noise"):
        denoising_score_matching_loss(score_oracle, BrownianBridgePath(0.0), x0, x1, t)


def test_loss_errors() -> None:
    path = PATHS["linear"]
    x0, x1, t = _batch(8)
    with pytest.raises(InputError, match="model output"):
        flow_matching_loss(lambda x_t, tt: x_t[:, :2], path, x0, x1, t)
    with pytest.raises(ConfigError, match="unknown prediction"):
        flow_matching_loss(lambda x_t, tt: x_t, path, x0, x1, t, prediction="eps")
    with pytest.raises(ConfigError, match="unknown reduction"):
        flow_matching_loss(lambda x_t, tt: x_t, path, x0, x1, t, reduction="sum")
    with pytest.raises(ConfigError, match="weighting"):
        denoising_score_matching_loss(lambda x_t, tt: x_t, path, x0, x1, t, weighting="snr")
