"""Watermark keys: a scheme name, an integer seed, the noise shape and the message, as a JSON file.

Everything secret (rotation angles, permutations, Fourier ring values, stream bits) is
*derived* from the seed with :func:`derive_generator`, so a key file is a few hundred bytes,
is human-readable, and regenerates bit-identical material on any machine. Nothing is loaded
with pickle.

Example:
    >>> key = new_key("spherical", (1, 32, 32), seed=7, message_bits=32)
    >>> key.save("k.json"); WatermarkKey.load("k.json") == key
    True
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import read_json, require_fields, write_json

__all__ = ["KEY_FORMAT", "SCHEMES", "WatermarkKey", "derive_generator", "derive_seed", "new_key", "parse_message"]

KEY_FORMAT = "genimage-watermark-key/1"
SCHEMES = ("spherical", "tree-ring", "gaussian-shading", "guidance", "molm")


def derive_seed(seed: int, purpose: str) -> int:
    """A 63-bit seed for ``purpose`` derived from the key seed by SHA-256 (independent streams per purpose)."""
    digest = hashlib.sha256(f"{int(seed)}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def derive_generator(seed: int, purpose: str) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed`."""
    return torch.Generator().manual_seed(derive_seed(seed, purpose))


def _is_int(value: Any) -> bool:
    """A JSON integer (``bool`` is an ``int`` subclass in Python but not an integer field)."""
    return isinstance(value, int) and not isinstance(value, bool)


def parse_message(text: str, bits: int | None = None) -> tuple[int, ...]:
    """Parse a message given as a string of ``0``/``1`` characters or as ``0x``-prefixed hex."""
    text = text.strip().lower()
    if text.startswith("0x"):
        digits = text[2:]
        if not digits or set(digits) - set("0123456789abcdef"):  # int() would also take a sign, '_' or spaces
            raise InputError(f"message {text!r} is not valid hexadecimal (digits 0-9 and a-f after 0x).")
        value = int(digits, 16)
        n = bits if bits is not None else 4 * len(text[2:])
        if value >= 1 << n:
            raise InputError(f"message {text!r} does not fit in {n} bits.")
        return tuple((value >> (n - 1 - i)) & 1 for i in range(n))
    if not text or set(text) - {"0", "1"}:
        raise InputError(f"message {text!r} must be a string of 0/1 characters or 0x-prefixed hex.")
    if bits is not None and len(text) != bits:
        raise InputError(f"message {text!r} has {len(text)} bits, expected {bits}.")
    return tuple(int(c) for c in text)


@dataclass(frozen=True)
class WatermarkKey:
    """A watermark key.

    Attributes:
        scheme: one of :data:`SCHEMES`.
        seed: the secret integer all key material is derived from.
        shape: the noise shape ``(C, H, W)`` the key was made for.
        message: the embedded bits (empty for zero-bit schemes).
        params: scheme parameters (e.g. ``parity_weight`` for spherical, ``radius`` for tree-ring).
    """

    scheme: str
    seed: int
    shape: tuple[int, int, int]
    message: tuple[int, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown watermark scheme {self.scheme!r}; expected one of: {', '.join(SCHEMES)}.")
        if len(self.shape) != 3 or any(int(s) < 1 for s in self.shape):
            raise InputError(f"key shape must be three positive integers (C, H, W), got {self.shape!r}.")
        if any(b not in (0, 1) for b in self.message):
            raise InputError("key message must contain only 0/1 bits.")

    @property
    def dim(self) -> int:
        c, h, w = self.shape
        return c * h * w

    def message_tensor(self) -> torch.Tensor:
        """The message as a ``[L]`` int64 tensor of 0/1."""
        return torch.tensor(self.message, dtype=torch.int64)

    def messages(self, n: int, bits: int, message: Any = None) -> torch.Tensor:
        """``[n, bits]`` int64 messages to embed: ``message`` (``[bits]`` for every image, or ``[n, bits]``) or, when
        None, the key's own; one :class:`InputError` unless the shape fits and every entry is a 0/1 bit."""
        m = self.message_tensor() if message is None else torch.as_tensor(message, dtype=torch.int64)
        m = m.expand(n, -1) if m.dim() == 1 else m
        if m.shape != (n, bits):
            raise InputError(f"message must have shape [{bits}] or [N, L], got {tuple(m.shape)}.")
        if bool(((m != 0) & (m != 1)).any()):
            raise InputError("message must hold only 0/1 bits.")
        return m

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["message"] = "".join(str(b) for b in self.message)
        return {"format": KEY_FORMAT, **d}

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "key") -> WatermarkKey:
        if not isinstance(d, dict) or d.get("format") != KEY_FORMAT:
            raise StorageError(f"{source} is not a genimage watermark key (expected format {KEY_FORMAT!r}).")
        require_fields(d, ("scheme", "seed", "shape", "message"), source)
        scheme, seed, shape, message = d["scheme"], d["seed"], d["shape"], d["message"]
        params = d.get("params", {})
        if not isinstance(scheme, str):
            raise StorageError(f"{source}: field 'scheme' must be a string, got {scheme!r}.")
        if not _is_int(seed):
            raise StorageError(f"{source}: field 'seed' must be an integer, got {seed!r}.")
        if not isinstance(shape, list) or len(shape) != 3 or not all(_is_int(s) and s >= 1 for s in shape):
            raise StorageError(f"{source}: field 'shape' must be three positive integers [C, H, W], got {shape!r}.")
        if not isinstance(message, str):
            raise StorageError(f"{source}: field 'message' must be a string of 0/1 bits, got {message!r}.")
        if not isinstance(params, dict):
            raise StorageError(f"{source}: field 'params' must be a mapping of name: value, got {params!r}.")
        return cls(
            scheme=scheme,
            seed=seed,
            shape=tuple(shape),
            message=parse_message(message) if message else (),
            params=dict(params),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Write the key as JSON (atomically)."""
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path: str | os.PathLike) -> WatermarkKey:
        """Read a key written by :meth:`save`."""
        return cls.from_dict(read_json(path), source=repr(str(path)))


def new_key(
    scheme: str,
    shape: tuple[int, int, int],
    *,
    seed: int | None = None,
    message: tuple[int, ...] | str | None = None,
    message_bits: int = 32,
    **params: Any,
) -> WatermarkKey:
    """Make a key; the seed defaults to 62 fresh bits from :mod:`secrets`, the message to seeded random bits."""
    if seed is None:
        seed = secrets.randbits(62)
    if scheme == "tree-ring":
        bits: tuple[int, ...] = ()
    elif message is None:
        if message_bits < 1:
            raise ConfigError(f"message_bits must be >= 1, got {message_bits}.")
        g = derive_generator(seed, "message")
        bits = tuple(int(b) for b in torch.randint(0, 2, (message_bits,), generator=g))
    elif isinstance(message, str):
        bits = parse_message(message)
    else:
        bits = tuple(int(b) for b in message)
    return WatermarkKey(scheme=scheme, seed=int(seed), shape=tuple(int(s) for s in shape), message=bits, params=params)
