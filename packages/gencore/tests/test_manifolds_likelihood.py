"""Riemannian likelihoods: exact divergence vs Hutchinson, and change of variables giving a normalised density."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.manifolds import ManifoldMLP, PoincareBall, Sphere, Torus, log_likelihood, riemannian_divergence


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
