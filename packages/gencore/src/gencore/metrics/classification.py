"""Scores of a detector: how well a scalar score separates positives from negatives.

- :func:`roc_auc`: area under the ROC curve by the Mann-Whitney statistic,
  ``P(score_pos > score_neg) + P(score_pos = score_neg) / 2``, computed from ranks in ``O(N log N)``.

Used wherever a package reports a detection AUROC (watermark detection, memorisation and event-boundary
detection), so that every table computes it the same way.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from gencore.errors import InputError

__all__ = ["roc_auc"]


def roc_auc(pos: torch.Tensor, neg: torch.Tensor) -> float:
    """ROC AUC of scores (larger = positive): ``pos`` holds the positives' scores, ``neg`` the negatives'.

    Ties between a positive and a negative count one half, as in the trapezoidal ROC curve. Both sets are
    flattened; each needs at least one score, and every score must be finite (as scikit-learn requires).
    """
    for name, scores in (("pos", pos), ("neg", neg)):
        if not torch.is_tensor(scores):
            raise InputError(f"roc_auc: {name} must be a torch.Tensor of scores, got {type(scores).__name__}.")
    p = pos.detach().double().flatten().cpu().numpy()
    n = neg.detach().double().flatten().cpu().numpy()
    if p.size == 0 or n.size == 0:
        raise InputError(f"roc_auc needs at least one positive and one negative score (got {p.size} and {n.size}).")
    if not (np.isfinite(p).all() and np.isfinite(n).all()):
        raise InputError("roc_auc needs finite scores (got NaN or infinity).")
    ranks = stats.rankdata(np.concatenate([p, n]))
    return float((ranks[: p.size].sum() - p.size * (p.size + 1) / 2) / (p.size * n.size))
