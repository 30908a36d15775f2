"""Damaged and odd files (shards cut short, truncated GIFs, corrupt .npy headers, empty WAVs, stale shards), bad
spectrogram settings, and folder loaders that keep only the resized pixels, checked against Pillow called directly."""

from __future__ import annotations

import gzip
import io
import tarfile
import weakref

import numpy as np
import pytest
import torch
from PIL import Image

from gencore.errors import ConfigError, InputError
from genimage.data import ImageSet, ShardedImages, load_image_folder, write_shards
from genimage.data.audio import MelConfig, load_mel_set, read_wav, synth_clips, write_wav
from genimage.data.video import load_video_folder, read_gif, save_video_gif
from genimage.imageio import to_uint8


def _unlabelled_shard(root, n=20) -> bytes:
    """One shard of ``n`` distinct 8x8 gray images (pixel (0, 0) holds the index); its bytes."""
    images = torch.full((n, 1, 8, 8), -1.0)
    images[:, 0, 0, 0] = torch.arange(n, dtype=torch.float32) / 127.5 - 1
    (path,) = write_shards(ImageSet(images, name="u"), root, shard_size=n)
    return path.read_bytes()


def test_a_shard_cut_short_or_with_a_corrupt_header_is_named_not_read_as_a_smaller_set(tmp_path) -> None:
    """tarfile stops without a word at a missing or broken header: a copy cut between two members used to stream
    as a smaller set (8 of 20 samples here), and a corrupt header in the middle dropped the rest of the shard."""
    full = _unlabelled_shard(tmp_path / "s")
    shard = tmp_path / "s" / "shard-00000.tar"
    assert len(list(ShardedImages(tmp_path / "s", image_size=8))) == 20
    with tarfile.open(fileobj=io.BytesIO(full)) as tar:
        offsets = [m.offset for m in tar]
    assert len(offsets) == 20
    corrupt = bytearray(full)
    corrupt[offsets[10] + 150] ^= 0x55  # inside member 10's header checksum
    for damaged in (full[: offsets[8]], full[: offsets[8] + 100], bytes(corrupt)):
        shard.write_bytes(damaged)
        with pytest.raises(InputError, match=r"shard-00000\.tar: not a readable tar shard") as exc:
            list(ShardedImages(tmp_path / "s", image_size=8))
        assert len(str(exc.value).splitlines()) == 1
        stream = ShardedImages(tmp_path / "s", image_size=8, skip_bad=True)
        got = sorted(round((float(x[0, 0, 0]) + 1) * 127.5) for (x,) in stream)
        assert got == list(range(len(got))) and len(got) <= 10  # the members before the damage, then skipped
        assert stream.skipped == [f"{shard} (unreadable tar)"]
    # a gzip-compressed shard streams whole; cut short it is one sentence, not EOFError from the gzip module
    packed = gzip.compress(full)
    shard.write_bytes(packed)
    assert len(list(ShardedImages(tmp_path / "s", image_size=8))) == 20
    shard.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match=r"shard-00000\.tar: not a readable tar shard"):
        list(ShardedImages(tmp_path / "s", image_size=8))


def test_hidden_shard_members_are_skipped_as_webdataset_skips_them(tmp_path) -> None:
    """A tar packed on macOS holds ``._<name>`` AppleDouble members; their names have no key before the first dot,
    so WebDataset skips them (as the image folder loader skips hidden files) rather than failing the sample."""
    png = io.BytesIO()
    Image.new("L", (8, 8), 200).save(png, format="PNG")
    root = tmp_path / "mac"
    root.mkdir()
    with tarfile.open(root / "a.tar", "w") as tar:
        for name, payload in (
            ("pets/._000.png", b"\x00\x05\x16\x07 AppleDouble"),
            ("pets/000.png", png.getvalue()),
            ("pets/.DS_Store", b"\x00\x00\x00\x01Bud1"),
            ("pets/001.png", png.getvalue()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    items = list(ShardedImages(root, image_size=8, channels=1))
    assert len(items) == 2 and all(torch.equal(x, torch.full((1, 8, 8), 200 / 127.5 - 1)) for (x,) in items)


def test_write_shards_refuses_a_folder_that_already_holds_shards(tmp_path) -> None:
    """Writing 2 images over a set of 3 shards used to stream back 6 images: the 2 new ones and 4 stale ones."""
    old = ImageSet(torch.full((6, 1, 8, 8), 1.0), name="old")
    write_shards(old, tmp_path / "s", shard_size=2)
    before = {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()}
    with pytest.raises(InputError, match=r"already holds shards; choose a new folder"):
        write_shards(ImageSet(torch.full((2, 1, 8, 8), -1.0), name="new"), tmp_path / "s", shard_size=2)
    assert {p.name: p.read_bytes() for p in (tmp_path / "s").iterdir()} == before
    write_shards(ImageSet(torch.full((2, 1, 8, 8), -1.0), name="new"), tmp_path / "t", shard_size=2)
    assert len(list(ShardedImages(tmp_path / "t", image_size=8))) == 2


def test_write_shards_stopped_part_way_leaves_no_shards_behind(tmp_path, monkeypatch) -> None:
    """A write that failed after its first shard used to leave that shard without classes.json: it streamed back as
    a smaller, unlabelled set, and a retry into the same folder was refused as a folder that already holds shards."""
    import genimage.data.shards as shards

    encode, calls = shards._png, []

    def failing_png(img):
        calls.append(1)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        return encode(img)

    monkeypatch.setattr(shards, "_png", failing_png)
    data = ImageSet(torch.zeros(5, 1, 8, 8), torch.tensor([0, 1, 0, 1, 0]), ["a", "b"], name="d")
    with pytest.raises(OSError, match="No space left"):
        write_shards(data, tmp_path / "s", shard_size=2)
    assert not (tmp_path / "s").exists()
    (tmp_path / "t").mkdir()
    calls.clear()
    with pytest.raises(OSError, match="No space left"):
        write_shards(data, tmp_path / "t", shard_size=2)
    assert list((tmp_path / "t").iterdir()) == []  # a folder that was there already is kept, empty
    monkeypatch.setattr(shards, "_png", encode)
    write_shards(data, tmp_path / "t", shard_size=2)
    assert sorted(int(y) for _, y in ShardedImages(tmp_path / "t", image_size=8)) == [0, 0, 0, 1, 1]


def test_a_gif_cut_short_anywhere_is_one_sentence(tmp_path) -> None:
    """Pillow's GIF reader fails with IndexError or struct.error on a file cut inside a frame header."""
    video = torch.rand(3, 6, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
    full = save_video_gif(tmp_path / "v.gif", video).read_bytes()
    cut = tmp_path / "cut.gif"
    refused = 0
    for n in range(0, len(full), 3):
        cut.write_bytes(full[:n])
        try:
            read_gif(cut)
        except InputError as exc:
            assert str(exc).startswith(f"{cut}: not a readable"), str(exc)
            refused += 1
    assert refused > len(full) // 6  # most cuts are refused, not read as shorter videos


def test_a_corrupt_npy_header_is_one_sentence(tmp_path) -> None:
    buf = io.BytesIO()
    np.save(buf, np.zeros((8, 8, 8), dtype=np.uint8))
    header = b"'shape': (8, 8, 8), }"
    assert header in buf.getvalue()
    (tmp_path / "v").mkdir()
    bad = tmp_path / "v" / "bad.npy"
    bad.write_bytes(buf.getvalue().replace(header, b"'shape': (8, 8, 8),  "))  # the dict is never closed
    np.save(tmp_path / "v" / "good.npy", np.zeros((8, 8, 8), dtype=np.uint8))
    with pytest.raises(InputError, match=r"bad\.npy: not a readable \.npy array"):
        load_video_folder(tmp_path / "v", image_size=8, frames=8)
    assert load_video_folder(tmp_path / "v", image_size=8, frames=8, skip_bad=True).skipped == [str(bad)]


def test_an_audio_file_without_samples_is_named_or_skipped(tmp_path) -> None:
    """A WAV with a header and no samples used to become an all-silent spectrogram, labelled with its class."""
    cfg = MelConfig()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    write_wav(tmp_path / "a" / "tone.wav", synth_clips(1, cfg)[0][0], cfg.sr)
    write_wav(tmp_path / "b" / "tone.wav", synth_clips(1, cfg, seed=1)[0][0], cfg.sr)
    empty = tmp_path / "b" / "empty.wav"
    write_wav(empty, np.zeros(0, dtype=np.float32), 8000)
    with pytest.raises(InputError, match=r"empty\.wav: holds no audio samples"):
        read_wav(empty, cfg.sr)
    with pytest.raises(InputError, match=r"empty\.wav: holds no audio samples"):
        load_mel_set(tmp_path, cfg=cfg)
    data = load_mel_set(tmp_path, cfg=cfg, skip_bad=True)
    assert data.labels.tolist() == [0, 1] and data.skipped == [str(empty)]


@pytest.mark.parametrize(
    "kwargs",
    [{"frames": 1}, {"hop": 0}, {"n_mels": 0}, {"n_fft": 512.0}, {"sr": True}, {"top_db": 0}, {"top_db": -80.0}],
)
def test_mel_settings_that_cannot_make_a_spectrogram_are_one_sentence(kwargs) -> None:
    (field,) = kwargs
    with pytest.raises(ConfigError, match=rf"MelConfig\.{field} must be"):
        MelConfig(**kwargs)


def _track_decoded(monkeypatch, module, attr, frames_of):
    """Wrap ``module.attr`` (a decoder) so that each call records how many full-size images of earlier calls are
    still alive; ``frames_of`` picks the Pillow images out of a result."""
    refs: list[weakref.ref] = []
    alive: list[int] = []
    decode = getattr(module, attr)

    def tracked(*args, **kwargs):
        alive.append(sum(r() is not None for r in refs))
        out = decode(*args, **kwargs)
        refs.extend(weakref.ref(im) for im in frames_of(out))
        return out

    monkeypatch.setattr(module, attr, tracked)
    return alive


def test_folders_keep_only_resized_pixels_and_convert_gray_to_rgb_exactly(tmp_path, monkeypatch) -> None:
    """Every decoded full-size image used to stay in memory until the whole folder was read (a folder of 2,000
    12-megapixel photos is 72 GB); a gray image in a colour set is still exactly Pillow's RGB resize and crop."""
    import genimage.data.folder as folder
    import genimage.data.video as video

    rng = np.random.default_rng(0)
    root = tmp_path / "imgs"
    root.mkdir()
    gray = Image.fromarray(rng.integers(0, 256, (23, 37), dtype=np.uint8))
    colour = Image.fromarray(rng.integers(0, 256, (23, 37, 3), dtype=np.uint8))
    gray.save(root / "a.png")
    colour.save(root / "b.png")
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)).save(root / f"c{i}.png")
    alive = _track_decoded(monkeypatch, folder, "decode_still", lambda im: [im])
    data = load_image_folder(root, image_size=16)
    assert alive == [0] * 5
    # 37 x 23 at 16: the shorter side 23 -> 16, the longer 37 * 16 / 23 = 25.7 -> 26, centre columns 5..20
    for i, img in enumerate((gray, colour)):
        want = np.asarray(img.convert("RGB").resize((26, 16), Image.BICUBIC).crop((5, 0, 21, 16)))
        assert np.array_equal(to_uint8(data.images)[i], want), i
    want = np.asarray(gray.resize((26, 16), Image.BICUBIC).crop((5, 0, 21, 16)))
    assert np.array_equal(to_uint8(load_image_folder(root, image_size=16, channels=1).images)[0, ..., 0], want)

    (tmp_path / "vids").mkdir()
    frames = rng.integers(0, 256, (5, 23, 37), dtype=np.uint8)
    np.save(tmp_path / "vids" / "a.npy", frames)
    np.save(tmp_path / "vids" / "b.npy", rng.integers(0, 256, (5, 23, 37, 3), dtype=np.uint8))
    np.save(tmp_path / "vids" / "c.npy", rng.integers(0, 256, (5, 30, 30, 3), dtype=np.uint8))
    alive = _track_decoded(monkeypatch, video, "_decode_video", lambda out: out[0])
    vids = load_video_folder(tmp_path / "vids", image_size=16, frames=4)
    assert alive == [0] * 3 and vids.videos.shape == (3, 3, 4, 16, 16)
    got = to_uint8(vids.videos[0].permute(1, 0, 2, 3))  # video 0's frames [T, H, W, 3]
    for t in range(4):
        want = np.asarray(
            Image.fromarray(frames[t]).convert("RGB").resize((26, 16), Image.BICUBIC).crop((5, 0, 21, 16))
        )
        assert np.array_equal(got[t], want), t
