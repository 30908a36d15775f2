"""Hyperbolic layers: closed forms against geoopt, points stay on the manifold (float32 near the boundary),
permutation / rotation equivariance, Riemannian Adam keeps ball parameters on the ball."""

from __future__ import annotations

import math

import geoopt
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gengraph.hyperbolic import (
    BallGeometry,
    EuclideanGeometry,
    HypAttention,
    HypGraphConv,
    HypNorm,
    HypTransformerBlock,
    LorentzLinear,
    PoincareLinear,
    ball_to_lorentz,
    lorentz_to_ball,
    riemannian_adam,
)


def _inside(g: BallGeometry, x: torch.Tensor) -> bool:
    return bool(torch.isfinite(x).all() and (x.norm(dim=-1) < 1 / g.c.sqrt()).all())


@settings(max_examples=25, deadline=None)
@given(c=st.floats(0.3, 3.0), scale=st.floats(0.01, 1.0), seed=st.integers(0, 1000))
def test_origin_maps_match_geoopt(c: float, scale: float, seed: int) -> None:
    g = BallGeometry(5, c).double()
    ref = geoopt.PoincareBall(c=c)
    u = torch.randn(7, 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True) * torch.linspace(0.01, 3.0, 7, dtype=torch.float64)[:, None] * scale / c**0.5
    x = g.expmap0(u)
    torch.testing.assert_close(x, ref.expmap0(u))
    # logmap0 is checked as the inverse (geoopt's artanh clamp loses digits near the boundary)
    torch.testing.assert_close(g.logmap0(x), u)
    y = g.expmap0(torch.randn(4, 5, dtype=torch.float64) * 0.5)
    # against gencore's log1p distance (geoopt's 2 artanh|(-x) (+) y| form loses digits as |x| -> 1/sqrt(c))
    torch.testing.assert_close(g.pairwise_dist(x, y), g.manifold.dist(x[:, None], y[None]), rtol=1e-10, atol=1e-10)


def test_float32_stability_at_the_boundary() -> None:
    g = BallGeometry(4)
    x = torch.randn(64, 4)
    x = x / x.norm(dim=-1, keepdim=True) * torch.tensor([0.999, 0.99999, 1.0, 1.2]).repeat(16)[:, None]
    x.requires_grad_(True)
    u = g.logmap0(x)
    y = g.expmap0(u * 50)  # far beyond float32's representable radius
    d = g.pairwise_dist(y, y)
    (u.sum() + d.sum()).backward()
    assert torch.isfinite(u).all() and _inside(g, y) and torch.isfinite(x.grad).all()
    assert torch.isfinite(d).all() and float(d.diagonal().abs().max()) < 1e-2


def _graph_batch(b: int = 2, n: int = 6, d: int = 8, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    g = BallGeometry(d)
    x = g.expmap0(torch.randn(b, n, d, generator=gen) * 1.5)
    a = (torch.rand(b, n, n, generator=gen) < 0.4).float().triu(1)
    a = a + a.transpose(1, 2)
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[-1, -2:] = False
    return g, x, a, mask


def test_layers_keep_points_on_the_ball() -> None:
    g, x, a, mask = _graph_batch()
    torch.manual_seed(0)
    layers = [PoincareLinear(g, 8, 8), HypNorm(g, 8), HypAttention(g, 8, 4), HypTransformerBlock(g, 8, 4)]
    for layer in layers:
        for p in layer.parameters():
            p.data.normal_(0, 2.0)  # large weights push outputs towards the boundary
        y = layer(x, mask) if isinstance(layer, HypAttention | HypTransformerBlock) else layer(x)
        assert _inside(g, y)
    assert _inside(g, HypGraphConv(g, 8, 8)(x, a, mask))


@pytest.mark.parametrize("c", [0.5, 1.0, 2.0])
def test_hyp_norm_normalises_hyperboloid_space_coordinates(c: float) -> None:
    """HypFormer's HypLayerNorm: the hyperboloid image of the output has LayerNorm(space part of the input) as
    its space part, so at default affine parameters every output lies at distance asinh(sqrt(c d)) / sqrt(c)
    from the origin, inside the clipping radius, wherever the input was (a tangent-space LayerNorm put every
    output on the clipping sphere); flat space: plain LayerNorm."""
    d = 32
    gen = torch.Generator().manual_seed(0)
    g = BallGeometry(d, c)
    radii = torch.tensor([0.05, 1.0, 3.0, 6.0])[:, None, None] / c**0.5  # geodesic distance / 2 from the origin
    u = torch.randn(4, 5, d, generator=gen)
    x = g.expmap0(radii * u / u.norm(dim=-1, keepdim=True)).requires_grad_(True)
    norm = HypNorm(g, d)
    y = norm(x)
    k = 1 / c
    expected_space = torch.nn.functional.layer_norm(ball_to_lorentz(x.double(), k)[..., 1:], (d,))
    torch.testing.assert_close(ball_to_lorentz(y.double(), k)[..., 1:], expected_space, rtol=1e-3, atol=1e-3)
    dist = g.manifold.dist(torch.zeros_like(y), y).double()
    torch.testing.assert_close(dist, torch.asinh(c**0.5 * expected_space.norm(dim=-1)) / c**0.5, rtol=1e-4, atol=1e-4)
    far = dist[1:]  # LayerNorm's eps shrinks the nearly-zero space part of the innermost inputs slightly
    torch.testing.assert_close(far, torch.full_like(far, math.asinh((c * d) ** 0.5) / c**0.5), rtol=1e-4, atol=1e-4)
    assert (y.norm(dim=-1) < g.max_norm(y) * (1 - 1e-3)).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and (x.grad.norm(dim=-1) > 0).all()
    flat = HypNorm(EuclideanGeometry(d), d)
    torch.testing.assert_close(flat(u), torch.nn.functional.layer_norm(u, (d,)))


def test_lorentz_linear_lands_on_the_hyperboloid() -> None:
    k = 2.0
    layer = LorentzLinear(3, 5, k=k)
    x = ball_to_lorentz(BallGeometry(3, 1 / k).expmap0(torch.randn(10, 3)), k=k)
    torch.testing.assert_close(-(x[:, 0] ** 2) + x[:, 1:].square().sum(-1), torch.full((10,), -k), rtol=1e-4, atol=1e-4)
    y = layer(x)
    torch.testing.assert_close(-(y[:, 0] ** 2) + y[:, 1:].square().sum(-1), torch.full((10,), -k), rtol=1e-4, atol=1e-3)
    z = BallGeometry(3, 1 / k).double().expmap0(torch.randn(5, 3, dtype=torch.float64))
    torch.testing.assert_close(lorentz_to_ball(ball_to_lorentz(z, k), k), z)


@pytest.mark.parametrize("geometry", ["ball", "euclidean"])
def test_permutation_equivariance(geometry: str) -> None:
    g, x, a, _ = _graph_batch(b=1)
    if geometry == "euclidean":
        g = EuclideanGeometry(8)
    torch.manual_seed(1)
    conv, block = HypGraphConv(g, 8, 8), HypTransformerBlock(g, 8, 4)
    perm = torch.randperm(6)
    out = block(conv(x, a))
    out_p = block(conv(x[:, perm], a[:, perm][:, :, perm]))
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-4, atol=1e-5)


def test_midpoint_is_rotation_equivariant_and_the_geodesic_midpoint() -> None:
    g = BallGeometry(3).double()
    x = g.expmap0(torch.randn(5, 3, dtype=torch.float64))
    w = torch.rand(2, 5, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))
    torch.testing.assert_close(g.midpoint(w, x @ q.T), g.midpoint(w, x) @ q.T)
    half = g.midpoint(torch.tensor([[1.0, 1.0]], dtype=torch.float64), x[:2])[0]
    torch.testing.assert_close(half, g.geodesic(x[0], x[1], 0.5))


@pytest.mark.parametrize("c", [1.0, 0.5])
def test_midpoint_reaches_the_outer_ball_in_float32(c) -> None:
    # the bracket of the gyromidpoint was clipped as a ball point, capping every midpoint (and so every graph
    # convolution, attention and codebook mean) at distance ~3.1 / sqrt(c) from the origin
    g = BallGeometry(3, c)
    u = torch.nn.functional.normalize(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), dim=-1)
    x = g.expmap0(u * torch.tensor([[2.0], [3.5], [4.5], [5.0]]) / c**0.5)  # float32 resolves ~5e-3 out there
    one = g.midpoint(torch.eye(4), x)  # each point alone is its own midpoint
    assert float(g.manifold.dist(one, x).max()) < 1e-2
    assign = torch.arange(4)
    assert float(g.manifold.dist(g.cluster_means(x, assign, 4, x, iters=0), x).max()) < 1e-2
    x64 = x.double()
    pair = g.midpoint(torch.ones(1, 2), x[2:4])[0].double()
    torch.testing.assert_close(pair, BallGeometry(3, c).double().geodesic(x64[2], x64[3], 0.5), atol=1e-4, rtol=0)


def test_riemannian_adam_keeps_ball_bias_on_the_ball() -> None:
    g = BallGeometry(4)
    layer = PoincareLinear(g, 4, 4, bias_on_ball=True)
    opt = riemannian_adam(layer.parameters(), lr=0.5)
    target = g.expmap0(torch.full((16, 4), 3.0))  # near the boundary: pulls the bias outwards
    x = g.expmap0(torch.randn(16, 4))
    for _ in range(30):
        loss = g.manifold.dist(layer(x), target).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert _inside(g, layer.bias.detach()) and float(layer.bias.norm()) > 0.5


def test_layer_arguments_raise_config_errors() -> None:
    """Bad layer arguments are the suite's ConfigError (a ValueError subclass, so old handlers still catch them)."""
    from gencore.errors import ConfigError
    from gengraph.hyperbolic import EuclideanGeometry, HypAttention, PoincareLinear

    with pytest.raises(ConfigError, match="divisible by heads"):
        HypAttention(BallGeometry(6), 6, heads=4)
    with pytest.raises(ConfigError, match="bias_on_ball"):
        PoincareLinear(EuclideanGeometry(4), 4, 4, bias_on_ball=True)


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_ball_operations_match_geoopt_for_c_other_than_one(c: float) -> None:
    """Mobius addition, conformal factor, curvature-scaled distance and the weighted gyromidpoint (unequal
    weights) against geoopt, at radii where geoopt's artanh forms keep their digits; the hyperboloid space part
    against ``ball_to_lorentz`` on ``<y, y>_L = -1/c``."""
    g = BallGeometry(5, c).double()
    ref = geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))
    gen = torch.Generator().manual_seed(3)
    x = g.expmap0(torch.randn(6, 5, generator=gen, dtype=torch.float64) * 0.6 / c**0.5)
    y = g.expmap0(torch.randn(6, 5, generator=gen, dtype=torch.float64) * 0.6 / c**0.5)
    torch.testing.assert_close(g.mobius_add(x, y), ref.mobius_add(x, y))
    torch.testing.assert_close(g.lambda_x(x), ref.lambda_x(x, keepdim=True))
    torch.testing.assert_close(g.pairwise_dist(x, y), ref.dist(x[:, None], y[None]), rtol=1e-9, atol=1e-9)
    w = torch.rand(3, 6, generator=gen, dtype=torch.float64)
    expected = torch.stack([ref.weighted_midpoint(x, w_i, reducedim=[0]) for w_i in w])
    torch.testing.assert_close(g.midpoint(w, x), expected)
    torch.testing.assert_close(g.to_space(x), ball_to_lorentz(x, 1 / c)[..., 1:])
    torch.testing.assert_close(g.from_space(g.to_space(x)), x)


def test_midpoint_gradients_are_finite_at_the_float32_boundary() -> None:
    # a point this close to the boundary makes the bracket's 1 - c|y|^2 exactly 0 in float32: sqrt's derivative
    # there was infinite and every gradient through the midpoint (convolution, attention, codebook) was NaN
    for c in (0.5, 1.0, 2.0):
        g = BallGeometry(4, c)
        u = torch.nn.functional.normalize(torch.randn(3, 4, generator=torch.Generator().manual_seed(0)), dim=-1)
        for radius in (0.9999999, 1.0):
            x = (u * radius / c**0.5).requires_grad_(True)
            m = g.midpoint(torch.eye(3), x) + g.midpoint(torch.ones(1, 3), x)
            means = g.cluster_means(x, torch.tensor([0, 0, 1]), 2, x[:2].detach(), iters=0)
            (m.sum() + means.sum()).backward()
            assert torch.isfinite(m).all() and torch.isfinite(x.grad).all(), (c, radius)


def _identity_attention(g: BallGeometry, dim: int, beta: float, gamma: float) -> HypAttention:
    attn = HypAttention(g, dim, heads=1).double()
    with torch.no_grad():
        for lin in (attn.q, attn.k, attn.v, attn.out):
            lin.weight.weight.copy_(torch.eye(dim))
            lin.bias.zero_()
        attn.log_beta.fill_(math.log(beta))
        attn.gamma.fill_(gamma)
    return attn


def test_hyp_attention_is_a_softmax_of_negative_distances() -> None:
    """With identity projections (queries = keys = values = the input) one head returns, for each query, the
    gyromidpoint of the unmasked keys weighted by ``softmax_j(-beta d(x_i, x_j) - gamma)``: checked with geoopt's
    distance and weighted midpoint; a large ``beta`` makes each query attend to itself (distance 0), so a sign
    error in the scores (attending to the farthest key) cannot pass."""
    c = 0.7
    g = BallGeometry(4, c).double()
    ref = geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))
    x = g.expmap0(torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, -2:] = False
    out = _identity_attention(g, 4, beta=1.7, gamma=0.3)(x, mask)
    for b in range(2):
        keys = x[b, mask[b]]
        for i in range(5):
            w = torch.softmax(-1.7 * ref.dist(x[b, i], keys) - 0.3, dim=-1)
            torch.testing.assert_close(out[b, i], ref.weighted_midpoint(keys, w, reducedim=[0]))
    sharp = _identity_attention(g, 4, beta=1e3, gamma=0.0)(x)
    torch.testing.assert_close(sharp, x, rtol=0, atol=1e-6)


def test_attention_accepts_float_and_int_masks_like_the_bool_mask() -> None:
    g, x, _, mask = _graph_batch()
    torch.manual_seed(0)
    attn, block = HypAttention(g, 8, 4), HypTransformerBlock(g, 8, 4)
    for m in (mask.float(), mask.long()):
        torch.testing.assert_close(attn(x, m), attn(x, mask))
        torch.testing.assert_close(block(x, m), block(x, mask))


@pytest.mark.parametrize("activation", [False, True])
def test_hyp_graph_conv_is_the_gyromidpoint_of_the_closed_neighbourhood(activation: bool) -> None:
    """With an identity Poincare map, node ``i``'s output is the unweighted gyromidpoint of itself and its
    unmasked neighbours (geoopt's midpoint), then ``exp_0(silu(log_0 .))`` with the activation."""
    c = 1.5
    g = BallGeometry(3, c).double()
    ref = geoopt.PoincareBall(c=torch.tensor(c, dtype=torch.float64))
    x = g.expmap0(torch.randn(1, 5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64))
    a = torch.zeros(1, 5, 5, dtype=torch.float64)
    for i, j in [(0, 1), (1, 2), (2, 3), (0, 4), (3, 4)]:
        a[0, i, j] = a[0, j, i] = 1
    mask = torch.tensor([[True, True, True, True, False]])
    conv = HypGraphConv(g, 3, 3, activation=activation).double()
    with torch.no_grad():
        conv.linear.weight.weight.copy_(torch.eye(3))
        conv.linear.bias.zero_()
    out = conv(x, a, mask)
    for i in range(4):
        hood = [j for j in range(4) if j == i or a[0, i, j] > 0]
        m = ref.weighted_midpoint(x[0, hood], torch.ones(len(hood), dtype=torch.float64), reducedim=[0])
        if activation:
            m = ref.expmap0(torch.nn.functional.silu(ref.logmap0(m)))
        torch.testing.assert_close(out[0, i], m)


def test_riemannian_adam_first_step_is_a_normalised_riemannian_gradient_step() -> None:
    """First step on a ball-valued bias of curvature 2, away from the origin (where lambda_x = 2 for every c):
    ``b <- projx(b - lr rgrad / (lambda_b |rgrad| + eps))`` with ``rgrad = egrad / lambda_b^2``; the first moment
    is carried to the new point with its Riemannian norm ``lambda |m|`` unchanged."""
    c, lr = 2.0, 0.05
    g = BallGeometry(3, c)
    layer = PoincareLinear(g, 3, 3, bias_on_ball=True)
    with torch.no_grad():
        layer.bias.copy_(torch.tensor([0.3, -0.2, 0.25]))
    b0 = layer.bias.detach().clone()
    opt = riemannian_adam(layer.parameters(), lr=lr, betas=(0.9, 0.999))
    x = g.expmap0(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)))
    target = g.expmap0(torch.full((8, 3), 0.7))
    g.manifold.dist(layer(x), target).square().mean().backward()
    lam = 2 / (1 - c * b0.square().sum())
    rgrad = layer.bias.grad.detach() / lam**2
    expected = g.manifold.projx(b0 - lr * rgrad / (lam * rgrad.norm() + 1e-8))
    opt.step()
    torch.testing.assert_close(layer.bias.detach(), expected, rtol=1e-5, atol=1e-6)
    lam1 = 2 / (1 - c * layer.bias.detach().square().sum())
    m = opt.state[layer.bias]["exp_avg"]
    torch.testing.assert_close(lam1 * m.norm(), 0.1 * lam * rgrad.norm(), rtol=1e-4, atol=0)
