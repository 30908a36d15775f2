"""Sharded tar archives in the WebDataset layout, for image sets larger than memory.

A shard ``shard-00000.tar`` holds samples as consecutive members sharing a key: ``<key>.png`` (the
image) and, for labelled sets, ``<key>.cls`` (the class index as ASCII). :func:`write_shards` writes
such shards (each atomically) plus ``classes.json``; :class:`ShardedImages` streams them back as a
``torch.utils.data.IterableDataset``: every (rank, DataLoader worker) pair reads its own shards
(shard ``i`` goes to consumer ``i mod count``, :func:`gencore.train.data_shard`), in an order
shuffled per epoch from the seed, decoding and resizing one sample at a time (``fit_square``).
With fewer shards than consumers the samples of every shard are split instead. A member that does
not decode raises :class:`~gencore.errors.InputError` naming the shard and member, or is skipped and
counted (``skipped``) with ``skip_bad=True``.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.utils.data import IterableDataset

from gencore.errors import InputError
from gencore.io import atomic_path, ensure_dir, read_json, write_json
from gencore.train import data_shard
from genimage.data.folder import convert, decode_image
from genimage.data.imageset import ImageSet
from genimage.imageio import to_uint8


def write_shards(images: ImageSet, out_dir: str | os.PathLike, *, shard_size: int = 1000) -> list[Path]:
    """Write ``images`` as PNG members into ``out_dir/shard-XXXXX.tar``; return the shard paths."""
    from PIL import Image

    out = ensure_dir(out_dir)
    pixels = to_uint8(images.images)
    paths = []
    for s, start in enumerate(range(0, len(images), shard_size)):
        path = out / f"shard-{s:05d}.tar"
        with atomic_path(path) as tmp, tarfile.open(tmp, "w") as tar:
            for i in range(start, min(start + shard_size, len(images))):
                buf = io.BytesIO()
                px = pixels[i]
                Image.fromarray(px[..., 0] if px.shape[-1] == 1 else px).save(buf, format="PNG")
                members = {f"{i:08d}.png": buf.getvalue()}
                if images.labels is not None:
                    members[f"{i:08d}.cls"] = str(int(images.labels[i])).encode()
                for name, data in members.items():
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    write_json(out / "classes.json", {"class_names": images.class_names, "channels": images.shape[0]})
    return paths


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
        base = Path(root)
        self.shards = sorted(base.glob("*.tar"))
        if not self.shards:
            raise InputError(f"{str(base)!r} contains no .tar shards.")
        meta = read_json(base / "classes.json") if (base / "classes.json").is_file() else {}
        self.class_names = meta.get("class_names")
        self.channels = channels or int(meta.get("channels", 3))
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
                    if not member.isfile():
                        continue
                    key, _, ext = member.name.rpartition(".")
                    if key != current and group:
                        yield current, group
                        group = {}
                    current = key
                    group[ext.lower()] = tar.extractfile(member).read()
        except tarfile.TarError as exc:
            reason = " ".join(str(exc).split())  # tarfile lists one line per compression method it tried
            raise InputError(f"{shard}: not a readable tar shard ({reason}).") from exc
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
            raise InputError(f"{shard}: sample {key!r} has no image member.")
        img = decode_image(io.BytesIO(group[image_ext]), f"{shard}:{key}.{image_ext}")
        x = convert(img, self.channels, self.image_size)
        if "cls" not in group:
            return (x,)
        text = group["cls"].decode("utf-8", errors="replace").strip()
        try:
            label = int(text)
        except ValueError:
            raise InputError(f"{shard}:{key}.cls: the class label must be an integer, got {text[:20]!r}.") from None
        return x, torch.tensor(label, dtype=torch.long)
