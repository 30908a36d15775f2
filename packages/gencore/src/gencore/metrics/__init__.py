"""Distances and discrepancies between point sets ``x: [N, D]`` and ``y: [M, D]``, and detector scores.

Every metric is a pure function of torch tensors, validates its inputs with
:mod:`gencore.checks` (raising :class:`~gencore.errors.InputError`), computes in
float64, works block by block so that large ``N`` never materialises more than a few
million pairwise entries at once, and returns a float or a small result dataclass.

- :func:`wasserstein2`: exact W2 between equal-size sets (linear assignment).
- :func:`sliced_wasserstein`: sliced W2 over random directions (any sizes).
- :func:`mmd`: squared MMD, multi-bandwidth RBF kernel, unbiased or biased estimator.
- :func:`energy_distance`: Szekely-Rizzo energy distance.
- :func:`roc_auc`: ROC AUC of a scalar score (Mann-Whitney, ties count one half).
"""

from __future__ import annotations

from gencore.metrics.classification import roc_auc
from gencore.metrics.discrepancy import (
    DEFAULT_BANDWIDTH_MULTIPLIERS,
    MMD_ESTIMATORS,
    MMDResult,
    energy_distance,
    median_pairwise_distance,
    mmd,
)
from gencore.metrics.transport import sliced_wasserstein, wasserstein2

__all__ = [
    "DEFAULT_BANDWIDTH_MULTIPLIERS",
    "MMD_ESTIMATORS",
    "MMDResult",
    "energy_distance",
    "median_pairwise_distance",
    "mmd",
    "roc_auc",
    "sliced_wasserstein",
    "wasserstein2",
]
