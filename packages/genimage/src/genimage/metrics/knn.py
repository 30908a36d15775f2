"""k-NN precision and recall of generated samples (Kynkaanniemi et al. 2019, "Improved Precision and
Recall Metric for Assessing Generative Models").

Each set's manifold is the union of balls around its points with radius the distance to the point's
``k``-th nearest neighbour within the same set (the point itself excluded). Precision is the fraction
of generated points inside the real manifold; recall the fraction of real points inside the generated
manifold. Distances are Euclidean on features, computed block-wise.
"""

from __future__ import annotations

import torch

from gencore.checks import check_int
from gencore.errors import InputError


def _kth_radius(x: torch.Tensor, k: int, block: int) -> torch.Tensor:
    out = []
    for chunk in x.split(block):
        d = torch.cdist(chunk, x)
        out.append(d.kthvalue(k + 1, dim=1).values)  # the 0 distance to itself is the first
    return torch.cat(out)


def _covered(queries: torch.Tensor, points: torch.Tensor, radii: torch.Tensor, block: int) -> torch.Tensor:
    hits = []
    for chunk in queries.split(block):
        hits.append((torch.cdist(chunk, points) <= radii[None]).any(dim=1))
    return torch.cat(hits)


def knn_precision_recall(real: torch.Tensor, fake: torch.Tensor, k: int = 3, block: int = 1024) -> dict[str, float]:
    """``{"precision_knn": ..., "recall_knn": ...}`` for feature sets ``real: [N, D]``, ``fake: [M, D]``.

    ``k >= 1`` neighbours; ``block >= 1`` rows of distances at a time.
    """
    k = check_int(k, "k-NN precision/recall k", low=1)
    block = check_int(block, "k-NN precision/recall block", low=1)
    if real.dim() != 2 or fake.dim() != 2 or real.shape[1] != fake.shape[1]:
        raise InputError(f"feature sets must be [N, D] with equal D, got {tuple(real.shape)} and {tuple(fake.shape)}.")
    if min(real.shape[0], fake.shape[0]) <= k:
        raise InputError(f"k-NN precision/recall needs more than k = {k} samples in each set.")
    if not (bool(torch.isfinite(real).all()) and bool(torch.isfinite(fake).all())):
        raise InputError("k-NN precision/recall needs finite features; got NaN or infinite values.")
    r, f = real.double(), fake.double()
    precision = _covered(f, r, _kth_radius(r, k, block), block).double().mean()
    recall = _covered(r, f, _kth_radius(f, k, block), block).double().mean()
    return {"precision_knn": float(precision), "recall_knn": float(recall)}
