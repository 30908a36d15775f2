"""Manifold operations: exp/log round trips across dtypes and near the ball's boundary, projection invariants,
parallel transport, the inverse differential of exp, agreement with geoopt, finite gradients at degenerate points."""

from __future__ import annotations

import math

import geoopt
import numpy as np
import pytest
import torch

from gencore.errors import ConfigError
from gencore.manifolds import (
    SO3,
    Euclidean,
    Lorentz,
    PoincareBall,
    Sphere,
    Torus,
    VonMisesFisherMixture,
    WrappedNormalMixture,
)
from gencore.manifolds.spaces import rodrigues, so3_log

MANIFOLDS = {
    "sphere": lambda: Sphere(2),
    "sphere4": lambda: Sphere(4),
    "torus": lambda: Torus(3),
    "ball": lambda: PoincareBall(3, c=1.0),
    "ball_c": lambda: PoincareBall(2, c=0.5),
    "lorentz": lambda: Lorentz(3, k=1.0),
    "lorentz_k": lambda: Lorentz(2, k=2.0),
    "so3": SO3,
    "euclidean": lambda: Euclidean(3),
}
TOL = {torch.float32: 2e-4, torch.float64: 1e-10}


def _pair(m, dtype, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = m.random_base(n, generator=g, dtype=dtype), m.random_base(n, generator=g, dtype=dtype)
    if m.name == "torus":  # stay inside the injectivity radius (cut locus at |delta| = pi per axis)
        y = m.projx(x + 0.9 * m.logmap(x, y))
    if m.name == "sphere" or m.name == "so3":
        y = m.expmap(x, 0.9 * m.logmap(x, y))
    if m.name == "lorentz" and dtype == torch.float32:
        # float32 hyperboloid coordinates cannot carry a tangent vector's Lorentz norm far from the origin (its
        # square is a difference of squares of the size x_0^2 |u|^2; at distance 3.8 with a geodesic of length
        # 4.5 that cancels 1e4 -> 20 and the exp map is off by 1e-2): keep both points within distance 3
        origin = m.origin(dtype).expand_as(x)
        near = (m.dist(origin, x) < 3) & (m.dist(origin, y) < 3)
        x, y = x[near], y[near]
    return x, y


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_exp_log_round_trip_and_metric(name, dtype):
    m = MANIFOLDS[name]()
    x, y = _pair(m, dtype)
    v = m.logmap(x, y)
    tol = TOL[dtype] * (10 if name.startswith(("lorentz", "ball")) else 1)  # hyperbolic points reach radius ~4
    assert (m.dist(m.expmap(x, v), y) < tol).all()
    # |log_x y|_x = d(x, y) = d(y, x)
    assert torch.allclose(m.norm2(x, v).sqrt(), m.dist(x, y), atol=tol, rtol=tol)
    assert torch.allclose(m.dist(x, y), m.dist(y, x), atol=tol, rtol=tol)
    # log is tangent
    assert torch.allclose(m.proju(x, v), v, atol=tol)
    # exp(x, log) for a short step lies on the geodesic: d(x, exp(x, a v)) = a d(x, y)
    assert torch.allclose(m.dist(x, m.expmap(x, 0.3 * v)), 0.3 * m.dist(x, y), atol=tol, rtol=tol)


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_projections_are_idempotent_and_land_on_the_manifold(name):
    m = MANIFOLDS[name]()
    g = torch.Generator().manual_seed(1)
    raw = torch.randn(32, m.ambient_dim, generator=g, dtype=torch.float64)
    if name.startswith("ball"):
        raw = raw * 3  # many outside the ball
    x = m.projx(raw)
    assert torch.allclose(m.projx(x), x, atol=1e-12)
    u = torch.randn(32, m.ambient_dim, generator=g, dtype=torch.float64)
    pu = m.proju(x, u)
    assert torch.allclose(m.proju(x, pu), pu, atol=1e-12)
    # u - proju(u) is metric-orthogonal to the tangent space (proju is the orthogonal projector)
    w = m.proju(x, torch.randn(32, m.ambient_dim, generator=g, dtype=torch.float64))
    if m.name in ("sphere", "so3", "lorentz"):
        assert torch.allclose(m.inner(x, u - pu, w), torch.zeros(32, dtype=torch.float64), atol=1e-12)
    if m.name == "sphere":
        assert torch.allclose(x.norm(dim=-1), torch.ones(32, dtype=torch.float64))
    elif m.name == "so3":
        r = x.reshape(-1, 3, 3)
        assert torch.allclose(r.transpose(1, 2) @ r, torch.eye(3, dtype=torch.float64).expand(32, 3, 3), atol=1e-12)
        assert torch.allclose(torch.linalg.det(r), torch.ones(32, dtype=torch.float64))
    elif m.name == "lorentz":
        assert torch.allclose(m.linner(x, x), torch.full((32,), -m.k, dtype=torch.float64))
    elif m.name == "ball":
        assert (x.norm(dim=-1) < 1 / math.sqrt(float(m.c)) * (1 - 1e-5 + 1e-12)).all()
    elif m.name == "torus":
        assert ((x >= -math.pi) & (x < math.pi)).all()


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_parallel_transport_is_an_isometry_along_the_geodesic(name):
    m = MANIFOLDS[name]()
    x, y = _pair(m, torch.float64, seed=2)
    g = torch.Generator().manual_seed(3)
    u = m.proju(x, torch.randn(x.shape, generator=g, dtype=torch.float64))
    w = m.proju(x, torch.randn(x.shape, generator=g, dtype=torch.float64))
    pu, pw = m.transp(x, y, u), m.transp(x, y, w)
    assert torch.allclose(m.proju(y, pu), pu, atol=1e-10)
    assert torch.allclose(m.inner(y, pu, pw), m.inner(x, u, w), atol=1e-9, rtol=1e-9)
    # the geodesic's velocity is parallel: P_{x->y} log_x y = -log_y x
    assert torch.allclose(m.transp(x, y, m.logmap(x, y)), -m.logmap(y, x), atol=1e-9)


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_dexp_inv_inverts_the_differential_of_exp(name):
    m = MANIFOLDS[name]()
    x, y = _pair(m, torch.float64, n=16, seed=4)
    xi = 0.8 * m.logmap(x, y)
    eta = m.proju(x, torch.randn(x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64))
    z = m.expmap(x, xi)
    h = 1e-5
    w = (m.expmap(x, xi + h * eta) - m.expmap(x, xi - h * eta)) / (2 * h)  # (d exp_x)_xi eta, tangent at z
    if m.name == "torus":
        w = m.logmap(m.expmap(x, xi - h * eta), m.expmap(x, xi + h * eta)) / (2 * h)
    assert torch.allclose(m.dexp_inv(x, xi, z, w), eta, atol=1e-7)


@pytest.mark.parametrize("name", ["sphere", "ball", "ball_c", "lorentz", "lorentz_k"])
def test_agrees_with_geoopt(name):
    m = MANIFOLDS[name]()
    x, y = _pair(m, torch.float64, seed=6)
    ref = {
        "sphere": lambda: geoopt.Sphere(),
        "ball": lambda: geoopt.PoincareBall(c=1.0),
        "ball_c": lambda: geoopt.PoincareBall(c=0.5),
        "lorentz": lambda: geoopt.Lorentz(k=1.0),
        "lorentz_k": lambda: geoopt.Lorentz(k=2.0),
    }[name]().to(torch.float64)
    v = m.logmap(x, y)
    assert torch.allclose(m.dist(x, y), ref.dist(x, y), atol=1e-9)
    assert torch.allclose(v, ref.logmap(x, y), atol=1e-9)
    # geoopt's ball expmap drifts off the geodesic by up to ~4e-7 on long steps (ours: 1e-14, checked
    # by the geodesic identity in test_exp_log_round_trip_and_metric), hence the looser bound here
    assert torch.allclose(m.expmap(x, 0.7 * v), ref.expmap(x, 0.7 * v), atol=1e-6)
    if name.startswith("lorentz"):
        ref_inner = ref.inner(v, v)  # geoopt's Lorentz.inner takes no base point
    else:
        ref_inner = ref.inner(x, v, v, keepdim=True)[..., 0]
    assert torch.allclose(m.inner(x, v, v), ref_inner, atol=1e-9)
    if name.startswith("ball") or name.startswith("lorentz"):  # geoopt's sphere transp is a projection
        assert torch.allclose(m.transp(x, y, v), ref.transp(x, y, v), atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_no_nan_gradients_at_degenerate_points(name, dtype):
    """expmap(x, 0), logmap(x, x), dist(x, x) and sq_dist: finite gradients (geoopt's sphere/Lorentz give NaN)."""
    m = MANIFOLDS[name]()
    x = m.random_base(8, generator=torch.Generator().manual_seed(7), dtype=dtype).requires_grad_(True)
    u = torch.zeros_like(x, requires_grad=True)
    out = m.expmap(x, u).sum() + m.logmap(x, x.detach()).sum() + m.dist(x, x.detach()).sum() + m.sq_dist(x, x).sum()
    gx, gu = torch.autograd.grad(out, (x, u))
    assert torch.isfinite(gx).all() and torch.isfinite(gu).all()
    # d/du exp_x(u) at u = 0 is the identity on the tangent space
    t = m.proju(x.detach(), torch.randn(x.shape, generator=torch.Generator().manual_seed(8), dtype=dtype))
    jvp = torch.func.jvp(lambda uu: m.expmap(x.detach(), uu), (torch.zeros_like(t),), (t,))[1]
    assert torch.allclose(jvp, t, atol=1e-5 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ball_near_the_boundary(dtype):
    """Points just inside geoopt's float32 clip radius 1 - 4e-3 (lambda_x ~ 250): finite values and gradients,
    clipping of points beyond it, and exp/log round trips. In float32 the Moebius operations lose about three
    digits this close to the boundary (conditioning, not a bug): the round-trip error must then be no worse
    than geoopt's on the same inputs; in float64 it must be tiny."""
    ball = PoincareBall(2, c=1.0)
    ref = geoopt.PoincareBall(c=1.0).to(dtype)
    g = torch.Generator().manual_seed(9)
    th = torch.rand(64, generator=g, dtype=torch.float64) * 2 * math.pi
    th2 = th + 2.0 * torch.rand(64, generator=g, dtype=torch.float64)
    r = 1 - 4e-3 - torch.rand(64, 2, generator=g, dtype=torch.float64) * 2e-3
    x = (r[:, :1] * torch.stack([th.cos(), th.sin()], -1)).to(dtype)
    y = (r[:, 1:] * torch.stack([th2.cos(), th2.sin()], -1)).to(dtype)
    outside = ball.projx(x * 1.01)
    assert (outside.norm(dim=-1) <= 1 - (4e-3 if dtype == torch.float32 else 1e-5) + 1e-6).all()
    xr, yr = x.detach().requires_grad_(True), y.detach().requires_grad_(True)
    v = ball.logmap(xr, yr)
    loss = ball.dist(ball.expmap(xr, v), yr).sum() + ball.sq_dist(xr, yr).sum() + ball.norm2(xr, v).sum()
    gx, gy = torch.autograd.grad(loss, (xr, yr))
    assert torch.isfinite(gx).all() and torch.isfinite(gy).all()
    # distances (about 10 here) agree with float64 on the same inputs to the working precision
    d64 = ball.dist(x.double(), y.double())
    assert torch.allclose(ball.dist(x, y).double(), d64, rtol=1e-5 if dtype == torch.float32 else 1e-12)
    err = ball.dist(ball.expmap(x, ball.logmap(x, y)).double(), y.double()) / d64
    if dtype == torch.float64:
        assert (err < 1e-9).all()
    else:
        err_geoopt = ball.dist(ref.expmap(x, ref.logmap(x, y)).double(), y.double()) / d64
        assert err.max() <= 1.5 * err_geoopt.max() and err.median() <= 1.5 * err_geoopt.median()


@pytest.mark.parametrize("quantity", ["dist", "base_log_prob"])
def test_ball_learnable_curvature_gets_the_right_gradient(quantity):
    # the base density's volume term depended on the curvature as a detached float before
    ball = PoincareBall(2, c=0.7, learnable=True).double()
    x, y = (p.detach() for p in _pair(ball, torch.float64, n=4, seed=10))

    def value():
        return ball.dist(x, y).sum() if quantity == "dist" else ball.base_log_prob(x).sum()

    param = ball.geo.isp_c  # geoopt's learnable parameter (inverse softplus of c)
    (grad,) = torch.autograd.grad(value(), [param])
    h = 1e-6
    with torch.no_grad():
        param += h
        up = value()
        param -= 2 * h
        down = value()
        param += h
    assert torch.allclose(grad, (up - down) / (2 * h), rtol=1e-5)


@pytest.mark.parametrize("angle", [0.0, 1e-9, 1e-4, 0.5, 3.0, math.pi - 1e-3, math.pi - 1e-6])
def test_so3_log_exp_small_and_large_angles(angle):
    g = torch.Generator().manual_seed(11)
    axis = torch.nn.functional.normalize(torch.randn(16, 3, generator=g, dtype=torch.float64), dim=-1)
    w = angle * axis
    r = rodrigues(w)
    assert torch.allclose(rodrigues(so3_log(r)), r, atol=1e-9)
    if angle < math.pi - 1e-2:
        assert torch.allclose(so3_log(r), w, atol=1e-9)
    # Rodrigues agrees with the matrix exponential
    from gencore.manifolds.spaces import hat

    assert torch.allclose(r, torch.linalg.matrix_exp(hat(w)), atol=1e-12)


def _ball_mass(ball: PoincareBall, log_prob, n: int = 800) -> float:
    """Quadrature of ``exp(log_prob)`` against the Riemannian volume ``lambda_x^2 dx`` over the unit disk."""
    r = (torch.arange(n, dtype=torch.float64) + 0.5) / n * (1 - 1e-9)
    th = (torch.arange(n, dtype=torch.float64) + 0.5) / n * 2 * math.pi
    rr, tt = torch.meshgrid(r, th, indexing="ij")
    pts = torch.stack([rr * torch.cos(tt), rr * torch.sin(tt)], -1).reshape(-1, 2)
    dens = torch.exp(log_prob(pts)) * ball.lambda_x(pts, keepdim=False).square()
    return float((dens * rr.reshape(-1)).sum() * (1 / n) * (2 * math.pi / n))


def test_ball_wrapped_normal_base_density_is_normalised():
    ball = PoincareBall(2, c=1.0, base_std=0.7)
    assert abs(_ball_mass(ball, ball.base_log_prob) - 1) < 1e-3


def test_lorentz_float32_log_matches_float64_far_from_the_origin():
    # the tangent norm comes from the points' difference, not from the direction's own components (which cancel)
    m = Lorentz(3, k=1.0)
    g = torch.Generator().manual_seed(0)
    x, y = m.random_base(64, generator=g), m.random_base(64, generator=g)
    v32, v64 = m.logmap(x, y), m.logmap(x.double(), y.double())
    rel = ((v32.double() - v64).norm(dim=-1) / v64.norm(dim=-1)).max()
    assert rel < 1e-5


def test_ball_with_a_fixed_curvature_computes_float64_with_the_exact_c():
    """c = 0.3 is not a float32 number: a fixed ball's float64 distance equals the closed form with the exact 0.3
    (geoopt's float32 parameter gives 0.30000007, a relative error ~1e-7 in the distance)."""
    ball = PoincareBall(dim=3, c=0.3)
    g = torch.Generator().manual_seed(0)
    x = 0.5 * torch.randn(5, 3, generator=g, dtype=torch.float64)
    y = 0.5 * torch.randn(5, 3, generator=g, dtype=torch.float64)
    c = 0.3
    z = 2 * c * (x - y).square().sum(-1) / ((1 - c * x.square().sum(-1)) * (1 - c * y.square().sum(-1)))
    exact = torch.acosh(1 + z) / math.sqrt(c)
    assert torch.allclose(ball.dist(x, y), exact, rtol=1e-13, atol=0)
    assert float(ball.c) == 0.3 and ball.curvature == -0.3
    learnable = PoincareBall(dim=3, c=0.3, learnable=True)
    assert learnable.c.requires_grad  # the learnable curvature is still geoopt's parameter


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_ball_base_draws_from_a_cpu_generator_on_the_balls_device() -> None:
    """The ball's origin follows its curvature to CUDA while its noise is drawn on the CPU: they used to mix."""
    ball = PoincareBall(3, c=0.7).to("cuda")
    x = ball.random_base(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ref = PoincareBall(3, c=0.7).random_base(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert x.device.type == "cuda"
    torch.testing.assert_close(x.cpu(), ref)  # the same draw, wherever the ball lives


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("manifold", [Euclidean(3), PoincareBall(3), Sphere(2), Torus(3), Lorentz(2), SO3()])
def test_random_base_draws_on_a_cuda_generators_device(manifold) -> None:
    """A training loss passes the engine's generator, which lives on the GPU: the base noise was drawn on the CPU
    from it, which a CUDA generator refuses. A CPU generator still gives the CPU draws on any device."""
    m = manifold.to("cuda")
    x = m.random_base(5, generator=torch.Generator(device="cuda").manual_seed(0))
    assert x.device.type == "cuda" and x.shape[:2] == (5, 3) and torch.isfinite(x).all()
    y = m.random_base(5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(y.cpu(), manifold.cpu().random_base(5, generator=torch.Generator().manual_seed(0)))


def test_wrapped_normal_mixture_density_is_normalised_on_the_ball_and_refused_where_it_is_not_exact():
    ball = PoincareBall(2, c=1.0)
    means = torch.tensor([[0.3, -0.2], [-0.5, 0.4]], dtype=torch.float64)
    mix = WrappedNormalMixture(ball, means, stds=[0.4, 0.6], weights=[0.3, 0.7])
    assert abs(_ball_mass(ball, mix.log_prob) - 1) < 2e-3
    # nearest-image density on the torus (it would need every 2 pi shift) and a truncated one on the sphere
    for m, mu in ((Torus(2), torch.zeros(1, 2)), (Sphere(2), torch.tensor([[0.0, 0.0, 1.0]]))):
        with pytest.raises(ConfigError, match="simply connected flat or hyperbolic"):
            WrappedNormalMixture(m, mu, stds=[0.5]).log_prob(mu)


def test_mixture_means_off_the_manifold_are_refused():
    """An unnormalised sphere mean (2 e_z) drew samples at half the requested spread, a ball mean outside the unit
    disk piled them on the boundary with log-densities near -4000, a zero vMF mean gave NaN samples: all silently."""
    with pytest.raises(ConfigError, match="points of the sphere"):
        WrappedNormalMixture(Sphere(2), torch.tensor([[0.0, 0.0, 2.0]]), stds=[0.5])
    with pytest.raises(ConfigError, match="points of the ball"):
        WrappedNormalMixture(PoincareBall(2), torch.tensor([[1.5, 0.0]]), stds=[0.5])
    with pytest.raises(ConfigError, match="points of the lorentz"):
        WrappedNormalMixture(Lorentz(2), torch.tensor([[2.0, 0.0, 0.0]]), stds=[0.5])
    with pytest.raises(ConfigError, match="non-zero"):
        VonMisesFisherMixture(torch.zeros(1, 3), kappas=[1.0])
    # points of the manifold pass: an unwrapped torus angle names the same point
    WrappedNormalMixture(Sphere(2), torch.tensor([[0.6, 0.0, 0.8]]), stds=[0.5])
    WrappedNormalMixture(Torus(2), torch.tensor([[3.5, -4.0]]), stds=[0.5])
    sample = WrappedNormalMixture(Sphere(2), torch.tensor([[0.0, 0.0, 1.0]]), stds=[0.3]).sample(
        4000, generator=torch.Generator().manual_seed(17), dtype=torch.float64
    )
    # d(x, mu) = |xi| inside the injectivity radius, so E d(x, mu)^2 = 2 std^2 on S^2 (sampling error ~0.003)
    d2 = Sphere(2).dist(sample, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)).square().mean()
    assert abs(float(d2) - 2 * 0.3**2) < 0.01


@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_network_outputs_are_read_in_an_orthonormal_frame(name):
    # a network output's size must mean the same anywhere: on the Lorentz model its Minkowski coordinates used
    # to be taken as is, a unit output had a tangent norm up to cosh(r), and untrained flows blew up to NaN
    m = MANIFOLDS[name]().double()
    g = torch.Generator().manual_seed(12)
    x = m.random_base(256, generator=g, dtype=torch.float64)
    if name.startswith("lorentz"):  # out to distance 6 from the origin
        xi = torch.randn(256, m.dim, generator=g, dtype=torch.float64)
        xi = xi / xi.norm(dim=-1, keepdim=True) * torch.linspace(0, 6, 256, dtype=torch.float64)[:, None]
        x = m.expmap(m.origin(torch.float64).expand(256, -1), m.origin_tangent(xi))
    u = torch.randn(256, m.ambient_dim, generator=g, dtype=torch.float64)
    w = m.proju(x, m.from_frame(x, u))
    assert torch.allclose(m.proju(x, w), w, atol=1e-9)
    assert bool((m.norm2(x, w) <= u.square().sum(-1) * (1 + 1e-9)).all())


def test_so3_transport_matches_numerical_parallel_transport_along_the_geodesic():
    """Levi-Civita transport on SO(3) as a submanifold of R^{3x3} = R^9: step the vector along the geodesic and
    project it onto the tangent space at each new point (converges at O(1/N)). The metric tr(U^T V) / 2 is a
    constant multiple of the Frobenius one, so it has the same connection, and ``proju`` is orthogonal for both.
    Isometry and P log_x y = -log_y x alone do not pin transport down: left translation y x^T v passes those."""
    m = SO3()
    x, y = _pair(m, torch.float64, n=16, seed=13)  # geodesic distances up to 0.9 pi
    v = m.proju(x, torch.randn(x.shape, generator=torch.Generator().manual_seed(14), dtype=torch.float64))
    xi = m.logmap(x, y)

    def numerical(n: int) -> torch.Tensor:
        s = torch.arange(1, n + 1, dtype=torch.float64)[:, None, None] / n
        points = m.expmap(x.expand(n, *x.shape), s * xi)  # gamma(k / n), k = 1..n, gamma(1) = y
        w = v
        for k in range(n):
            w = m.proju(points[k], w)
        return w

    exact = m.transp(x, y, v)
    p1, p2, p4 = numerical(50), numerical(100), numerical(200)
    torch.testing.assert_close(m._m(m.expmap(x, xi)), m._m(y), atol=1e-10, rtol=0)
    # first-order convergence to transp, per sample ...
    e2, e4 = (p2 - exact).norm(dim=-1), (p4 - exact).norm(dim=-1)
    assert bool(((e2 / e4 - 2).abs() < 0.1).all()), e2 / e4
    # ... and Richardson extrapolation of the O(1/N) and O(1/N^2) terms agrees to 5e-5 (it is ~1e-5)
    torch.testing.assert_close((8 * p4 - 6 * p2 + p1) / 3, exact, atol=5e-5, rtol=0)
    # left translation (isometric, maps log_x y to -log_y x) is far from it
    left = m._f(m._m(y) @ m._m(x).transpose(-1, -2) @ m._m(v))
    assert bool(((left - exact).norm(dim=-1) > 0.1).all())


def test_so3_projection_has_the_polar_factors_derivative_and_finite_gradients_on_rotations():
    """The SVD's backward divides by s_i^2 - s_j^2, which is 0/0 on rotations (all s = 1): gradients through projx,
    hence through every solver step on SO(3), were NaN. The derivative of the nearest rotation must match finite
    differences on generic matrices (det > 0 and < 0), and on a rotation it is the orthogonal tangent projection."""
    m = SO3()
    g = torch.Generator().manual_seed(15)
    raw = torch.randn(6, 9, generator=g, dtype=torch.float64)
    dets = torch.linalg.det(raw.reshape(-1, 3, 3))
    assert bool((dets > 0).any()) and bool((dets < 0).any())
    assert torch.autograd.gradcheck(m.projx, (raw.clone().requires_grad_(True),))
    r = m.random_base(6, generator=g, dtype=torch.float64).requires_grad_(True)
    c = torch.randn(6, 9, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad((m.projx(r) * c).sum(), r)
    assert torch.isfinite(grad).all()
    torch.testing.assert_close(grad, m.proju(r.detach(), c), atol=1e-12, rtol=0)
    # forward mode too (flow maps take jvp through the manifold's operations)
    _, tangent = torch.func.jvp(m.projx, (r.detach(),), (c,))
    torch.testing.assert_close(tangent, m.proju(r.detach(), c), atol=1e-12, rtol=0)


def test_lorentz_refuses_a_non_positive_base_std():
    # base_std = 0 reached math.log(0) in the base density: a bare "math domain error"
    for std in (0.0, -1.0):
        with pytest.raises(ConfigError, match="base_std"):
            Lorentz(2, base_std=std)


def _midpoints(lo: float, hi: float, n: int) -> tuple[torch.Tensor, float]:
    h = (hi - lo) / n
    return lo + (torch.arange(n, dtype=torch.float64) + 0.5) * h, h


def _sphere_mass(n: int) -> float:
    """Quadrature of the base density over S^1, S^2, S^3 in (hyper)spherical angles with their volume element."""
    m = Sphere(n)
    k = 400
    psi, dpsi = _midpoints(0, math.pi, k)
    phi, dphi = _midpoints(0, 2 * math.pi, k)
    if n == 1:
        pts, vol = torch.stack([phi.cos(), phi.sin()], -1), torch.full_like(phi, dphi)
    elif n == 2:
        a, b = torch.meshgrid(psi, phi, indexing="ij")
        pts = torch.stack([a.sin() * b.cos(), a.sin() * b.sin(), a.cos()], -1)
        vol = a.sin() * dpsi * dphi
    else:
        psi, dpsi = _midpoints(0, math.pi, 300)
        phi, dphi = _midpoints(0, 2 * math.pi, 8)
        a, c, b = torch.meshgrid(psi, psi, phi, indexing="ij")
        pts = torch.stack([a.cos(), a.sin() * c.cos(), a.sin() * c.sin() * b.cos(), a.sin() * c.sin() * b.sin()], -1)
        vol = a.sin().square() * c.sin() * dpsi * dpsi * dphi
    return float((m.base_log_prob(pts.reshape(-1, n + 1)).exp() * vol.reshape(-1)).sum())


def _lorentz_mass(m: Lorentz) -> float:
    """The hyperboloid as the graph x_0 = sqrt(k + |s|^2) over s in R^2: volume element sqrt(k / (k + |s|^2)) ds
    (the induced Minkowski metric), radii spread out as |s| = sqrt(k) sinh(u) for the quadrature only."""
    u, du = _midpoints(0, 7, 3000)
    th, dth = _midpoints(0, 2 * math.pi, 64)
    uu, tt = torch.meshgrid(u, th, indexing="ij")
    rho = math.sqrt(m.k) * torch.sinh(uu)
    s = torch.stack([rho * tt.cos(), rho * tt.sin()], -1).reshape(-1, 2)
    x = torch.cat([torch.sqrt(m.k + s.square().sum(-1, keepdim=True)), s], -1)
    vol = torch.sqrt(m.k / (m.k + rho.square())) * rho * math.sqrt(m.k) * torch.cosh(uu) * du * dth
    return float((m.base_log_prob(x).exp() * vol.reshape(-1)).sum())


def _so3_mass() -> float:
    """Rotations in exponential coordinates w (|w| = angle <= pi): the volume element of the metric tr(U^T V) / 2 is
    2 (1 - cos |w|) / |w|^2 d^3 w; the base density is evaluated at rotations about random axes."""
    m = SO3()
    th, dth = _midpoints(0, math.pi, 2000)
    axis = torch.nn.functional.normalize(torch.randn(2000, 3, generator=torch.Generator().manual_seed(16)), dim=-1)
    pts = m._f(rodrigues(th[:, None] * axis.double()))
    return float((m.base_log_prob(pts).exp() * 4 * math.pi * 2 * (1 - th.cos()) * dth).sum())


@pytest.mark.parametrize("case", ["sphere1", "sphere2", "sphere3", "torus", "so3", "lorentz_k", "ball_c"])
def test_base_densities_integrate_to_one_over_the_riemannian_volume(case):
    """The uniform densities 1 / vol(M) (S^n, T^n, SO(3) of volume 8 pi^2) and the wrapped normals of a curvature
    other than -1 (k = 2 on the hyperboloid, c = 0.5 on the ball), against quadrature in coordinates of their own."""
    if case.startswith("sphere"):
        mass = _sphere_mass(int(case[-1]))
    elif case == "torus":
        t = Torus(2)
        a, h = _midpoints(-math.pi, math.pi, 50)
        pts = torch.stack(torch.meshgrid(a, a, indexing="ij"), -1).reshape(-1, 2)
        mass = float(t.base_log_prob(pts).exp().sum() * h * h)
    elif case == "so3":
        mass = _so3_mass()
    elif case == "lorentz_k":
        mass = _lorentz_mass(Lorentz(2, k=2.0, base_std=0.7))
    else:
        ball = PoincareBall(2, c=0.5, base_std=0.7)
        r, dr = _midpoints(0, (1 - 1e-9) / math.sqrt(0.5), 800)
        th, dth = _midpoints(0, 2 * math.pi, 200)
        rr, tt = torch.meshgrid(r, th, indexing="ij")
        pts = torch.stack([rr * tt.cos(), rr * tt.sin()], -1).reshape(-1, 2)
        vol = ball.lambda_x(pts, keepdim=False).square() * rr.reshape(-1) * dr * dth
        mass = float((ball.base_log_prob(pts).exp() * vol).sum())
    assert abs(mass - 1) < 1e-4, mass


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_safe_norm_and_sqrt_of_zero_are_positive_with_finite_gradients_in_every_dtype(dtype):
    """The floor must survive the dtype's rounding: float16 rounds 1e-8 to 0, which gave sqrt(0) with an
    infinite gradient and a zero norm that exp maps divide by."""
    from gencore.manifolds.base import safe_norm, safe_sqrt

    u = torch.zeros(3, 4, dtype=dtype, requires_grad=True)
    n = safe_norm(u)
    assert bool((n > 0).all())
    n.sum().backward()
    assert bool(torch.isfinite(u.grad).all())
    x = torch.zeros(5, dtype=dtype, requires_grad=True)
    s = safe_sqrt(x)
    assert bool((s > 0).all())
    s.sum().backward()
    assert bool(torch.isfinite(x.grad).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("delta", [1e-2, 1e-3, 1e-4])
@pytest.mark.parametrize("n", [2, 3])
def test_sphere_log_exp_and_transport_near_the_antipode(n, delta, dtype):
    """Points at distance pi - delta: |log_x y| = d(x, y), exp_x(log_x y) = y, and transport keeps inner products.
    The log scaled its O(eps) direction by d / sin d (float32, delta = 1e-3: length off by 2.5e-4) and the transport
    divided by 1 + <x, y>, which cancels (float32, delta = 1e-4: a unit vector came back with norm 1.5e7)."""
    m = Sphere(n)
    g = torch.Generator().manual_seed(20)
    x = m.random_base(32, generator=g, dtype=torch.float64)
    e = m.proju(x, torch.randn(x.shape, generator=g, dtype=torch.float64))
    e = e / e.norm(dim=-1, keepdim=True)
    d = math.pi - delta
    y = (math.cos(d) * x + math.sin(d) * e).to(dtype)
    x = x.to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    v = m.logmap(x, y)
    assert torch.allclose(v.norm(dim=-1), m.dist(x, y), atol=tol, rtol=0)
    assert torch.allclose(m.dist(x, y).double(), torch.full((32,), d, dtype=torch.float64), atol=tol, rtol=0)
    assert (m.dist(m.expmap(x, v), y) < tol).all()
    u = m.proju(x, torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype))
    w = m.proju(x, torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype))
    pu, pw = m.transp(x, y, u), m.transp(x, y, w)
    assert torch.allclose(m.inner(y, pu, pw), m.inner(x, u, w), atol=tol * 10, rtol=0)
    assert torch.allclose(m.inner(y, pu, pu), m.inner(x, u, u), atol=tol * 10, rtol=0)
    # the transported vector is tangent at y (up to the rounding of the points themselves, ~eps / delta)
    assert (m.inner(y, pu, y).abs() < (1e-2 if dtype == torch.float32 else 1e-9)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", list(MANIFOLDS))
def test_parallel_transport_along_a_zero_length_geodesic_is_the_identity(name, dtype):
    m = MANIFOLDS[name]()
    x = m.random_base(32, generator=torch.Generator().manual_seed(21), dtype=dtype)
    u = m.proju(x, torch.randn(x.shape, generator=torch.Generator().manual_seed(22), dtype=dtype))
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    assert torch.allclose(m.transp(x, x, u), u, atol=tol * (1 + float(u.abs().max())), rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_so3_log_exp_near_angle_pi_agree_with_scipy(dtype):
    """Rotation angles pi - delta down to the cut locus, in float32 and float64, against scipy's rotation vectors."""
    from scipy.spatial.transform import Rotation

    m = SO3()
    g = torch.Generator().manual_seed(23)
    axis = torch.nn.functional.normalize(torch.randn(64, 3, generator=g, dtype=torch.float64), dim=-1)
    tol = 2e-5 if dtype == torch.float32 else 1e-12
    for delta in (0.1, 1.1e-2, 9e-3, 1e-4, 1e-6):
        w = (math.pi - delta) * axis
        r = torch.as_tensor(Rotation.from_rotvec(w.numpy()).as_matrix(), dtype=dtype)
        assert torch.allclose(so3_log(r).double(), w, atol=tol, rtol=0)
        o = m.origin(dtype).expand(64, 9)
        v = m.origin_tangent(w.to(dtype))
        assert torch.allclose(m.logmap(o, m.expmap(o, v)), v, atol=tol, rtol=0)
        assert torch.allclose(m.dist(o, m._f(r)).double(), torch.full((64,), math.pi - delta).double(), atol=tol)
        ref = torch.as_tensor(Rotation.from_matrix(r.double().numpy()).as_rotvec())
        assert torch.allclose(so3_log(r).double(), ref, atol=tol, rtol=0)


def test_so3_uniform_base_has_the_haar_angle_density():
    """Haar measure: the rotation angle has density (1 - cos theta) / pi on [0, pi] (KS test)."""
    from scipy import stats

    m = SO3()
    x = m.random_base(20000, generator=torch.Generator().manual_seed(24), dtype=torch.float64)
    angle = m.dist(m.origin(torch.float64).expand_as(x), x).numpy()
    assert stats.kstest(angle, lambda t: (t - np.sin(t)) / math.pi).pvalue > 1e-3
