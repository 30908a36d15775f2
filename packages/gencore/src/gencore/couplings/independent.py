"""Independent pairing: the coupling of plain conditional flow matching
(Lipman et al. 2023, "Flow Matching for Generative Modeling")."""

from __future__ import annotations

import torch

from gencore.couplings.base import check_batch_pair
from gencore.rng import draw_device


class IndependentCoupling:
    """Pair ``x0[i]`` with ``x1[i]`` (the product coupling ``q(x0) q(x1)``).

    A batch of i.i.d. noise and i.i.d. data is already a sample of the product
    coupling, so the identity pairing is exact. ``shuffle=True`` permutes ``x1``
    with ``generator`` instead (useful when the data batch is not i.i.d., e.g.
    sorted by class).

    Example::

        x0, x1 = IndependentCoupling()(torch.randn(8, 2), data_batch)
    """

    def __init__(self, *, shuffle: bool = False) -> None:
        self.shuffle = bool(shuffle)

    def __call__(
        self, x0: torch.Tensor, x1: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x0: [B, ...]``, ``x1: [B, ...]`` -> ``(x0, x1)`` or ``(x0, x1[perm])``."""
        check_batch_pair(x0, x1)
        if not self.shuffle:
            return x0, x1
        perm = torch.randperm(x1.shape[0], generator=generator, device=draw_device(generator))
        perm = perm.to(x1.device)
        return x0, x1[perm]

    def __repr__(self) -> str:
        return f"IndependentCoupling(shuffle={self.shuffle})"
