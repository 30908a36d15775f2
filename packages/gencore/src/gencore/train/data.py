"""Exactly resumable per-rank batches of a map-style dataset.

Epoch ``e`` shuffles the ``len(dataset)`` indices as ``torch.utils.data.DistributedSampler`` does
(seed ``seed``, ``set_epoch(e)``, ``drop_last=True``); rank ``r`` of ``W`` receives the
indices ``perm[r::W]`` and cuts them into consecutive micro-batches of ``b`` samples. With ``A``
micro-batches per optimiser step (gradient accumulation) an epoch holds ``n // (W A b)`` whole steps: the
trailing ``n mod (W A b)`` samples are dropped (``drop_last`` for the global batch), so no step mixes two
epochs (which would put a sample twice into one step's batch and make the data order depend on ``A``).
Micro-batch ``k`` of all ranks together is therefore ``perm[k W b : (k + 1) W b]``: the same samples a
single process would take with micro-batches of ``W b``, which is what makes a W-process run equal a
1-process run with the same global batch. The position is ``(epoch, micro)``: the number of micro-batches this rank
has consumed in the current epoch; resuming skips exactly those. A dataset whose ``__getitem__``
draws random numbers (augmentation) resumes exactly with ``num_workers=0`` (the draws come from the
restored global RNG); with workers, each worker's stream restarts from its (seed, rank, epoch) base
at the resume position, so the augmentations after a resume differ from the uninterrupted run's.
Derive such randomness from the sample index and epoch where an exact resume matters.

Iterable (streaming) datasets shard themselves: inside ``__iter__`` they call
:func:`data_shard` to learn their shard ``(index, count)`` over every (rank, DataLoader
worker) pair, and may define ``set_epoch(epoch)``, which is called before each pass. An
epoch ends when the stream does; on resume the ``micro`` batches already consumed in the
epoch are read again and discarded (exact when the stream is a deterministic function of
the epoch and shard; worker seeds are derived from the run seed, rank and epoch). The
W-process = 1-process equality holds for map-style datasets only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info

from gencore.errors import ConfigError


def data_shard() -> tuple[int, int]:
    """``(index, count)`` of the calling stream shard: ``index = rank * workers + worker_id``.

    Call it inside an ``IterableDataset.__iter__``; yield only items ``i`` with
    ``i % count == index`` (or an equivalent split) so that no two ranks/workers repeat data.
    """
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)
    info = get_worker_info()
    wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank * nw + wid, world * nw


@dataclass
class DataPosition:
    """Where the next micro-batch comes from: ``micro`` batches of ``epoch`` already used."""

    epoch: int = 0
    micro: int = 0


def per_rank_batches(dataset: Dataset, micro_batch_size: int, world_size: int, accum: int = 1) -> int:
    """Micro-batches per epoch on each rank, a multiple of ``accum`` (0 for an iterable dataset, whose length is
    unknown); one :class:`ConfigError` sentence when a map-style dataset has no length or is smaller than one
    global batch (``accum`` micro-batches per rank)."""
    if isinstance(dataset, IterableDataset):
        return 0
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        raise ConfigError("dataset must be a torch IterableDataset or a map-style Dataset with a length.") from None
    per_epoch = (n // world_size) // micro_batch_size // accum * accum  # whole optimiser steps only
    if per_epoch < 1:
        raise ConfigError(
            f"the dataset has {n} samples, fewer than one micro-batch on every rank for each of {accum} "
            f"accumulation steps ({world_size} x {accum} x {micro_batch_size}); use a smaller global batch size "
            "(--batch-size)."
            if accum > 1
            else f"the dataset has {n} samples, fewer than one micro-batch on every rank "
            f"({world_size} x {micro_batch_size}); use a smaller global batch size (--batch-size)."
        )
    return per_epoch


class RankBatches:
    """Endless iterator of this rank's micro-batches, with a resumable :class:`DataPosition`."""

    def __init__(
        self,
        dataset: Dataset,
        *,
        micro_batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        num_workers: int = 0,
        pin_memory: bool = False,
        position: DataPosition | None = None,
        accum: int = 1,
    ) -> None:
        self.iterable = isinstance(dataset, IterableDataset)
        self.per_epoch = per_rank_batches(dataset, micro_batch_size, world_size, accum)
        self.dataset = dataset
        self.micro = micro_batch_size
        self.rank = rank
        self.world = world_size
        self.seed = seed
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.position = position or DataPosition()
        self._it: Iterator[Any] | None = None

    def _epoch_indices(self, epoch: int) -> torch.Tensor:
        """This rank's indices of ``epoch``: ``DistributedSampler(shuffle=True, drop_last=True)``'s, computed in
        torch (the sampler's Python list round trip costs more than a small network's step every epoch)."""
        n = len(self.dataset)  # type: ignore[arg-type]
        g = torch.Generator().manual_seed(self.seed + epoch)
        perm = torch.randperm(n, generator=g)[: (n // self.world) * self.world]
        return perm[self.rank :: self.world][: self.per_epoch * self.micro]

    def _open(self) -> None:
        pos = self.position
        # a private generator: DataLoader draws its worker base seed from it, not from the global RNG
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + pos.epoch * 7919 + self.rank) % 2**63)
        common = {
            "batch_size": self.micro,
            "drop_last": True,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "generator": g,
        }
        if self.iterable:
            if callable(getattr(self.dataset, "set_epoch", None)):
                self.dataset.set_epoch(pos.epoch)  # type: ignore[attr-defined]
            self._it = iter(DataLoader(self.dataset, **common))
            for k in range(pos.micro):  # replay the part of the epoch already consumed
                try:
                    next(self._it)
                except StopIteration:
                    raise ConfigError(
                        f"the stream of epoch {pos.epoch} ended after {k} micro-batches, before the resume "
                        f"position {pos.micro}; it must replay identically for an exact resume."
                    ) from None
            return
        indices = self._epoch_indices(pos.epoch)[pos.micro * self.micro :]
        if isinstance(self.dataset, TensorDataset) and self.num_workers == 0 and not self.pin_memory:
            # In-memory tensors: index whole micro-batches at once. Same batches as the DataLoader's
            # per-sample fetch and collate (a stack of rows), without B Python calls per batch.
            chunks = indices.split(self.micro)
            tensors = self.dataset.tensors
            self._it = (tuple(t[c] for t in tensors) for c in chunks)
            return
        self._it = iter(DataLoader(self.dataset, sampler=indices.tolist(), **common))

    def __iter__(self) -> RankBatches:
        return self

    def __next__(self) -> Any:
        if not self.iterable and self.position.micro >= self.per_epoch:
            self.position = DataPosition(self.position.epoch + 1, 0)
            self._it = None
        if self._it is None:
            self._open()
        try:
            batch = next(self._it)  # type: ignore[arg-type]
        except StopIteration:
            if not self.iterable or self.position.micro == 0:
                raise ConfigError(
                    f"the data stream yielded no complete micro-batch of {self.micro} in epoch {self.position.epoch}."
                ) from None
            self.position = DataPosition(self.position.epoch + 1, 0)
            self._open()
            return next(self)
        self.position = DataPosition(self.position.epoch, self.position.micro + 1)
        return batch
