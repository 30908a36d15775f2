"""Riemannian likelihoods: exact divergence vs Hutchinson, and change of variables giving a normalised density."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError
from gencore.manifolds import (
    SO3,
    Lorentz,
    ManifoldMLP,
    PoincareBall,
    Sphere,
    Torus,
    log_likelihood,
    riemannian_divergence,
)


def _net(m, seed=0):
    torch.manual_seed(seed)
    return ManifoldMLP(m, hidden=32, depth=2).double()


@pytest.mark.parametrize("m", [Sphere(2), PoincareBall(2, c=1.0), Torus(2)], ids=lambda m: m.name)
def test_hutchinson_agrees_with_the_exact_divergence(m):
    net = _net(m)
    x = m.random_base(8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    t = torch.tensor(0.3, dtype=torch.float64)
    _, exact = riemannian_divergence(m, net, x, t)
    k = 4000
    probes = torch.randn(k, *x.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    singles = torch.stack(
        [riemannian_divergence(m, net, x, t, estimator="hutchinson", probes=p[None])[1] for p in probes[:200]]
    )
    _, hutch = riemannian_divergence(m, net, x, t, estimator="hutchinson", probes=probes)
    se = singles.std(0) / math.sqrt(k)
    assert ((hutch - exact).abs() <= 5 * se + 1e-12).all()


def test_sphere_divergence_of_a_conformal_field():
    """v(x) = a - (a.x) x (the gradient of a.x on S^2) has div = -2 (a.x) (Laplacian of a degree-1 harmonic)."""
    m = Sphere(2)
    a = torch.tensor([0.3, -1.2, 0.5], dtype=torch.float64)
    x = m.random_base(16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    _, div = riemannian_divergence(m, lambda x, t: a.expand_as(x), x, torch.tensor(0.0, dtype=torch.float64))
    assert torch.allclose(div, -2 * (x @ a), atol=1e-12)


def test_ball_divergence_includes_the_volume_term():
    """On the disk with metric lambda^2 I: div(v) = div_E(v) + n c lambda <x, v>. For v = x: 2 + 2 c lambda |x|^2."""
    m = PoincareBall(2, c=0.8)
    x = m.random_base(16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    _, div = riemannian_divergence(m, lambda x, t: x, x, torch.tensor(0.0, dtype=torch.float64))
    lam = m.lambda_x(x, keepdim=False)
    assert torch.allclose(div, 2 + 2 * 0.8 * lam * x.square().sum(-1), atol=1e-12)


def _sphere_grid(n):
    lat = (torch.arange(n, dtype=torch.float64) + 0.5) / n * math.pi - math.pi / 2
    lon = (torch.arange(2 * n, dtype=torch.float64) + 0.5) / (2 * n) * 2 * math.pi - math.pi
    la, lo = torch.meshgrid(lat, lon, indexing="ij")
    pts = torch.stack([la.cos() * lo.cos(), la.cos() * lo.sin(), la.sin()], -1).reshape(-1, 3)
    area = (la.cos() * (math.pi / n) * (2 * math.pi / (2 * n))).reshape(-1)
    return pts, area


def test_change_of_variables_gives_a_normalised_density_on_the_sphere():
    m = Sphere(2)
    net = _net(m, seed=5)
    with torch.no_grad():
        net.net[-1].weight.mul_(20)  # a field strong enough to move mass around
    pts, area = _sphere_grid(40)
    res = log_likelihood(m, net, pts, steps=16, method="rk4")
    total = float((res.log_prob.exp() * area).sum())
    assert abs(total - 1) < 2e-3
    # and the density is far from uniform, so the check is not vacuous
    assert float(res.log_prob.exp().max() / res.log_prob.exp().min()) > 1.5


def test_change_of_variables_on_the_ball_uses_the_wrapped_normal_base():
    m = PoincareBall(2, c=1.0, base_std=0.6)
    net = _net(m, seed=6)
    n = 80
    r = (torch.arange(n, dtype=torch.float64) + 0.5) / n * 0.97
    th = (torch.arange(n, dtype=torch.float64) + 0.5) / n * 2 * math.pi
    rr, tt = torch.meshgrid(r, th, indexing="ij")
    pts = torch.stack([rr * tt.cos(), rr * tt.sin()], -1).reshape(-1, 2)
    res = log_likelihood(m, lambda x, t: net(x, t) / m.lambda_x(x), pts, steps=12, method="rk4")  # bounded speed
    vol = m.lambda_x(pts, keepdim=False).square() * rr.reshape(-1) * (0.97 / n) * (2 * math.pi / n)
    mass = float((res.log_prob.exp() * vol).sum())
    # mass beyond radius 0.97 (hyperbolic radius ~4.2, i.e. 7 base stds) is negligible; the flow is mild
    assert abs(mass - 1) < 5e-3


def test_lorentz_divergence_of_the_gradient_of_a_linear_function():
    """On the hyperboloid <x, x>_L = -k (curvature -1/k) f(x) = <a, x>_L has Hess f = (f / k) g, so the divergence of
    its gradient (the Minkowski-orthogonal projection of a) is n f / k; the trace runs in the Minkowski projector."""
    m = Lorentz(3, k=2.0)
    a = torch.tensor([1.3, 0.2, -0.4, 0.5], dtype=torch.float64)
    x = m.random_base(16, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    _, div = riemannian_divergence(m, lambda x, t: a.expand_as(x), x, torch.tensor(0.0, dtype=torch.float64))
    torch.testing.assert_close(div, 3 * m.linner(a.expand_as(x), x) / 2.0, atol=1e-10, rtol=1e-10)


def test_so3_divergences_of_invariant_and_gradient_fields():
    """Left-invariant fields R hat(w) are divergence-free (Killing fields); the matrix entries f = tr(A^T R) are
    eigenfunctions of the Laplacian of the metric tr(U^T V) / 2 with eigenvalue -2, and grad f = 2 proju(R, A)."""
    m = SO3()
    x = m.random_base(8, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    t = torch.tensor(0.0, dtype=torch.float64)
    w = torch.tensor([0.3, -0.7, 1.1], dtype=torch.float64)
    from gencore.manifolds.spaces import hat

    _, div = riemannian_divergence(m, lambda x, t: (x.reshape(-1, 3, 3) @ hat(w)).reshape(-1, 9), x, t)
    assert div.abs().max() < 1e-12
    a = torch.randn(9, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    _, div = riemannian_divergence(m, lambda x, t: 2 * m.proju(x, a.expand_as(x)), x, t)
    torch.testing.assert_close(div, -2 * (x * a).sum(-1), atol=1e-12, rtol=1e-12)


def test_log_likelihood_refuses_bad_probe_counts():
    # zero probes averaged to a NaN divergence, hence a NaN log-likelihood, without a word
    m = Sphere(2)
    x = m.random_base(4, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    for n in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="n_probes"):
            log_likelihood(m, _net(m), x, steps=2, estimator="hutchinson", n_probes=n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_hutchinson_probes_come_from_a_cuda_generator():
    # the probes were drawn on the CPU from the given generator, which a CUDA generator refuses
    m = Sphere(2)
    net = _net(m).to("cuda")
    x = m.random_base(4, generator=torch.Generator().manual_seed(11), dtype=torch.float64).to("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    res = log_likelihood(m, net, x, steps=2, estimator="hutchinson", generator=gen)
    assert res.log_prob.device.type == "cuda" and torch.isfinite(res.log_prob).all()
