"""Kernel and energy discrepancies between point sets: MMD with multi-bandwidth RBF
kernels, and the energy distance.

MMD (Gretton, Borgwardt, Rasch, Schoelkopf & Smola, "A kernel two-sample test",
JMLR 2012). With ``k(a, b) = sum_h exp(-|a - b|^2 / (2 h^2))`` over bandwidths ``h``,

    MMD^2 = E k(X, X') + E k(Y, Y') - 2 E k(X, Y).

The unbiased U-statistic (Gretton et al., Lemma 6) drops the ``i == j`` terms:

    MMD^2_u = 1/(N(N-1)) sum_{i!=j} k(x_i, x_j) + 1/(M(M-1)) sum_{i!=j} k(y_i, y_j)
              - 2/(NM) sum_{i,j} k(x_i, y_j)        (can be slightly negative),

and the biased V-statistic keeps them (``1/N^2`` and ``1/M^2``; always ``>= 0``; it is
the squared RKHS distance between the two empirical mean embeddings).

Energy distance (Szekely & Rizzo, "Energy statistics: A class of statistics based on
distances", J. Stat. Plann. Inference 2013):

    E(X, Y) = 2 E|X - Y| - E|X - X'| - E|Y - Y'|,

evaluated between the two empirical measures (V-statistic, all pairs including
``i == j``), so it is ``>= 0`` and zero iff the sets are equal as measures. This is the
*squared* form: ``scipy.stats.energy_distance`` (1-D) returns its square root.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.errors import InputError
from gencore.metrics._pairwise import as_point_pair, distances, pairwise_sum

MMD_ESTIMATORS = ("unbiased", "biased")
DEFAULT_BANDWIDTH_MULTIPLIERS = (0.25, 0.5, 1.0, 2.0, 4.0)
_MEDIAN_MAX_POINTS = 1024


@dataclass(frozen=True)
class MMDResult:
    """A squared-MMD estimate and the exact variant that produced it.

    Attributes:
        value: the estimate of ``MMD^2`` (unbiased estimates may be slightly negative).
        estimator: ``"unbiased"`` (U-statistic) or ``"biased"`` (V-statistic).
        bandwidths: the RBF bandwidths ``h`` summed in the kernel.
        n_x, n_y: the two sample sizes.
    """

    value: float
    estimator: str
    bandwidths: tuple[float, ...]
    n_x: int
    n_y: int

    @property
    def key(self) -> str:
        """The metric name to report, e.g. ``"mmd2_rbf_unbiased"``."""
        return f"mmd2_rbf_{self.estimator}"

    def as_dict(self) -> dict[str, float]:
        """``{key: value}``, ready to merge into a metrics record."""
        return {self.key: self.value}

    def __float__(self) -> float:
        return self.value


def median_pairwise_distance(x: torch.Tensor, y: torch.Tensor | None = None) -> float:
    """Median Euclidean distance over distinct pairs of the pooled points ``cat(x, y)``.

    The lower median when the number of pairs is even (no averaging). Deterministic: above 1024
    pooled points an evenly strided subset of 1024 is used.
    ``x: [N, D]``, ``y: [M, D]`` or None.
    """
    xd, yd = as_point_pair(x, x if y is None else y)
    z = xd if y is None else torch.cat([xd, yd])
    if z.shape[0] < 2:
        raise InputError("the median heuristic needs at least two points in total.")
    if z.shape[0] > _MEDIAN_MAX_POINTS:
        # float64 positions: float32 rounds them wrongly above ~1e5 points and past the end at 2**25.
        idx = torch.linspace(0, z.shape[0] - 1, _MEDIAN_MAX_POINTS, dtype=torch.float64, device=z.device)
        idx = idx.round().long()
        z = z[idx]
    d = distances(z, z)
    iu = torch.triu_indices(z.shape[0], z.shape[0], offset=1, device=z.device)
    return float(d[iu[0], iu[1]].median())


def _positive_floats(values: Sequence[float], name: str) -> tuple[float, ...]:
    """``values`` as a non-empty tuple of positive finite floats, else one :class:`InputError` naming ``name``."""
    try:  # a string iterates into characters: "12" would silently become (1.0, 2.0)
        out = () if isinstance(values, (str, bytes)) else tuple(float(v) for v in values)
    except (TypeError, ValueError):
        out = ()
    if not out or not all(0 < v < math.inf for v in out):
        raise InputError(f"{name} must be a non-empty sequence of positive finite numbers, got {values!r}.")
    return out


def _rbf_sum(bandwidths: torch.Tensor):
    """``d -> sum_h exp(-d^2 / (2 h^2))`` applied elementwise to a block of distances."""
    coef = -0.5 / bandwidths.square()

    def fn(d: torch.Tensor) -> torch.Tensor:
        sq = d.square()
        out = torch.exp(sq * coef[0])
        for c in coef[1:]:
            out += torch.exp(sq * c)
        return out

    return fn


def mmd(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    bandwidths: Sequence[float] | None = None,
    bandwidth_multipliers: Sequence[float] = DEFAULT_BANDWIDTH_MULTIPLIERS,
    estimator: str = "unbiased",
    block_rows: int | None = None,
) -> MMDResult:
    """Squared maximum mean discrepancy with a sum of RBF kernels.

    Args:
        x: ``[N, D]`` points; ``y``: ``[M, D]`` points (sizes may differ; the unbiased
            estimator needs ``N, M >= 2``).
        bandwidths: explicit RBF bandwidths ``h > 0``. When None, ``h = c * median`` for
            each ``c`` in ``bandwidth_multipliers``, with ``median`` the median pairwise
            distance of the pooled sample (:func:`median_pairwise_distance`; 1.0 if it is 0).
        bandwidth_multipliers: multipliers of the median heuristic (default 0.25 .. 4).
        estimator: ``"unbiased"`` (U-statistic) or ``"biased"`` (V-statistic).
        block_rows: rows per block of the pairwise computation (None: automatic, ~4M
            kernel entries per block). Any value gives the same result up to rounding.

    Returns:
        :class:`MMDResult` whose ``key`` names the variant, e.g. ``"mmd2_rbf_unbiased"``.
    """
    check_choice(estimator, MMD_ESTIMATORS, "MMD estimator")
    xd, yd = as_point_pair(x, y)
    n, m = xd.shape[0], yd.shape[0]
    if estimator == "unbiased" and min(n, m) < 2:
        raise InputError(f"the unbiased MMD needs at least 2 points in each set, got {n} and {m}.")
    if bandwidths is None:
        mults = _positive_floats(bandwidth_multipliers, "bandwidth_multipliers")
        med = median_pairwise_distance(xd, yd)
        med = med if med > 0 else 1.0
        hs = tuple(c * med for c in mults)
    else:
        hs = _positive_floats(bandwidths, "bandwidths")
    fn = _rbf_sum(torch.tensor(hs, dtype=torch.float64, device=xd.device))
    unbiased = estimator == "unbiased"
    kxx = pairwise_sum(xd, xd, fn, exclude_diagonal=unbiased, block_rows=block_rows)
    kyy = pairwise_sum(yd, yd, fn, exclude_diagonal=unbiased, block_rows=block_rows)
    kxy = pairwise_sum(xd, yd, fn, block_rows=block_rows)
    if unbiased:
        value = kxx / (n * (n - 1)) + kyy / (m * (m - 1)) - 2.0 * kxy / (n * m)
    else:
        value = kxx / n**2 + kyy / m**2 - 2.0 * kxy / (n * m)
    return MMDResult(value=float(value), estimator=estimator, bandwidths=hs, n_x=n, n_y=m)


def energy_distance(x: torch.Tensor, y: torch.Tensor, *, block_rows: int | None = None) -> float:
    """Energy distance ``2 E|X - Y| - E|X - X'| - E|Y - Y'|`` between two empirical measures.

    ``x: [N, D]``, ``y: [M, D]`` (sizes may differ). All pairs are averaged, including
    ``i == j`` (V-statistic), so the value is ``>= 0`` (tiny negative rounding is clipped
    to 0) and exactly 0 for identical sets. For point masses at ``a`` and ``b`` it is
    ``2 |a - b|``. ``block_rows`` controls chunking as in :func:`mmd`.
    """
    xd, yd = as_point_pair(x, y)
    n, m = xd.shape[0], yd.shape[0]

    def ident(d: torch.Tensor) -> torch.Tensor:
        return d

    dxy = pairwise_sum(xd, yd, ident, block_rows=block_rows) / (n * m)
    dxx = pairwise_sum(xd, xd, ident, block_rows=block_rows) / n**2
    dyy = pairwise_sum(yd, yd, ident, block_rows=block_rows) / m**2
    return max(float(2.0 * dxy - dxx - dyy), 0.0)
