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


def test_epoch_indices_are_distributed_samplers() -> None:
    from torch.utils.data import DistributedSampler

    for n, world, micro in ((103, 1, 8), (103, 3, 5), (64, 4, 16)):
        ds = TensorDataset(torch.arange(n))
        for rank in range(world):
            batches = RankBatches(ds, micro_batch_size=micro, rank=rank, world_size=world, seed=11)
            for epoch in (0, 1, 5):
                sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=11, drop_last=True)
                sampler.set_epoch(epoch)
                expected = list(sampler)[: batches.per_epoch * micro]
                assert batches._epoch_indices(epoch).tolist() == expected


def test_ranks_get_disjoint_slices_that_cover_the_epoch_but_a_dropped_remainder() -> None:
    """drop_last semantics: per epoch each of W ranks takes floor(floor(n / W) / b) micro-batches of b samples, no
    sample twice; the n mod (W b) samples left out (fewer than one micro-batch per rank) change with the epoch."""
    n, world, micro = 103, 3, 5
    ds = TensorDataset(torch.arange(n))
    ranks = [RankBatches(ds, micro_batch_size=micro, rank=r, world_size=world, seed=7) for r in range(world)]
    per_epoch = (n // world) // micro
    dropped = []
    for epoch in range(3):
        seen = [torch.cat([next(b)[0] for _ in range(per_epoch)]) for b in ranks]
        assert all(b.position == DataPosition(epoch, per_epoch) for b in ranks)
        union = torch.cat(seen)
        assert union.unique().numel() == union.numel() == per_epoch * micro * world  # disjoint
        left = sorted(set(range(n)) - set(union.tolist()))
        assert len(left) == n % (world * micro) < world * micro
        dropped.append(left)
    assert dropped[0] != dropped[1] != dropped[2]


def test_with_accumulation_an_epoch_holds_whole_steps_and_no_step_repeats_a_sample() -> None:
    """drop_last for the global batch: with A micro-batches per step an epoch holds n // (W A b) steps. Before, an
    epoch of 10 micro-batches with A = 4 ended inside step 2, which then held 2 samples of epoch 0 that epoch 1
    gave it again (14 distinct samples of 16), and the data of a step depended on A."""
    n, world, micro, accum = 43, 2, 2, 4  # 10 micro-batches of 2 per rank: 2 whole steps of 4, 2 dropped
    ds = TensorDataset(torch.arange(n))
    ranks = [RankBatches(ds, micro_batch_size=micro, rank=r, world_size=world, seed=5, accum=accum) for r in range(2)]
    big = RankBatches(ds, micro_batch_size=world * micro * accum, rank=0, world_size=1, seed=5)  # the step's batch
    assert ranks[0].per_epoch == (n // (world * micro * accum)) * accum == 8
    for step in range(7):  # over three epochs
        rows = torch.cat([next(b)[0] for _ in range(accum) for b in ranks])
        assert rows.unique().numel() == rows.numel() == world * micro * accum
        assert sorted(rows.tolist()) == sorted(next(big)[0].tolist())
        assert ranks[0].position == DataPosition(step // 2, 4 * (step % 2 + 1))
