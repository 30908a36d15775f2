"""Pins for lines that no other test reached (each found by a mutation that left every test passing): the
small-argument series of SO(3) and of ``sinc_ratio``, the curvature in the ball's pairwise distances,
``base_std`` in the hyperbolic base samplers, the auxiliary-integral weights of the manifold solvers and the
tangent projection of the Hutchinson probes."""

import math

import torch

from gencore.manifolds.base import sinc_ratio
from gencore.manifolds.likelihood import riemannian_divergence
from gencore.manifolds.solvers import solve_manifold_ode
from gencore.manifolds.spaces import Lorentz, PoincareBall, Sphere, _jr_inv, hat, rodrigues, so3_log

D = torch.float64


def _w(theta: float) -> torch.Tensor:
    axis = torch.tensor([0.3, -0.5, 0.8], dtype=D)
    return theta * axis / axis.norm()


def _exp_oracle(w: torch.Tensor, theta: float) -> torch.Tensor:
    # Rodrigues with coefficients free of cancellation in float64: sin t / t and 2 sin^2(t/2) / t^2
    k = hat(w)
    return torch.eye(3, dtype=D) + math.sin(theta) / theta * k + 2 * math.sin(theta / 2) ** 2 / theta**2 * (k @ k)


def test_rodrigues_series_matches_closed_form_just_below_threshold():
    # theta < 1e-2 takes the series branch. The quadratic coefficient b = (1 - cos t) / t^2 is also read off the
    # symmetric part, since its contribution is only O(t^2) of the matrix.
    for theta in (9e-3, 4e-3):
        w = _w(theta)
        r = rodrigues(w)
        torch.testing.assert_close(r, _exp_oracle(w, theta), rtol=0, atol=1e-15)
        torch.testing.assert_close(r, torch.linalg.matrix_exp(hat(w)), rtol=0, atol=1e-12)
        kk = hat(w) @ hat(w)
        b = (((r + r.T) / 2 - torch.eye(3, dtype=D)) * kk).sum() / (kk * kk).sum()
        assert abs(float(b) / (2 * math.sin(theta / 2) ** 2 / theta**2) - 1) < 1e-9


def test_so3_log_series_inverts_the_exponential_just_below_threshold():
    for theta in (9e-3, 4e-3):
        w = _w(theta)
        torch.testing.assert_close(so3_log(_exp_oracle(w, theta)), w, rtol=1e-12, atol=0)


def test_jr_inv_series_is_the_inverse_of_the_right_jacobian():
    # J_r(w) = I - (1 - cos t) / t^2 K + (t - sin t) / t^3 K^2, K = hat(w), inverted numerically
    for theta in (9e-3, 4e-3, 0.5):
        w = _w(theta)
        k = hat(w)
        jr = (
            torch.eye(3, dtype=D)
            - 2 * math.sin(theta / 2) ** 2 / theta**2 * k
            + (theta - math.sin(theta)) / theta**3 * (k @ k)
        )
        torch.testing.assert_close(_jr_inv(w), torch.linalg.inv(jr), rtol=0, atol=1e-14)
        # the K^2 coefficient itself (the diagonal of K^2 is O(t^2), so compare it relatively)
        diff = (_jr_inv(w) - torch.linalg.inv(jr)) * (k @ k)
        assert float(diff.abs().sum()) < 1e-9 * float((k @ k).square().sum())


def test_sinc_ratio_series_branch_matches_sin_and_sinh():
    r = torch.tensor([9e-4, 5e-4], dtype=D)
    for k in (1.0, 0.25):
        torch.testing.assert_close(
            sinc_ratio(r, k), torch.sin(math.sqrt(k) * r) / (math.sqrt(k) * r), rtol=1e-13, atol=0
        )
        torch.testing.assert_close(
            sinc_ratio(r, -k), torch.sinh(math.sqrt(k) * r) / (math.sqrt(k) * r), rtol=1e-13, atol=0
        )
    # the deviation from 1 itself, which the comparison above sees only at the 1e-7 level
    a = torch.tensor([9e-4], dtype=D)
    assert abs(float(1 - sinc_ratio(a, 1.0)) / (1 - math.sin(9e-4) / 9e-4) - 1) < 1e-6


def test_ball_pairwise_sq_dist_matches_dist_for_c_not_one():
    ball = PoincareBall(2, c=0.3)
    g = torch.Generator().manual_seed(0)
    x = ball.random_base(5, generator=g, dtype=D)
    y = ball.random_base(4, generator=g, dtype=D)
    ref = ball.dist(x[:, None, :], y[None, :, :]).square()
    torch.testing.assert_close(ball.pairwise_sq_dist(x, y), ref, rtol=1e-10, atol=1e-12)


def test_hyperbolic_random_base_has_the_requested_spread():
    # exp_o of xi ~ N(0, std^2 I_n) is at geodesic distance |xi| from the origin: E d^2 = n std^2
    n, std, draws = 2, 0.3, 4000
    for m in (PoincareBall(n, c=0.5, base_std=std), Lorentz(n, k=2.0, base_std=std)):
        x = m.random_base(draws, generator=torch.Generator().manual_seed(1), dtype=D)
        d2 = m.dist(m.origin(D).expand_as(x), x).square()
        se = float(d2.std()) / math.sqrt(draws)
        assert abs(float(d2.mean()) - n * std**2) < 5 * se, (float(d2.mean()), n * std**2, se)


def test_solver_aux_integrals_use_the_rules_weights():
    # int_0^1 t^3 dt = 1/4: RK4's Simpson weights integrate a cubic in t exactly, the midpoint rule a linear one
    m = Sphere(2)
    x0 = m.random_base(3, generator=torch.Generator().manual_seed(0), dtype=D)

    for method, power, exact in (("rk4", 3, 0.25), ("midpoint", 1, 0.5)):

        def f(x, t, power=power):
            return torch.zeros_like(x), (t**power).expand(x.shape[0])

        sol = solve_manifold_ode(m, f, x0, steps=2, method=method, with_aux=True)
        torch.testing.assert_close(sol.aux, torch.full((3,), exact, dtype=D), rtol=1e-12, atol=1e-14)


def test_hutchinson_with_basis_probes_equals_the_exact_divergence():
    # probes sqrt(D) e_j, j = 1..D: the mean of z^T J P z is tr(J P) exactly; the normal direction of the sphere
    # carries derivatives of the tangent field that an unprojected probe would add
    m = Sphere(2)
    x = m.random_base(4, generator=torch.Generator().manual_seed(2), dtype=D)
    a = torch.tensor([[0.3, -1.2, 0.5], [0.7, 0.2, -0.4], [-0.6, 0.9, 1.1]], dtype=D)

    def field(y, t):
        return torch.sin(y @ a) + y.square()

    probes = (math.sqrt(3) * torch.eye(3, dtype=D))[:, None, :].expand(3, 4, 3)
    _, exact = riemannian_divergence(m, field, x, torch.tensor(0.5, dtype=D))
    _, hutch = riemannian_divergence(m, field, x, torch.tensor(0.5, dtype=D), estimator="hutchinson", probes=probes)
    torch.testing.assert_close(hutch, exact, rtol=1e-12, atol=1e-12)
