"""Image values, PNG files and picture grids.

One convention everywhere in genimage: images are float tensors ``[N, C, H, W]`` with values in
``[-1, 1]`` (``C`` is 1 for grayscale, 3 for RGB). :func:`to_uint8` and :func:`from_uint8` convert
to and from 8-bit pixels (``u = round((x + 1) * 127.5)``, clipped to 0..255), :func:`save_png` writes
one image, :func:`write_grid` writes a grid of images as one PNG (or JPEG / WebP, by the file's suffix) and
:func:`save_images` writes one PNG per image. Every file is written atomically (temporary name, then renamed).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from gencore.checks import check_int
from gencore.errors import InputError
from gencore.io import atomic_path, ensure_dir

__all__ = [
    "GRID_FORMATS",
    "check_images",
    "from_uint8",
    "grid_format",
    "image_grid_array",
    "save_images",
    "save_png",
    "to_uint8",
    "write_grid",
]

GRID_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG", ".webp": "WEBP"}


def check_images(x: torch.Tensor, name: str = "images") -> torch.Tensor:
    """Raise :class:`InputError` unless ``x`` is a finite float tensor ``[N, C, H, W]`` with C in {1, 3}."""
    if not torch.is_tensor(x) or not x.is_floating_point():
        raise InputError(f"{name} must be a float tensor [N, C, H, W] in [-1, 1].")
    if x.dim() != 4 or x.shape[1] not in (1, 3):
        raise InputError(f"{name} must have shape [N, C, H, W] with C = 1 or 3, got {tuple(x.shape)}.")
    if not bool(torch.isfinite(x).all()):
        raise InputError(f"{name} contains NaN or inf values.")
    return x


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """``[N, C, H, W]`` floats in ``[-1, 1]`` -> uint8 array ``[N, H, W, C]`` (values outside are clipped)."""
    check_images(x)
    u = ((x.detach().cpu().float() + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return u.permute(0, 2, 3, 1).numpy()


def from_uint8(u: np.ndarray | torch.Tensor) -> torch.Tensor:
    """uint8 pixels ``[N, H, W, C]`` (or ``[N, H, W]`` grayscale) -> float32 ``[N, C, H, W]`` in ``[-1, 1]``."""
    a = torch.as_tensor(np.asarray(u))
    if a.dtype != torch.uint8:
        raise InputError(f"from_uint8 expects uint8 pixels, got {a.dtype}.")
    if a.dim() == 3:
        a = a.unsqueeze(-1)
    if a.dim() != 4 or a.shape[-1] not in (1, 3):
        raise InputError(
            f"from_uint8 expects [N, H, W, C] (C = 1 or 3) or [N, H, W] pixels, got shape {tuple(a.shape)}."
        )
    return a.permute(0, 3, 1, 2).float() / 127.5 - 1.0


def _pil_image(pixels: np.ndarray):
    from PIL import Image

    if pixels.shape[-1] == 1:
        return Image.fromarray(pixels[..., 0], mode="L")
    return Image.fromarray(pixels, mode="RGB")


def save_png(path: str | os.PathLike, image: torch.Tensor, *, scale: int = 1) -> Path:
    """Write one image ``[C, H, W]`` (or ``[1, C, H, W]``) in ``[-1, 1]`` as a PNG, enlarged ``scale`` times."""
    scale = check_int(scale, "scale", low=1)
    x = image.unsqueeze(0) if torch.is_tensor(image) and image.dim() == 3 else image
    if torch.is_tensor(x) and x.dim() == 4 and x.shape[0] != 1:
        raise InputError(f"save_png writes one image; got a batch of {x.shape[0]}.")
    img = _pil_image(to_uint8(x)[0])
    if scale > 1:
        from PIL import Image

        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    with atomic_path(path) as tmp:
        img.save(tmp, format="PNG")
    return Path(path)


def image_grid_array(images: torch.Tensor, nrow: int | None = None, padding: int = 1) -> np.ndarray:
    """Tile ``[N, C, H, W]`` images into one uint8 array ``[rows*(H+p)+p, cols*(W+p)+p, C]`` (p = padding)."""
    nrow = None if nrow is None else check_int(nrow, "nrow (or None)", low=1)
    padding = check_int(padding, "padding", low=0)
    pixels = to_uint8(images)
    n, h, w, c = pixels.shape
    cols = nrow or max(1, math.ceil(math.sqrt(n)))
    rows = max(1, math.ceil(n / cols))
    grid = np.full((rows * (h + padding) + padding, cols * (w + padding) + padding, c), 255, dtype=np.uint8)
    for i in range(n):
        r, k = divmod(i, cols)
        y0, x0 = padding + r * (h + padding), padding + k * (w + padding)
        grid[y0 : y0 + h, x0 : x0 + w] = pixels[i]
    return grid


def grid_format(path: str | os.PathLike) -> str:
    """The image format a grid file's suffix names (``GRID_FORMATS``); one :class:`InputError` sentence otherwise."""
    fmt = GRID_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputError(
            f"{str(path)!r}: a picture grid is written as {', '.join(sorted(set(GRID_FORMATS.values())))}; "
            f"name the file with one of the suffixes {', '.join(GRID_FORMATS)}."
        )
    return fmt


def write_grid(
    path: str | os.PathLike, images: torch.Tensor, *, nrow: int | None = None, scale: int | None = None
) -> Path:
    """Write ``[N, C, H, W]`` images in ``[-1, 1]`` as one grid (``nrow`` per row; about square by default).

    The format follows the suffix (:func:`grid_format`): PNG, JPEG (quality 95) or lossless WebP.

    Small images are enlarged with nearest-neighbour pixels (``scale``; by default so that a tile is at
    least 64 pixels wide) so that 8x8 digits stay visible.
    """
    from PIL import Image

    fmt = grid_format(path)
    check_images(images)
    scale = None if scale is None else check_int(scale, "scale (or None)", low=1)
    if images.shape[0] == 0:
        raise InputError("write_grid needs at least one image.")
    grid = image_grid_array(images, nrow)
    s = scale if scale is not None else -(-64 // images.shape[-1])  # ceil(64 / W)
    img = _pil_image(grid)
    if s > 1:
        img = img.resize((img.width * s, img.height * s), Image.NEAREST)
    options = {"JPEG": {"quality": 95}, "WEBP": {"lossless": True}}.get(fmt, {})
    with atomic_path(path) as tmp:
        img.save(tmp, format=fmt, **options)
    return Path(path)


def save_images(directory: str | os.PathLike, images: torch.Tensor, *, prefix: str = "img") -> Sequence[Path]:
    """Write each image of ``[N, C, H, W]`` as ``directory/{prefix}-{i:05d}.png``; return the paths."""
    d = ensure_dir(directory)
    check_images(images)
    return [save_png(d / f"{prefix}-{i:05d}.png", images[i]) for i in range(images.shape[0])]
