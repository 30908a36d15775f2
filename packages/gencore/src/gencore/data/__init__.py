"""Data sets that need no network: seeded 2-D toy distributions and scikit-learn's digits.

:func:`get_dataset` is the single entry point used by command lines and demos:
``get_dataset("moons", 10_000, seed=0)`` or ``get_dataset("digits")``.
"""

from __future__ import annotations

import torch

from gencore.data.digits import (
    DIGITS_SCALINGS,
    DIGITS_SHAPE,
    digits_inverse_transform,
    digits_labels,
    load_digits,
)
from gencore.data.toy import (
    TOY_DATASETS,
    _check_n,
    as_generator,
    sample_8gaussians,
    sample_checkerboard,
    sample_moons,
    sample_rings,
    sample_spirals,
    toy_dataset,
)
from gencore.errors import ConfigError, InputError

DATASETS: tuple[str, ...] = (*TOY_DATASETS, "digits")


def get_dataset(
    name: str,
    n: int | None = None,
    *,
    seed: int | None = None,
    generator: torch.Generator | None = None,
    scaling: str = "symmetric",
) -> torch.Tensor:
    """Return a data set by name (one of :data:`DATASETS`) as a float32 tensor ``[n, D]``.

    - Toy names draw ``n`` fresh points ``[n, 2]``; ``n`` is required.
    - ``"digits"`` returns all 1,797 images ``[1797, 64]`` (scaled with ``scaling``, see
      :func:`load_digits`) when ``n`` is None, else ``n <= 1797`` distinct images chosen at
      random (without replacement) with ``seed`` / ``generator``.
    """
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; expected one of: {', '.join(DATASETS)}.")
    if name != "digits":
        if n is None:
            raise ConfigError(f"dataset {name!r} is sampled on the fly: pass the number of points n.")
        return toy_dataset(name, n, seed=seed, generator=generator)
    x = load_digits(scaling=scaling)
    if n is None:
        return x
    n = _check_n(n)
    if n > x.shape[0]:
        raise InputError(f"n must be an integer between 0 and {x.shape[0]} for 'digits', got {n!r}.")
    idx = torch.randperm(x.shape[0], generator=as_generator(generator, seed=seed))[:n]
    return x[idx]


__all__ = [
    "DATASETS",
    "DIGITS_SCALINGS",
    "DIGITS_SHAPE",
    "TOY_DATASETS",
    "digits_inverse_transform",
    "digits_labels",
    "get_dataset",
    "load_digits",
    "sample_8gaussians",
    "sample_checkerboard",
    "sample_moons",
    "sample_rings",
    "sample_spirals",
    "toy_dataset",
]
