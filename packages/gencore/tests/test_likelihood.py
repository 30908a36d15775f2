"""Probability-flow likelihoods against closed-form Gaussian densities; divergence estimators."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.likelihood import (
    exact_divergence,
    hutchinson_divergence,
    log_likelihood,
    sample_probe,
    standard_normal_log_prob,
)

DT = torch.float64


class GaussianFlow(nn.Module):
    """Exact marginal velocity of the linear path from N(0, I) to N(mu, diag(s^2)) (independent coupling).

    x_t ~ N(t mu, diag(std_t^2)), std_t^2 = (1 - t)^2 + t^2 s^2, so
    v(x, t) = mu + (t s^2 - (1 - t)) / std_t^2 * (x - t mu) and the flow maps z to mu + s z.
    """

    def __init__(self, mu: torch.Tensor, s: torch.Tensor) -> None:
        super().__init__()
        self.mu = nn.Parameter(mu.clone())
        self.log_s = nn.Parameter(s.log().clone())

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        s2 = torch.exp(2 * self.log_s)
        var = (1 - t) ** 2 + t**2 * s2
        return self.mu + (t * s2 - (1 - t)) / var * (x - t * self.mu)


def gaussian_log_prob(x: torch.Tensor, mu: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    z = (x - mu) / s
    return (-0.5 * z**2 - torch.log(s) - 0.5 * math.log(2 * math.pi)).sum(-1)


MU = torch.tensor([1.0, -2.0, 0.5], dtype=DT)
S = torch.tensor([0.5, 2.0, 1.3], dtype=DT)


def data(n: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return MU + S * torch.randn(n, 3, generator=g, dtype=DT)


@pytest.mark.parametrize(("method", "tol"), [("dopri5", 1e-5), ("rk4", 1e-5), ("heun", 5e-3)])
def test_log_likelihood_matches_gaussian(method: str, tol: float) -> None:
    model = GaussianFlow(MU, S)
    x1 = data()
    with torch.no_grad():
        res = log_likelihood(model, x1, method=method, steps=60, rtol=1e-8, atol=1e-8)
    torch.testing.assert_close(res.log_prob, gaussian_log_prob(x1, MU, S), atol=tol, rtol=0)
    torch.testing.assert_close(res.x0, (x1 - MU) / S, atol=tol, rtol=0)
    torch.testing.assert_close(res.log_prob, res.source_log_prob + res.delta_log_prob)
    if method == "rk4":
        assert res.nfe == 240
    assert not res.log_prob.requires_grad


def test_rademacher_hutchinson_exact_for_diagonal_jacobian_and_fixed_probe() -> None:
    """For a diagonal Jacobian a Rademacher probe gives the exact divergence; a Gaussian probe held fixed
    along the trajectory gives delta = sum_d eps_d^2 * (exact per-coordinate integral)."""
    model = GaussianFlow(MU, S)
    x1 = data()
    kw = dict(method="rk4", steps=40)
    exact = log_likelihood(model, x1, **kw)
    rad = log_likelihood(model, x1, divergence="hutchinson", generator=torch.Generator().manual_seed(1), **kw)
    torch.testing.assert_close(rad.log_prob, exact.log_prob)
    gau = log_likelihood(
        model,
        x1,
        divergence="hutchinson",
        probe="gaussian",
        n_probes=3,
        generator=torch.Generator().manual_seed(2),
        **kw,
    )
    eps = sample_probe(x1.new_empty(3, *x1.shape), "gaussian", generator=torch.Generator().manual_seed(2))
    per_coord = -torch.log(S)  # -int_0^1 d/dx_d v_d dt = -log s_d
    expected = (eps**2).mean(0) @ per_coord
    torch.testing.assert_close(gau.delta_log_prob, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(gau.x0, exact.x0)


@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
def test_hutchinson_unbiased(kind: str) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(4, 4, generator=g, dtype=DT)
    x = torch.randn(5, 4, generator=g, dtype=DT)

    def fn(z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(z @ w) + z**2

    v, div = exact_divergence(fn, x)
    # analytic: d/dz_i [tanh(z w)_i + z_i^2] = (1 - tanh(z w)_i^2) w_ii + 2 z_i
    ref = ((1 - torch.tanh(x @ w) ** 2) * torch.diagonal(w)).sum(1) + 2 * x.sum(1)
    torch.testing.assert_close(div, ref)
    torch.testing.assert_close(v, fn(x))
    n = 4000
    probes = sample_probe(x.new_empty(n, *x.shape), kind, generator=g)
    samples = torch.stack([hutchinson_divergence(fn, x, probes[i])[1] for i in range(0, n, 1)])
    se = samples.std(0) / math.sqrt(n)
    assert bool(((samples.mean(0) - ref).abs() < 4 * se + 1e-12).all())
    # the [P, B, ...] form averages the same probes
    _, avg = hutchinson_divergence(fn, x, probes[:50])
    torch.testing.assert_close(avg, samples[:50].mean(0))
    if kind == "rademacher":
        assert set(probes.unique().tolist()) == {-1.0, 1.0}
    else:
        assert abs(float(probes.var()) - 1.0) < 0.02


def test_gradients_flow_when_asked() -> None:
    model = GaussianFlow(MU, S)
    x1 = data(4).requires_grad_(True)
    res = log_likelihood(model, x1, method="rk4", steps=30, keep_graph=True)
    res.log_prob.sum().backward()
    # d/dmu log N(x; mu, s^2) = (x - mu) / s^2 ; d/dx = -(x - mu) / s^2 ; d/dlog s = z^2 - 1
    xd = x1.detach()
    torch.testing.assert_close(model.mu.grad, ((xd - MU) / S**2).sum(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(x1.grad, -(xd - MU) / S**2, atol=1e-5, rtol=0)
    torch.testing.assert_close(model.log_s.grad, (((xd - MU) / S) ** 2 - 1).sum(0), atol=1e-5, rtol=0)
    # Hutchinson + dopri5 keep gradients too
    model.zero_grad()
    res = log_likelihood(
        model,
        x1.detach(),
        divergence="hutchinson",
        keep_graph=True,
        rtol=1e-7,
        atol=1e-7,
        generator=torch.Generator().manual_seed(0),
    )
    res.log_prob.sum().backward()
    torch.testing.assert_close(model.mu.grad, ((xd - MU) / S**2).sum(0), atol=1e-4, rtol=0)
    # without keep_graph nothing is recorded
    assert not log_likelihood(model, x1, method="euler", steps=3).log_prob.requires_grad


def test_custom_source_and_image_shape() -> None:
    model = GaussianFlow(MU, S)
    x1 = data(4)
    base = log_likelihood(model, x1, method="rk4", steps=20)
    shifted = log_likelihood(
        model, x1, method="rk4", steps=20, source_log_prob=lambda z: standard_normal_log_prob(z) + 1.5
    )
    torch.testing.assert_close(shifted.log_prob, base.log_prob + 1.5)

    # [B, 2, 2] data through a per-pixel linear flow: N(0, I) -> N(0, 4 I), log p = N(x; 0, 4 I)
    def img_model(x: torch.Tensor, t: torch.Tensor, gain: float = 1.0) -> torch.Tensor:
        var = (1 - t) ** 2 + 4 * t**2
        return gain * (4 * t - (1 - t)) / var * x

    xi = 2 * torch.randn(3, 2, 2, generator=torch.Generator().manual_seed(5), dtype=DT)
    res = log_likelihood(img_model, xi, method="rk4", steps=40, gain=1.0)
    ref = (-0.5 * (xi / 2) ** 2 - math.log(2) - 0.5 * math.log(2 * math.pi)).flatten(1).sum(1)
    torch.testing.assert_close(res.log_prob, ref, atol=1e-6, rtol=0)
    assert res.x0.shape == xi.shape


def test_likelihood_validation() -> None:
    model = GaussianFlow(MU, S)
    with pytest.raises(ConfigError):
        log_likelihood(model, data(), method="rk45")
    with pytest.raises(ConfigError):
        log_likelihood(model, data(), divergence="hutchinson", probe="uniform")
    with pytest.raises(InputError):
        log_likelihood(model, torch.tensor([1.0, float("nan")], dtype=DT).expand(2, 2))
    with pytest.raises(InputError):
        log_likelihood(model, data(), method="euler", steps=2, source_log_prob=lambda z: z)


# Affine flow v(x, t) = A x + b0 + t b1 with a full, non-symmetric A (the Jacobian is not diagonal, so the
# divergence must be its trace, not any other sum of its entries). From x(0) = z ~ N(0, I) the flow gives
# x(1) = M z + c with M = expm(A) and c the top-right block of expm of the augmented generator below, so
# p_1 = N(c, M M^T) and log p_1(x1) = log N(M^{-1}(x1 - c); 0, I) - tr(A) (det expm(A) = e^{tr A}).
_G = torch.Generator().manual_seed(123)
LIN_A = torch.randn(3, 3, generator=_G, dtype=DT)
LIN_B0 = torch.randn(3, generator=_G, dtype=DT)
LIN_B1 = torch.randn(3, generator=_G, dtype=DT)


def affine_field(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return x @ LIN_A.T + LIN_B0 + t * LIN_B1


def affine_flow_map() -> tuple[torch.Tensor, torch.Tensor]:
    """``(M, c)`` with ``x(1) = M x(0) + c``: expm of the generator of ``z = (x, 1, t)``, ``dz/dt = G z``."""
    gen = torch.zeros(5, 5, dtype=DT)
    gen[:3, :3], gen[:3, 3], gen[:3, 4], gen[4, 3] = LIN_A, LIN_B0, LIN_B1, 1.0
    flow = torch.linalg.matrix_exp(gen)
    return flow[:3, :3], flow[:3, 3]


def affine_data(n: int, seed: int) -> tuple[torch.Tensor, torch.distributions.MultivariateNormal]:
    m, c = affine_flow_map()
    p1 = torch.distributions.MultivariateNormal(c, covariance_matrix=m @ m.T)
    z = torch.randn(n, 3, generator=torch.Generator().manual_seed(seed), dtype=DT)
    return z @ m.T + c, p1


@pytest.mark.parametrize(("method", "kw"), [("dopri5", dict(rtol=1e-9, atol=1e-9)), ("rk4", dict(steps=80))])
def test_log_likelihood_of_affine_flow_with_full_nonsymmetric_jacobian(method: str, kw: dict) -> None:
    assert not torch.allclose(LIN_A, LIN_A.T, atol=0.5)  # far from symmetric, far from diagonal
    m, c = affine_flow_map()
    torch.testing.assert_close(m, torch.linalg.matrix_exp(LIN_A))
    x1, p1 = affine_data(8, seed=0)
    x1 = torch.cat([x1, c + torch.tensor([[3.0, -2.0, 1.0]], dtype=DT)])  # and an atypical point
    with torch.no_grad():
        res = log_likelihood(affine_field, x1, method=method, **kw)
    torch.testing.assert_close(res.log_prob, p1.log_prob(x1), atol=1e-7, rtol=0)
    torch.testing.assert_close(res.x0, torch.linalg.solve(m, (x1 - c).T).T, atol=1e-7, rtol=0)
    torch.testing.assert_close(res.source_log_prob, standard_normal_log_prob(res.x0))
    # the divergence is the constant tr(A) (not, e.g., the sum of all Jacobian entries): delta = -tr(A)
    torch.testing.assert_close(res.delta_log_prob, torch.full_like(res.delta_log_prob, -float(LIN_A.trace())))


@pytest.mark.parametrize("probe", ["rademacher", "gaussian"])
def test_hutchinson_affine_flow_fixed_probes(probe: str) -> None:
    """With fixed probes the estimated divergence is eps^T A eps (constant in time): delta is exactly its negative
    mean over the probes, x0 is unaffected, and over many samples the estimate averages to -tr(A)."""
    n, n_probes = 400, 2
    x1, p1 = affine_data(n, seed=1)
    res = log_likelihood(
        affine_field,
        x1,
        divergence="hutchinson",
        probe=probe,
        n_probes=n_probes,
        generator=torch.Generator().manual_seed(7),
        rtol=1e-9,
        atol=1e-9,
    )
    eps = sample_probe(x1.new_empty(n_probes, n, 3), probe, generator=torch.Generator().manual_seed(7))
    quad = torch.einsum("pbi,ij,pbj->b", eps, LIN_A, eps) / n_probes
    torch.testing.assert_close(res.delta_log_prob, -quad, atol=1e-10, rtol=0)
    m, c = affine_flow_map()
    torch.testing.assert_close(res.x0, torch.linalg.solve(m, (x1 - c).T).T, atol=1e-7, rtol=0)
    # log_prob = exact log p1 + (tr(A) - eps^T A eps), an unbiased error
    torch.testing.assert_close(res.log_prob, p1.log_prob(x1) + float(LIN_A.trace()) - quad, atol=1e-7, rtol=0)
    se = float(res.delta_log_prob.std()) / math.sqrt(n)
    assert abs(float(res.delta_log_prob.mean()) + float(LIN_A.trace())) < 4 * se
    assert float(res.delta_log_prob.std()) > 0.1  # the off-diagonal terms do enter the estimate


def test_a_field_that_ignores_x_has_zero_divergence() -> None:
    # autograd raised "does not require grad" for a constant field, and "not used in the graph" for one built
    # from parameters alone
    x = torch.randn(5, 3, dtype=torch.float64)
    mu = torch.nn.Parameter(torch.randn(3, dtype=torch.float64))
    probe = torch.ones_like(x)
    for field in (lambda z: torch.ones_like(z), lambda z: mu.expand_as(z)):
        for _, div in (exact_divergence(field, x), hutchinson_divergence(field, x, probe)):
            assert torch.equal(div, torch.zeros(5, dtype=torch.float64))
    res = log_likelihood(lambda z, t: torch.ones_like(z), x, divergence="exact", method="euler", steps=4)
    torch.testing.assert_close(res.x0, x - 1.0)


def test_log_likelihood_with_pure_relative_tolerance() -> None:
    # the log-density accumulator starts at exactly 0, which with atol = 0 made dopri5's starting step NaN
    model = GaussianFlow(MU, S)
    x1 = data()
    with torch.no_grad():
        res = log_likelihood(model, x1, rtol=1e-9, atol=0.0)
    torch.testing.assert_close(res.log_prob, gaussian_log_prob(x1, MU, S), atol=1e-6, rtol=0)
    assert res.nfe < 2000, res.nfe


def test_a_field_of_the_wrong_shape_is_rejected() -> None:
    # a field returning [B, 1] for [B, 3] inputs gave a silent, wrong "divergence" (the derivative of one output
    # summed with unrelated entries, or a broadcast product with the probe), and log_likelihood a raw reshape error
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=DT)
    probe = torch.ones_like(x)
    with pytest.raises(InputError, match=r"input's shape \(4, 3\), got \(4, 1\)"):
        exact_divergence(lambda z: 2 * z[:, :1], x)
    with pytest.raises(InputError, match=r"input's shape \(4, 3\), got \(4, 1\)"):
        hutchinson_divergence(lambda z: z.sum(1, keepdim=True), x, probe)
    for divergence in ("exact", "hutchinson"):
        with pytest.raises(InputError, match="input's shape"):
            log_likelihood(lambda z, t: z[:, :1], x, divergence=divergence, method="euler", steps=2)


def test_integer_data_is_rejected_naming_x1() -> None:
    with pytest.raises(InputError, match="x1 must be a floating-point"):
        log_likelihood(lambda z, t: -z, torch.ones(2, 3, dtype=torch.long), method="euler", steps=2)


def test_probe_count_and_kind_are_validated() -> None:
    # n_probes = 1.5 or True reached new_empty as a TypeError; a misspelt probe was ignored with the exact divergence
    model = GaussianFlow(MU, S)
    for bad in (1.5, True, 0):
        with pytest.raises(ConfigError, match="n_probes must be"):
            log_likelihood(model, data(), divergence="hutchinson", n_probes=bad, method="euler", steps=2)
    with pytest.raises(ConfigError, match="probe"):
        log_likelihood(model, data(), divergence="exact", probe="bogus", method="euler", steps=2)
