"""The in-memory image set every loader returns, and the resize policies.

An :class:`ImageSet` holds ``images: [N, C, H, W]`` float32 in ``[-1, 1]``, optional integer
``labels: [N]`` with their ``class_names``, and the names of files skipped as unreadable.

Resize policies (stated once, used by every loader):

- ``fit_square`` (photos, folders): resize so the shorter side equals ``size`` (antialiased bicubic,
  Pillow), then centre-crop ``size x size``. Aspect ratio is kept; the longer side loses its margins.
- ``resize`` (digits, spectrograms): antialiased bilinear resampling of the whole image to
  ``size x size`` (the source is already square).
- MNIST (28 x 28): ``size = 32`` pads 2 background pixels on every side (LeNet's convention, no
  resampling), ``size = 28`` keeps the digits, any other size pads to 32 and then resamples.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F

from gencore.errors import ConfigError, InputError
from genimage.imageio import check_images


@dataclass
class ImageSet:
    """Images ``[N, C, H, W]`` in ``[-1, 1]`` with optional labels (see the module docstring)."""

    images: torch.Tensor
    labels: torch.Tensor | None = None
    class_names: list[str] | None = None
    name: str = "images"
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_images(self.images, f"{self.name} images")
        if self.labels is not None and self.labels.shape != (self.images.shape[0],):
            raise InputError(
                f"{self.name}: labels must have shape [{self.images.shape[0]}], got {tuple(self.labels.shape)}."
            )

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else None

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(C, H, W)``."""
        return tuple(self.images.shape[1:])  # type: ignore[return-value]

    def subset(self, index: torch.Tensor) -> ImageSet:
        labels = None if self.labels is None else self.labels[index]
        return replace(self, images=self.images[index], labels=labels)

    def split(self, holdout: float, seed: int = 0) -> tuple[ImageSet, ImageSet]:
        """Deterministic ``(train, held-out)`` split; ``holdout`` is the held-out fraction."""
        keep, held = split_indices(len(self), holdout, seed)
        return self.subset(keep), self.subset(held)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """``(images,)`` or ``(images, labels)``: what a ``TensorDataset`` of this set holds."""
        return (self.images,) if self.labels is None else (self.images, self.labels)


def split_indices(n: int, holdout: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted ``(kept, held-out)`` indices of a seeded split of ``n`` items; ``holdout`` is the held-out fraction."""
    if not 0.0 < holdout < 1.0:
        raise ConfigError(f"holdout fraction must be in (0, 1), got {holdout}.")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    k = max(1, round(holdout * n))
    if k >= n:
        raise ConfigError(f"holding out {k} of {n} items (fraction {holdout}) leaves none to train on.")
    return perm[k:].sort().values, perm[:k].sort().values


def resize_images(x: torch.Tensor, size: int) -> torch.Tensor:
    """Antialiased bilinear resize of ``[N, C, H, W]`` to ``[N, C, size, size]`` (identity when equal)."""
    if x.shape[-2:] == (size, size):
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False).clamp(-1, 1)


def fit_square(img, size: int):
    """Pillow image -> shorter side ``size`` (bicubic, antialiased), centre-cropped to ``size x size``."""
    from PIL import Image

    w, h = img.size
    s = size / min(w, h)
    nw, nh = max(size, round(w * s)), max(size, round(h * s))
    img = img.resize((nw, nh), Image.BICUBIC, reducing_gap=None)
    left, top = (nw - size) // 2, (nh - size) // 2
    return img.crop((left, top, left + size, top + size))


def pil_to_tensor(img) -> torch.Tensor:
    """Pillow ``L`` or ``RGB`` image -> ``[C, H, W]`` float32 in ``[-1, 1]``."""
    a = np.asarray(img, dtype=np.uint8)
    if a.ndim == 2:
        a = a[..., None]
    return torch.from_numpy(a.copy()).permute(2, 0, 1).float() / 127.5 - 1.0
