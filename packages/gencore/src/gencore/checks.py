"""Input validation shared by the suite: each check raises :class:`InputError`
with one sentence naming the offending argument and what was expected."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from gencore.errors import ConfigError, InputError


def check_finite(x: torch.Tensor, name: str) -> torch.Tensor:
    """Raise if ``x`` holds NaN or inf values; return ``x`` unchanged."""
    if not torch.is_tensor(x):
        raise InputError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    if (x.is_floating_point() or x.is_complex()) and not bool(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise InputError(f"{name} contains {bad} NaN or inf value(s); expected finite numbers.")
    return x


def check_ndim(x: torch.Tensor, ndim: int, name: str, shape_hint: str = "") -> torch.Tensor:
    """Raise unless ``x`` has exactly ``ndim`` dimensions."""
    if x.dim() != ndim:
        hint = f" {shape_hint}" if shape_hint else ""
        raise InputError(f"{name} must have {ndim} dimension(s){hint}, got shape {tuple(x.shape)}.")
    return x


def check_points(x: torch.Tensor, name: str) -> torch.Tensor:
    """Validate a point cloud ``[N, D]``: a finite 2-D real (floating or integer) tensor with N >= 1."""
    check_finite(x, name)
    if x.is_complex() or x.dtype == torch.bool:
        raise InputError(f"{name} must hold real coordinates (a floating or integer tensor), got dtype {x.dtype}.")
    check_ndim(x, 2, name, "[N, D]")
    if x.shape[0] == 0:
        raise InputError(f"{name} is empty; expected at least one point.")
    return x


def check_same_dim(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise unless two batches share their trailing (feature) shape."""
    if a.shape[1:] != b.shape[1:]:
        raise InputError(
            f"{name_a} has feature shape {tuple(a.shape[1:])} but {name_b} has {tuple(b.shape[1:])}; they must match."
        )


def _int_range(low: int | None, high: int | None) -> str:
    if high is not None:
        return f"an integer from {low} to {high}" if low is not None else f"an integer <= {high}"
    return {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")


def check_int(
    value: object, name: str, *, low: int | None = None, high: int | None = None, error: type[Exception] = ConfigError
) -> int:
    """``value`` as an ``int`` (a Python or NumPy integer, or a one-element integer tensor; never a bool or a
    float) within ``[low, high]``; otherwise one ``error`` sentence naming ``name`` and the range expected."""
    if not isinstance(value, bool) and not (torch.is_tensor(value) and value.dtype == torch.bool):
        try:
            number = operator.index(value)
        except TypeError:
            number = None
        if number is not None and (low is None or number >= low) and (high is None or number <= high):
            return number
    raise error(f"{name} must be {_int_range(low, high)}, got {value!r}.")


SEED_LIMIT = 2**32  # seeds are in [0, 2**32): NumPy's legacy range; rank seeds ``seed * 1_000_003 + rank`` fit torch's


def check_seed(value: object, name: str = "seed") -> int:
    """``value`` as a seed, an integer in ``[0, 2**32)`` (the range every seed of the suite takes: a negative one
    is refused by gymnasium and NumPy, one of ``2**64`` or more by torch's generator, each with a traceback)."""
    return check_int(value, name, low=0, high=SEED_LIMIT - 1)


def check_choice(value: str, choices: Sequence[str], what: str) -> str:
    """Raise :class:`ConfigError` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; expected one of: {', '.join(choices)}.")
    return value
