"""Data loaders: bundled sets and their size policies, image folders, corrupt files, tar shards."""

from __future__ import annotations

import tarfile

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from gencore.errors import ConfigError, InputError
from genimage.cli import main
from genimage.data import ImageSet, ShardedImages, load_image_folder, load_image_set, write_shards
from genimage.imageio import from_uint8, to_uint8


def _write_folder(root, n_per_class=3, size=(20, 12), mode="RGB"):
    rng = np.random.default_rng(0)
    for _k, name in enumerate(("cat", "dog")):
        (root / name).mkdir(parents=True)
        for i in range(n_per_class):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode).save(root / name / f"{i}.png")
    return root


def test_uint8_round_trip() -> None:
    u = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1)
    x = from_uint8(u)
    assert x.shape == (1, 1, 16, 16) and float(x.min()) == -1.0 and float(x.max()) == 1.0
    assert np.array_equal(to_uint8(x), u)


def test_digits_sizes_and_values() -> None:
    d8 = load_image_set("digits")
    assert d8.shape == (1, 8, 8) and len(d8) == 1797 and d8.num_classes == 10
    assert float(d8.images.min()) == -1.0 and float(d8.images.max()) == 1.0
    d16 = load_image_set("digits", image_size=16)
    assert d16.shape == (1, 16, 16)
    # resizing keeps the mean intensity of each image (bilinear, antialiased)
    assert torch.allclose(d16.images.mean(dim=(1, 2, 3)), d8.images.mean(dim=(1, 2, 3)), atol=0.02)


def test_mnist_padding_policy() -> None:
    m32 = load_image_set("mnist")
    m28 = load_image_set("mnist", image_size=28)
    assert m32.shape == (1, 32, 32) and len(m32) == 5000
    assert torch.equal(m32.images[:, :, 2:30, 2:30], m28.images)  # 32 = 28 padded by 2, no resampling
    assert bool((m32.images[:, :, :2] == -1).all())


def test_split_is_deterministic_and_disjoint() -> None:
    d = load_image_set("digits")
    a_train, a_held = d.split(0.2, seed=3)
    _b_train, b_held = d.split(0.2, seed=3)
    assert torch.equal(a_held.images, b_held.images) and len(a_train) + len(a_held) == len(d)


def test_folder_labels_and_fit_square(tmp_path) -> None:
    root = _write_folder(tmp_path / "imgs")
    data = load_image_folder(root, image_size=8)
    assert data.shape == (3, 8, 8) and len(data) == 6
    assert data.class_names == ["cat", "dog"] and data.labels.tolist() == [0, 0, 0, 1, 1, 1]
    gray = load_image_folder(_write_folder(tmp_path / "gray", mode="L"), image_size=8)
    assert gray.shape == (1, 8, 8)


def test_corrupt_image_is_named_or_skipped(tmp_path) -> None:
    root = _write_folder(tmp_path / "imgs")
    bad = root / "dog" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    with pytest.raises(InputError, match=r"broken\.png"):
        load_image_folder(root, image_size=8)
    data = load_image_folder(root, image_size=8, skip_bad=True)
    assert len(data) == 6 and data.skipped == [str(bad)]


def test_cli_reports_corrupt_image_in_one_line(tmp_path, capsys) -> None:
    root = _write_folder(tmp_path / "imgs")
    (root / "cat" / "zz.jpg").write_bytes(b"garbage")
    code = main(["train", "--data", "folder", "--data-path", str(root), "--steps", "1", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "zz.jpg" in err[0] and "Traceback" not in err[0]


def test_empty_and_mixed_folders_are_refused(tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="contains no images"):
        load_image_folder(tmp_path / "empty")
    root = _write_folder(tmp_path / "mixed")
    Image.new("RGB", (4, 4)).save(root / "loose.png")
    with pytest.raises(InputError, match=r"both directly and in class sub-folders"):
        load_image_folder(root)
    with pytest.raises(ConfigError):
        load_image_set("nope")


def test_shards_round_trip_and_rank_split(tmp_path, monkeypatch) -> None:
    data = load_image_set("digits").subset(torch.arange(50))
    paths = write_shards(data, tmp_path / "shards", shard_size=10)
    assert len(paths) == 5
    stream = ShardedImages(tmp_path / "shards", image_size=8, channels=1)
    items = list(stream)
    assert len(items) == 50
    # the same (image, label) pairs as a multiset, images exactly as 8-bit PNG stores them
    quantised = from_uint8(to_uint8(data.images))
    got = sorted((x.flatten().tolist(), int(y)) for x, y in items)
    want = sorted((quantised[i].flatten().tolist(), int(data.labels[i])) for i in range(50))
    assert got == want
    # two ranks read disjoint shards that together cover the set
    seen = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        seen.append(sum(1 for _ in ShardedImages(tmp_path / "shards", image_size=8)))
    assert sum(seen) == 50 and 0 < seen[0] < 50
    batch = next(iter(DataLoader(stream, batch_size=8)))
    assert batch[0].shape == (8, 1, 8, 8) and batch[1].shape == (8,)


def test_corrupt_shard_member(tmp_path) -> None:
    data = ImageSet(torch.zeros(3, 1, 8, 8), None, None, name="z")
    (path,) = write_shards(data, tmp_path / "s", shard_size=10)
    with tarfile.open(path, "a") as tar:
        info = tarfile.TarInfo("00000099.png")
        payload = b"not a png"
        info.size = len(payload)
        import io

        tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(InputError, match=r"00000099"):
        list(ShardedImages(tmp_path / "s", image_size=8))
    with pytest.raises(InputError) as exc:
        list(ShardedImages(tmp_path / "s", image_size=8))
    assert "0x" not in str(exc.value)  # no Python object repr in the sentence
    stream = ShardedImages(tmp_path / "s", image_size=8, skip_bad=True)
    assert len(list(stream)) == 3 and len(stream.skipped) == 1


def test_unreadable_shard_and_bad_label_are_one_sentence_or_skipped(tmp_path) -> None:
    import io

    data = load_image_set("digits").subset(torch.arange(6))
    (good,) = write_shards(data, tmp_path / "s", shard_size=10)
    from PIL import Image

    png = io.BytesIO()
    Image.new("L", (8, 8)).save(png, format="PNG")
    with tarfile.open(good, "a") as tar:  # a readable image whose class label is not an integer
        for name, payload in (("00000098.png", png.getvalue()), ("00000098.cls", b"seven")):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    (tmp_path / "s" / "broken.tar").write_bytes(b"not a tar at all")
    with pytest.raises(InputError) as exc:
        list(ShardedImages(tmp_path / "s", image_size=8, channels=1))
    assert len(str(exc.value).splitlines()) == 1
    assert "broken.tar: not a readable tar shard" in str(exc.value) or "must be an integer" in str(exc.value)
    stream = ShardedImages(tmp_path / "s", image_size=8, channels=1, skip_bad=True)
    assert len(list(stream)) == 6
    assert sorted(stream.skipped) == sorted([f"{tmp_path / 's' / 'broken.tar'} (unreadable tar)", f"{good}:00000098"])


def test_genimage_shards_packs_a_folder_that_streams_back_as_the_folder_loads(tmp_path, capsys) -> None:
    root = _write_folder(tmp_path / "pets", n_per_class=3)
    Image.open(root / "cat" / "0.png").save(root / "dog" / "extra.jpg", quality=80)  # a JPEG among PNGs
    (root / "dog" / "broken.png").write_bytes(b"not a png")
    out = tmp_path / "shards"
    # an unreadable image stops the packing with its name and leaves no shard behind
    assert main(["shards", str(root), "--out", str(out), "--shard-size", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.png: not a readable image" in err[0]
    assert not list(out.glob("*.tar"))
    assert main(["shards", str(root), "--out", str(out), "--shard-size", "2", "--skip-bad", "--no-progress"]) == 0
    said = capsys.readouterr().out
    assert "wrote 7 images into 4 shards" in said and "skipped 1 unreadable" in said and "broken.png" in said
    # the same (image, label) pairs as the in-memory folder loader gives, at any read size
    folder = load_image_folder(root, image_size=16, skip_bad=True)
    stream = ShardedImages(out, image_size=16)
    assert stream.class_names == ["cat", "dog"] and stream.channels == 3
    got = sorted((x.flatten().tolist(), int(y)) for x, y in stream)
    want = sorted((folder.images[i].flatten().tolist(), int(folder.labels[i])) for i in range(len(folder)))
    assert got == want
    # an existing set of shards is not mixed with a new one; a bad shard size is one sentence
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["shards", str(root), "--out", str(out), "--skip-bad", "--no-progress"]) == 2
    assert "already holds shards" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert main(["shards", str(root), "--out", str(tmp_path / "s2"), "--shard-size", "0", "--no-progress"]) == 2
    assert "shard size must be a positive integer, got 0" in capsys.readouterr().err


def test_grayscale_folders_pack_to_one_channel_and_a_missing_shard_folder_is_one_sentence(tmp_path) -> None:
    from genimage.data.shards import shard_image_folder

    root = _write_folder(tmp_path / "g", n_per_class=2, mode="L")
    paths, count, skipped = shard_image_folder(root, tmp_path / "s", progress=False)
    assert (len(paths), count, skipped) == (1, 4, [])
    assert ShardedImages(tmp_path / "s").channels == 1
    with pytest.raises(InputError, match=r"shard folder .*nope' does not exist; pack an image folder with"):
        ShardedImages(tmp_path / "nope")
