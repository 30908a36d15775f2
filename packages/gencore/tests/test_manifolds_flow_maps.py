"""Generalised Flow Maps: X_{s,s} = id, the three self-distillation residuals vanish on an analytic flow map and
not on a wrong one, finite gradients near the ball's boundary, and a quick RFM fit recovering a vMF target."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gencore.errors import ConfigError
from gencore.manifolds import (
    GeneralisedFlowMap,
    ManifoldMLP,
    PoincareBall,
    Sphere,
    Torus,
    VonMisesFisherMixture,
    geodesic_mmd,
    gfm_loss,
    rfm_loss,
    solve_manifold_ode,
)
from gencore.manifolds.flow_maps import diagonal_loss, esd_residual, lsd_residual, psd_loss
from gencore.manifolds.interpolants import geodesic_interpolant
from gencore.manifolds.spaces import rodrigues

AXIS = torch.tensor([0.3, -0.5, 0.8], dtype=torch.float64)
AXIS = AXIS / AXIS.norm()


def _theta(t):  # rotation angle at time t for angular speed 1 + t
    return t + t**2 / 2


class RotationMap(nn.Module):
    """The exact flow map of dx/dt = (1 + t) AXIS x x on S^2, written as X_{s,t}(x) = exp_x((t - s) v(x, s, t)):
    v = log_x(R(theta(t) - theta(s)) x) / (t - s), and the instantaneous velocity on the diagonal."""

    def __init__(self, sphere, exact: bool = True):
        super().__init__()
        self.sphere, self.exact = sphere, exact

    def forward(self, x, s, t):
        inst = (1 + t)[:, None] * torch.linalg.cross(AXIS.expand_as(x), x)
        if not self.exact:  # a plausible but wrong map: a geodesic along the current velocity
            return inst
        ang = (_theta(t) - _theta(s))[:, None] * AXIS
        y = (rodrigues(ang) @ x[..., None])[..., 0]
        gap = (t - s)[:, None]
        far = gap.abs() > 1e-9
        return torch.where(far, self.sphere.logmap(x, y) / torch.where(far, gap, torch.ones_like(gap)), inst)


def _points(n=16, seed=0):
    s2 = Sphere(2)
    g = torch.Generator().manual_seed(seed)
    x = s2.random_base(n, generator=g, dtype=torch.float64)
    st = torch.rand(n, 2, generator=g, dtype=torch.float64).sort(-1).values
    return s2, x, st[:, 0], st[:, 1]


def test_identity_on_the_diagonal_for_a_network_map():
    for m in (Sphere(2), Torus(2), PoincareBall(2)):
        fm = GeneralisedFlowMap(m, ManifoldMLP(m, n_times=2, hidden=16).double())
        x = m.random_base(8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        t = torch.rand(8, dtype=torch.float64)
        assert torch.allclose(fm(x, t, t), m.projx(x), atol=1e-12)


def test_self_distillation_residuals_vanish_on_the_exact_flow_map():
    s2, x, s, t = _points()
    fm = GeneralisedFlowMap(s2, RotationMap(s2))
    exact = (rodrigues((_theta(t) - _theta(s))[:, None] * AXIS) @ x[..., None])[..., 0]
    assert torch.allclose(fm(x, s, t), exact, atol=1e-12)
    for res in (lsd_residual, esd_residual):
        _, r = res(fm, x, s, t)
        assert r.abs().max() < 1e-8
    assert psd_loss(fm, x, s, t).max() < 1e-16
    # semigroup: X_{u,t} o X_{s,u} = X_{s,t}
    u = (s + t) / 2
    assert torch.allclose(fm(fm(x, s, u), u, t), fm(x, s, t), atol=1e-12)


def test_self_distillation_residuals_detect_a_wrong_flow_map():
    s2, x, s, t = _points(seed=2)
    fm = GeneralisedFlowMap(s2, RotationMap(s2, exact=False))
    for res in (lsd_residual, esd_residual):
        xm, r = res(fm, x, s, t)
        assert s2.norm2(xm, r).mean() > 1e-3
    assert psd_loss(fm, x, s, t).mean() > 1e-3


def test_sampling_in_k_jumps_follows_the_exact_map():
    s2, x, _, _ = _points(seed=3)
    fm = GeneralisedFlowMap(s2, RotationMap(s2))
    exact = (rodrigues(_theta(torch.tensor(1.0, dtype=torch.float64)) * AXIS) @ x[..., None])[..., 0]
    for k in (1, 2, 4):
        assert torch.allclose(fm.sample(x, k), exact, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("method", ["lsd", "esd", "psd"])
def test_gfm_losses_have_finite_gradients_near_the_ball_boundary(method, dtype):
    ball = PoincareBall(2, c=1.0, learnable=True)
    torch.manual_seed(0)
    fm = GeneralisedFlowMap(ball, ManifoldMLP(ball, n_times=2, hidden=16)).to(dtype)
    g = torch.Generator().manual_seed(4)
    d = torch.nn.functional.normalize(torch.randn(32, 2, generator=g, dtype=dtype), dim=-1)
    x1 = ball.projx(d * (1 - 3e-3))  # clipped to geoopt's radius
    x0 = ball.random_base(32, generator=g, dtype=dtype)
    loss, _ = gfm_loss(fm, x0, x1, method, generator=g)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in fm.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(gr).all() for gr in grads)
    assert ball.geo.isp_c.grad is not None  # the learnable curvature is trained too


def test_rfm_quick_fit_recovers_a_von_mises_fisher_target():
    s2 = Sphere(2)
    vmf = VonMisesFisherMixture(torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]), kappas=[20.0, 20.0])
    torch.manual_seed(0)
    net = ManifoldMLP(s2, hidden=64, depth=2)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(5)
    for _ in range(300):
        x0, x1 = s2.random_base(256, generator=g), vmf.sample(256, generator=g)
        loss = rfm_loss(s2, net, x0, x1, torch.rand(256, generator=g))
        opt.zero_grad()
        loss.backward()
        opt.step()
    ref = vmf.sample(1000, generator=torch.Generator().manual_seed(6))
    x0 = s2.random_base(1000, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        xs = solve_manifold_ode(s2, net, x0, steps=20, method="midpoint").x
    before, after = geodesic_mmd(s2, x0, ref), geodesic_mmd(s2, xs, ref)
    assert after < 0.1 * before, (before, after)


@pytest.mark.slow
def test_learned_lsd_flow_map_is_close_to_a_semigroup():
    """Distil the rotation field's flow map with G-LSD (diagonal regressed on the analytic velocity): the learned
    map approaches the exact one, so X_{u,t} o X_{s,u} ~ X_{s,t}, far better than the naive geodesic map."""
    s2 = Sphere(2)
    torch.manual_seed(0)
    fm = GeneralisedFlowMap(s2, ManifoldMLP(s2, n_times=2, hidden=64, depth=3))
    opt = torch.optim.Adam(fm.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(1)
    axis = AXIS.float()
    for _ in range(3000):
        x = s2.random_base(256, generator=g)
        st = torch.rand(256, 2, generator=g).sort(-1).values
        s, t = st[:, 0], st[:, 1]
        td = torch.rand(256, generator=g)
        inst = (1 + td)[:, None] * torch.linalg.cross(axis.expand_as(x), x)
        diag = s2.norm2(x, fm.velocity(x, td, td) - inst).mean()
        xm, r = lsd_residual(fm, x, s, t)
        loss = diag + s2.norm2(xm.detach(), r).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    s2d, x, s, t = _points(n=256, seed=11)
    x, s, t = x.float(), s.float(), t.float()
    u = (s + t) / 2
    with torch.no_grad():
        learned = s2.dist(fm(fm(x, s, u), u, t), fm(x, s, t)).mean()
        naive = GeneralisedFlowMap(s2, RotationMap(s2d, exact=False))
        naive_gap = s2.dist(
            naive(naive(x.double(), s.double(), u.double()), u.double(), t.double()),
            naive(x.double(), s.double(), t.double()),
        ).mean()
        exact = (rodrigues((_theta(t.double()) - _theta(s.double()))[:, None] * AXIS) @ x.double()[..., None])[..., 0]
        err = s2.dist(fm(x, s, t).double(), exact).mean()
    assert learned < 0.1 * naive_gap, (learned, naive_gap)
    assert err < 0.05, err


class GapMap(nn.Module):
    """On the flat torus, ``v(x, s, t) = c (t - s)``: ``X_{s,t}(x) = x + c (t - s)^2`` (a map that is not a
    semigroup, with an identically zero diagonal), whose three residuals are known in closed form."""

    c = 0.3

    def forward(self, x, s, t):
        return self.c * (t - s)[:, None] * torch.ones_like(x)


def test_self_distillation_residuals_match_their_closed_forms_on_the_flat_torus():
    torus = Torus(3)
    g = torch.Generator().manual_seed(12)
    x = torus.random_base(16, generator=g, dtype=torch.float64)
    st = torch.rand(16, 2, generator=g, dtype=torch.float64).sort(-1).values
    s, t = st[:, 0], 0.05 + st[:, 1]  # t - s >= 0.05 > gap_eps
    fm = GeneralisedFlowMap(torus, GapMap())
    gap = (t - s)[:, None].expand_as(x)
    # G-LSD: d/dt X = 2 c (t - s), v(X, t, t) = 0; G-ESD: d/ds X = -2 c (t - s), dX[v(x, s, s)] = dX[0] = 0
    _, r_lsd = lsd_residual(fm, x, s, t)
    torch.testing.assert_close(r_lsd, 2 * GapMap.c * gap, rtol=1e-12, atol=1e-12)
    _, r_esd = esd_residual(fm, x, s, t)
    torch.testing.assert_close(r_esd, -2 * GapMap.c * gap, rtol=1e-12, atol=1e-12)
    # G-PSD: the two half-jumps reach x + c (t - s)^2 / 2, so d^2 / (t - s)^2 = D c^2 (t - s)^2 / 4
    torch.testing.assert_close(psd_loss(fm, x, s, t), 3 * GapMap.c**2 * (t - s) ** 2 / 4, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("method", ["lsd", "esd", "psd"])
def test_gfm_loss_is_the_diagonal_loss_plus_the_residual_at_the_geodesic_point_at_s(method):
    """The documented draws (``t_diag``, then the sorted ``(s, t)``), the state ``x_s`` on the geodesic at the
    start time ``s``, and residuals measured in the ball's metric ``lambda_X^2 |r|^2``, ``lambda = 2/(1 - c|X|^2)``."""
    ball = PoincareBall(2, c=1.0)
    torch.manual_seed(0)
    fm = GeneralisedFlowMap(ball, ManifoldMLP(ball, n_times=2, hidden=16)).double()
    g = torch.Generator().manual_seed(13)
    x0 = ball.random_base(32, generator=g, dtype=torch.float64)
    x1 = ball.projx(0.8 * torch.nn.functional.normalize(torch.randn(32, 2, generator=g, dtype=torch.float64), dim=-1))
    total, parts = gfm_loss(fm, x0, x1, method, generator=torch.Generator().manual_seed(14))
    g = torch.Generator().manual_seed(14)
    t_diag = torch.rand(32, generator=g, dtype=torch.float64)
    s, t = torch.rand(32, 2, generator=g, dtype=torch.float64).sort(dim=-1).values.unbind(-1)
    xs, _ = geodesic_interpolant(ball, x0, x1, s)
    if method == "psd":
        l_sd = psd_loss(fm, xs, s, t).mean()
    else:
        xm, r = (lsd_residual if method == "lsd" else esd_residual)(fm, xs, s, t)
        lam = 2.0 / (1.0 - xm.detach().square().sum(-1))
        l_sd = (lam.square() * r.square().sum(-1)).mean()
    torch.testing.assert_close(parts["diag"], diagonal_loss(fm, x0, x1, t_diag).detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(parts[method], l_sd.detach(), rtol=1e-10, atol=0)
    torch.testing.assert_close(total.detach(), parts["diag"] + parts[method], rtol=1e-12, atol=0)


def test_sample_refuses_a_non_integer_nfe():
    s2 = Sphere(2)
    fm = GeneralisedFlowMap(s2, RotationMap(s2))
    x = s2.random_base(4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for nfe in (0, 2.0):
        with pytest.raises(ConfigError, match="nfe"):
            fm.sample(x, nfe)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gfm_loss_draws_its_times_from_a_cpu_generator_for_cuda_data():
    # the times were drawn with the given generator on the data's device, which a CPU generator refuses
    s2 = Sphere(2)
    torch.manual_seed(0)
    fm = GeneralisedFlowMap(s2, ManifoldMLP(s2, n_times=2, hidden=16)).double().to("cuda")
    x0 = s2.random_base(8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x1 = s2.random_base(8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    loss, _ = gfm_loss(fm, x0.to("cuda"), x1.to("cuda"), "psd", generator=torch.Generator().manual_seed(3))
    ref, _ = gfm_loss(fm.cpu(), x0, x1, "psd", generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(loss.cpu(), ref)
