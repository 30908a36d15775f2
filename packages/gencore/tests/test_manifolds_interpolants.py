"""Geodesic interpolants (endpoints, closed-form velocity vs autodiff through the geodesic) and the RFM loss."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import InputError
from gencore.manifolds import SO3, Lorentz, PoincareBall, Sphere, Torus, geodesic_interpolant, rfm_loss

MANIFOLDS = {
    "sphere": lambda: Sphere(2),
    "torus": lambda: Torus(2),
    "ball": lambda: PoincareBall(2, c=1.3),
    "lorentz": lambda: Lorentz(2),
    "so3": SO3,
}


def _endpoints(m, n=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x0, x1 = m.random_base(n, generator=g, dtype=torch.float64), m.random_base(n, generator=g, dtype=torch.float64)
    if m.name in ("sphere", "so3", "torus"):  # keep away from the cut locus
        x1 = m.expmap(x0, 0.9 * m.logmap(x0, x1))
    return x0, x1


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_endpoints(name):
    m = MANIFOLDS[name]()
    x0, x1 = _endpoints(m)
    xt0, _ = geodesic_interpolant(m, x0, x1, torch.zeros(32, dtype=torch.float64))
    xt1, _ = geodesic_interpolant(m, x0, x1, torch.ones(32, dtype=torch.float64))
    assert torch.allclose(xt0, x0, atol=1e-12)
    assert (m.dist(xt1, x1) < 1e-9).all()


@pytest.mark.parametrize("velocity", ["log", "transport"])
@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_closed_form_velocity_matches_autodiff_through_the_geodesic(name, velocity):
    m = MANIFOLDS[name]()
    x0, x1 = _endpoints(m, seed=1)
    t = torch.rand(32, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.95
    xt, ut = geodesic_interpolant(m, x0, x1, t, velocity=velocity)

    def path(tt):
        return m.expmap(x0, tt[:, None] * m.logmap(x0, x1))

    xt_ad, ut_ad = torch.func.jvp(path, (t,), (torch.ones_like(t),))
    assert torch.allclose(xt, xt_ad, atol=1e-12)
    assert torch.allclose(ut, ut_ad, atol=1e-8)
    # constant speed d(x0, x1)
    assert torch.allclose(m.norm2(xt, ut).sqrt(), m.dist(x0, x1), atol=1e-8)


def test_rfm_loss_is_the_metric_norm_and_vanishes_at_the_marginal_velocity():
    """Data = a point mass at p: the marginal velocity is log_x(p) / (1 - t) exactly. The loss of that field is
    zero; the loss of another field equals its squared error in the metric (lambda^2 on the ball)."""
    ball = PoincareBall(2, c=1.0)
    g = torch.Generator().manual_seed(3)
    x0 = ball.random_base(64, generator=g, dtype=torch.float64)
    p = ball.projx(torch.tensor([[0.3, -0.5]], dtype=torch.float64)).expand(64, -1)
    t = torch.rand(64, generator=g, dtype=torch.float64) * 0.9

    def exact(x, tt):
        return ball.logmap(x, p) / (1 - tt)[:, None]

    assert rfm_loss(ball, exact, x0, p, t) < 1e-20
    shift = torch.tensor([0.2, 0.1], dtype=torch.float64)
    xt, _ = geodesic_interpolant(ball, x0, p, t)
    expected = (ball.lambda_x(xt, keepdim=False) ** 2 * shift.square().sum()).mean()
    assert torch.allclose(rfm_loss(ball, lambda x, tt: exact(x, tt) + shift, x0, p, t), expected, rtol=1e-9)


def test_rfm_loss_projects_the_network_output():
    sphere = Sphere(2)
    g = torch.Generator().manual_seed(4)
    x0, x1 = _endpoints(sphere, 16, 4)
    t = torch.rand(16, generator=g, dtype=torch.float64)
    _, ut = geodesic_interpolant(sphere, x0, x1, t)
    # a normal component (along x_t) is invisible to the loss
    assert rfm_loss(sphere, lambda x, tt: ut + 5.0 * x, x0, x1, t) < 1e-16


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_log_velocity_at_t_one_is_the_transported_velocity(name):
    """At t = 1 exactly log_{x_t}(x1) = 0; the velocity must still be the constant-speed geodesic's."""
    m = MANIFOLDS[name]()
    x0, x1 = _endpoints(m, seed=5)
    t = torch.ones(32, dtype=torch.float64)
    _, u_log = geodesic_interpolant(m, x0, x1, t, velocity="log")
    _, u_tr = geodesic_interpolant(m, x0, x1, t, velocity="transport")
    assert torch.allclose(u_log, u_tr, atol=1e-8)
    assert torch.allclose(m.norm2(x1, u_log).sqrt(), m.dist(x0, x1), atol=1e-8)


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_log_velocity_is_accurate_in_float32_close_to_t_one(name):
    # log_{x_t}(x1) / (1 - t) divides a rounding error by 1 - t: near t = 1 the transported form takes over
    m = MANIFOLDS[name]()
    x0, x1 = _endpoints(m, seed=6)
    t = 1 - torch.logspace(-5, -3, 32, dtype=torch.float64)
    _, exact = geodesic_interpolant(m, x0, x1, t, velocity="transport")
    _, u32 = geodesic_interpolant(m, x0.float(), x1.float(), t.float(), velocity="log")
    rel = (u32.double() - exact).norm(dim=-1) / exact.norm(dim=-1)
    assert float(rel.max()) < 1e-4


def test_scalar_time_broadcasts_and_a_wrong_time_shape_is_refused():
    m = Sphere(2)
    x0, x1 = _endpoints(m, 8, 6)
    xt, ut = geodesic_interpolant(m, x0, x1, 0.25)
    xt_b, ut_b = geodesic_interpolant(m, x0, x1, torch.full((8,), 0.25, dtype=torch.float64))
    assert torch.equal(xt, xt_b) and torch.equal(ut, ut_b)
    with pytest.raises(InputError, match="t must be"):
        geodesic_interpolant(m, x0, x1, torch.rand(3, dtype=torch.float64))
    with pytest.raises(InputError, match="same shape"):
        geodesic_interpolant(m, x0, x1[:4], 0.5)
