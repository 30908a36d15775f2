"""The scikit-learn handwritten digits (UCI optical recognition of handwritten digits;
Alpaydin & Kaynak 1998): 1,797 grey-level 8 x 8 images with pixel values 0..16 and
labels 0..9. The data ship inside scikit-learn, so loading needs no network.

Scalings (``x`` in pixel units 0..16, output float32 ``[1797, 64]``, row-major 8 x 8):

- ``"symmetric"`` (default): ``x / 8 - 1``, in ``[-1, 1]``; fixed, data-independent,
  the usual image convention for diffusion and flow models.
- ``"standard"``: ``(x - mean) / std`` with the scalar mean and standard deviation over
  the whole data set (every pixel of every image), so the data set has zero mean and
  unit standard deviation overall.
- ``"none"``: raw pixel values 0..16.

:func:`digits_inverse_transform` maps model output back to pixel units for plotting
(``.reshape(-1, 8, 8)`` gives images).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from gencore.checks import check_choice
from gencore.errors import InputError

DIGITS_SCALINGS = ("symmetric", "standard", "none")
DIGITS_SHAPE = (8, 8)
DIGITS_MAX_PIXEL = 16.0


@lru_cache(maxsize=1)
def _raw() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits as _sk_load_digits

    bunch = _sk_load_digits()
    data = np.asarray(bunch.data, dtype=np.float64)
    target = np.asarray(bunch.target, dtype=np.int64)
    data.setflags(write=False)
    target.setflags(write=False)
    return data, target


def _stats() -> tuple[float, float]:
    data = _raw()[0]
    return float(data.mean()), float(data.std())


def load_digits(normalize: bool = True, *, scaling: str = "symmetric") -> torch.Tensor:
    """All 1,797 digits as float32 ``[1797, 64]``.

    Args:
        normalize: when False, return raw pixel values 0..16 (same as ``scaling="none"``).
        scaling: ``"symmetric"`` (``[-1, 1]``, default), ``"standard"`` (zero mean, unit
            std over the whole data set) or ``"none"``. See the module docstring.
    """
    check_choice(scaling, DIGITS_SCALINGS, "digits scaling")
    x = torch.tensor(_raw()[0], dtype=torch.float64)
    if not normalize or scaling == "none":
        return x.float()
    if scaling == "symmetric":
        return (x / (DIGITS_MAX_PIXEL / 2) - 1.0).float()
    mean, std = _stats()
    return ((x - mean) / std).float()


def digits_inverse_transform(x: torch.Tensor, *, scaling: str = "symmetric") -> torch.Tensor:
    """Map scaled digits ``[..., 64]`` back to pixel units (0..16 for real digits; not clipped).

    Inverse of :func:`load_digits` with the same ``scaling``; returns float32.
    """
    check_choice(scaling, DIGITS_SCALINGS, "digits scaling")
    if not torch.is_tensor(x):
        raise InputError(f"x must be a torch.Tensor, got {type(x).__name__}.")
    x = x.to(torch.float64)
    if scaling == "symmetric":
        out = (x + 1.0) * (DIGITS_MAX_PIXEL / 2)
    elif scaling == "standard":
        mean, std = _stats()
        out = x * std + mean
    else:
        out = x
    return out.float()


def digits_labels() -> torch.Tensor:
    """The digit class of each image, int64 ``[1797]`` in 0..9 (same order as :func:`load_digits`)."""
    return torch.tensor(_raw()[1], dtype=torch.int64)
