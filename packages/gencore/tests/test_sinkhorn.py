"""gencore.couplings.sinkhorn: checked against POT (numpy, float64) and against its own invariants."""

from __future__ import annotations

import numpy as np
import ot
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gencore.couplings import sinkhorn
from gencore.errors import ConfigError, ConvergenceError, InputError


def _clouds(seed: int, n: int, m: int, d: int = 2, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype)
    y = torch.randn(m, d, generator=g, dtype=dtype) * 1.5 + 1.0
    return x, y


def _cost(x, y):
    return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


def _centered(f, g):
    """Potentials are unique up to (f + c, g - c): fix c by centring f."""
    c = f.mean(-1, keepdim=True)
    return f - c, g + c


@pytest.mark.parametrize("method", ["absorb", "lse"])
def test_plan_matches_pot_sinkhorn(method):
    x, y = _clouds(0, 12, 9)
    c = _cost(x, y)
    g = torch.Generator().manual_seed(1)
    a = torch.rand(12, generator=g, dtype=torch.float64) + 0.2
    b = torch.rand(9, generator=g, dtype=torch.float64) + 0.2
    a, b = a / a.sum(), b / b.sum()
    eps = 0.3
    res = sinkhorn(a, b, c, eps, tol=1e-13, method=method, return_plan=True)
    plan, log = ot.sinkhorn(a.numpy(), b.numpy(), c.numpy(), eps, stopThr=1e-15, numItermax=100_000, log=True)
    assert res.converged
    np.testing.assert_allclose(res.plan.numpy(), plan, atol=1e-12, rtol=1e-9)
    # POT: P = diag(u) exp(-C / eps) diag(v); ours: P = a b^T exp((f + g - C) / eps)
    f_pot = eps * np.log(log["u"] / a.numpy())
    g_pot = eps * np.log(log["v"] / b.numpy())
    shift = f_pot - res.f.numpy()
    np.testing.assert_allclose(shift, shift.mean(), atol=1e-9)
    np.testing.assert_allclose(g_pot - res.g.numpy(), -shift.mean(), atol=1e-9)


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(1, 30),
    m=st.integers(1, 30),
    rel_eps=st.sampled_from([1.0, 0.3, 0.1]),
    seed=st.integers(0, 10_000),
    method=st.sampled_from(["absorb", "lse"]),
)
def test_marginals_within_tolerance(n, m, rel_eps, seed, method):
    """epsilon relative to the largest cost: smaller ratios admit instances on which Sinkhorn itself
    (ours and POT's alike) needs > 1e5 iterations (e.g. a 3 x 3 problem at 0.03 max C)."""
    x, y = _clouds(seed, n, m)
    c = _cost(x, y)
    tol = 1e-9
    res = sinkhorn(cost=c, epsilon=rel_eps * float(c.max()) + 1e-3, tol=tol, method=method, return_plan=True)
    assert res.converged and float(res.marginal_error) < tol
    p = res.plan
    assert torch.isfinite(p).all() and (p >= 0).all()
    np.testing.assert_allclose(p.sum(1).numpy(), np.full(n, 1 / n), atol=1e-12)
    assert float((p.sum(0) - 1 / m).abs().sum()) < tol
    # the reported error is the true column error of the returned potentials
    np.testing.assert_allclose(float((p.sum(0) - 1 / m).abs().sum()), float(res.marginal_error), rtol=1e-4, atol=1e-13)


def test_batched_equals_per_problem_runs():
    xs, ys = zip(*[_clouds(s, 10, 7) for s in range(4)], strict=True)
    c = torch.stack([_cost(x, y) for x, y in zip(xs, ys, strict=True)]).reshape(2, 2, 10, 7)
    w = torch.rand(2, 2, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) + 0.1
    res = sinkhorn(w, None, c, 0.2, tol=1e-12, return_plan=True)
    assert res.f.shape == (2, 2, 10) and res.g.shape == (2, 2, 7) and res.marginal_error.shape == (2, 2)
    for i in range(2):
        for j in range(2):
            single = sinkhorn(w[i, j], None, c[i, j], 0.2, tol=1e-12, return_plan=True)
            torch.testing.assert_close(res.plan[i, j], single.plan, atol=1e-11, rtol=0)
            f0, g0 = _centered(res.f[i, j], res.g[i, j])
            f1, g1 = _centered(single.f, single.g)
            torch.testing.assert_close(f0, f1, atol=1e-8, rtol=0)
            torch.testing.assert_close(g0, g1, atol=1e-8, rtol=0)


def test_batched_points_and_low_memory_batch():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 20, 4, generator=g, dtype=torch.float64)
    y = torch.randn(3, 15, 4, generator=g, dtype=torch.float64)
    dense = sinkhorn(x=x, y=y, epsilon=0.5, tol=1e-11)
    low = sinkhorn(x=x, y=y, epsilon=0.5, tol=1e-11, low_memory=True, chunk_elements=7)
    for r in (dense, low):
        assert r.converged and r.f.shape == (3, 20)
    f0, g0 = _centered(dense.f, dense.g)
    f1, g1 = _centered(low.f, low.g)
    torch.testing.assert_close(f0, f1, atol=1e-8, rtol=0)
    torch.testing.assert_close(g0, g1, atol=1e-8, rtol=0)


@pytest.mark.parametrize("chunk", [1, 50, 10_000])
def test_low_memory_gives_dense_potentials(chunk):
    x, y = _clouds(7, 21, 17, d=3)
    dense = sinkhorn(x=x, y=y, epsilon=0.3, tol=1e-11, method="absorb")
    low = sinkhorn(x=x, y=y, epsilon=0.3, tol=1e-11, low_memory=True, chunk_elements=chunk)
    assert low.converged and low.plan is None
    f0, g0 = _centered(dense.f, dense.g)
    f1, g1 = _centered(low.f, low.g)
    torch.testing.assert_close(f0, f1, atol=1e-8, rtol=0)
    torch.testing.assert_close(g0, g1, atol=1e-8, rtol=0)


@pytest.mark.parametrize("method", ["absorb", "lse"])
def test_eps_scaling_converges_to_same_answer(method):
    x, y = _clouds(11, 30, 30)
    c = _cost(x, y)
    eps = 0.02 * float(c.mean())
    annealed = sinkhorn(cost=c, epsilon=eps, tol=1e-11, method=method, return_plan=True, eps_scaling=0.5)
    plain = sinkhorn(cost=c, epsilon=eps, tol=1e-11, method=method, return_plan=True, eps_scaling=None)
    assert annealed.converged and plain.converged
    torch.testing.assert_close(annealed.plan, plain.plan, atol=1e-9, rtol=0)
    assert annealed.n_iters < plain.n_iters  # the point of annealing at small epsilon


def test_small_epsilon_float32_is_finite_and_close_to_exact_ot():
    """eps = 1e-3 x mean cost underflows exp(-C/eps) everywhere; the stabilised solver must not."""
    x, y = _clouds(2, 64, 64, dtype=torch.float32)
    c = _cost(x, y)
    res = sinkhorn(cost=c, epsilon=1e-3 * float(c.mean()), tol=1e-4, return_plan=True)
    assert res.converged and torch.isfinite(res.f).all() and torch.isfinite(res.plan).all()
    exact = ot.emd2(np.full(64, 1 / 64), np.full(64, 1 / 64), c.double().numpy())
    entropic_cost = float((res.plan.double() * c.double()).sum())
    assert abs(entropic_cost - exact) < 0.02 * exact


@pytest.mark.parametrize("dtype, rel_eps", [(torch.float32, 1e-3), (torch.float64, 3e-5)])
def test_absorb_without_annealing_reports_the_true_error_of_its_plan(dtype, rel_eps):
    # far from a small epsilon's solution the scalings drift between absorptions, and the floored kernel entries
    # times those scalings carried false mass: "converged" with half the mass misplaced, unless convergence is
    # only accepted on a freshly absorbed kernel (and the budget's last error is measured exactly)
    g = torch.Generator().manual_seed(1)
    for _ in range(12):
        n, m = (int(v) for v in torch.randint(2, 40, (2,), generator=g))
        x = torch.randn(n, 3, generator=g, dtype=dtype) * (1 + 29 * torch.rand((), generator=g, dtype=dtype))
        y = torch.randn(m, 3, generator=g, dtype=dtype) * (1 + 29 * torch.rand((), generator=g, dtype=dtype)) + 2
        c = _cost(x, y)
        for check_every in (1, 10, 100):
            res = sinkhorn(
                cost=c,
                epsilon=rel_eps * float(c.mean()),
                tol=1e-3,
                max_iters=3000,
                return_plan=True,
                eps_scaling=None,
                check_every=check_every,
            )
            plan = res.plan.double()
            true_col = float((plan.sum(0) - 1 / m).abs().sum())
            true_row = float((plan.sum(1) - 1 / n).abs().sum())
            assert true_row < 1e-3 and true_col == pytest.approx(float(res.marginal_error), rel=0.05, abs=1e-4)


@pytest.mark.parametrize("low_memory", [False, True])
def test_float32_point_clouds_far_from_the_origin_keep_their_cost(low_memory):
    """The cost of point clouds is expanded as |x|^2 + |y|^2 - 2 <x, y>: at offset 1000 in float32 that is
    ~2e6 with a rounding step of 0.25, for costs of a few units. The translation-invariant cost must not care:
    uncentred, the dense plan had 12 % of its mass misplaced and the low-memory run did not converge."""
    x, y = _clouds(4, 48, 40)
    eps = 0.05 * float(_cost(x, y).mean())
    ref = sinkhorn(x=x, y=y, epsilon=eps, tol=1e-12, return_plan=True)
    far = sinkhorn(
        x=(x + 1e3).float(),
        y=(y + 1e3).float(),
        epsilon=eps,
        tol=1e-5,
        low_memory=low_memory,
        return_plan=not low_memory,
    )
    assert far.converged
    f0, g0 = _centered(ref.f, ref.g)
    f1, g1 = _centered(far.f.double(), far.g.double())
    torch.testing.assert_close(f1, f0, atol=2e-3, rtol=0)
    torch.testing.assert_close(g1, g0, atol=2e-3, rtol=0)
    if not low_memory:
        assert float((far.plan.double() - ref.plan).abs().sum()) < 1e-3


def test_float32_medium_problem_meets_tolerance():
    x, y = _clouds(3, 512, 384, d=8, dtype=torch.float32)
    res = sinkhorn(x=x, y=y, epsilon=0.05 * 2 * 8, tol=1e-4, return_plan=True)
    assert res.converged and res.f.dtype == torch.float32
    err = float((res.plan.double().sum(0) - 1 / 384).abs().sum())
    assert err < 1e-4 + 1e-5  # true error of the returned plan, float32 rounding included
    assert res.error_history and res.error_history[-1] == pytest.approx(float(res.marginal_error))


def test_errors_and_strict_mode():
    x, y = _clouds(0, 5, 4)
    c = _cost(x, y)
    with pytest.raises(InputError):
        sinkhorn(cost=c, x=x, y=y)
    with pytest.raises(InputError):
        sinkhorn(torch.ones(3, dtype=torch.float64), None, c)
    with pytest.raises(InputError):
        sinkhorn(torch.tensor([1.0, 0, 1, 1, 1], dtype=torch.float64), None, c)
    with pytest.raises(InputError):
        sinkhorn(cost=torch.full((3, 3), float("nan")))
    with pytest.raises(ConfigError):
        sinkhorn(cost=c, epsilon=0.0)
    with pytest.raises(ConfigError):
        sinkhorn(cost=c, method="greenkhorn")
    with pytest.raises(ConfigError):
        sinkhorn(cost=c, low_memory=True)
    with pytest.raises(ConvergenceError):
        sinkhorn(cost=c, epsilon=0.01, tol=1e-14, max_iters=3, strict=True, eps_scaling=None)
    res = sinkhorn(cost=c, epsilon=0.01, tol=1e-14, max_iters=3, eps_scaling=None)
    assert not res.converged and res.n_iters == 3


@pytest.mark.parametrize("kwargs", [{"eps_start": float("nan")}, {"eps_start": float("inf")}, {"eps_start": -1.0}])
def test_eps_start_must_be_a_positive_number(kwargs):
    # NaN and inf escaped as ValueError / OverflowError from the annealing schedule, -1 silently disabled annealing
    x, y = _clouds(0, 5, 4)
    with pytest.raises(ConfigError, match="eps_start"):
        sinkhorn(x=x, y=y, epsilon=0.1, **kwargs)


@pytest.mark.parametrize("threshold", [0.0, -1.0, float("nan")])
def test_absorb_threshold_must_be_a_positive_number(threshold):
    # a threshold <= 0 re-absorbed the kernel at every check and never accepted convergence: a problem that
    # converges in 80 iterations ran all max_iters (3000, with 300 absorptions)
    x, y = _clouds(0, 8, 8, d=3)
    assert sinkhorn(x=x, y=y, epsilon=1.0, max_iters=3000).n_iters < 3000
    with pytest.raises(ConfigError, match="absorb_threshold"):
        sinkhorn(x=x, y=y, epsilon=1.0, max_iters=3000, absorb_threshold=threshold)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cpu_weights_with_a_cuda_cost():
    x, y = _clouds(0, 6, 5)
    c = _cost(x, y)
    a = torch.rand(6, dtype=torch.float64) + 0.1
    res = sinkhorn(a, None, c.to("cuda"), 0.5, tol=1e-10, return_plan=True)
    ref = sinkhorn(a, None, c, 0.5, tol=1e-10, return_plan=True)
    torch.testing.assert_close(res.plan.cpu(), ref.plan)
