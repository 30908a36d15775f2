"""Optimal-transport distances between point sets: exact and sliced 2-Wasserstein.

For empirical measures with uniform weights, ``mu = 1/N sum_i delta(x_i)`` and
``nu = 1/M sum_j delta(y_j)``,

    W2(mu, nu)^2 = min_{P in U(mu, nu)} sum_ij P_ij |x_i - y_j|^2.

When ``N == M`` the optimum is attained at a permutation (Birkhoff-von Neumann), so
``W2^2 = min_sigma 1/N sum_i |x_i - y_sigma(i)|^2``, solved exactly here as a linear
assignment problem (:func:`gencore.couplings.assignment.optimal_assignment`).

The sliced 2-Wasserstein distance (Rabin, Peyre, Delon & Bernot, "Wasserstein
barycenter and its application to texture mixing", SSVM 2011; Bonneel, Rabin,
Peyre & Pfister, "Sliced and Radon Wasserstein barycenters of measures", JMIV 2015)
averages 1-D distances of projections onto random unit directions ``theta``:

    SW2(mu, nu)^2 = E_{theta ~ U(S^{D-1})} W2(theta#mu, theta#nu)^2,

and in 1-D ``W2^2 = int_0^1 (F^{-1}(u) - G^{-1}(u))^2 du`` is computed exactly from
sorted samples. Because each projection is 1-Lipschitz, ``SW2 <= W2`` always; for a
translation ``y = x + s`` every projection is shifted by ``<theta, s>``, so
``SW2^2 = E <theta, s>^2 = |s|^2 / D`` in expectation over directions.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from gencore.checks import check_int
from gencore.couplings.assignment import optimal_assignment
from gencore.errors import InputError
from gencore.metrics._pairwise import _BLOCK_ELEMENTS, as_point_pair, distances
from gencore.rng import draw_device

W2_MAX_POINTS = 8192  # exact W2's default limit: an [N, N] cost matrix and O(N^3) time


def wasserstein2(x: torch.Tensor, y: torch.Tensor, *, max_points: int = W2_MAX_POINTS) -> float:
    """Exact 2-Wasserstein distance between two equal-size point sets with uniform weights.

    Args:
        x: ``[N, D]`` points.
        y: ``[N, D]`` points (same ``N``; use :func:`sliced_wasserstein` or subsample otherwise).
        max_points: refuse ``N`` above this, since the full ``[N, N]`` cost matrix is held
            (``N = 8192`` is 64M float64 entries) and the assignment costs ``O(N^3)`` time.

    Returns:
        ``W2 = sqrt(mean_i |x_i - y_sigma*(i)|^2)`` for the optimal permutation ``sigma*``.

    Example:
        >>> x = torch.randn(100, 2)
        >>> abs(wasserstein2(x, x + torch.tensor([3.0, 4.0])) - 5.0) < 1e-6
        True
    """
    xd, yd = as_point_pair(x, y)
    if xd.shape[0] != yd.shape[0]:
        raise InputError(
            f"exact W2 needs equal-size sets, got x with {xd.shape[0]} and y with {yd.shape[0]} points; "
            "subsample one of them or use sliced_wasserstein."
        )
    max_points = check_int(max_points, "max_points", low=1, error=InputError)
    if xd.shape[0] > max_points:
        raise InputError(
            f"exact W2 on {xd.shape[0]} points exceeds max_points={max_points} (an N x N cost matrix and "
            "O(N^3) time); subsample, raise max_points, or use sliced_wasserstein."
        )
    cost = distances(xd, yd).square_().cpu().numpy()
    sigma = optimal_assignment(cost)
    return math.sqrt(max(float(np.mean(cost[np.arange(len(sigma)), sigma])), 0.0))


def _random_directions(n: int, dim: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """``n`` directions uniform on the sphere ``S^{dim-1}`` (normalised Gaussians): ``[n, dim]``."""
    g = torch.randn(n, dim, generator=generator, dtype=torch.float64, device=draw_device(generator))
    return (g / g.norm(dim=1, keepdim=True)).to(device)


def _quantile_matching_cost(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Exact 1-D ``W2^2`` between empirical measures from sorted samples ``xs: [N, P]``, ``ys: [M, P]``.

    The quantile functions are step functions with jumps at ``i/N`` and ``j/M``. Writing
    all breakpoints as integers over ``L = N M`` (``i M`` and ``j N``) makes their union
    exact; on the interval ending at ``k/L`` the quantile indices are ``ceil(k/M) - 1`` and
    ``ceil(k/N) - 1``. Returns ``[P]``.
    """
    n, m = xs.shape[0], ys.shape[0]
    if n == m:
        return (xs - ys).square().mean(dim=0)
    dev = xs.device
    knots = torch.unique(
        torch.cat([torch.arange(1, n + 1, device=dev) * m, torch.arange(1, m + 1, device=dev) * n])
    )  # sorted int64, ends at n*m
    weights = torch.diff(knots, prepend=knots.new_zeros(1)).to(torch.float64) / (n * m)
    ix = (knots + m - 1) // m - 1
    iy = (knots + n - 1) // n - 1
    return (weights[:, None] * (xs[ix] - ys[iy]).square()).sum(dim=0)


def sliced_wasserstein(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    n_projections: int = 128,
    generator: torch.Generator | None = None,
    projections: torch.Tensor | None = None,
) -> float:
    """Sliced 2-Wasserstein distance ``SW2 = sqrt(mean_theta W2(<theta, x>, <theta, y>)^2)``.

    Sizes may differ: each 1-D distance is the exact ``W2`` between the two empirical
    measures (uniform weights ``1/N`` and ``1/M``), computed by matching quantile
    functions, not by interpolating to a common grid. Projections are processed in
    groups so that no more than ~4M projected values are held at once.

    Args:
        x: ``[N, D]`` points.
        y: ``[M, D]`` points.
        n_projections: number of random directions, drawn uniformly on the sphere with
            ``generator`` (torch's global RNG when None). Ignored when ``projections`` is given.
        generator: a ``torch.Generator`` for the directions, for reproducible values.
        projections: explicit directions ``[P, D]``; rows are normalised to unit length.

    Returns:
        The Monte-Carlo estimate of ``SW2`` over the chosen directions (a float).
    """
    xd, yd = as_point_pair(x, y)
    dim = xd.shape[1]
    if projections is None:
        n_projections = check_int(n_projections, "n_projections", low=1, error=InputError)
        theta = _random_directions(n_projections, dim, generator, xd.device)
    else:
        if not torch.is_tensor(projections):
            raise InputError(
                f"projections must be a torch.Tensor of shape [P, {dim}], got {type(projections).__name__}."
            )
        if projections.dim() != 2 or projections.shape[1] != dim or projections.shape[0] < 1:
            raise InputError(f"projections must have shape [P, {dim}] with P >= 1, got {tuple(projections.shape)}.")
        theta = projections.detach().to(device=xd.device, dtype=torch.float64)
        norms = theta.norm(dim=1, keepdim=True)
        if not bool(torch.isfinite(theta).all()) or bool((norms == 0).any()):
            raise InputError("projections must be finite, non-zero direction vectors.")
        theta = theta / norms
    group = max(1, _BLOCK_ELEMENTS // max(xd.shape[0], yd.shape[0]))
    total = torch.zeros((), dtype=torch.float64, device=xd.device)
    for start in range(0, theta.shape[0], group):
        th = theta[start : start + group].T  # [D, p]
        xs = torch.sort(xd @ th, dim=0).values
        ys = torch.sort(yd @ th, dim=0).values
        total = total + _quantile_matching_cost(xs, ys).sum()
    return math.sqrt(max(float(total) / theta.shape[0], 0.0))
