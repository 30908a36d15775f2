"""Horizontal projection and the quotient sampler's correction term, against analytic facts and autograd."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.paths import harmonic_noise_transform
from genmol.generation.strategies import STRATEGIES, coordinate_error, pair, sde_step
from genmol.se3 import (
    center,
    centered_noise,
    horizontal_projection,
    inertia,
    log_orbit_volume,
    mean_curvature,
    random_rotations,
    rotation_generators,
    vertical_projection,
)

D = torch.float64


def cloud(seed: int, b: int = 3, n: int = 6, pad: int = 2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, n, 3, generator=g, dtype=D)
    mask = torch.ones(b, n, dtype=D)
    mask[0, n - pad :] = 0  # a padded molecule
    v = torch.randn(b, n, 3, generator=g, dtype=D)
    return x * mask[..., None], v * mask[..., None], mask


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_projection_is_idempotent(seed):
    x, v, mask = cloud(seed)
    p = horizontal_projection(x, v, mask)
    torch.testing.assert_close(horizontal_projection(x, p, mask), p, atol=1e-10, rtol=0)
    torch.testing.assert_close(p + vertical_projection(x, v, mask), v, atol=1e-10, rtol=0)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_projection_is_orthogonal_to_infinitesimal_rotations_and_translations(seed):
    x, v, mask = cloud(seed)
    p = horizontal_projection(x, v, mask)
    xc = center(x, mask)
    for gen in rotation_generators(D):
        xi = (xc @ gen.T) * mask[..., None]  # the infinitesimal rotation e_k x x_i
        assert (p * xi).sum((1, 2)).abs().max() < 1e-10
    assert (p.sum(1)).abs().max() < 1e-10  # no translation
    # and the vertical part is exactly a rigid motion: it is removed completely
    omega = torch.randn(x.shape[0], 3, dtype=D)
    rigid = torch.linalg.cross(omega[:, None].expand_as(xc), xc, dim=-1) + torch.randn(x.shape[0], 1, 3, dtype=D)
    assert horizontal_projection(x, rigid * mask[..., None], mask).abs().max() < 1e-10


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_projection_and_curvature_are_rotation_equivariant(seed):
    x, v, mask = cloud(seed)
    rot = random_rotations(x.shape[0], generator=torch.Generator().manual_seed(seed), dtype=D)
    shift = torch.randn(x.shape[0], 1, 3, dtype=D)
    xr = (x @ rot.transpose(1, 2) + shift) * mask[..., None]
    vr = v @ rot.transpose(1, 2)
    torch.testing.assert_close(
        horizontal_projection(xr, vr, mask), horizontal_projection(x, v, mask) @ rot.transpose(1, 2), atol=1e-9, rtol=0
    )
    torch.testing.assert_close(
        mean_curvature(xr, mask), mean_curvature(x, mask) @ rot.transpose(1, 2), atol=1e-9, rtol=0
    )


def test_rotations_are_proper_and_orthogonal():
    r = random_rotations(100, generator=torch.Generator().manual_seed(0), dtype=D)
    torch.testing.assert_close(r @ r.transpose(1, 2), torch.eye(3, dtype=D).expand(100, 3, 3), atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.linalg.det(r), torch.ones(100, dtype=D), atol=1e-12, rtol=0)


def test_rotations_are_drawn_on_the_requested_device_from_the_generators_stream():
    rot = random_rotations(6, generator=torch.Generator().manual_seed(3), dtype=D, device="cpu")
    torch.testing.assert_close(rot, random_rotations(6, generator=torch.Generator().manual_seed(3), dtype=D))
    torch.testing.assert_close(rot @ rot.transpose(1, 2), torch.eye(3, dtype=D).expand(6, 3, 3))
    torch.testing.assert_close(torch.linalg.det(rot), torch.ones(6, dtype=D))


def test_mean_curvature_equals_minus_gradient_of_log_orbit_volume():
    """Autograd oracle (torch.func.grad): H = -grad (1/2) log det G."""
    x, _, mask = cloud(1)
    h = mean_curvature(x, mask)
    for b in range(x.shape[0]):
        grad = torch.func.grad(lambda y, b=b: log_orbit_volume(y[None], mask[b : b + 1])[0])(x[b])
        torch.testing.assert_close(h[b], -grad * mask[b, :, None], atol=1e-10, rtol=0)


def test_mean_curvature_is_the_vertical_trace_of_the_hessian():
    """Second oracle (torch.func.hessian): for an SO(3)-invariant f, tr(P_v Hess f P_v) = -<grad f, H>."""
    x, _, _ = cloud(2, b=1, n=5, pad=0)
    x0 = x[0]

    def f(y):
        d = ((y[:, None] - y[None]) ** 2).sum(-1)
        return (torch.exp(-d) * (1 - torch.eye(y.shape[0], dtype=D))).sum() + (
            (center(y[None])[0] ** 2).sum(-1) ** 2
        ).sum()

    hess = torch.func.hessian(f)(x0).reshape(15, 15)
    grad = torch.func.grad(f)(x0).reshape(15)
    basis = torch.eye(15, dtype=D).reshape(15, 5, 3)
    pv = torch.stack([vertical_projection(x0[None].expand(15, 5, 3), basis, None)[k].reshape(15) for k in range(15)])
    vertical_trace = torch.trace(pv @ hess @ pv.T)
    torch.testing.assert_close(vertical_trace, -(grad @ mean_curvature(x0[None])[0].reshape(15)), atol=1e-8, rtol=0)


def test_curvature_on_a_circle_gives_the_bessel_drift():
    """Two points on a line through the origin: the orbit of the pair is a sphere of radius r/2 per point."""
    r = 3.0
    x = torch.tensor([[[r / 2, 0, 0], [-r / 2, 0, 0]]], dtype=D)
    x = x + torch.tensor([[[0, 1e-7, 0], [0, -1e-7, 0]]], dtype=D)  # away from exact collinearity
    h = mean_curvature(x)
    # the relative vector y = x1 - x2 moves on a sphere of radius r in R^3: mean curvature vector -2 y / r^2
    hy = h[0, 0] - h[0, 1]
    torch.testing.assert_close(hy, torch.tensor([-2 * 2 / r, 0, 0], dtype=D), atol=1e-6, rtol=0)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.2, 5.0))
def test_radial_component_of_curvature_is_minus_three(seed, scale):
    """G is homogeneous of degree 2, so <x, H> = -(1/2) d/ds log det G(s x) = -3 for every generic x."""
    x, _, mask = cloud(seed)
    xc = center(x * scale, mask)
    torch.testing.assert_close((xc * mean_curvature(x * scale, mask)).sum((1, 2)), torch.full((3,), -3.0, dtype=D))


def test_horizontal_noise_needs_the_correction_to_match_euclidean_noise():
    """E|x|^2 grows at rate 3(N-1) under CoM-free Brownian motion. Horizontal noise alone grows it at
    tr P_h = 3(N-1) - 3; the correction -(1/2) H restores the missing 3 (since <x, H> = -3)."""
    n, b, dt, steps = 5, 20_000, 1e-3, 10
    g = torch.Generator().manual_seed(0)
    x0 = center(torch.randn(1, n, 3, generator=g, dtype=D))
    x0 = (x0 / x0.norm() * 1.5).expand(b, n, 3).clone()
    mask = torch.ones(b, n, dtype=D)
    zero = torch.zeros_like(x0)

    def run(strategy, correct):
        x = x0.clone()
        for _ in range(steps):
            eps = torch.randn(x.shape, generator=g, dtype=D)
            if strategy == "euclid":
                x = x + math.sqrt(dt) * center(eps, mask)
            else:
                drift = -0.5 * mean_curvature(x, mask) if correct else zero
                x = x + drift * dt + math.sqrt(dt) * horizontal_projection(x, eps, mask)
        return ((x * x).sum((1, 2)).mean() - (x0[0] ** 2).sum()) / (steps * dt)

    full = run("euclid", False)
    corrected = run("quotient", True)
    plain = run("quotient", False)
    tol = 0.8  # the Monte-Carlo standard error of each rate is about 0.2 here
    assert abs(full - 12.0) < tol
    assert abs(corrected - 12.0) < tol
    assert abs(plain - 9.0) < tol


@pytest.mark.parametrize("strategy", ["quotient", "quotient-aligned"])
def test_sde_step_uses_horizontal_noise_and_correction(strategy):
    x, v, mask = cloud(3)
    x = center(x, mask)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    out = sde_step(strategy, v, x, 0.3, 0.01, mask, 0.5, g1)
    eps = torch.randn(x.shape, generator=g2, dtype=D)
    p = horizontal_projection(x, v, mask)
    g2_ = 0.5 * 0.7
    drift = p - 0.25 * (x - 0.3 * p) - 0.5 * g2_ * mean_curvature(x, mask)
    expected = (x + drift * 0.01 + math.sqrt(g2_ * 0.01) * horizontal_projection(x, eps, mask)) * mask[..., None]
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sde_step_with_a_harmonic_prior_injects_its_noise_without_correction(strategy):
    x, v, mask = cloud(3)
    x = center(x, mask)
    adj = torch.zeros(3, 6, 6, dtype=D)
    adj[:, torch.arange(5), torch.arange(1, 6)] = 1.0
    a = harmonic_noise_transform(adj, mask, alpha=1.3)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    out = sde_step(strategy, v, x, 0.3, 0.01, mask, 0.5, g1, a)
    eps = torch.randn(x.shape, generator=g2, dtype=D)
    p = horizontal_projection(x, v, mask) if strategy.startswith("quotient") else center(v, mask)
    drift = p - 0.25 * (x - 0.3 * p)
    expected = (x + drift * 0.01 + math.sqrt(0.35 * 0.01) * center(a @ eps, mask)) * mask[..., None]
    torch.testing.assert_close(out, expected)


def test_harmonic_sde_keeps_the_path_law_for_every_strategy_and_isotropic_noise_does_not():
    """Data: one 4-atom chain under Haar-random rotations; noise: the harmonic prior of its bond graph. The
    exact marginal velocity is a posterior average over rotations (Monte Carlo over 200 rotations). Run to
    t = 0.6 with a large noise scale, the mean squared pair distances must match those of
    ``x_t = t R x1 + (1 - t) x0``: with the preconditioned noise for the com and the quotient strategies
    (whose drift drops the vertical part), not with the isotropic horizontal noise and curvature term."""
    n, b, steps, t_end = 4, 2000, 50, 0.6
    g = torch.Generator().manual_seed(0)
    adj = torch.zeros(n, n, dtype=D)
    adj[torch.arange(n - 1), torch.arange(1, n)] = 1.0
    adj = adj + adj.T
    mask = torch.ones(b, n, dtype=D)
    a = harmonic_noise_transform(adj.expand(b, n, n), mask)
    lap = torch.diag(adj.sum(1)) - adj  # the prior's precision on centred clouds (alpha = 1)
    x1 = center(torch.tensor([[[0.0, 0, 0], [1.5, 0, 0], [2.0, 1.4, 0], [3.5, 1.4, 0.8]]], dtype=D))
    ref = x1[0] @ random_rotations(200, generator=g, dtype=D).transpose(1, 2)

    def velocity(x, t):
        diff = x[:, None] - t * ref[None]
        weights = torch.softmax(-torch.einsum("brni,nm,brmi->br", diff, lap, diff) / (2 * (1 - t) ** 2), -1)
        return (torch.einsum("br,rni->bni", weights, ref) - x) / (1 - t)

    def pair_sq(x):
        d = torch.cdist(x, x).pow(2).mean(0)
        return torch.stack([d[0, 1], d[0, 2], d[0, 3], d[1, 3]])

    # E|x_i - x_j|^2 = t^2 |x1_i - x1_j|^2 + (1 - t)^2 3 R_ij (R: effective resistance, |i - j| on a chain)
    data_sq = pair_sq(x1)
    truth = t_end**2 * data_sq + (1 - t_end) ** 2 * 3 * torch.tensor([1.0, 2.0, 3.0, 2.0], dtype=D)
    x0 = center(a @ torch.randn(b, n, 3, generator=g, dtype=D))
    dt = t_end / steps
    results = {}
    for name, strategy, transform in [("com", "com", a), ("quotient", "quotient", a), ("isotropic", "quotient", None)]:
        x = x0.clone()
        for k in range(steps):
            x = sde_step(strategy, velocity(x, k * dt), x, k * dt, dt, mask, 2.0, g, transform)
        results[name] = pair_sq(x) / truth - 1
    # the sampling error of each ratio is about 2 % (measured: within 3 %); the isotropic sampler is 11-44 % off
    assert results["com"].abs().max() < 0.07
    assert results["quotient"].abs().max() < 0.07
    assert results["isotropic"].abs().max() > 0.25


@pytest.mark.parametrize("strategy", ["quotient", "quotient-aligned"])
def test_quotient_loss_ignores_vertical_motion_and_com_loss_does_not(strategy):
    x, v, mask = cloud(4)
    u = torch.randn_like(v) * mask[..., None]
    xc = center(x, mask)
    omega = torch.tensor([[0.3, -1.0, 2.0]] * 3, dtype=D)
    spin = torch.linalg.cross(omega[:, None].expand_as(xc), xc, dim=-1) * mask[..., None]
    q0, q1 = coordinate_error(strategy, v, u, x, mask), coordinate_error(strategy, v + spin, u, x, mask)
    torch.testing.assert_close(q0, q1)
    assert (coordinate_error("com", v + spin, u, x, mask) - coordinate_error("com", v, u, x, mask)).abs().min() > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aligned_pairs_give_horizontal_straight_paths(seed):
    """After Kabsch alignment the straight path is the horizontal lift of a quotient geodesic: its velocity
    is horizontal at every point; without alignment it is not."""
    x0, x1, mask = cloud(seed, n=9)
    for strategy in STRATEGIES:
        a, b = pair(strategy, x0, x1, mask)
        u = (b - a) * mask[..., None]
        off = max(
            float((horizontal_projection(t * b + (1 - t) * a, u, mask) - u).norm() / u.norm())
            for t in (0.0, 0.3, 0.7, 1.0)
        )
        if strategy in ("kabsch", "quotient-aligned"):
            assert off < 1e-10, strategy
        else:
            assert off > 0.05, strategy


def test_cli_offers_every_strategy():
    from genmol.cli import build_parser

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    assert tuple(next(a for a in train._actions if a.dest == "strategy").choices) == STRATEGIES


def test_inertia_of_a_unit_square():
    x = torch.tensor([[[1, 1, 0], [1, -1, 0], [-1, 1, 0], [-1, -1, 0]]], dtype=D)
    torch.testing.assert_close(inertia(x)[0], torch.diag(torch.tensor([4.0, 4.0, 8.0], dtype=D)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_projection_is_stable_for_nearly_linear_molecules(dtype):
    x = torch.tensor([[[0, 0, -1.16], [0, 0, 0], [0, 0, 1.16]]], dtype=dtype)  # CO2-like
    x = x + 1e-4 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    v = torch.randn(x.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    p = horizontal_projection(x, v)
    assert torch.isfinite(p).all() and torch.isfinite(mean_curvature(x)).all()


def test_centered_noise_is_drawn_in_the_requested_dtype():
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    x = centered_noise((2, 4, 3), mask, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eps = torch.randn((2, 4, 3), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert x.dtype == torch.float64
    assert torch.equal(x[0, 3], torch.zeros(3, dtype=torch.float64))  # padding stays zero
    mean = (eps * mask[..., None]).sum(1, keepdim=True) / mask.sum(1)[:, None, None]
    torch.testing.assert_close(x, (eps - mean) * mask[..., None], rtol=0, atol=1e-15)
    assert torch.randn(1).dtype == centered_noise((1, 1, 3), torch.ones(1, 1)).dtype  # default: torch's dtype


def test_kabsch_never_reflects_a_mirror_image_conformer():
    """A chiral cloud against its mirror image: the best improper alignment would be exact, the best proper
    rotation is not. The rotation returned is proper, kabsch_align applies it, and its residual is kabsch_rmsd."""
    from genmol.metrics.rmsd import kabsch_align, kabsch_rmsd, kabsch_rotation

    x = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.4, 0.3, 0.2]], dtype=D)
    g = torch.Generator().manual_seed(0)
    rot = random_rotations(1, generator=g, dtype=D)[0]
    mirror = (x * torch.tensor([-1.0, 1.0, 1.0], dtype=D)) @ rot.T + torch.tensor([0.5, -1.0, 2.0], dtype=D)
    r = kabsch_rotation(x, mirror)
    torch.testing.assert_close(torch.linalg.det(r), torch.tensor(1.0, dtype=D), atol=1e-12, rtol=0)
    torch.testing.assert_close(r @ r.T, torch.eye(3, dtype=D), atol=1e-12, rtol=0)
    rmsd = kabsch_rmsd(x, mirror)
    assert rmsd > 0.1
    aligned = kabsch_align(x, mirror)
    residual = ((aligned - mirror).pow(2).sum(-1).mean()).sqrt()
    torch.testing.assert_close(residual, rmsd, atol=1e-10, rtol=0)
    # no proper rotation does better (brute force over many rotations)
    rs = random_rotations(20_000, generator=g, dtype=D)
    xc, mc = x - x.mean(0), mirror - mirror.mean(0)
    best = ((xc @ rs.transpose(1, 2) - mc).pow(2).sum(-1).mean(-1)).sqrt().min()
    assert rmsd <= best + 1e-12
    # batched and padded: the same for each molecule
    xb = torch.zeros(2, 6, 3, dtype=D)
    yb = torch.zeros(2, 6, 3, dtype=D)
    xb[:, :5], yb[:, :5] = x, mirror
    mask = torch.ones(2, 6, dtype=D)
    mask[:, 5] = 0
    rb = kabsch_rotation(xb, yb, mask)
    torch.testing.assert_close(torch.linalg.det(rb), torch.ones(2, dtype=D), atol=1e-12, rtol=0)
    torch.testing.assert_close(kabsch_rmsd(xb, yb, mask), rmsd.expand(2), atol=1e-10, rtol=0)


def test_gaussian_sde_keeps_the_path_law_and_the_quotient_one_needs_its_correction(monkeypatch):
    """Centred Gaussian noise, data one 4-atom cloud under Haar-random rotations, the exact marginal velocity (a
    posterior average over 150 rotations). Run to t = 0.6 with a large noise scale, the mean squared pair distances
    must match those of ``x_t = t R x1 + (1 - t) x0``: for the com SDE (centred Euclidean noise) and for the quotient
    SDE (horizontal noise plus the curvature drift -(g^2/2) H); without that drift the quotient SDE shrinks them."""
    import genmol.generation.strategies as strategies

    n, b, steps, t_end = 4, 2000, 40, 0.6
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(b, n, dtype=D)
    x1 = center(torch.tensor([[[0.0, 0, 0], [1.5, 0, 0], [2.0, 1.4, 0], [3.5, 1.4, 0.8]]], dtype=D))
    ref = x1[0] @ random_rotations(150, generator=g, dtype=D).transpose(1, 2)

    def velocity(x, t):
        diff = x[:, None] - t * ref[None]
        weights = torch.softmax(-diff.pow(2).sum((2, 3)) / (2 * (1 - t) ** 2), -1)
        return (torch.einsum("br,rni->bni", weights, ref) - x) / (1 - t)

    def pair_sq(x):
        d = torch.cdist(x, x).pow(2).mean(0)
        return torch.stack([d[0, 1], d[0, 2], d[0, 3], d[1, 3]])

    # E|x_i - x_j|^2 = t^2 |x1_i - x1_j|^2 + (1 - t)^2 * 3 * 2 for centred standard noise
    truth = t_end**2 * pair_sq(x1) + (1 - t_end) ** 2 * 6
    x0 = centered_noise((b, n, 3), mask, generator=g, dtype=D)
    dt = t_end / steps

    def run(strategy):
        x = x0.clone()
        for k in range(steps):
            x = sde_step(strategy, velocity(x, k * dt), x, k * dt, dt, mask, 2.0, g)
        return pair_sq(x) / truth - 1

    com, quotient = run("com"), run("quotient")
    monkeypatch.setattr(strategies, "mean_curvature", lambda x, mask: torch.zeros_like(x))
    uncorrected = run("quotient")
    # sampling error of each ratio about 2 % (seeds 0-3: within 4.1 %); the uncorrected sampler is 15-20 % low
    assert com.abs().max() < 0.07
    assert quotient.abs().max() < 0.07
    assert uncorrected.max() < -0.1


def test_kabsch_matches_scipys_align_vectors_on_padded_batches():
    """The rotation of every padded molecule equals scipy's (rigid SVD fit of the centred real atoms); the values in
    padded rows, however large, change nothing."""
    from scipy.spatial.transform import Rotation

    from genmol.metrics.rmsd import kabsch_align, kabsch_rotation

    g = torch.Generator().manual_seed(0)
    b, n = 6, 9
    sizes = [3, 4, 5, 7, 8, 9]
    mask = (torch.arange(n)[None] < torch.tensor(sizes)[:, None]).to(D)
    x = torch.randn(b, n, 3, generator=g, dtype=D) * mask[..., None] + 100 * (1 - mask[..., None])
    y = torch.randn(b, n, 3, generator=g, dtype=D) * mask[..., None] - 50 * (1 - mask[..., None])
    rot = kabsch_rotation(x, y, mask)
    for k, size in enumerate(sizes):
        xk, yk = x[k, :size].numpy(), y[k, :size].numpy()
        want, _ = Rotation.align_vectors(yk - yk.mean(0), xk - xk.mean(0))
        torch.testing.assert_close(rot[k], torch.tensor(want.as_matrix()), atol=1e-10, rtol=0)
    aligned = kabsch_align(x, y, mask)
    assert torch.equal(aligned * (1 - mask[..., None]), torch.zeros_like(aligned))
    ybar = (y * mask[..., None]).sum(1, keepdim=True) / mask.sum(1)[:, None, None]
    xc = x - (x * mask[..., None]).sum(1, keepdim=True) / mask.sum(1)[:, None, None]
    torch.testing.assert_close(aligned, (xc @ rot.transpose(1, 2) + ybar) * mask[..., None])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_pairs_are_centred_equivariant_and_aligned_targets_forget_the_data_pose(strategy):
    """Every strategy centres both ends on the real atoms and is equivariant: rotating the noise and the data together
    rotates the pair. The aligned strategies' target does not depend on the data's pose at all (rotating or shifting
    the data gives the same pair), which is what makes it horizontal."""
    x0, x1, mask = cloud(5, b=4, n=7)
    m = mask[..., None]
    rot = random_rotations(4, generator=torch.Generator().manual_seed(1), dtype=D)
    a0, a1 = pair(strategy, x0 + 3.0 * m, x1 - 2.0 * m, mask)
    for end in (a0, a1):
        assert (end.sum(1)).abs().max() < 1e-12 and torch.equal(end * (1 - m), torch.zeros_like(end))
    b0, b1 = pair(strategy, x0 @ rot.transpose(1, 2), x1 @ rot.transpose(1, 2), mask)
    torch.testing.assert_close(b0, a0 @ rot.transpose(1, 2), atol=1e-10, rtol=0)
    torch.testing.assert_close(b1, a1 @ rot.transpose(1, 2), atol=1e-10, rtol=0)
    c0, c1 = pair(strategy, x0, (x1 @ rot.transpose(1, 2) + torch.randn(4, 1, 3, dtype=D)) * m, mask)
    torch.testing.assert_close(c0, a0, atol=1e-10, rtol=0)
    if strategy in ("kabsch", "quotient-aligned"):
        torch.testing.assert_close(c1, a1, atol=1e-10, rtol=0)
    else:
        assert (c1 - a1).abs().max() > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("atoms", [2, 3, 5])
def test_mean_curvature_of_a_linear_molecule_in_any_orientation(dtype, atoms):
    """A collinear cloud (every two-atom molecule) has a two-dimensional orbit; its mean curvature is ``-2 x / S``
    with ``S = sum_i |x_i|^2`` (for two atoms the Bessel drift of the test above, ``H_1 - H_2 = -4 y / r^2``), and
    ``<x, H> = -2``. The inertia tensor is singular; a ridge in place of the pseudo-inverse multiplied rounding along
    the axis by ``1 / ridge``: errors up to 1.4 % in float32 and in float64 alike, depending on the orientation."""
    g = torch.Generator().manual_seed(atoms)
    b = 200
    line = torch.zeros(b, atoms, 3, dtype=D)
    line[..., 0] = 0.5 + 2.0 * torch.rand(b, atoms, generator=g, dtype=D).cumsum(1)  # distinct atoms along x
    rot = random_rotations(b, generator=g, dtype=D)
    x = line @ rot.transpose(1, 2) + 5.0 * torch.randn(b, 1, 3, generator=g, dtype=D)
    xc = center(x)
    want = -2.0 * xc / (xc * xc).sum((1, 2), keepdim=True)
    h = mean_curvature(x.to(dtype)).to(D)
    tol = 1e-4 if dtype == torch.float32 else 1e-12  # float32: the rounding of the shifted input, not the algorithm
    assert ((h - want).norm(dim=(1, 2)) / want.norm(dim=(1, 2))).max() < tol
    torch.testing.assert_close((xc * h).sum((1, 2)), torch.full((b,), -2.0, dtype=D), atol=tol * 10, rtol=0)
    if atoms == 2:  # the pair's relative vector y = x_1 - x_2 on a sphere of radius r
        y = xc[:, 0] - xc[:, 1]
        want_y = -4.0 * y / (y * y).sum(-1, keepdim=True)
        assert ((h[:, 0] - h[:, 1] - want_y).norm(dim=-1) / want_y.norm(dim=-1)).max() < tol


def test_mean_curvature_of_one_atom_and_of_a_padded_pair_is_finite():
    x = torch.tensor([[[0.3, -1.0, 2.0], [0.0, 0.0, 0.0]], [[1.0, 1.0, 1.0], [1.0, 1.0, 2.2]]], dtype=D)
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]], dtype=D)
    h = mean_curvature(x, mask)
    assert torch.equal(h[0], torch.zeros(2, 3, dtype=D))  # a single atom has a point for its orbit
    torch.testing.assert_close(h[1], torch.tensor([[0, 0, 2 / 1.2], [0, 0, -2 / 1.2]], dtype=D))
    # a diverged molecule (NaN) stays NaN and leaves the rest of the batch alone, as a linear solve does
    bad = torch.cat([x, torch.full((1, 2, 3), float("nan"), dtype=D)])
    hb = mean_curvature(bad, torch.cat([mask, torch.ones(1, 2, dtype=D)]))
    assert torch.isnan(hb[2]).all() and torch.equal(hb[:2], h)


def test_random_rotations_are_haar_distributed():
    """Statistical test: the rotation angle of a Haar-random rotation has the CDF ``(theta - sin theta) / pi``, every
    entry ``R_ij`` is uniform on [-1, 1] (a column is uniform on the sphere), and ``E[R_ij R_kl] = d_ik d_jl / 3``.
    Dropping the QR sign fix fails all three (KS p-values of 0)."""
    import numpy as np
    from scipy import stats

    n = 20_000
    r = random_rotations(n, generator=torch.Generator().manual_seed(0), dtype=D)
    theta = torch.arccos(((r.diagonal(dim1=1, dim2=2).sum(-1) - 1) / 2).clamp(-1, 1)).numpy()
    p_angle = stats.kstest(theta, lambda th: (th - np.sin(th)) / np.pi).pvalue
    p_entries = [stats.kstest(r[:, i, j].numpy(), stats.uniform(-1, 2).cdf).pvalue for i in range(3) for j in range(3)]
    # with the seed fixed the p-values are fixed (0.58 and at least 0.14); a Haar sampler misses 1e-3 rarely
    assert p_angle > 1e-3 and min(p_entries) > 1e-3
    second = torch.einsum("bij,bkl->ijkl", r, r) / n
    eye = torch.eye(3, dtype=D)
    want = torch.einsum("ik,jl->ijkl", eye, eye) / 3
    assert (second - want).abs().max() < 5 * (1 / 5 / n) ** 0.5  # five standard errors (E[R_ij^4] = 1/5 bounds each)
    assert r.mean(0).abs().max() < 5 / (3 * n) ** 0.5


def test_kabsch_rmsd_of_float32_clouds_is_not_floored_by_cancellation():
    """``N RMSD^2 = |x_c|^2 + |y_c|^2 - 2 sum s`` cancels: in float32 a rigid copy of a 20-atom cloud used to come out
    1.2e-3 angstrom from itself. The float32 answer must match the float64 one of the same (rounded) numbers."""
    from genmol.metrics.rmsd import kabsch_rmsd

    g = torch.Generator().manual_seed(0)
    x = 2.0 * torch.randn(8, 20, 3, generator=g, dtype=D)
    rot = random_rotations(8, generator=g, dtype=D)
    x32, y32 = x.float(), (x @ rot.transpose(1, 2) + 3.0).float()
    got = kabsch_rmsd(x32, y32)
    want = kabsch_rmsd(x32.double(), y32.double())
    assert got.dtype == torch.float32 and want.max() < 2e-6
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=0)  # float32 centring: rounding of order 1e-7
    mask = torch.ones(8, 20)
    mask[:, 15:] = 0
    torch.testing.assert_close(
        kabsch_rmsd(x32, y32, mask).double(), kabsch_rmsd(x32.double(), y32.double(), mask), atol=1e-6, rtol=0
    )
