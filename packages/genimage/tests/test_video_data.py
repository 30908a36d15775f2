"""Video data: VideoSet, Moving MNIST kinematics and scale, GIF round trips, video folders and bad files."""

from __future__ import annotations

import importlib.util
import os
import re

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from genimage.data.video import (
    VideoSet,
    load_video_folder,
    moving_mnist,
    moving_mnist_layout,
    read_gif,
    save_video_gif,
    write_video_grid,
)
from genimage.imageio import to_uint8


def _u8(videos: torch.Tensor) -> np.ndarray:
    """``[N, C, T, H, W]`` -> uint8 ``[N, T, H, W, C]``."""
    n, c, t, h, w = videos.shape
    return to_uint8(videos.permute(0, 2, 1, 3, 4).reshape(n * t, c, h, w)).reshape(n, t, h, w, c)


def _from_u8(frames: np.ndarray) -> torch.Tensor:
    """uint8 ``[T, H, W, C]`` -> one video ``[C, T, H, W]`` in ``[-1, 1]``."""
    return torch.from_numpy(frames).permute(3, 0, 1, 2).float() / 127.5 - 1.0


def _centre_of_mass(videos: torch.Tensor) -> np.ndarray:
    """``[N, 1, T, S, S]`` -> ``[N, T, 2]`` (row, col) centres of the pixel intensities above black."""
    m = (videos[:, 0].double() + 1.0) / 2.0
    idx = torch.arange(m.shape[-1], dtype=torch.float64)
    total = m.sum(dim=(-2, -1))
    rows = (m.sum(-1) * idx).sum(-1) / total
    cols = (m.sum(-2) * idx).sum(-1) / total
    return torch.stack([rows, cols], dim=-1).numpy()


def _reference_positions(start: np.ndarray, velocity: np.ndarray, lim: float, frames: int) -> np.ndarray:
    """Step-by-step bouncing (reflect position and velocity at 0 and ``lim``), rounded to pixels."""
    p, v = start.copy(), velocity.copy()
    out = []
    for _ in range(frames):
        out.append(np.floor(p + 0.5))
        p = p + v
        low, high = p < 0, p > lim
        p[low], v[low] = -p[low], -v[low]
        p[high], v[high] = 2 * lim - p[high], -v[high]
    return np.stack(out, axis=-2).astype(np.int64)  # [..., frames, 2]


@pytest.fixture(scope="module")
def mnist28():
    from genimage.data.bundled import load_mnist_set

    return load_mnist_set(28)


# --------------------------------------------------------------------------------------------- VideoSet


def test_videoset_validates_and_flattens_frames() -> None:
    v = torch.arange(4 * 3, dtype=torch.float32).reshape(4, 1, 3, 1, 1).expand(4, 1, 3, 5, 5) / 12.0
    data = VideoSet(v.contiguous(), torch.tensor([0, 1, 0, 1]), ["a", "b"])
    assert len(data) == 4 and data.shape == (1, 3, 5, 5) and data.num_classes == 2
    f = data.frames()
    assert f.shape == (12, 1, 5, 5)
    assert torch.equal(f[:, 0, 0, 0], torch.arange(12, dtype=torch.float32) / 12.0)  # video by video, in time order
    assert len(data.tensors()) == 2 and len(VideoSet(v.contiguous()).tensors()) == 1
    with pytest.raises(InputError, match="square"):
        VideoSet(torch.zeros(2, 1, 3, 4, 5))
    with pytest.raises(InputError, match="C = 1 or 3"):
        VideoSet(torch.zeros(2, 2, 3, 4, 4))
    with pytest.raises(InputError, match=r"\[N, C, T, H, W\]"):
        VideoSet(torch.zeros(2, 1, 4, 4))
    with pytest.raises(InputError, match="NaN"):
        VideoSet(torch.full((1, 1, 2, 4, 4), float("nan")))
    with pytest.raises(InputError, match="labels"):
        VideoSet(torch.zeros(2, 1, 3, 4, 4), torch.zeros(3, dtype=torch.long))


def test_videoset_split_is_deterministic_and_disjoint() -> None:
    ids = torch.arange(20, dtype=torch.float32) / 20.0
    data = VideoSet(ids.reshape(20, 1, 1, 1, 1).expand(20, 1, 2, 3, 3).contiguous(), torch.arange(20) % 3)
    train, held = data.split(0.25, seed=3)
    _, held_again = data.split(0.25, seed=3)
    _, held_other = data.split(0.25, seed=4)
    assert len(held) == 5 and len(train) == 15
    assert torch.equal(held.videos, held_again.videos) and not torch.equal(held.videos, held_other.videos)
    train_ids, held_ids = set(train.videos[:, 0, 0, 0, 0].tolist()), set(held.videos[:, 0, 0, 0, 0].tolist())
    assert not train_ids & held_ids and len(train_ids | held_ids) == 20
    assert torch.equal(held.labels, (held.videos[:, 0, 0, 0, 0] * 20).round().long() % 3)  # labels follow
    with pytest.raises(ConfigError):
        data.split(1.0)


# --------------------------------------------------------------------------------------------- Moving MNIST


def test_moving_mnist_shapes_range_and_seed() -> None:
    a = moving_mnist(12, frames=5, image_size=32, digits=2, seed=0)
    assert a.videos.shape == (12, 1, 5, 32, 32) and a.videos.dtype == torch.float32 and a.shape == (1, 5, 32, 32)
    assert a.labels is None and a.class_names is None
    assert float(a.videos.min()) == -1.0 and 0.9 < float(a.videos.max()) <= 1.0
    assert torch.equal(a.videos, moving_mnist(12, frames=5, image_size=32, digits=2, seed=0).videos)
    assert not torch.equal(a.videos, moving_mnist(12, frames=5, image_size=32, digits=2, seed=1).videos)
    assert not torch.equal(a.videos[:, :, 0], a.videos[:, :, 1])  # the digits move
    assert a.frames().shape == (60, 1, 32, 32)


@pytest.mark.parametrize(
    "kwargs", [{"n": 0}, {"frames": 1}, {"image_size": 7}, {"digits": 0}, {"n": True}, {"n": 2.0}, {"seed": -1}]
)
def test_moving_mnist_rejects_bad_arguments(kwargs) -> None:
    with pytest.raises(ConfigError):
        moving_mnist(**{"n": 2, **kwargs})


def test_moving_mnist_digit_scale_and_speed() -> None:
    for size, d in ((8, 4), (16, 7), (20, 9), (24, 10), (32, 14), (40, 18), (64, 28)):
        layout = moving_mnist_layout(50, frames=3, image_size=size, digits=2, seed=0)
        assert layout.digit_size == d and layout.speed == pytest.approx(0.1 * (size - d))
        assert np.allclose(np.hypot(*np.moveaxis(layout.velocity, -1, 0)), layout.speed)
        assert layout.positions.min() >= 0 and layout.positions.max() <= size - d


def test_single_digit_moves_at_constant_velocity_and_bounces_inside_the_canvas() -> None:
    n, frames, size = 48, 24, 32
    data = moving_mnist(n, frames=frames, image_size=size, digits=1, seed=5)
    layout = moving_mnist_layout(n, frames=frames, image_size=size, digits=1, seed=5)
    lim = size - layout.digit_size
    # the trajectories are those of a step-by-step simulation that reflects at both walls
    expected = _reference_positions(layout.start[:, 0], layout.velocity[:, 0], lim, frames)
    assert np.array_equal(layout.positions[:, 0], expected)
    # the digit is never cut off: the same mass in every frame
    mass = (data.videos[:, 0] + 1.0).sum(dim=(-2, -1))
    assert torch.allclose(mass, mass[:, :1].expand_as(mass), rtol=1e-5)
    # the picture moves rigidly with the layout: its centre of mass shifts by the corner's displacement
    com = _centre_of_mass(data.videos)
    assert np.allclose(com - com[:, :1], layout.positions[:, 0] - layout.positions[:, 0, :1], atol=1e-4)
    # constant velocity until the first bounce (within one pixel of rounding), then some bounce happens
    step = np.diff(com, axis=1)  # [n, T-1, 2]
    bounced = 0
    for i in range(n):
        u = layout.start[i, 0][None] + layout.velocity[i, 0][None] * np.arange(frames)[:, None]
        outside = ((u < 0) | (u > lim)).any(axis=1)
        first = int(np.argmax(outside)) if outside.any() else frames
        bounced += first < frames
        free = step[i, : max(0, first - 1)]
        assert np.all(np.abs(free - layout.velocity[i, 0]) <= 1.0 + 1e-6)
        if len(free) >= 2:
            assert np.ptp(free, axis=0).max() <= 1.0 + 1e-6
    assert bounced > n // 2  # 24 frames at 1.8 px per frame over an 18 px range: most digits bounce
    # the centre of mass keeps to the range the digit box allows: [com at corner 0, com at corner lim]
    com0 = com[:, :1] - layout.positions[:, 0, :1]
    assert np.all(com - com0 >= -1e-4) and np.all(com - com0 <= lim + 1e-4)


def test_single_digit_labels_and_original_scale(mnist28) -> None:
    data = moving_mnist(30, frames=4, image_size=64, digits=1, seed=2)
    layout = moving_mnist_layout(30, frames=4, image_size=64, digits=1, seed=2)
    src = torch.from_numpy(layout.sources[:, 0])
    assert data.class_names == [str(k) for k in range(10)] and data.num_classes == 10
    assert torch.equal(data.labels, mnist28.labels[src])
    assert len(set(data.labels.tolist())) > 3
    for i in range(30):
        for t in range(4):
            r, c = layout.positions[i, 0, t]
            frame = data.videos[i, 0, t]
            # at 64x64 the digit is the MNIST digit itself, unresampled, in a 28x28 box; black elsewhere
            assert torch.allclose(frame[r : r + 28, c : c + 28], mnist28.images[src[i], 0], atol=1e-5)
            outside = frame.clone()
            outside[r : r + 28, c : c + 28] = -1.0
            assert bool((outside == -1.0).all())


def test_two_digits_combine_by_maximum(mnist28) -> None:
    data = moving_mnist(20, frames=3, image_size=64, digits=2, seed=9)
    layout = moving_mnist_layout(20, frames=3, image_size=64, digits=2, seed=9)
    for i in range(20):
        canvas = torch.full((64, 64), -1.0)
        for k in range(2):
            r, c = layout.positions[i, k, 2]
            patch = canvas[r : r + 28, c : c + 28]
            canvas[r : r + 28, c : c + 28] = torch.maximum(patch, mnist28.images[layout.sources[i, k], 0])
        assert torch.allclose(data.videos[i, 0, 2], canvas, atol=1e-5)


# --------------------------------------------------------------------------------------------- GIF files


def test_gray_gif_round_trip_is_exact_even_with_repeated_frames(tmp_path) -> None:
    video = moving_mnist(1, frames=5, image_size=16, digits=1, seed=0).videos[0]
    video = video[:, [0, 0, 1, 2, 2, 2, 3, 4]]  # Pillow merges identical consecutive frames; read_gif splits them
    path = save_video_gif(tmp_path / "sub" / "dir" / "one.gif", video, fps=8)
    back = read_gif(path)
    assert back.shape == (1, 8, 16, 16)
    assert np.array_equal(_u8(back[None]), _u8(video[None]))
    still = video[:, [3, 3, 3, 3]]  # every frame identical: Pillow writes one frame
    assert np.array_equal(_u8(read_gif(save_video_gif(tmp_path / "still.gif", still))[None]), _u8(still[None]))
    assert sorted(p.name for p in (tmp_path / "sub" / "dir").iterdir()) == ["one.gif"]  # no temporary left


def test_a_gif_that_turns_colour_after_a_gray_first_frame_loads_as_rgb(tmp_path) -> None:
    """A GIF is gray only when every frame it keeps is gray: a red frame after a gray one keeps its colour."""
    video = torch.full((3, 2, 4, 4), -1.0)
    video[:, 0] = 0.2  # frame 0 gray
    video[0, 1] = 1.0  # frame 1 pure red
    (tmp_path / "v").mkdir()
    save_video_gif(tmp_path / "v" / "a.gif", video)
    data = load_video_folder(tmp_path / "v", image_size=4, frames=2)
    assert data.shape == (3, 2, 4, 4)
    assert np.array_equal(_u8(data.videos), _u8(video[None]))
    assert _u8(data.videos)[0, 1, 0, 0].tolist() == [255, 0, 0]
    green = torch.full((3, 2, 4, 4), -1.0)
    green[1] = 1.0  # red = blue everywhere, green differs: colour, not gray
    back = read_gif(save_video_gif(tmp_path / "green.gif", green))
    assert back.shape == (3, 2, 4, 4) and np.array_equal(_u8(back[None]), _u8(green[None]))


def test_a_frame_limit_that_ends_inside_a_merged_gif_frame_keeps_exactly_that_many(tmp_path) -> None:
    video = moving_mnist(1, frames=3, image_size=8, digits=1, seed=0).videos[0]
    video = video[:, [0, 1, 1, 1, 2]]  # Pillow writes frame 1 once, three delays long
    (tmp_path / "v").mkdir()
    save_video_gif(tmp_path / "v" / "a.gif", video)
    for frames in (1, 2, 3, 4, 5):
        data = load_video_folder(tmp_path / "v", image_size=8, frames=frames)
        assert data.shape == (1, frames, 8, 8)
        assert np.array_equal(_u8(data.videos), _u8(video[None, :, :frames]))


def test_rgb_gif_round_trip_and_grid(tmp_path) -> None:
    rng = np.random.default_rng(0)
    palette = rng.integers(0, 256, (40, 3), dtype=np.uint8)  # at most 256 colours per frame: GIF keeps them all
    frames = palette[rng.integers(0, 40, (3, 6, 10, 10))]  # 3 videos [T=6, 10, 10, 3]
    videos = torch.stack([_from_u8(f) for f in frames])
    back = read_gif(save_video_gif(tmp_path / "rgb.gif", videos[0], fps=10))
    assert back.shape == (3, 6, 10, 10) and np.array_equal(_u8(back[None])[0], frames[0])
    grid = read_gif(write_video_grid(tmp_path / "grid.gif", videos, nrow=2))  # 1-px white padding
    assert grid.shape == (3, 6, 2 * 11 + 1, 2 * 11 + 1)
    tiles = _u8(grid[None])[0]
    for i in range(3):
        r, k = divmod(i, 2)
        assert np.array_equal(tiles[:, 1 + r * 11 : 11 + r * 11, 1 + k * 11 : 11 + k * 11], frames[i])
    assert (tiles[:, 0] == 255).all()
    one = read_gif(write_video_grid(tmp_path / "one.gif", videos[:1], nrow=1))
    assert np.array_equal(_u8(one[None])[0][:, 1:-1, 1:-1], frames[0])


def test_write_video_grid_refuses_bad_paths_and_settings(tmp_path) -> None:
    v = torch.zeros(1, 1, 2, 4, 4)
    with pytest.raises(InputError, match=r"out\.png.*\.gif"):
        write_video_grid(tmp_path / "out.png", v)
    with pytest.raises(ConfigError, match="fps"):
        write_video_grid(tmp_path / "out.gif", v, fps=0)
    with pytest.raises(InputError, match=r"\[N, C, T, H, W\]"):
        write_video_grid(tmp_path / "out.gif", torch.zeros(1, 2, 4, 4))
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------- video folders


def _gray(t: int, size: tuple[int, int] = (16, 16), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (t, *size), dtype=np.uint8)


def test_npy_videos_load_with_fit_square(tmp_path) -> None:
    root = tmp_path / "gray"
    root.mkdir()
    a, b = _gray(10, seed=1), _gray(8, seed=2)[..., None]  # [T, H, W] and [T, H, W, 1]
    np.save(root / "a.npy", a)
    np.save(root / "b.npy", b)
    data = load_video_folder(root, image_size=16, frames=8)
    assert data.videos.shape == (2, 1, 8, 16, 16) and data.labels is None and data.skipped == []
    assert np.array_equal(_u8(data.videos)[0, ..., 0], a[:8])  # the first 8 frames, unresampled at the same size
    assert np.array_equal(_u8(data.videos)[1], b)
    np.save(root / "c.npy", np.random.default_rng(3).integers(0, 256, (9, 12, 20, 3), dtype=np.uint8))
    mixed = load_video_folder(root, image_size=8, frames=6)
    assert mixed.videos.shape == (3, 3, 6, 8, 8)  # one colour video: every video becomes RGB
    assert torch.equal(mixed.videos[0, 0], mixed.videos[0, 2])
    assert load_video_folder(root, image_size=8, frames=6, channels=1).videos.shape == (3, 1, 6, 8, 8)


def test_class_folders_mix_gif_and_npy(tmp_path) -> None:
    root = tmp_path / "classes"
    (root / "up").mkdir(parents=True)
    (root / "down").mkdir()
    clip = moving_mnist(1, frames=8, image_size=16, digits=1, seed=4).videos[0]
    save_video_gif(root / "up" / "x.gif", clip)
    np.save(root / "up" / "y.npy", _gray(8))
    np.save(root / "down" / "z.npy", _gray(9, seed=5))
    data = load_video_folder(root, image_size=16, frames=8)
    assert data.class_names == ["down", "up"] and data.labels.tolist() == [0, 1, 1]
    assert data.videos.shape == (3, 1, 8, 16, 16)  # the GIF's gray palette counts as grayscale
    assert np.array_equal(_u8(data.videos[1:2]), _u8(clip[None]))
    (root / "stray.npy").write_bytes(b"")
    with pytest.raises(InputError, match="both directly and in class sub-folders"):
        load_video_folder(root)


class _Boom:
    """Unpickling this object would create the folder named in it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _bad_files(root) -> dict[str, str]:
    """Write one bad file of each kind into ``root``; ``{file name: what the message says}``."""
    np.save(root / "short.npy", _gray(3))
    (root / "corrupt.gif").write_bytes(np.random.default_rng(0).integers(0, 256, 500, dtype=np.uint8).tobytes())
    np.save(root / "floats.npy", _gray(8).astype(np.float64))
    np.save(root / "pickled.npy", np.array([_Boom(str(root / "unpickled"))], dtype=object), allow_pickle=True)
    return {
        "short.npy": "3 frames",
        "corrupt.gif": "not a readable",
        "floats.npy": "float64",
        "pickled.npy": "allow_pickle",
    }


@pytest.mark.parametrize("bad", ["short.npy", "corrupt.gif", "floats.npy", "pickled.npy"])
def test_each_bad_video_is_named(tmp_path, bad) -> None:
    root = tmp_path / "one"
    root.mkdir()
    np.save(root / "good.npy", _gray(8))
    scratch = tmp_path / "all"
    scratch.mkdir()
    said = _bad_files(scratch)
    (root / bad).write_bytes((scratch / bad).read_bytes())
    with pytest.raises(InputError, match=rf"{re.escape(bad)}.*{said[bad]}"):
        load_video_folder(root, image_size=8, frames=8)
    assert not (root / "unpickled").exists() and not (scratch / "unpickled").exists()  # never unpickled


def test_bad_videos_are_skipped_and_listed(tmp_path) -> None:
    root = tmp_path / "vids"
    root.mkdir()
    np.save(root / "good.npy", _gray(8))
    bad = _bad_files(root)
    data = load_video_folder(root, image_size=8, frames=8, skip_bad=True)
    assert len(data) == 1 and data.videos.shape == (1, 1, 8, 8, 8)
    assert data.skipped == sorted(str(root / name) for name in bad)
    assert not (root / "unpickled").exists()
    (root / "good.npy").unlink()
    with pytest.raises(InputError, match="no readable video"):
        load_video_folder(root, image_size=8, frames=8, skip_bad=True)


def test_a_skipped_video_does_not_shift_the_labels_of_the_rest(tmp_path) -> None:
    root = tmp_path / "vids"
    for name, files in (("a", ("0-bad.npy", "1.npy")), ("b", ("0.npy", "1.npy"))):
        (root / name).mkdir(parents=True)
        for f in files:
            np.save(root / name / f, _gray(2) if "bad" not in f else np.zeros((2, 8, 8), dtype=np.float32))
    data = load_video_folder(root, image_size=8, frames=2, skip_bad=True)
    assert data.skipped == [str(root / "a" / "0-bad.npy")]
    assert data.class_names == ["a", "b"] and data.labels.tolist() == [0, 1, 1]


def test_folder_errors(tmp_path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_video_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="contains no videos"):
        load_video_folder(tmp_path / "empty")
    with pytest.raises(ConfigError, match="channels"):
        load_video_folder(tmp_path / "empty", channels=2)


@pytest.mark.skipif(importlib.util.find_spec("av") is not None, reason="PyAV is installed")
def test_mp4_without_pyav_says_what_to_install(tmp_path) -> None:
    root = tmp_path / "mp4"
    root.mkdir()
    np.save(root / "a.npy", _gray(8))
    (root / "clip.mp4").write_bytes(b"\x00" * 64)
    for skip_bad in (False, True):
        with pytest.raises(ConfigError, match=r"clip\.mp4.*install genimage\[video\] \(PyAV\)"):
            load_video_folder(root, image_size=8, skip_bad=skip_bad)


def test_an_mp4_folder_loads_through_pyav(tmp_path) -> None:
    """Encode a moving square with FFmpeg's MPEG-4 codec, then read it back (lossy: compare loosely)."""
    av = pytest.importorskip("av")
    from genimage.data.video import load_video_folder

    frames = np.zeros((6, 32, 32, 3), np.uint8)
    for t in range(6):
        frames[t, 8:16, 4 + 3 * t : 12 + 3 * t] = 255
    path = tmp_path / "v" / "clip.mp4"
    path.parent.mkdir()
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        for f in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        out.mux(stream.encode())
    ds = load_video_folder(tmp_path / "v", image_size=32, frames=5)
    assert ds.videos.shape == (1, 3, 5, 32, 32)
    want = torch.from_numpy(frames[:5]).permute(3, 0, 1, 2).float() / 127.5 - 1
    assert float((ds.videos[0] - want).abs().mean()) < 0.1  # the square is where it was put, in every frame
    with pytest.raises(InputError, match=r"clip\.mp4: holds 6 frames, fewer than the 9 asked for"):
        load_video_folder(tmp_path / "v", image_size=32, frames=9)


def test_frames_of_colour_videos_keep_each_frames_channels_together() -> None:
    v = torch.rand(2, 3, 4, 5, 5, generator=torch.Generator().manual_seed(0)) * 2 - 1
    f = VideoSet(v).frames()
    assert f.shape == (8, 3, 5, 5)
    for k in range(8):
        assert torch.equal(f[k], v[k // 4, :, k % 4])  # frame k % 4 of video k // 4, all three channels


def test_a_video_one_frame_short_is_refused_and_one_of_exactly_enough_frames_loads(tmp_path) -> None:
    np.save(tmp_path / "seven.npy", _gray(7))
    with pytest.raises(InputError, match=r"seven\.npy: holds 7 frames, fewer than the 8 asked for"):
        load_video_folder(tmp_path, image_size=8, frames=8)
    assert load_video_folder(tmp_path, image_size=8, frames=7).videos.shape == (1, 1, 7, 8, 8)
