"""MMD between point sets on a manifold with a geodesic-distance kernel.

``k(x, y) = sum_h exp(-d(x, y)^2 / (2 h^2))`` with ``d`` the manifold's geodesic distance (Davis et al. 2025
report MMD with such kernels for their Generalised Flow Maps). A Gaussian of the geodesic distance is not
positive definite on every manifold for every bandwidth, so the estimate is a discrepancy, not always a
metric; with several bandwidths and fixed reference data it ranks samplers consistently. Computed in float64
block by block; the unbiased estimator (U-statistic) is used by default, as in :func:`gencore.metrics.mmd`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from gencore.checks import check_choice
from gencore.errors import InputError
from gencore.manifolds.base import Manifold

BANDWIDTH_MULTIPLIERS = (0.125, 0.25, 0.5, 1.0)


def _kernel_sum(manifold: Manifold, a: torch.Tensor, b: torch.Tensor, coef: torch.Tensor, exclude_diag: bool):
    total = torch.zeros((), dtype=torch.float64)
    block = max(1, 2_000_000 // max(1, b.shape[0]))
    for i in range(0, a.shape[0], block):
        d2 = manifold.pairwise_sq_dist(a[i : i + block], b)
        k = torch.exp(d2[..., None] * coef).sum(-1)
        if exclude_diag:
            rows = torch.arange(i, min(i + block, a.shape[0]))
            k[rows - i, rows] = 0
        total = total + k.sum()
    return total


def median_geodesic_distance(manifold: Manifold, x: torch.Tensor, max_points: int = 1024) -> float:
    """Median pairwise geodesic distance of ``x`` (an evenly strided subset above ``max_points``)."""
    if x.shape[0] > max_points:
        x = x[torch.linspace(0, x.shape[0] - 1, max_points).round().long()]
    d = manifold.pairwise_sq_dist(x.double(), x.double()).clamp_min(0).sqrt()
    iu = torch.triu_indices(x.shape[0], x.shape[0], offset=1)
    return float(d[iu[0], iu[1]].median())


def geodesic_mmd(
    manifold: Manifold,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    bandwidths: Sequence[float] | None = None,
    estimator: str = "unbiased",
) -> float:
    """Squared MMD between ``x: [N, D]`` and ``y: [M, D]`` with the geodesic Gaussian kernel.

    ``bandwidths``: geodesic lengths ``h``; default ``BANDWIDTH_MULTIPLIERS`` times the median pairwise
    geodesic distance of ``y`` (pass the reference data as ``y`` so every sampler is scored alike).
    """
    check_choice(estimator, ("unbiased", "biased"), "MMD estimator")
    n, m = x.shape[0], y.shape[0]
    if min(n, m) < 2:
        raise InputError(f"MMD needs at least 2 points in each set, got {n} and {m}.")
    if not (torch.isfinite(x).all() and torch.isfinite(y).all()):
        raise InputError("MMD inputs contain NaN or inf.")
    x, y = x.detach().double().cpu(), y.detach().double().cpu()
    if bandwidths:
        hs = [float(h) for h in bandwidths]
        if not all(0 < h < math.inf for h in hs):
            raise InputError(f"MMD bandwidths must be positive finite geodesic lengths, got {list(bandwidths)}.")
    else:
        med = median_geodesic_distance(manifold, y)
        hs = [c * (med if med > 0 else 1.0) for c in BANDWIDTH_MULTIPLIERS]  # identical points: unit lengths
    coef = torch.tensor([-0.5 / h**2 for h in hs], dtype=torch.float64)
    ub = estimator == "unbiased"
    kxx = _kernel_sum(manifold, x, x, coef, ub) / (n * (n - 1) if ub else n * n)
    kyy = _kernel_sum(manifold, y, y, coef, ub) / (m * (m - 1) if ub else m * m)
    kxy = _kernel_sum(manifold, x, y, coef, False) / (n * m)
    return float(kxx + kyy - 2 * kxy)
