"""Exactly resumable, verified, pickle-free training checkpoints.

A checkpoint is one folder ``root/step-000000123/`` holding

* ``<group>.safetensors`` per group (``model``, ``ema``, ``optimizer``, ``scheduler``, ``rng-rank0``...):
  every tensor of the group's nested state, with the JSON description of the nesting (dict keys with their
  exact types, tuples, numbers, strings, ``None``...) in the safetensors header metadata;
* ``state.json``: the step, the caller's ``extra`` (data position, config...), the SHA-256 and byte size of
  every group file, and the SHA-256 of ``state.json``'s own canonical content.

Writes go to ``root/.tmp-step-.../`` which is renamed into place with :func:`os.replace` only once every file
is written and synced, so a killed run never leaves a half checkpoint under a ``step-*`` name. Loading
verifies every size and checksum, and refuses pickle payloads (magic bytes ``0x80 0x02..0x05``, torch.save's
zip ``PK``, or a ``.pt``/``.pth``/``.pkl`` file) before anything is parsed; nothing is ever unpickled.

Exact resumption (the issue-3 requirement that a SIGKILLed and resumed CPU run ends bit-identical to an
uninterrupted one) needs the optimizer/scheduler state to round-trip exactly,
``opt.load_state_dict(unflatten_state(*flatten_state(opt.state_dict())))``, and every RNG stream (python,
numpy global, torch CPU and CUDA) to continue where it stopped: :func:`capture_rng_state` /
:func:`restore_rng_state`.

Encoding of the metadata tree (``flatten_state``): ``None``, bools, ints, finite floats and strings are
themselves; lists are JSON lists; a dict whose keys are all strings (none equal to ``"__t__"``) is a JSON
object; anything else is an object tagged by ``"__t__"``: ``tensor`` (``key`` into the tensor dict),
``tuple`` / ``dict`` (``items``; a dict as ``[key, value]`` pairs so int/tuple/None keys keep their type),
``float`` (``nan``/``inf``/``-inf``), ``ndarray`` / ``npscalar`` (raw bytes as a uint8 tensor plus dtype
and shape).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import shutil
import struct
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import ensure_dir, read_json, save_tensors, write_json

__all__ = [
    "STATE_NAME",
    "Checkpoint",
    "capture_rng_state",
    "check_resume_steps",
    "checkpoint_step",
    "find_checkpoints",
    "flatten_state",
    "load_checkpoint",
    "load_latest",
    "pack_state",
    "restore_rng_state",
    "save_checkpoint",
    "unflatten_state",
    "unpack_state",
]

STATE_NAME = "state.json"
FORMAT = "gencore.checkpoint"
VERSION = 1
_META_KEY = "gencore.meta"
_TAG = "__t__"
_STEP_RE = re.compile(r"^step-(\d{9,})$")
_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".pickle")
_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------------- flatten


def flatten_state(obj: Any) -> tuple[dict[str, torch.Tensor], Any]:
    """Split a nested state into ``(tensors, meta)``: a flat tensor dict and a JSON-able description.

    ``obj`` may nest dicts (any hashable scalar/tuple keys, e.g. the int parameter ids of an optimizer
    state), lists and tuples of tensors, numpy arrays/scalars, ints, floats (incl. nan/inf), bools, strings
    and ``None``. Tensor keys are the dotted path (made unique); the same tensor object appearing twice is
    stored once and comes back as one object. :func:`unflatten_state` inverts it exactly, key types and
    container types included. Raises :class:`InputError` naming the path of an unsupported value.
    """
    tensors: dict[str, torch.Tensor] = {}
    seen: dict[int, str] = {}
    meta = _encode(obj, "", tensors, seen)
    return tensors, meta


def unflatten_state(tensors: dict[str, torch.Tensor], meta: Any) -> Any:
    """Rebuild the object :func:`flatten_state` split; raises :class:`InputError` on inconsistent input."""
    used: set[str] = set()
    out = _decode(meta, tensors, used, "")
    unused = sorted(set(tensors) - used)
    if unused:
        raise InputError(f"tensors {unused[:5]} are not referenced by the metadata; expected every tensor to be.")
    return out


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _encode(obj: Any, path: str, tensors: dict[str, torch.Tensor] | None, seen: dict[int, str]) -> Any:
    where = path or "<root>"
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        if tensors is None:
            raise InputError(f"value at {where!r} is a tensor; expected only JSON-able values here.")
        if id(obj) in seen:
            return {_TAG: "tensor", "key": seen[id(obj)]}
        if obj.is_sparse or obj.device.type == "meta":
            raise InputError(f"tensor at {where!r} is sparse or on the meta device; expected a dense tensor.")
        key = path or "tensor"
        if key in tensors:
            n = 2
            while f"{key}#{n}" in tensors:
                n += 1
            key = f"{key}#{n}"
        tensors[key] = obj
        seen[id(obj)] = key
        return {_TAG: "tensor", "key": key}
    if isinstance(obj, np.generic) and tensors is None:
        return _encode(obj.item(), path, tensors, seen)
    if isinstance(obj, (np.ndarray, np.generic)):
        if tensors is None:
            raise InputError(f"value at {where!r} is a numpy value; expected only JSON-able values here.")
        arr = np.asarray(obj)
        if arr.dtype.hasobject:
            raise InputError(f"numpy value at {where!r} has dtype object; expected a numeric dtype.")
        kind = "npscalar" if isinstance(obj, np.generic) else "ndarray"
        raw = torch.from_numpy(np.frombuffer(arr.tobytes(), dtype=np.uint8).copy())
        ref = _encode(raw, path, tensors, seen)
        return {_TAG: kind, "dtype": arr.dtype.str, "shape": list(arr.shape), "key": ref["key"]}
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if math.isfinite(obj):
            return float(obj)
        return {_TAG: "float", "value": "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, list):
        return [_encode(v, _join(path, i), tensors, seen) for i, v in enumerate(obj)]
    if isinstance(obj, tuple):
        return {_TAG: "tuple", "items": [_encode(v, _join(path, i), tensors, seen) for i, v in enumerate(obj)]}
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj) and _TAG not in obj:
            return {k: _encode(v, _join(path, k), tensors, seen) for k, v in obj.items()}
        items = []
        for k, v in obj.items():
            if isinstance(k, (torch.Tensor, np.ndarray, np.generic)):
                raise InputError(f"dict at {where!r} has an array key; expected scalar or tuple keys.")
            items.append([_encode(k, _join(path, "key"), None, seen), _encode(v, _join(path, k), tensors, seen)])
        return {_TAG: "dict", "items": items}
    raise InputError(
        f"value at {where!r} has type {type(obj).__name__}; expected tensors, numpy arrays, numbers, strings, "
        "None, bools, lists, tuples or dicts."
    )


def _decode(meta: Any, tensors: dict[str, torch.Tensor], used: set[str], path: str) -> Any:
    where = path or "<root>"
    if meta is None or isinstance(meta, (bool, str, int, float)):
        return meta
    if isinstance(meta, list):
        return [_decode(v, tensors, used, _join(path, i)) for i, v in enumerate(meta)]
    if not isinstance(meta, dict):
        raise InputError(f"metadata at {where!r} has type {type(meta).__name__}; expected a JSON value.")
    if _TAG not in meta:
        return {k: _decode(v, tensors, used, _join(path, k)) for k, v in meta.items()}
    tag = meta[_TAG]
    try:
        if tag == "tensor" or tag in ("ndarray", "npscalar"):
            key = meta["key"]
            if key not in tensors:
                raise InputError(f"metadata at {where!r} refers to tensor {key!r}, which is missing.")
            used.add(key)
            if tag == "tensor":
                return tensors[key]
            raw = tensors[key].detach().cpu().contiguous().numpy().tobytes()
            arr = np.frombuffer(raw, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"]).copy()
            return arr[()] if tag == "npscalar" else arr
        if tag == "tuple":
            return tuple(_decode(v, tensors, used, _join(path, i)) for i, v in enumerate(meta["items"]))
        if tag == "dict":
            out = {}
            for k, v in meta["items"]:
                key = _decode(k, tensors, used, _join(path, "key"))
                out[key] = _decode(v, tensors, used, _join(path, key))
            return out
        if tag == "float":
            return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[meta["value"]]
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"metadata at {where!r} is malformed ({type(exc).__name__}: {exc}).") from exc
    raise InputError(f"metadata at {where!r} has unknown tag {tag!r}; expected a gencore flatten tag.")


def pack_state(obj: Any) -> torch.Tensor:
    """Serialise a flattenable object into one CPU uint8 tensor (safetensors bytes, no pickle).

    Meant for collectives: e.g. gather every rank's :func:`capture_rng_state` to rank 0 with tensor
    all-gathers (pad to the longest length first) instead of pickling ``*_object`` collectives.
    """
    tensors, meta = flatten_state(obj)
    clean = {k: v.contiguous() for k, v in _unshare(tensors).items()}
    blob = _st_save(clean, metadata={_META_KEY: json.dumps(meta, separators=(",", ":"), allow_nan=False)})
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8)


def unpack_state(packed: torch.Tensor) -> Any:
    """Invert :func:`pack_state`; trailing bytes (padding) are ignored. Raises :class:`InputError` if malformed."""
    data = packed.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()
    if not _safetensors_shaped(data[:9], len(data)):
        raise InputError("packed must be a uint8 tensor made by pack_state (bad safetensors header).")
    n = struct.unpack("<Q", data[:8])[0]
    try:
        header = json.loads(data[8 : 8 + n])
        meta = json.loads(header["__metadata__"][_META_KEY])
        tensors = _st_load(data[: 8 + n + _data_len(header)])
    except (KeyError, TypeError, ValueError, SafetensorError) as exc:
        raise InputError(f"packed is not a pack_state payload ({type(exc).__name__}: {exc}).") from exc
    return unflatten_state(tensors, meta)


def _data_len(header: dict[str, Any]) -> int:
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    return max(ends, default=0)


# --------------------------------------------------------------------------------------------- RNG


def capture_rng_state() -> dict[str, Any]:
    """Snapshot the process-global RNG streams as a flattenable dict.

    Keys: ``python`` (``random.getstate()``), ``numpy`` (``np.random.get_state(legacy=False)``: bit generator
    name, ``key`` uint32[624], ``pos``, cached Gaussian), ``torch`` (``torch.get_rng_state()``, uint8) and,
    when CUDA is available, ``cuda`` (one uint8 state per visible device). Save it as a checkpoint group
    (one per rank, e.g. ``rng-rank0``); :func:`restore_rng_state` makes the next draws of every stream equal
    those of an uninterrupted process. Explicit ``torch.Generator`` objects are not global: save their
    ``get_state()`` tensors yourself.
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=False),  # noqa: NPY002 (the global stream is the point)
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng_state` returned (also after a save/load round trip).

    CUDA states are restored for the devices present in both the snapshot and this process; a snapshot
    with CUDA states restored where CUDA is unavailable (or with a different device count) warns.
    """
    if not isinstance(state, dict) or not {"python", "numpy", "torch"} <= set(state):
        raise InputError("state must be the dict capture_rng_state() returned (keys python, numpy, torch).")
    try:
        random.setstate(_as_tuple(state["python"]))
        np.random.set_state(state["numpy"])  # noqa: NPY002
        torch.set_rng_state(torch.as_tensor(state["torch"]).to(device="cpu", dtype=torch.uint8))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"RNG state could not be restored ({type(exc).__name__}: {exc}).") from exc
    cuda = state.get("cuda")
    if cuda:
        if not torch.cuda.is_available():
            warnings.warn("the RNG snapshot has CUDA states but CUDA is unavailable; they are ignored.", stacklevel=2)
            return
        n = torch.cuda.device_count()
        if n != len(cuda):
            warnings.warn(
                f"the RNG snapshot has {len(cuda)} CUDA states but {n} devices are visible; "
                f"restoring the first {min(n, len(cuda))}.",
                stacklevel=2,
            )
        for i in range(min(n, len(cuda))):
            torch.cuda.set_rng_state(torch.as_tensor(cuda[i]).to(device="cpu", dtype=torch.uint8), i)


def _as_tuple(x: Any) -> Any:
    """Lists to tuples, recursively (``random.setstate`` insists on tuples)."""
    return tuple(_as_tuple(v) for v in x) if isinstance(x, (list, tuple)) else x


# --------------------------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Checkpoint:
    """A loaded, verified checkpoint: ``groups`` maps group name to its unflattened state."""

    step: int
    groups: dict[str, Any]
    extra: dict[str, Any]
    path: Path


def _hash_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _state_digest(body: dict[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _unshare(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detach to CPU and clone tensors whose storage another tensor already uses (safetensors refuses those)."""
    out: dict[str, torch.Tensor] = {}
    storages: set[tuple[str, int]] = set()
    for k, v in tensors.items():
        v = v.detach()
        ident = (str(v.device), v.untyped_storage().data_ptr())
        if v.numel() > 0 and ident in storages:
            v = v.clone()
        storages.add(ident)
        out[k] = v.cpu()
    return out


def _write_group(folder: Path, name: str, tensors: dict[str, torch.Tensor], meta: Any) -> dict[str, Any]:
    """Write ``<name>.safetensors`` into ``folder``; return its ``{"sha256", "size"}`` entry."""
    path = folder / f"{name}.safetensors"
    text = json.dumps(meta, separators=(",", ":"), allow_nan=False)
    try:
        save_tensors(path, _unshare(tensors), metadata={_META_KEY: text, "format": "pt"})
    except (SafetensorError, RuntimeError, ValueError, TypeError) as exc:
        raise StorageError(f"cannot write checkpoint group file {str(path)!r} ({exc}).") from exc
    _fsync(path)
    sha, size = _hash_file(path)
    return {"sha256": sha, "size": size}


def save_checkpoint(
    root: str | os.PathLike,
    step: int,
    groups: dict[str, Any],
    extra: dict[str, Any] | None = None,
    keep_last: int | None = 3,
) -> Path:
    """Atomically write ``root/step-{step:09d}/`` and prune older checkpoints; return its path.

    ``groups`` maps a file-safe name to a state dict or any :func:`flatten_state`-able object; ``extra``
    is stored (type-exactly, no tensors) in ``state.json``. Everything is written into ``root/.tmp-step-*``
    and renamed into place at the end; an error midway removes the temporary folder and leaves existing
    checkpoints untouched. An existing checkpoint of the same step is replaced. Afterwards only the new
    checkpoint and the ``keep_last - 1`` newest others are kept (``keep_last=None`` keeps all), and stale
    ``.tmp-*`` folders are removed: exactly one process may write into ``root``.
    """
    step = check_int(step, "step", low=0, error=InputError)
    if keep_last is not None:
        keep_last = check_int(keep_last, "keep_last (or None)", low=1, error=InputError)
    if not isinstance(groups, dict) or not groups:
        raise InputError("groups must be a non-empty dict mapping a group name to its state.")
    for name in groups:
        if not isinstance(name, str) or not _GROUP_RE.match(name) or name == Path(STATE_NAME).stem:
            raise InputError(
                f"group name {name!r} is not allowed; expected letters, digits, '_', '.', '-' (not 'state')."
            )
    extra = {} if extra is None else extra
    if not isinstance(extra, dict):
        raise InputError(f"extra must be a dict, got {type(extra).__name__}.")
    extra_meta = _encode(extra, "extra", None, {})
    flat = {name: flatten_state(obj) for name, obj in groups.items()}

    root = ensure_dir(root)
    final = root / f"step-{step:09d}"
    tmp = root / f".tmp-step-{step:09d}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    old: Path | None = None
    try:
        tmp.mkdir()
        files = {}
        for name, (tensors, meta) in flat.items():
            files[f"{name}.safetensors"] = _write_group(tmp, name, tensors, meta)
        body = {
            "format": FORMAT,
            "version": VERSION,
            "step": step,
            "groups": list(flat),
            "files": files,
            "extra": extra_meta,
            "torch_version": torch.__version__,
        }
        write_json(tmp / STATE_NAME, {**body, "state_sha256": _state_digest(body)})
        _fsync(tmp / STATE_NAME)
        _fsync(tmp)
        if final.exists():
            old = root / f".tmp-old-{final.name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not final.exists():
            os.replace(old, final)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    _prune(root, final, keep_last)
    return final


def _prune(root: Path, keep: Path, keep_last: int | None) -> None:
    for p in root.glob(".tmp-*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
    if keep_last is None:
        return
    others = [p for p in find_checkpoints(root) if p.resolve() != keep.resolve()]
    for p in others[keep_last - 1 :]:
        shutil.rmtree(p, ignore_errors=True)


def checkpoint_step(folder: str | os.PathLike) -> int:
    """The step in a checkpoint folder's name ``step-{step:09d}`` (as :func:`find_checkpoints` lists them)."""
    m = _STEP_RE.match(Path(folder).name)
    if m is None:
        raise InputError(f"{str(folder)!r} is not a checkpoint folder named step-NNNNNNNNN.")
    return int(m.group(1))


def check_resume_steps(root: str | os.PathLike, steps: int) -> None:
    """Refuse to resume the run checkpointed in ``root`` with fewer ``steps`` than its newest checkpoint has done:
    the model would stay at that step while the run recorded the smaller count."""
    found = find_checkpoints(root)
    done = checkpoint_step(found[0]) if found else 0
    if done > steps:
        raise ConfigError(
            f"{str(found[0])!r} has already trained {done} steps, more than the {steps} asked for; pass --steps "
            f"{done} or more to continue that run, or choose a new output folder."
        )


def find_checkpoints(root: str | os.PathLike) -> list[Path]:
    """Complete checkpoint folders ``root/step-*`` (with ``state.json``), newest step first.

    Temporary ``.tmp-*`` folders and ``step-*`` folders without ``state.json`` are skipped; a missing
    ``root`` gives ``[]``. Completeness here is structural only: :func:`load_checkpoint` verifies content.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        m = _STEP_RE.match(p.name)
        if m and p.is_dir() and (p / STATE_NAME).is_file():
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found, key=lambda sp: sp[0], reverse=True)]


def _safetensors_shaped(head: bytes, size: int) -> bool:
    """First 9 bytes of a safetensors file: u64 little-endian header length N, ``8 + N <= size``, then ``{``."""
    return len(head) >= 9 and head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] + 8 <= size


def _refuse_pickles(folder: Path) -> None:
    """Raise :class:`StorageError` for any file in ``folder`` that is (or is named like) a pickle.

    Pickle streams of protocol 2-5 start with ``0x80 0x02..0x05``, torch.save archives with zip's ``PK``.
    A safetensors header length can begin with those two bytes, so a file with a consistent safetensors
    header is not flagged (a pickle or zip cannot have one: its bytes 2-7 would make the length huge).
    """
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            continue
        if p.suffix.lower() in _PICKLE_SUFFIXES:
            raise StorageError(
                f"checkpoint file {str(p)!r} has a pickle/torch.save extension; refusing to load a checkpoint "
                "that carries pickle payloads."
            )
        try:
            with p.open("rb") as f:
                head = f.read(9)
        except OSError as exc:
            raise StorageError(f"checkpoint file {str(p)!r} cannot be read ({exc.strerror or exc}).") from exc
        magic = (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5) or head[:2] == b"PK"
        if magic and not _safetensors_shaped(head, p.stat().st_size):
            kind = "a torch.save zip archive" if head[:2] == b"PK" else "a pickle stream"
            raise StorageError(f"checkpoint file {str(p)!r} is {kind}; refusing to load pickle payloads.")


def _read_state(folder: Path) -> dict[str, Any]:
    path = folder / STATE_NAME
    if not path.is_file():
        raise StorageError(f"checkpoint state file {str(path)!r} is missing.")
    state = read_json(path)
    bad = f"checkpoint state file {str(path)!r}"
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise StorageError(f"{bad} is not a gencore checkpoint state (format {FORMAT!r} expected).")
    if state.get("version") != VERSION:
        raise StorageError(f"{bad} has version {state.get('version')!r}; this gencore reads version {VERSION}.")
    body = {k: v for k, v in state.items() if k != "state_sha256"}
    try:
        digest = _state_digest(body)
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{bad} contains non-canonical JSON ({exc}).") from exc
    if state.get("state_sha256") != digest:
        raise StorageError(f"{bad} was modified after it was written (its own checksum does not match).")
    step, groups, files = state.get("step"), state.get("groups"), state.get("files")
    if (
        isinstance(step, bool)
        or not isinstance(step, int)
        or not isinstance(groups, list)
        or not isinstance(files, dict)
        or not isinstance(state.get("extra"), dict)
        or any(not isinstance(g, str) or not _GROUP_RE.match(g) for g in groups)
        or set(files) != {f"{g}.safetensors" for g in groups}
    ):
        raise StorageError(f"{bad} lacks a valid step, groups, files or extra entry.")
    m = _STEP_RE.match(folder.name)
    if m and int(m.group(1)) != step:
        raise StorageError(f"{bad} says step {step} but its folder is named {folder.name!r}.")
    return state


def _verify_file(folder: Path, name: str, entry: Any) -> Path:
    path = folder / name
    if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("size"), int)):
        raise StorageError(f"checkpoint state lists {name!r} without a sha256 and size.")
    if not path.is_file():
        raise StorageError(f"checkpoint file {str(path)!r} is missing.")
    sha, size = _hash_file(path)
    if size != entry["size"]:
        raise StorageError(
            f"checkpoint file {str(path)!r} has {size} bytes but {entry['size']} were written (truncated or altered)."
        )
    if sha != entry["sha256"]:
        raise StorageError(f"checkpoint file {str(path)!r} fails its SHA-256 check (corrupted bytes).")
    return path


def _read_group(path: Path, device: str | torch.device) -> Any:
    with path.open("rb") as f:
        head = f.read(9)
    if not _safetensors_shaped(head, path.stat().st_size):
        raise StorageError(f"checkpoint file {str(path)!r} is not a safetensors file (bad header).")
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            header = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        meta = json.loads(header[_META_KEY])
        return unflatten_state(tensors, meta)
    except (SafetensorError, OSError, KeyError, json.JSONDecodeError, InputError, ValueError) as exc:
        raise StorageError(f"checkpoint file {str(path)!r} cannot be decoded ({type(exc).__name__}: {exc}).") from exc


def load_checkpoint(path: str | os.PathLike, device: str | torch.device = "cpu") -> Checkpoint:
    """Load and fully verify one checkpoint folder written by :func:`save_checkpoint`.

    Order: refuse pickle payloads (by extension and magic bytes, before parsing anything), check
    ``state.json`` (valid JSON, own checksum, structure), then the size and SHA-256 of every group file,
    then decode. Any failure raises :class:`StorageError` whose sentence names the offending file.
    Tensors are placed on ``device`` (keep ``"cpu"`` for RNG groups).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise StorageError(f"checkpoint folder {str(folder)!r} does not exist.")
    _refuse_pickles(folder)
    state = _read_state(folder)
    files = state["files"]
    paths = {name: _verify_file(folder, name, entry) for name, entry in files.items()}
    groups = {g: _read_group(paths[f"{g}.safetensors"], device) for g in state["groups"]}
    try:
        extra = unflatten_state({}, state["extra"])
    except InputError as exc:
        where = str(folder / STATE_NAME)
        raise StorageError(f"checkpoint state file {where!r} has a bad extra entry ({exc}).") from exc
    return Checkpoint(step=state["step"], groups=groups, extra=extra, path=folder)


def load_latest(root: str | os.PathLike, device: str | torch.device = "cpu") -> Checkpoint | None:
    """Newest checkpoint under ``root`` that verifies; ``None`` if there are none at all.

    A checkpoint that fails verification is skipped with a ``warnings.warn`` naming it and the reason,
    and the next older one is tried. If checkpoints exist but none verifies, :class:`StorageError` is
    raised rather than returning ``None``: silently restarting from scratch would lose the run.
    """
    candidates = find_checkpoints(root)
    reasons = []
    for p in candidates:
        try:
            return load_checkpoint(p, device=device)
        except StorageError as exc:
            reasons.append(f"{p.name}: {exc}")
            warnings.warn(f"skipping unusable checkpoint {str(p)!r}: {exc} Falling back to an older one.", stacklevel=2)
    if candidates:
        raise StorageError(
            f"none of the {len(candidates)} checkpoints in {str(Path(root))!r} is usable: " + "; ".join(reasons)
        )
    return None
