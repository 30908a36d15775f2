"""Image folders: PNG/JPEG (also BMP, WebP, TIFF) files, class labels from sub-folders.

Layout: ``root/<class>/<file>`` gives one class per sub-folder (sorted names, label = index), or
``root/<file>`` for an unlabelled set (not both). Hidden files and folders (names starting with ``.``,
such as macOS ``._*`` files or ``.ipynb_checkpoints``) are ignored, and a sub-folder without images is not
a class. Every image is turned upright by its EXIF orientation tag, 16-bit grayscale is scaled to 8 bits
(``round(v / 257)``), and the image goes through the ``fit_square`` policy (shorter side to ``size``, centre
crop) and is converted to grayscale (``channels=1``) or RGB (``channels=3``); ``channels=None`` takes 1 when
every image is single-channel, else 3.

A file that cannot be decoded, or is larger than Pillow's decompression-bomb limit, raises
:class:`~gencore.errors.InputError` naming it; with ``skip_bad=True`` it is skipped and listed in
``ImageSet.skipped`` instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gencore.checks import check_int
from gencore.errors import InputError
from genimage.data.imageset import ImageSet, fit_square, pil_to_tensor

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")
GRAY_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F", "P")
WIDE_GRAY_MODES = ("I", "I;16", "I;16B", "I;16L", "I;16N")  # 16-bit grayscale (PNG, TIFF) opens as one of these
EXIF_ORIENTATION = 0x0112


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

    def wanted(path: Path, top: Path) -> bool:  # hidden files and folders are ignored
        hidden = any(part.startswith(".") for part in path.relative_to(top).parts)
        return not hidden and path.is_file() and path.suffix.lower() in suffixes

    direct = sorted(p for p in base.iterdir() if wanted(p, base))
    folders = sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    found = {name: sorted(p for p in (base / name).rglob("*") if wanted(p, base / name)) for name in folders}
    classes = [name for name in folders if found[name]]  # a sub-folder without such files is not a class
    labelled = [(p, k) for k, name in enumerate(classes) for p in found[name]]
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
    except Image.DecompressionBombError as exc:
        raise InputError(f"{name}: too large to decode safely ({str(exc).rstrip('.')}).") from exc
    except UnidentifiedImageError as exc:  # its message names a file object for in-memory members
        raise InputError(f"{name}: not a readable image (no image format recognised).") from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{name}: not a readable image ({type(exc).__name__}: {exc}).") from exc
    return img


def decode_still(path_or_file, name: str):
    """:func:`decode_image` of a still image, turned upright by its EXIF orientation, 16-bit gray scaled to 8 bits,
    float gray with values in [0, 1] scaled to 8 bits (in [0, 255] kept)."""
    from PIL import Image, ImageOps

    img = decode_image(path_or_file, name)
    try:
        if img.getexif().get(EXIF_ORIENTATION, 1) in range(2, 9):
            img = ImageOps.exif_transpose(img)
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{name}: unreadable EXIF data ({type(exc).__name__}: {exc}).") from exc
    if img.mode in WIDE_GRAY_MODES:
        wide = np.asarray(img).astype(np.float64)
        if wide.size and (wide.min() < 0 or wide.max() > 65535):
            raise InputError(
                f"{name}: a 32-bit integer image with values in [{wide.min():g}, {wide.max():g}]; expected 8- or "
                "16-bit pixel values (0 to 65535)."
            )
        img = Image.fromarray(np.clip(np.round(wide / 257.0), 0, 255).astype(np.uint8))  # mode L
    elif img.mode == "F":  # float gray (TIFF): [0, 1] is scaled to 8 bits, [0, 255] kept; Pillow would clip to 0/1
        f = np.asarray(img).astype(np.float64)
        if not np.isfinite(f).all() or (f.size and (f.min() < 0 or f.max() > 255)):
            raise InputError(f"{name}: a float image must hold finite values in [0, 1] or [0, 255].")
        scale = 255.0 if f.size == 0 or f.max() <= 1.0 else 1.0
        img = Image.fromarray(np.clip(np.round(f * scale), 0, 255).astype(np.uint8))  # mode L
    return img


def convert(img, channels: int, size: int) -> torch.Tensor:
    """Pillow image -> ``[channels, size, size]`` in ``[-1, 1]`` under the ``fit_square`` policy."""
    return pil_to_tensor(fit_square(img.convert("L" if channels == 1 else "RGB"), size))


def load_image_folder(
    root: str | os.PathLike, *, image_size: int = 32, channels: int | None = None, skip_bad: bool = False
) -> ImageSet:
    """Load a whole image folder into memory (see the module docstring)."""
    image_size = check_int(image_size, "image_size", low=1)
    if channels not in (None, 1, 3) or isinstance(channels, bool):
        raise InputError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels}.")
    files, labels, classes = list_images(root)

    def decode(path: Path) -> tuple[Any, bool]:
        """``(image at its final size, whether it is gray)``: only the small image is kept, so a folder of large
        photos is never all in memory at full size. A gray image is resized in mode ``L``; :meth:`Image.convert`
        to RGB afterwards gives exactly the pixels of resizing it as RGB (every band is resampled alike)."""
        img = decode_still(path, str(path))
        gray = img.mode in GRAY_MODES and img.mode != "P"
        return fit_square(img.convert("L" if gray or channels == 1 else "RGB"), image_size), gray

    decoded, kept, skipped = decode_files(files, decode, skip_bad, root, "image")
    if channels is None:
        channels = 1 if all(gray for _, gray in decoded) else 3
    images = torch.stack([pil_to_tensor(im.convert("L" if channels == 1 else "RGB")) for im, _ in decoded])
    y = None if labels is None else torch.tensor([labels[i] for i in kept], dtype=torch.long)
    return ImageSet(images, y, classes, name=Path(root).name or "folder", skipped=skipped)
