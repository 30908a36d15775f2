"""Process-group set-up and the few collectives the trainer needs, on top of torch.distributed.

A process belongs to a multi-process run when the launcher (``torchrun``, or
:func:`gencore.train.launch.launch` through torch's elastic launcher) sets ``WORLD_SIZE > 1``
with ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; the group is then created
with ``init_method="env://"`` and backend NCCL when CUDA is available, gloo otherwise
(PyTorch DDP: Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
Parallel Training"). Nothing here communicates by itself; all exchanges are
``torch.distributed`` collectives, and JSON payloads are exchanged as byte tensors (no pickle).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

# torch.distributed.nn.functional takes ``group=group.WORLD`` as a default argument, evaluated when it is first
# imported, and DDP's first construction imports it (through torch.distributed._shard). Imported after
# :func:`setup` made the group, it would hold the group past destroy_process_group until interpreter exit, where
# tearing down gloo's still-running threads can abort a run that finished ("terminate called without an active
# exception", exit -6). Imported here, before any group exists, its default stays a placeholder.
import torch.distributed.nn.functional

from gencore.errors import ConfigError


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits: ``rank`` of ``world_size``, ``local_rank`` on its node, ``device``."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None: single process, no process group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name} must be an integer, got {value!r}.") from None


def setup(device: str | torch.device | None = None) -> DistInfo:
    """Join the process group described by the environment (or run alone) and pick the device.

    ``device=None`` chooses ``cuda:LOCAL_RANK`` when CUDA is available, else CPU; ``"cuda"`` without an
    index also means ``cuda:LOCAL_RANK`` (one GPU per local process). An already initialised default
    group is reused.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", 0)
    if device is None:
        dev = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    else:
        dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {str(dev)!r} was requested but this machine has no usable CUDA device.")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world <= 1 and not dist.is_initialized():
        return DistInfo(0, 1, 0, dev, None)
    if not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"backend": backend, "init_method": "env://", "world_size": world, "rank": rank}
        if dev.type == "cuda":
            kwargs["device_id"] = dev
        dist.init_process_group(**kwargs)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local, dev, dist.get_backend())


def is_main_process() -> bool:
    """True on rank 0 of a process group, or when no group is initialised (for tasks that write files)."""
    return not dist.is_initialized() or dist.get_rank() == 0


def teardown(info: DistInfo) -> None:
    """Destroy the process group if :func:`setup` made one (safe to call twice)."""
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``values`` over ranks (identity for one process); returns a CPU float64 tensor."""
    if not info.distributed:
        return values.detach().to("cpu", torch.float64)
    buf = values.detach().to(info.device, torch.float64).clone()
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return buf.cpu()


def group_size() -> int:
    """Processes in the default group (1 when none is initialised): a collective is needed only above 1."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def average_gradients(params: Iterable[torch.Tensor]) -> None:
    """Replace each ``p.grad`` by its mean over the process group, in one all-reduce (no-op alone).

    For learners that step their own optimisers (reinforcement-learning agents with several losses)
    instead of going through :class:`~gencore.train.Trainer`'s DDP wrapper: call it between
    ``backward()`` and ``optimizer.step()`` on every rank. Parameters without a gradient are skipped
    (every rank must agree on which have one, as they do when all run the same code).
    """
    if group_size() == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= group_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def broadcast_state(module: torch.nn.Module, src: int = 0) -> None:
    """Copy every parameter and buffer of ``module`` from rank ``src`` to all ranks (no-op alone)."""
    if group_size() == 1:
        return
    with torch.no_grad():
        for t in module.state_dict().values():
            dist.broadcast(t, src)


def all_gather_rows(x: torch.Tensor) -> torch.Tensor:
    """Every rank's ``x: [M_r, ...]`` concatenated in rank order (``M_r`` may differ; ``x`` itself alone).

    For statistics that must see the global batch, e.g. a VQ codebook's k-means initialisation and EMA.
    """
    if group_size() == 1:
        return x
    count = torch.tensor([x.shape[0]], dtype=torch.int64, device=x.device)
    counts = [torch.zeros_like(count) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, count)
    longest = int(max(int(c) for c in counts))
    padded = x.new_zeros((longest, *x.shape[1:]))
    padded[: x.shape[0]] = x
    parts = [torch.zeros_like(padded) for _ in counts]
    dist.all_gather(parts, padded.contiguous())
    return torch.cat([p[: int(c)] for p, c in zip(parts, counts)])


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def _gather_bytes(payload: bytes, info: DistInfo) -> list[bytes]:
    data = torch.frombuffer(bytearray(payload), dtype=torch.uint8) if payload else torch.zeros(0, dtype=torch.uint8)
    size = torch.tensor([data.numel()], dtype=torch.int64, device=info.device)
    sizes = [torch.zeros_like(size) for _ in range(info.world_size)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=torch.uint8, device=info.device)
    padded[: data.numel()] = data.to(info.device)
    out = [torch.zeros_like(padded) for _ in range(info.world_size)]
    dist.all_gather(out, padded)
    return [bytes(o[: int(s.item())].cpu().numpy().tobytes()) for o, s in zip(out, sizes)]


def _raw_bytes(t: torch.Tensor) -> bytes:
    return bytes(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())


def gather_state(
    tensors: dict[str, torch.Tensor], meta: Any, info: DistInfo
) -> list[tuple[dict[str, torch.Tensor], Any]]:
    """Every rank's ``(tensors, meta)``, indexed by rank (all ranks receive all).

    ``meta`` must be JSON-able; tensors may differ in shape, dtype and keys between ranks.
    Each tensor travels as raw bytes plus a JSON header (dtype, shape), so nothing is pickled.
    """
    if not info.distributed:
        return [(dict(tensors), meta)]
    header = {
        "meta": meta,
        "tensors": [[k, str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in tensors.items()],
    }
    blob = b"".join(
        v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for v in tensors.values()
    )
    headers = _gather_bytes(json.dumps(header).encode(), info)
    blobs = _gather_bytes(blob, info)
    result = []
    for h_raw, b_raw in zip(headers, blobs):
        h = json.loads(h_raw.decode())
        flat = torch.frombuffer(bytearray(b_raw), dtype=torch.uint8) if b_raw else torch.zeros(0, dtype=torch.uint8)
        got: dict[str, torch.Tensor] = {}
        offset = 0
        for key, dtype_name, shape in h["tensors"]:
            dtype = getattr(torch, dtype_name)
            n = int(torch.Size(shape).numel()) * torch.empty(0, dtype=dtype).element_size()
            got[key] = flat[offset : offset + n].clone().view(dtype).reshape(shape)
            offset += n
        result.append((got, h["meta"]))
    return result
