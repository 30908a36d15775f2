"""Sharded tar archives in the WebDataset layout, for image sets larger than memory.

A shard ``shard-00000.tar`` holds samples as consecutive members sharing a key: ``<key>.png`` (the
image) and, for labelled sets, ``<key>.cls`` (the class index as ASCII). :func:`write_shards` writes
such shards (each atomically) plus ``classes.json`` into a folder that holds no shards yet, with a marker
``shards.incomplete`` there from before the first shard until after ``classes.json`` (a killed packing leaves it,
and :class:`ShardedImages` refuses such a folder rather than read a part of the set as the whole);
:class:`ShardedImages` streams them back as a ``torch.utils.data.IterableDataset``: every (rank,
DataLoader worker) pair reads its own shards (shard ``i`` goes to consumer ``i mod count``,
:func:`gencore.train.data_shard`), in an order shuffled per epoch from the seed, decoding and resizing
one sample at a time (``fit_square``).
With fewer shards than consumers the samples of every shard are split instead. Member names split as
WebDataset splits them: the key ends at the first dot of the file name, and hidden members (file names starting
with ``.``, such as macOS ``._*`` files) are skipped. A set is labelled when
``classes.json`` names its classes; otherwise ``.cls`` members are not read and every sample is ``(image,)``.
A member that does not decode, or in a labelled set a ``.cls`` label that is missing, not an integer or outside
``0 .. classes - 1``, raises :class:`~gencore.errors.InputError` naming the shard and member, or is skipped and
counted (``skipped``) with ``skip_bad=True``. A shard cut short or corrupt (it does not end with the tar
end-of-archive block where its members stop) is unreadable from there on: :class:`~gencore.errors.InputError` naming
it, or with ``skip_bad=True`` the rest of it is skipped.
"""

from __future__ import annotations

import io
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from gencore.checks import check_int
from gencore.errors import InputError
from gencore.io import atomic_path, ensure_dir, read_json, write_json, write_text
from gencore.train import data_shard
from genimage.data.folder import convert, decode_still
from genimage.data.imageset import ImageSet
from genimage.imageio import to_uint8

INCOMPLETE_NAME = "shards.incomplete"


def _refuse_existing(out: Path) -> None:
    """Refuse an output folder that already holds shards (of another set, or of an interrupted packing)."""
    if (out / INCOMPLETE_NAME).is_file():
        raise InputError(
            f"{str(out)!r} holds the shards of an interrupted 'genimage shards' run; remove the folder and pack again."
        )
    if out.is_dir() and any(out.glob("shard-*.tar")):  # stale shards of another set would be read with these
        raise InputError(f"{str(out)!r} already holds shards; choose a new folder so that they are not mixed.")


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _key_and_ext(name: str) -> tuple[str, str]:
    """WebDataset's split of a member name: the key ends at the first dot of the file name (folders may hold
    dots), the extension is the rest, so ``dir.v2/a.seg.png`` is key ``dir.v2/a`` with extension ``seg.png``."""
    folder, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), ext


class _ShardWriter:
    """Members into ``out/shard-XXXXX.tar`` files of ``shard_size`` samples, each shard written atomically."""

    def __init__(self, out: Path, shard_size: int) -> None:
        if shard_size < 1:  # refused before the folder is made: a failed call leaves no empty folder behind
            raise InputError(f"shard size must be a positive integer, got {shard_size}.")
        self.out, self.shard_size, self.paths, self.count = ensure_dir(out), shard_size, [], 0
        # written before the first shard, removed after classes.json: a folder killed midway is never read as a set
        write_text(self.out / INCOMPLETE_NAME, "packing by 'genimage shards' in progress or interrupted\n")
        self._tar: tarfile.TarFile | None = None
        self._atomic: Any = None

    def add(self, png: bytes, label: int | None) -> None:
        if self.count % self.shard_size == 0:
            self._close()
            self.paths.append(self.out / f"shard-{len(self.paths):05d}.tar")
            self._atomic = atomic_path(self.paths[-1])
            self._tar = tarfile.open(self._atomic.__enter__(), "w")
        members = {f"{self.count:08d}.png": png}
        if label is not None:
            members[f"{self.count:08d}.cls"] = str(int(label)).encode()
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            self._tar.addfile(info, io.BytesIO(data))
        self.count += 1

    def _close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._atomic.__exit__(None, None, None)
            self._tar = None

    def abort(self, exc: BaseException) -> None:
        """Discard the shard being written and the finished ones."""
        if self._tar is not None:
            self._tar.close()
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)  # removes the temporary file
            self._tar = None
        for path in self.paths:
            path.unlink(missing_ok=True)
        (self.out / INCOMPLETE_NAME).unlink(missing_ok=True)

    def finish(self, class_names: list[str] | None, channels: int) -> list[Path]:
        self._close()
        write_json(self.out / "classes.json", {"class_names": class_names, "channels": channels})
        (self.out / INCOMPLETE_NAME).unlink()
        return self.paths


def write_shards(images: ImageSet, out_dir: str | os.PathLike, *, shard_size: int = 1000) -> list[Path]:
    """Write ``images`` as PNG members into ``out_dir/shard-XXXXX.tar``; return the shard paths."""
    from PIL import Image

    if images.labels is not None:  # classes.json must name the classes, or the labels are not read back
        classes = len(images.class_names or ())
        if not classes:
            raise InputError(
                f"{images.name}: labelled images need class_names, or the shards' labels are not read back."
            )
        bad = images.labels[(images.labels < 0) | (images.labels >= classes)]
        if bad.numel():
            raise InputError(
                f"{images.name}: labels must be in 0..{classes - 1} ({classes} class names), got {int(bad[0])}."
            )
    out = Path(out_dir)
    _refuse_existing(out)
    created = not out.exists()
    writer = _ShardWriter(out, shard_size)
    try:
        for i, px in enumerate(to_uint8(images.images)):
            png = _png(Image.fromarray(px[..., 0] if px.shape[-1] == 1 else px))
            writer.add(png, None if images.labels is None else images.labels[i])
    except BaseException as exc:  # a partial set without classes.json would read back as a smaller unlabelled one
        writer.abort(exc)
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    return writer.finish(images.class_names, images.shape[0])


def shard_image_folder(
    root: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    shard_size: int = 1000,
    skip_bad: bool = False,
    progress: bool = True,
) -> tuple[list[Path], int, list[str]]:
    """Pack an image folder (the layout of :func:`genimage.data.load_image_folder`) into shards, one image at a
    time, so that a set larger than memory can be packed; ``(shard paths, images written, skipped files)``.

    Images keep their size (lossless PNG; :class:`ShardedImages` resizes when it reads) and their mode:
    grayscale stays grayscale, anything else becomes RGB; ``classes.json`` says 1 channel when every image is
    grayscale. An unreadable file stops the packing with its name and leaves no shard (nor a folder it made)
    behind; with ``skip_bad`` it is skipped and named. A folder that already holds shards is refused.
    """
    from tqdm.auto import tqdm

    from genimage.data.folder import GRAY_MODES, list_images

    files, labels, classes = list_images(root)
    out = Path(out_dir)
    _refuse_existing(out)
    created = not out.exists()
    writer = _ShardWriter(out, shard_size)
    skipped: list[str] = []
    gray = True
    try:
        for i, path in enumerate(tqdm(files, disable=not progress, desc="shards", unit="image")):
            try:
                img = decode_still(path, str(path))
            except InputError:
                if not skip_bad:
                    raise
                skipped.append(str(path))
                continue
            is_gray = img.mode in GRAY_MODES and img.mode != "P"
            gray = gray and is_gray
            writer.add(_png(img.convert("L" if is_gray else "RGB")), None if labels is None else labels[i])
        if not writer.count:
            raise InputError(f"no readable images in {str(root)!r} ({len(skipped)} unreadable skipped).")
    except BaseException as exc:  # also Ctrl-C: no partial set of shards is left to be mistaken for a whole one
        writer.abort(exc)
        if created and not any(out.iterdir()):
            out.rmdir()  # a folder this call made and left empty would only look like a finished job
        raise
    return writer.finish(classes, 1 if gray else 3), writer.count, skipped


class ShardedImages(IterableDataset):
    """Stream ``(image,)`` or ``(image, label)`` samples from tar shards (see the module docstring)."""

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        image_size: int = 32,
        channels: int | None = None,
        skip_bad: bool = False,
        seed: int = 0,
    ) -> None:
        image_size = check_int(image_size, "image_size", low=1)
        if channels not in (None, 1, 3) or isinstance(channels, bool):
            raise InputError(
                f"channels must be 1 (grayscale), 3 (RGB) or None (as classes.json says), got {channels!r}."
            )
        base = Path(root)
        if not base.is_dir():
            raise InputError(f"shard folder {str(base)!r} does not exist; pack an image folder with 'genimage shards'.")
        if (base / INCOMPLETE_NAME).is_file():
            raise InputError(
                f"shard folder {str(base)!r} holds an interrupted 'genimage shards' run ({INCOMPLETE_NAME}); "
                "remove it and pack the images again."
            )
        self.shards = sorted(p for p in base.glob("*.tar") if not p.name.startswith("."))  # not macOS ``._*``
        if not self.shards:
            raise InputError(f"{str(base)!r} contains no .tar shards.")
        meta = read_json(base / "classes.json") if (base / "classes.json").is_file() else {}
        names = meta.get("class_names") if isinstance(meta, dict) else None
        stored = meta.get("channels", 3) if isinstance(meta, dict) else None
        if not (
            isinstance(meta, dict)
            and (names is None or (isinstance(names, list) and all(isinstance(n, str) for n in names)))
            and stored in (1, 3)
            and not isinstance(stored, bool)
        ):
            raise InputError(
                f"{str(base / 'classes.json')!r}: expected a JSON object with 'class_names' (a list of names, or null) "
                "and 'channels' (1 or 3), as 'genimage shards' writes it."
            )
        self.class_names = names
        self.channels = channels or stored
        self.image_size = image_size
        self.skip_bad = skip_bad
        self.seed = seed
        self.epoch = 0
        self.skipped: list[str] = []

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _samples(self, shard: Path) -> Iterator[tuple[str, dict[str, bytes]]]:
        current, group = None, {}
        try:
            with tarfile.open(shard) as tar:
                for member in tar:
                    if not member.isfile() or member.name.rpartition("/")[2].startswith("."):
                        continue  # hidden members (macOS ``._*`` AppleDouble files) are skipped, as WebDataset does
                    key, ext = _key_and_ext(member.name)
                    if key != current and group:
                        yield current, group
                        group = {}
                    current = key
                    group[ext.lower()] = tar.extractfile(member).read()
                end = tar.offset  # tarfile stops without a word at a cut or corrupt header: check where it stopped
                tar.fileobj.seek(end)
                block = tar.fileobj.read(tarfile.BLOCKSIZE)
        except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as exc:  # a compressed shard cut short
            reason = " ".join(str(exc).split())  # tarfile lists one line per compression method it tried
            raise InputError(f"{shard}: not a readable tar shard ({reason}).") from exc
        if len(block) < tarfile.BLOCKSIZE or block.count(0) < tarfile.BLOCKSIZE:
            raise InputError(
                f"{shard}: not a readable tar shard (no end-of-archive block at byte {end}: the file is cut short or "
                "corrupt there)."
            )
        if group:
            yield current, group

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        index, count = data_shard()
        order = torch.randperm(len(self.shards), generator=torch.Generator().manual_seed(self.seed + self.epoch))
        shards = [self.shards[i] for i in order.tolist()]
        split_samples = len(shards) < count
        mine = shards if split_samples else shards[index::count]
        n = 0
        for shard in mine:
            samples = self._samples(shard)
            while True:
                try:
                    key, group = next(samples)
                except StopIteration:
                    break
                except InputError:  # the tar itself is unreadable from here on
                    if not self.skip_bad:
                        raise
                    self._skip(f"{shard} (unreadable tar)")
                    break
                n += 1
                if split_samples and (n - 1) % count != index:
                    continue
                try:
                    yield self._decode(shard, key, group)
                except InputError:
                    if not self.skip_bad:
                        raise
                    self._skip(f"{shard}:{key}")

    def _skip(self, name: str) -> None:
        if name not in self.skipped:  # once, however many epochs meet it
            self.skipped.append(name)

    def _decode(self, shard: Path, key: str, group: dict[str, bytes]) -> tuple[torch.Tensor, ...]:
        """``(image,)`` or ``(image, label)`` of one sample; :class:`InputError` naming shard and member."""
        image_ext = next((e for e in ("png", "jpg", "jpeg", "webp") if e in group), None)
        if image_ext is None:
            raise InputError(
                f"{shard}: sample {key!r} has no .png, .jpg, .jpeg or .webp member (WebDataset keys end at the first "
                "dot of the file name)."
            )
        img = decode_still(io.BytesIO(group[image_ext]), f"{shard}:{key}.{image_ext}")
        x = convert(img, self.channels, self.image_size)
        if not self.class_names:  # an unlabelled set: any .cls member is not read, so every sample is (image,)
            return (x,)
        classes = len(self.class_names)
        if "cls" not in group:  # a labelled set: a sample without its label would break every batch it lands in
            raise InputError(f"{shard}: sample {key!r} has no .cls label, but classes.json lists {classes} classes.")
        text = group["cls"].decode("utf-8", errors="replace").strip()
        try:
            label = int(text)
        except ValueError:
            raise InputError(f"{shard}:{key}.cls: the class label must be an integer, got {text[:20]!r}.") from None
        if not 0 <= label < classes:
            raise InputError(
                f"{shard}:{key}.cls: the class label must be in 0..{classes - 1} ({classes} classes in classes.json), "
                f"got {label}."
            )
        return x, torch.tensor(label, dtype=torch.long)
