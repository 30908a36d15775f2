"""A sharded on-disk store of activations, written while streaming and read without loading it whole.

Layout of a store folder::

    acts/
      index.json                       # written last: a store without it is incomplete
      shard-00000.safetensors          # "activations" [S, L, D], "tokens" [S, L] (int64)
      shard-00001.safetensors
      ...

or, with ``storage="npy"``, ``shard-00000.activations.npy`` and ``shard-00000.tokens.npy``
(memory-mapped on read). Activations are kept per fixed-length sequence (``S`` sequences of
``L`` tokens, ``D`` features) so that sequence models (Temporal SAE) and per-token models read
the same files. ``index.json`` records the format version, the shapes, dtype, the source
(model, module, text), the per-shard sequence counts and SHA-256 digests, and running
statistics (feature mean and mean squared norm) gathered while writing.

Reading opens every shard lazily (safetensors ``safe_open`` slices or ``numpy.load(mmap_mode="r")``)
so only the requested sequences are read from disk; :class:`ActivationStore` is a map-style
``torch`` dataset of sequences that :class:`gencore.train.Trainer` samples from directly.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, overload

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from torch.utils.data import Dataset

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import atomic_path, ensure_dir, read_json, require_fields, save_tensors, write_json

FORMAT = "geninterp.activations"
VERSION = 1
STORAGES = ("safetensors", "npy")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# activation dtypes a shard may hold (safetensors names; numpy's float16/32/64 are the same three without bfloat16)
READ_FLOATS = ("F16", "BF16", "F32", "F64")
INDEX_NAME = "index.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _count(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _check_index(index: dict[str, Any], where: str) -> None:
    """Raise one :class:`StorageError` naming the first field of ``index.json`` that the reader cannot use."""

    def bad(field: str, expected: str, value: Any) -> None:
        raise StorageError(f"{where}: field {field!r} must be {expected}, got {value!r}.")

    if index["storage"] not in STORAGES:
        bad("storage", f"one of {', '.join(STORAGES)}", index["storage"])
    for name in ("d_model", "seq_len"):
        if not _count(index[name], 1):
            bad(name, "a positive integer", index[name])
    if not _count(index["n_sequences"], 0):
        bad("n_sequences", "a non-negative integer", index["n_sequences"])
    n_files = 1 if index["storage"] == "safetensors" else 2
    if not isinstance(index["shards"], list):
        bad("shards", "a list", index["shards"])
    for k, shard in enumerate(index["shards"]):
        if not isinstance(shard, dict):
            bad(f"shards[{k}]", "a JSON object", shard)
        files, digests = shard.get("files"), shard.get("sha256")
        plain = isinstance(files, list) and all(isinstance(f, str) and f == Path(f).name != ".." for f in files)
        if not (plain and len(files) == n_files):
            bad(f"shards[{k}].files", f"a list of {n_files} file name(s) in the store folder", files)
        if not _count(shard.get("n_sequences"), 1):
            bad(f"shards[{k}].n_sequences", "a positive integer", shard.get("n_sequences"))
        if not (isinstance(digests, list) and len(digests) == n_files and all(isinstance(d, str) for d in digests)):
            bad(f"shards[{k}].sha256", f"a list of {n_files} SHA-256 digest(s)", digests)
    stats = index["stats"]
    mean = stats.get("mean") if isinstance(stats, dict) else None
    if not (isinstance(mean, list) and len(mean) == index["d_model"] and all(_finite(v) for v in mean)):
        shown = f"{len(mean)} values" if isinstance(mean, list) and len(mean) != index["d_model"] else mean
        bad("stats.mean", f"a list of {index['d_model']} finite numbers (d_model)", shown)
    norm = stats.get("mean_sq_norm")
    if not (_finite(norm) and norm >= 0):
        bad("stats.mean_sq_norm", "a finite non-negative number", norm)
    if not isinstance(index.get("metadata", {}), dict):
        bad("metadata", "a JSON object", index["metadata"])


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)


def check_new_store(out_dir: str | os.PathLike) -> None:
    """Refuse (one :class:`StorageError` sentence) a folder that already holds an activation store."""
    if (Path(out_dir) / INDEX_NAME).exists():
        raise StorageError(f"{str(out_dir)!r} already holds an activation store; choose a new --out folder.")


class ActivationWriter:
    """Append ``[B, L, D]`` activation batches; flushes a shard every ``shard_sequences`` sequences.

    Use as a context manager: ``index.json`` is written on a clean exit only, so an interrupted
    capture never looks complete. Running statistics are accumulated in float64.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        d_model: int,
        seq_len: int,
        shard_sequences: int = 256,
        storage: str = "safetensors",
        dtype: str = "float32",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if storage not in STORAGES:
            raise ConfigError(f"storage must be one of {', '.join(STORAGES)}, got {storage!r}.")
        if dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}.")
        if min(d_model, seq_len, shard_sequences) < 1:
            raise ConfigError("d_model, seq_len and shard_sequences must be positive integers.")
        try:  # refused now, not by index.json's writer after the whole capture
            json.dumps(metadata or {})
            if not isinstance(metadata or {}, Mapping):
                raise TypeError(f"got {type(metadata).__name__}")
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"metadata must be a mapping of JSON values (strings, numbers, lists, mappings): {exc}."
            ) from None
        check_new_store(out_dir)
        self.dir = ensure_dir(out_dir)
        self.d_model, self.seq_len, self.shard_sequences = d_model, seq_len, shard_sequences
        self.storage, self.dtype = storage, dtype
        self.metadata = dict(metadata or {})
        self._acts: list[torch.Tensor] = []
        self._tokens: list[torch.Tensor] = []
        self._buffered = 0
        self.shards: list[dict[str, Any]] = []
        self._sum = torch.zeros(d_model, dtype=torch.float64)
        self._sum_sq_norm = 0.0
        self.n_sequences = 0

    def __enter__(self) -> ActivationWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()

    def write(self, acts: torch.Tensor, tokens: torch.Tensor) -> None:
        """Append ``acts: [B, L, D]`` and their token ids ``tokens: [B, L]``."""
        if acts.ndim != 3 or acts.shape[1:] != (self.seq_len, self.d_model):
            raise InputError(
                f"activations must have shape [B, {self.seq_len}, {self.d_model}], got {tuple(acts.shape)}."
            )
        if tokens.shape != acts.shape[:2]:
            raise InputError(f"tokens must have shape {tuple(acts.shape[:2])}, got {tuple(tokens.shape)}.")
        acts = acts.detach().to("cpu", torch.float32)
        if not torch.isfinite(acts).all():
            raise InputError("activations contain NaN or inf values; refusing to store them.")
        stored = acts.to(DTYPES[self.dtype])
        if not torch.isfinite(stored).all():  # finite in float32, past float16's 65504 (read back as "damaged")
            raise InputError(
                f"activations reach {float(acts.abs().max()):.6g}, beyond the range of {self.dtype} "
                f"(largest {torch.finfo(stored.dtype).max:.6g}); store them as float32 or bfloat16."
            )
        flat = acts.reshape(-1, self.d_model).double()
        self._sum += flat.sum(0)
        self._sum_sq_norm += float(flat.pow(2).sum())
        self._acts.append(stored)
        self._tokens.append(tokens.detach().to("cpu", torch.int64))
        self._buffered += acts.shape[0]
        self.n_sequences += acts.shape[0]
        while self._buffered >= self.shard_sequences:
            self._flush(self.shard_sequences)

    def _flush(self, n: int) -> None:
        acts, tokens = torch.cat(self._acts), torch.cat(self._tokens)
        head_a, head_t = acts[:n].contiguous(), tokens[:n].contiguous()
        self._acts, self._tokens = ([acts[n:]], [tokens[n:]]) if n < acts.shape[0] else ([], [])
        self._buffered = acts.shape[0] - n
        k = len(self.shards)
        if self.storage == "safetensors":
            name = f"shard-{k:05d}.safetensors"
            save_tensors(self.dir / name, {"activations": head_a, "tokens": head_t})
            files = [name]
        else:
            files = [f"shard-{k:05d}.activations.npy", f"shard-{k:05d}.tokens.npy"]
            array = head_a.float().numpy() if self.dtype == "bfloat16" else head_a.numpy()
            for name, arr in zip(files, (array, head_t.numpy()), strict=True):
                with atomic_path(self.dir / name) as tmp, open(tmp, "wb") as f:
                    np.save(f, arr)
        self.shards.append({"files": files, "n_sequences": n, "sha256": [_sha256(self.dir / f) for f in files]})

    def close(self) -> Path:
        """Flush the last partial shard and write ``index.json``; returns the store folder."""
        if self._buffered:
            self._flush(self._buffered)
        if not self.shards:
            raise InputError("no activations were written; the store would be empty.")
        n_tokens = self.n_sequences * self.seq_len
        index = {
            "format": FORMAT,
            "version": VERSION,
            "storage": self.storage,
            "dtype": self.dtype if self.storage == "safetensors" or self.dtype != "bfloat16" else "float32",
            "d_model": self.d_model,
            "seq_len": self.seq_len,
            "n_sequences": self.n_sequences,
            "n_tokens": n_tokens,
            "shards": self.shards,
            "stats": {
                "mean": (self._sum / n_tokens).tolist(),
                "mean_sq_norm": self._sum_sq_norm / n_tokens,
            },
            "metadata": self.metadata,
        }
        write_json(self.dir / INDEX_NAME, index)
        return self.dir


class ActivationStore(Dataset):
    """Read a store written by :class:`ActivationWriter`; item ``i`` is sequence ``i``: ``[L, D]`` float32.

    ``store[a:b]`` is a view of those sequences (like ``sequences=``), not a tensor; ``store[a:b].load()`` reads them.

    ``sequences`` restricts the view to a range of sequence indices (train/eval splits share the
    files). Shards are opened on first use in each process, so the object pickles cheaply into
    DataLoader workers.
    """

    def __init__(self, path: str | os.PathLike, sequences: range | None = None, *, verify: bool = False) -> None:
        self.path = Path(path)
        index_path = self.path / INDEX_NAME
        if not index_path.is_file():
            raise StorageError(
                f"{str(self.path)!r} is not an activation store (no {INDEX_NAME}; was the capture interrupted?)."
            )
        index = read_json(index_path)
        if not isinstance(index, dict):
            raise StorageError(f"{str(index_path)!r} does not hold a JSON object; it is not a {FORMAT} index.")
        if index.get("format") != FORMAT or index.get("version") != VERSION:
            raise StorageError(
                f"{str(index_path)!r} is not a {FORMAT} v{VERSION} index "
                f"(format={index.get('format')!r}, version={index.get('version')!r})."
            )
        fields = ("storage", "d_model", "seq_len", "n_sequences", "shards", "stats")
        require_fields(index, fields, repr(str(index_path)))
        _check_index(index, repr(str(index_path)))
        self.index = index
        self.d_model, self.seq_len = index["d_model"], index["seq_len"]
        counts = [s["n_sequences"] for s in index["shards"]]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        total = int(self._starts[-1])
        if total != index["n_sequences"]:
            raise StorageError(
                f"{str(index_path)!r}: the shards' n_sequences add to {total}, not n_sequences={index['n_sequences']}."
            )
        for shard in index["shards"]:
            for f in shard["files"]:
                if not (self.path / f).is_file():
                    raise StorageError(f"shard file {str(self.path / f)!r} listed in the index is missing.")
        if verify:
            self.verify()
        for k in range(len(index["shards"])):  # headers only: shapes and dtypes as the index says
            self._open_shard(k)
        self.sequences = range(total) if sequences is None else sequences
        if len(self.sequences):  # an empty view (``store[5:5]``) is allowed
            ends = (self.sequences[0], self.sequences[-1]) if isinstance(self.sequences, range) else self.sequences
            if min(ends) < 0 or max(ends) >= total:
                raise InputError(f"sequence range {self.sequences} is outside the store's {total} sequences.")
        self._open: dict[int, Any] = {}

    # ------------------------------------------------------------------ metadata
    @property
    def n_tokens(self) -> int:
        return len(self.sequences) * self.seq_len

    @property
    def mean(self) -> torch.Tensor:
        """Feature mean of the whole store (every sequence, whatever this view holds; see ``position_stats``)."""
        return torch.tensor(self.index["stats"]["mean"], dtype=torch.float32)

    @property
    def mean_sq_norm(self) -> float:
        """Mean squared norm of the whole store's activations (every sequence, whatever this view holds)."""
        return float(self.index["stats"]["mean_sq_norm"])

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.index.get("metadata", {}))

    def verify(self) -> None:
        """Check every shard's SHA-256 against the index; raise :class:`StorageError` naming a corrupt file."""
        for shard in self.index["shards"]:
            for f, digest in zip(shard["files"], shard["sha256"], strict=True):
                if _sha256(self.path / f) != digest:
                    raise StorageError(f"shard file {str(self.path / f)!r} does not match its SHA-256 in the index.")

    def split(self, eval_fraction: float) -> tuple[ActivationStore, ActivationStore]:
        """Train/eval views: the last ``ceil(eval_fraction * n)`` sequences (at least one) are held out."""
        if not 0.0 < eval_fraction < 1.0:
            raise ConfigError(f"eval_fraction must be in (0, 1), got {eval_fraction}.")
        n = len(self.sequences)
        # rounded first: 0.07 * 100 is 7.000000000000001 in floating point, whose ceiling would hold out 8
        n_eval = max(1, math.ceil(round(eval_fraction * n, 9)))
        if n - n_eval < 1:
            raise InputError(f"the store has {n} sequences: too few to hold out an evaluation split.")
        a, b = self.sequences[: n - n_eval], self.sequences[n - n_eval :]
        return ActivationStore(self.path, a), ActivationStore(self.path, b)

    # ------------------------------------------------------------------ reading
    def _open_shard(self, k: int) -> Any:
        """Open shard ``k`` (headers only) and check its arrays' shapes and dtypes against the index."""
        shard = self.index["shards"][k]
        files = name = shard["files"]
        try:
            if self.index["storage"] == "safetensors":
                name = files[0]
                f = safe_open(str(self.path / name), framework="pt")
                handle = (f.get_slice("activations"), f.get_slice("tokens"), f)
                found = [(tuple(s.get_shape()), s.get_dtype()) for s in handle[:2]]
                kinds = [found[0][1] in READ_FLOATS, found[1][1].startswith(("I", "U"))]
            else:
                arrays = []
                for name in files:
                    arrays.append(np.load(self.path / name, mmap_mode="r", allow_pickle=False))
                handle = tuple(arrays)
                found = [(a.shape, str(a.dtype)) for a in handle]
                kinds = [handle[0].dtype.kind == "f" and handle[0].dtype.itemsize <= 8, handle[1].dtype.kind in "iu"]
        except (SafetensorError, OSError, ValueError) as exc:
            raise StorageError(f"cannot read shard file {str(self.path / name)!r}: {str(exc).rstrip('.')}.") from exc
        n, length, d = shard["n_sequences"], self.seq_len, self.d_model
        expected = [((n, length, d), "float16/bfloat16/float32/float64 activations [n_sequences, seq_len, d_model]"),
                    ((n, length), "integer token ids [n_sequences, seq_len]")]  # fmt: skip
        for i, ((shape, dtype), (want, what), ok) in enumerate(zip(found, expected, kinds, strict=True)):
            if tuple(shape) != want or not ok:
                name = files[min(i, len(files) - 1)]
                raise StorageError(
                    f"shard file {str(self.path / name)!r} holds {dtype} {list(shape)} where the index expects "
                    f"{what} = {list(want)}."
                )
        return handle

    def _shard(self, k: int) -> Any:
        handle = self._open.get(k)
        if handle is None:
            handle = self._open[k] = self._open_shard(k)
        return handle

    def _read(self, global_index: int) -> tuple[torch.Tensor, torch.Tensor]:
        k = int(np.searchsorted(self._starts, global_index, side="right") - 1)
        j = global_index - int(self._starts[k])
        acts, tokens = self._shard(k)[:2]
        if self.index["storage"] == "safetensors":
            a, t = acts[j : j + 1][0], tokens[j : j + 1][0]
        else:
            # native byte order: torch cannot read a big-endian array (a store written on such a machine)
            a = torch.from_numpy(np.array(acts[j], dtype=acts.dtype.newbyteorder("=")))
            t = torch.from_numpy(np.array(tokens[j], dtype=tokens.dtype.newbyteorder("=")))
        if not torch.isfinite(a).all():  # the writer refuses these, so the file was damaged or edited since
            name = self.index["shards"][k]["files"][0]
            raise StorageError(
                f"shard file {str(self.path / name)!r} holds NaN or infinite activations (sequence {j}); "
                "the store is damaged: capture it again."
            )
        return a.float(), t.long()

    def __len__(self) -> int:
        return len(self.sequences)

    @overload
    def __getitem__(self, i: int) -> torch.Tensor: ...
    @overload
    def __getitem__(self, i: slice) -> ActivationStore: ...
    def __getitem__(self, i: int | slice) -> torch.Tensor | ActivationStore:
        """Sequence ``i`` as ``[L, D]`` float32; a slice gives a view (an :class:`ActivationStore`) of them."""
        if isinstance(i, slice):
            return ActivationStore(self.path, self.sequences[i])
        return self._read(self.sequences[i])[0]

    def tokens(self, i: int) -> torch.Tensor:
        """Token ids ``[L]`` of sequence ``i`` (of this view)."""
        return self._read(self.sequences[i])[1]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = {}
        return state

    def iter_batches(self, batch_sequences: int = 64) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """In order, ``(acts [b, L, D], tokens [b, L])`` batches of this view."""
        if batch_sequences < 1:  # a negative count yielded nothing at all, zero a ValueError from range()
            raise ConfigError(f"batch_sequences must be a positive integer, got {batch_sequences!r}.")
        for start in range(0, len(self), batch_sequences):
            items = [self._read(self.sequences[i]) for i in range(start, min(start + batch_sequences, len(self)))]
            yield torch.stack([a for a, _ in items]), torch.stack([t for _, t in items])

    def load(self, max_sequences: int | None = None) -> torch.Tensor:
        """``[S, L, D]`` of (at most ``max_sequences`` of) this view in memory."""
        if max_sequences is not None and max_sequences < 0:
            raise ConfigError(f"max_sequences must be a non-negative integer or None, got {max_sequences!r}.")
        n = len(self) if max_sequences is None else min(len(self), max_sequences)
        return torch.stack([self[i] for i in range(n)]) if n else torch.empty(0, self.seq_len, self.d_model)
