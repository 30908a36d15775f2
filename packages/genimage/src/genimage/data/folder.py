"""Image folders: PNG/JPEG (also BMP, WebP, TIFF) files, class labels from sub-folders.

Layout: ``root/<class>/<file>`` gives one class per sub-folder (sorted names, label = index), or
``root/<file>`` for an unlabelled set (not both). Every image goes through the ``fit_square``
policy (shorter side to ``size``, centre crop) and is converted to grayscale (``channels=1``) or
RGB (``channels=3``); ``channels=None`` takes 1 when every image is single-channel, else 3.

A file that cannot be decoded raises :class:`~gencore.errors.InputError` naming it; with
``skip_bad=True`` it is skipped and listed in ``ImageSet.skipped`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from gencore.errors import InputError
from genimage.data.imageset import ImageSet, fit_square, pil_to_tensor

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "F", "P")


def list_images(root: str | os.PathLike) -> tuple[list[Path], list[int] | None, list[str] | None]:
    """``(files, labels or None, class names or None)`` of an image folder (sorted, deterministic)."""
    return list_labelled_files(root, IMAGE_SUFFIXES, "images")


def list_labelled_files(
    root: str | os.PathLike, suffixes: tuple[str, ...], kind: str
) -> tuple[list[Path], list[int] | None, list[str] | None]:
    """Files with ``suffixes`` directly in ``root`` (unlabelled) or in class sub-folders (label = sorted index)."""
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"{kind[:-1]} folder {str(base)!r} does not exist or is not a folder.")
    direct = sorted(p for p in base.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    classes = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    labelled: list[tuple[Path, int]] = []
    for k, name in enumerate(classes):
        files = sorted(p for p in (base / name).rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        labelled += [(p, k) for p in files]
    if direct and labelled:
        raise InputError(
            f"{str(base)!r} holds {kind} both directly and in class sub-folders; use one layout or the other."
        )
    if labelled:
        return [p for p, _ in labelled], [k for _, k in labelled], classes
    if not direct:
        raise InputError(f"{str(base)!r} contains no {kind} ({', '.join(suffixes)}).")
    return direct, None, None


def decode_files(
    files: list[Path], decode: Any, skip_bad: bool, root: str | os.PathLike, kind: str
) -> tuple[list[Any], list[int], list[str]]:
    """``(decoded, kept indices, skipped names)``: ``decode(path)`` of each file; a file whose decoding raises
    :class:`InputError` stops loading, or with ``skip_bad`` is skipped and named; none readable is an error."""
    decoded, kept, skipped = [], [], []
    for i, path in enumerate(files):
        try:
            decoded.append(decode(path))
            kept.append(i)
        except InputError:
            if not skip_bad:
                raise
            skipped.append(str(path))
    if not decoded:
        raise InputError(f"no readable {kind} in {str(root)!r} ({len(skipped)} unreadable skipped).")
    return decoded, kept, skipped


def decode_image(path_or_file, name: str):
    """Open and fully decode an image with Pillow, raising :class:`InputError` naming ``name``."""
    from PIL import Image, UnidentifiedImageError

    try:
        img = Image.open(path_or_file)
        img.load()
    except UnidentifiedImageError as exc:  # its message names a file object for in-memory members
        raise InputError(f"{name}: not a readable image (no image format recognised).") from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{name}: not a readable image ({type(exc).__name__}: {exc}).") from exc
    return img


def convert(img, channels: int, size: int) -> torch.Tensor:
    """Pillow image -> ``[channels, size, size]`` in ``[-1, 1]`` under the ``fit_square`` policy."""
    return pil_to_tensor(fit_square(img.convert("L" if channels == 1 else "RGB"), size))


def load_image_folder(
    root: str | os.PathLike, *, image_size: int = 32, channels: int | None = None, skip_bad: bool = False
) -> ImageSet:
    """Load a whole image folder into memory (see the module docstring)."""
    files, labels, classes = list_images(root)
    decoded, kept, skipped = decode_files(files, lambda path: decode_image(path, str(path)), skip_bad, root, "image")
    if channels is None:
        channels = 1 if all(im.mode in GRAY_MODES and im.mode != "P" for im in decoded) else 3
    if channels not in (1, 3):
        raise InputError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}.")
    images = torch.stack([convert(im, channels, image_size) for im in decoded])
    y = None if labels is None else torch.tensor([labels[i] for i in kept], dtype=torch.long)
    return ImageSet(images, y, classes, name=Path(root).name or "folder", skipped=skipped)
