"""Shared plumbing of the point-set metrics: input validation, float64 conversion
and blocked (chunked) reductions over pairwise Euclidean distances.

A reduction over all pairs ``(i, j)`` of ``a: [N, D]`` and ``b: [M, D]`` is done in
blocks of rows so that no more than ``_BLOCK_ELEMENTS`` distances (plus a few
same-sized temporaries) are held at once, whatever ``N`` and ``M`` are.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gencore.checks import check_int, check_points, check_same_dim
from gencore.errors import InputError

# At most this many pairwise distances per block (4M float64 = 32 MiB); with the
# temporaries of a multi-bandwidth kernel this stays far below ~64M elements.
_BLOCK_ELEMENTS = 1 << 22


def as_point_pair(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate two point sets ``x: [N, D]``, ``y: [M, D]`` and return them as float64 on ``x``'s device.

    Raises :class:`InputError` for non-tensors, wrong ndim, empty sets, NaN/inf or mismatched ``D``.
    """
    check_points(x, "x")
    check_points(y, "y")
    check_same_dim(x, y, "x", "y")
    return x.detach().to(torch.float64), y.detach().to(device=x.device, dtype=torch.float64)


def resolve_block_rows(n_cols: int, block_rows: int | None) -> int:
    """Rows per block: ``block_rows`` if given (must be >= 1), else as many as the element budget allows."""
    if block_rows is None:
        return max(1, _BLOCK_ELEMENTS // max(n_cols, 1))
    return check_int(block_rows, "block_rows", low=1, error=InputError)


def distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distances ``[n, m]`` computed from coordinate differences (no ``|a|^2 + |b|^2 - 2ab``
    cancellation, so identical points give exactly 0)."""
    return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")


def pairwise_sum(
    a: torch.Tensor,
    b: torch.Tensor,
    fn: Callable[[torch.Tensor], torch.Tensor],
    *,
    exclude_diagonal: bool = False,
    block_rows: int | None = None,
) -> torch.Tensor:
    """Return ``sum_{i, j} fn(|a_i - b_j|)`` as a float64 0-dim tensor, computed block by block.

    ``fn`` maps a block of distances ``[r, M]`` to values of the same shape. With
    ``exclude_diagonal`` (only meaningful when ``b`` is ``a``) the terms ``i == j`` are skipped.
    """
    n, m = a.shape[0], b.shape[0]
    rows = resolve_block_rows(m, block_rows)
    total = torch.zeros((), dtype=torch.float64, device=a.device)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        vals = fn(distances(a[start:stop], b))
        if exclude_diagonal:
            idx = torch.arange(start, min(stop, m), device=a.device)
            vals[idx - start, idx] = 0.0
        total = total + vals.sum()
    return total
