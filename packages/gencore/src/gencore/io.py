"""Atomic file writes and safetensors + JSON persistence.

Every file the suite writes goes to a temporary name in the same folder and is
then renamed into place (``os.replace`` is atomic on POSIX and Windows), so a
killed run never leaves a half-written checkpoint. Weights are stored as
safetensors with a JSON config beside them; nothing is loaded with pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from gencore.errors import StorageError

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"


def ensure_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) or raise :class:`StorageError` saying why."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create output folder {str(p)!r}: {exc.strerror or exc}.") from exc
    if not os.access(p, os.W_OK):
        raise StorageError(f"output folder {str(p)!r} is not writable.")
    return p


def _probe_nearest_folder(target: Path, start: Path, what: str) -> None:
    """Probe the nearest existing folder at or above ``start`` with a temporary file (removed at once);
    ``what`` (empty, or ending in a space) names ``target`` in the error."""
    folder = start
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise StorageError(f"cannot write {what}{str(target)!r}: {str(folder)!r} is a file, not a folder.")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise StorageError(f"cannot write {what}{str(target)!r}: {exc.strerror or exc}.") from exc


def check_writable(path: str | os.PathLike) -> Path:
    """Raise :class:`StorageError` now if a file could not be written at ``path`` later.

    Commands call this on their output files before any long work, so a run is not lost to an
    unwritable ``--json`` at its end. Nothing is created: the nearest existing folder above
    ``path`` is probed with a temporary file that is removed at once.
    """
    target = Path(path)
    if target.is_dir():
        raise StorageError(f"{str(target)!r} is a folder; name a file to write.")
    _probe_nearest_folder(target, target.parent, "")
    return target


def check_folder_writable(path: str | os.PathLike) -> Path:
    """Raise :class:`StorageError` now if ``path`` could not serve as an output folder later.

    The folder may exist (then it must be a writable folder) or be made later (then the nearest
    existing folder above it must be writable). Nothing is created, as in :func:`check_writable`.
    """
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise StorageError(f"output folder {str(target)!r} is a file; name a folder.")
    _probe_nearest_folder(target, target, "into the output folder ")
    return target


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it into place on success.

    On any exception the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    ensure_dir(target.parent)
    # A fresh unique name that the writer creates itself, so the file gets the usual permissions
    # (0666 less the umask) rather than mkstemp's private 0600.
    tmp_path = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        yield tmp_path
        os.replace(tmp_path, target)
    except OSError as exc:
        tmp_path.unlink(missing_ok=True)
        if exc.filename in (str(tmp_path), tmp_path) and not isinstance(exc, StorageError):
            raise StorageError(f"cannot write {str(target)!r}: {exc.strerror or exc}.") from exc
        raise
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Atomically write ``text`` to ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def _strict_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float as ``None``: JSON has neither, and strict readers (``jq``,
    JavaScript) reject the ``NaN`` that Python's ``json`` writes by default."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict_json(v) for v in value]
    return value


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Atomically write ``obj`` as indented, strict JSON: NaN and infinite floats are written as ``null``."""
    return write_text(path, json.dumps(_strict_json(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, raising :class:`StorageError` with the file name on failure (missing, a folder, below a
    file, unreadable, not UTF-8 text, not JSON)."""
    p = Path(path)
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise StorageError(f"{str(p)!r} does not exist.") from exc
    except IsADirectoryError as exc:
        raise StorageError(f"{str(p)!r} is a folder, not a JSON file.") from exc
    except NotADirectoryError as exc:
        parent = next((a for a in p.parents if a.is_file()), p.parent)
        raise StorageError(f"{str(p)!r} does not exist: {str(parent)!r} is a file, not a folder.") from exc
    except OSError as exc:
        raise StorageError(f"{str(p)!r} cannot be read ({exc.strerror or exc}).") from exc
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise StorageError(f"{str(p)!r} is not valid JSON ({reason}).") from None
    except json.JSONDecodeError as exc:
        raise StorageError(f"{str(p)!r} is not valid JSON (line {exc.lineno}: {exc.msg}).") from exc


def require_fields(record: Any, names: tuple[str, ...], source: str, hint: str = "") -> None:
    """Raise :class:`StorageError` unless ``record`` is a JSON object holding every field in ``names``.

    ``source`` names the file in the message (e.g. ``repr(str(path))``); ``hint`` is appended to it
    (e.g. ``"; it was not written by `genmol train`"``).
    """
    if not isinstance(record, dict):
        raise StorageError(f"{source} does not hold a JSON object{hint}.")
    missing = [name for name in names if name not in record]
    if missing:
        raise StorageError(f"{source} lacks the field {missing[0]!r}{hint}.")


def tensor_fingerprint(*tensors: torch.Tensor, header: str = "") -> str:
    """SHA-256 (hex) of ``header`` and each tensor's shape, dtype and bytes, in order: identifies the data a run
    or a fitted object was made from (a resumed or finished run is the same run only on the same data)."""
    digest = hashlib.sha256(header.encode())
    for x in tensors:
        x = x.detach().to("cpu").contiguous()
        digest.update(f"{tuple(x.shape)}|{x.dtype}".encode())
        digest.update(x.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_tensors(
    path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None
) -> Path:
    """Atomically save a flat dict of tensors as safetensors."""
    clean = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(clean, str(tmp), metadata=metadata)
        os.chmod(tmp, _usual_mode())  # safetensors creates its file private (0600), unlike every other file written
    return Path(path)


def _usual_mode() -> int:
    """0666 less the process's umask: the mode ``open(path, "w")`` gives a new file."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def load_tensors(path: str | os.PathLike, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load a safetensors file, raising :class:`StorageError` naming the file on failure."""
    p = Path(path)
    if not p.is_file():
        raise StorageError(f"weights file {str(p)!r} does not exist.")
    try:
        return load_file(str(p), device=str(device))
    except (SafetensorError, OSError, ValueError) as exc:
        raise StorageError(f"{str(p)!r} is not a readable safetensors file ({exc}).") from exc


def save_pretrained(directory: str | os.PathLike, state: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``directory``."""
    d = ensure_dir(directory)
    save_tensors(d / WEIGHTS_NAME, state)
    write_json(d / CONFIG_NAME, config)
    return d


def saved_float_dtype(state: dict[str, torch.Tensor]) -> torch.dtype | None:
    """The one floating-point dtype of saved weights (None when they have none or several): a module rebuilt from
    its config is cast to it before loading, since ``load_state_dict`` copies into the module's own dtype."""
    dtypes = {v.dtype for v in state.values() if v.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def rebuild_module(build: Callable[[], Any], state: dict[str, torch.Tensor], directory: str | os.PathLike, name: str):
    """``build()`` a module from a saved folder's config, cast it to the saved weights' one float dtype (a float64
    model comes back float64, not rounded to float32) and load ``state`` into it. A config the constructor refuses,
    or weights that do not fit what it builds, are one :class:`StorageError` sentence naming the folder."""
    where = str(Path(directory) / CONFIG_NAME)
    try:
        model = build()
    except (TypeError, ValueError) as exc:  # ValueError: the suite's ConfigError/InputError of a bad setting
        raise StorageError(f"{where!r} does not describe a {name} ({str(exc).rstrip('.')}).") from None
    dtype = saved_float_dtype(state)
    if dtype is not None:
        model = model.to(dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError:
        raise StorageError(
            f"the weights in {str(directory)!r} do not fit the {name} its config.json describes."
        ) from None
    return model


def load_pretrained(
    directory: str | os.PathLike, device: str | torch.device = "cpu"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read back what :func:`save_pretrained` wrote: ``(state, config)``."""
    d = Path(directory)
    if not d.is_dir():
        raise StorageError(f"model folder {str(d)!r} does not exist.")
    return load_tensors(d / WEIGHTS_NAME, device), read_json(d / CONFIG_NAME)


class Pretrained:
    """``save_pretrained`` / ``from_pretrained`` for a ``torch.nn.Module`` rebuilt from its own config.

    The module keeps what its constructor needs in ``self.config``: a dict of keyword arguments, or a dataclass
    instance passed as the single argument when the class sets ``config_class``. ``config.json`` holds that
    config plus ``"class"`` (the class name, for the reader); a config that does not build the class, or weights
    that do not fit what it builds, are one :class:`StorageError` sentence naming the folder.
    """

    config_class: type | None = None  # a dataclass given to the constructor as its one argument; None: kwargs

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        from dataclasses import asdict, is_dataclass

        config = asdict(self.config) if is_dataclass(self.config) else dict(self.config)
        return save_pretrained(directory, self.state_dict(), {"class": type(self).__name__, **config})

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> Any:
        state, config = load_pretrained(directory, device)
        where = str(Path(directory) / CONFIG_NAME)
        if not isinstance(config, dict):
            raise StorageError(f"{where!r} must hold a JSON object of {cls.__name__} settings.")
        kwargs = {k: v for k, v in config.items() if k != "class"}
        klass = cls.saved_class(config.get("class", cls.__name__), where)

        def build() -> Any:
            return klass(klass.config_class(**kwargs)) if klass.config_class is not None else klass(**kwargs)

        return rebuild_module(build, state, directory, klass.__name__).to(device)

    @classmethod
    def saved_class(cls, name: str, where: str) -> type:
        """The class to rebuild for the ``"class"`` name saved in ``where``: ``cls`` itself; a base class with a
        registry of subclasses overrides this to pick one."""
        return cls
