"""Rank batches: the in-memory fast path yields exactly what the DataLoader path yields."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset

from gencore.train.data import DataPosition, RankBatches


class _Rows(Dataset):
    """The same rows behind a plain map-style dataset (forces the DataLoader path)."""

    def __init__(self, ds: TensorDataset) -> None:
        self.ds = ds

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int):
        return self.ds[i]


def test_tensor_fast_path_matches_dataloader_across_epochs_and_resume() -> None:
    ds = TensorDataset(torch.randn(103, 3), torch.arange(103))
    for pos in (None, DataPosition(epoch=2, micro=3)):
        fast = RankBatches(ds, micro_batch_size=8, rank=1, world_size=2, seed=3, position=pos)
        slow = RankBatches(_Rows(ds), micro_batch_size=8, rank=1, world_size=2, seed=3, position=pos)
        for _ in range(20):  # 6 micro-batches per epoch: crosses several epochs
            a, b = next(fast), next(slow)
            assert all(torch.equal(u, v) for u, v in zip(a, b))
            assert fast.position == slow.position
