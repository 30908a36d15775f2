"""Image values, grids, resize policies, image modes and shard streams against independent oracles (NumPy,
Pillow called directly, brute-force coverage counts)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from gencore.errors import ConfigError, InputError
from genimage.data import ImageSet, ShardedImages, load_image_folder, write_shards
from genimage.data.folder import decode_still
from genimage.data.imageset import fit_square, resize_images, split_indices
from genimage.imageio import from_uint8, image_grid_array, save_png, to_uint8, write_grid


def test_to_uint8_is_numpy_rounding_of_the_documented_map_and_clips() -> None:
    x = torch.linspace(-1.1, 1.1, 4001)
    want = np.clip(np.round((x.double().numpy() + 1.0) * 127.5), 0, 255)
    assert np.array_equal(to_uint8(x.view(1, 1, 1, -1))[0, 0, :, 0], want.astype(np.uint8))
    with pytest.raises(InputError, match=r"C = 1 or 3"):
        from_uint8(np.zeros((1, 4, 4, 4), dtype=np.uint8))  # RGBA pixels are not an image of this package


def test_image_grid_places_image_i_at_row_i_div_cols_and_pads_white() -> None:
    images = (torch.arange(5, dtype=torch.float32) * 40 / 127.5 - 1).view(5, 1, 1, 1).expand(5, 1, 3, 4)
    grid = image_grid_array(images)  # about square: ceil(sqrt(5)) = 3 columns, 2 rows
    assert grid.shape == (2 * (3 + 1) + 1, 3 * (4 + 1) + 1, 1)
    for i in range(5):
        r, k = divmod(i, 3)
        y0, x0 = 1 + r * 4, 1 + k * 5
        assert (grid[y0 : y0 + 3, x0 : x0 + 4] == 40 * i).all()
    tiles = np.zeros(grid.shape[:2], dtype=bool)
    for i in range(5):
        r, k = divmod(i, 3)
        tiles[1 + r * 4 : 4 + r * 4, 1 + k * 5 : 5 + k * 5] = True
    assert (grid[~tiles] == 255).all()  # padding and the empty sixth slot are white
    assert image_grid_array(images, nrow=5, padding=0).shape == (3, 20, 1)


@pytest.mark.parametrize("suffix", [".png", ".webp"])
def test_write_grid_enlarges_to_at_least_64_pixels_by_nearest_neighbour(tmp_path, suffix) -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, 28, 28, generator=g) * 2 - 1
    grid = image_grid_array(images, nrow=2)  # [30, 59, 3]
    with Image.open(write_grid(tmp_path / f"g{suffix}", images, nrow=2)) as im:
        got = np.asarray(im.convert("RGB"))
    s = 3  # the smallest whole factor with 28 s >= 64 (64 // 28 = 2 would give 56-pixel tiles)
    assert got.shape == (30 * s, 59 * s, 3)
    assert np.array_equal(got, grid.repeat(s, axis=0).repeat(s, axis=1))  # lossless, nearest-neighbour
    with Image.open(save_png(tmp_path / "one.png", images[1], scale=2)) as im:
        assert np.array_equal(np.asarray(im), to_uint8(images[1:])[0].repeat(2, axis=0).repeat(2, axis=1))
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match="scale"):
            save_png(tmp_path / "bad.png", images[0], scale=bad)


def test_split_holds_out_the_first_round_of_holdout_n_of_the_seeded_permutation() -> None:
    keep, held = split_indices(10, 0.3, seed=4)
    perm = torch.randperm(10, generator=torch.Generator().manual_seed(4))
    assert held.tolist() == sorted(perm[:3].tolist()) and keep.tolist() == sorted(perm[3:].tolist())


@pytest.mark.parametrize(("n", "holdout"), [(1, 0.1), (2, 0.75), (2, 0.9), (5, 0.95)])
def test_a_split_that_would_hold_out_every_item_is_refused(n, holdout) -> None:
    """One image with the classifier's 10 % hold-out used to give an empty training set and no error."""
    assert max(1, round(holdout * n)) >= n
    with pytest.raises(ConfigError, match=rf"holding out {n} of {n} items .* leaves none to train on"):
        split_indices(n, holdout)
    with pytest.raises(ConfigError, match="leaves none to train on"):
        ImageSet(torch.zeros(n, 1, 4, 4)).split(holdout)
    keep, held = split_indices(n + 1, 0.5 / (n + 1))  # one held out, the rest kept
    assert len(held) == 1 and len(keep) == n and sorted(keep.tolist() + held.tolist()) == list(range(n + 1))


@pytest.mark.parametrize("size", [3, 5, 13, 16])
def test_resize_images_is_pillows_antialiased_bilinear(size) -> None:
    x = torch.rand(2, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    ref = [np.asarray(Image.fromarray(x[i, 0].numpy(), "F").resize((size, size), Image.BILINEAR)) for i in (0, 1)]
    torch.testing.assert_close(resize_images(x, size), torch.from_numpy(np.stack(ref)).unsqueeze(1), atol=1e-5, rtol=0)


@pytest.mark.parametrize(("w", "h", "box"), [(37, 23, (5, 0, 21, 16)), (23, 37, (0, 5, 16, 21))])
def test_fit_square_resizes_the_shorter_side_and_crops_the_centre(tmp_path, w, h, box) -> None:
    """37 x 23 at 16: shorter side 23 -> 16, longer 37 * 16 / 23 = 25.7 -> 26 pixels, crop columns 5..20."""
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8))
    long = (26, 16) if w > h else (16, 26)
    want = np.asarray(img.resize(long, Image.BICUBIC).crop(box))
    assert np.array_equal(np.asarray(fit_square(img, 16)), want)
    (tmp_path / "f").mkdir()
    img.save(tmp_path / "f" / "a.png")
    data = load_image_folder(tmp_path / "f", image_size=16)
    assert np.array_equal(to_uint8(data.images)[0], want)  # [H, W, C] as Pillow holds it


def test_image_modes_convert_as_documented(tmp_path) -> None:
    rng = np.random.default_rng(1)
    # 16-bit grayscale: 8-bit v = round(v / 257) (128 / 257 rounds to 0, 129 / 257 to 1; 65535 -> 255)
    wide = np.array([[0, 128, 129, 385, 386], [32767, 32768, 65406, 65407, 65535]], dtype=np.uint16)
    (tmp_path / "w").mkdir()
    Image.fromarray(wide).save(tmp_path / "w" / "a.png")
    decoded = np.asarray(decode_still(tmp_path / "w" / "a.png", "a"))
    assert decoded.tolist() == [[0, 0, 1, 1, 2], [127, 128, 254, 255, 255]]
    assert load_image_folder(tmp_path / "w", image_size=2).shape == (1, 2, 2)
    # grayscale+alpha is grayscale; a palette image is RGB (its palette may hold colours); RGBA drops alpha
    rgba = rng.integers(0, 256, (6, 6, 4), dtype=np.uint8)
    for name, img in (
        ("la", Image.fromarray(rgba[..., :2].copy(), "LA")),
        ("p", Image.fromarray(rgba[..., :3].copy()).quantize(8)),
    ):
        (tmp_path / name).mkdir()
        img.save(tmp_path / name / "a.png")
    assert load_image_folder(tmp_path / "la", image_size=6).shape == (1, 6, 6)
    pal = load_image_folder(tmp_path / "p", image_size=6)
    assert pal.shape == (3, 6, 6)
    assert np.array_equal(to_uint8(pal.images)[0], np.asarray(Image.open(tmp_path / "p" / "a.png").convert("RGB")))
    (tmp_path / "mixed").mkdir()
    Image.fromarray(rgba[..., 0].copy()).save(tmp_path / "mixed" / "a.png")
    Image.fromarray(rgba, "RGBA").save(tmp_path / "mixed" / "b.png")
    mixed = load_image_folder(tmp_path / "mixed", image_size=6)
    assert mixed.shape == (3, 6, 6)  # one colour image makes the whole set RGB
    assert np.array_equal(to_uint8(mixed.images)[1], rgba[..., :3])
    assert np.array_equal(to_uint8(mixed.images)[0], np.repeat(rgba[..., :1], 3, axis=-1))


def test_exif_mirror_orientation_is_applied(tmp_path) -> None:
    stored = np.zeros((8, 8), dtype=np.uint8)
    stored[:, :4] = 255  # stored: left half white; orientation 2 (mirrored) displays the right half white
    exif = Image.Exif()
    exif[0x0112] = 2
    (tmp_path / "m").mkdir()
    Image.fromarray(stored).save(tmp_path / "m" / "a.png", exif=exif.tobytes())
    got = to_uint8(load_image_folder(tmp_path / "m", image_size=8).images)[0, ..., 0]
    assert np.array_equal(got, stored[:, ::-1])


def test_a_skipped_file_does_not_shift_the_labels_of_the_rest(tmp_path) -> None:
    for name, value in (("a", 255), ("b", 0)):
        (tmp_path / "f" / name).mkdir(parents=True)
        Image.new("L", (4, 4), value).save(tmp_path / "f" / name / "1.png")
    (tmp_path / "f" / "a" / "0.png").write_bytes(b"not a png")  # sorts before a/1.png
    data = load_image_folder(tmp_path / "f", image_size=4, skip_bad=True)
    assert data.labels.tolist() == [0, 1] and data.images[:, 0, 0, 0].tolist() == [1.0, -1.0]


def _indexed_shards(root, n=23, shard_size=4, channels=1) -> ImageSet:
    """Shards of ``n`` images whose pixel (0, 0) holds the image index, labelled ``index mod 3``."""
    images = torch.full((n, channels, 4, 4), -1.0)
    images[:, :, 0, 0] = (torch.arange(n, dtype=torch.float32) / 127.5 - 1).view(n, 1)
    data = ImageSet(images, torch.arange(n) % 3, ["a", "b", "c"])
    write_shards(data, root, shard_size=shard_size)
    return data


def _ids(stream) -> list[int]:
    return [round((float(x[0, 0, 0]) + 1) * 127.5) for x, *_ in stream]


@pytest.mark.parametrize(("world", "shard_size"), [(2, 4), (3, 4), (2, 12), (4, 12)])
def test_every_image_is_read_exactly_once_per_epoch_across_ranks(tmp_path, monkeypatch, world, shard_size) -> None:
    n = 23
    _indexed_shards(tmp_path / "s", n, shard_size)
    shards = -(-n // shard_size)
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world))
            stream = ShardedImages(tmp_path / "s", image_size=4, seed=7)
            stream.set_epoch(epoch)
            mine = _ids(stream)
            assert mine, f"rank {rank} got nothing"
            blocks = {i // shard_size for i in mine}
            if shards >= world:  # whole shards per rank; else the samples of every shard are split
                assert sum(min(shard_size, n - b * shard_size) for b in blocks) == len(mine)
            else:
                assert len(mine) in (n // world, -(-n // world))
            seen += mine
        assert sorted(seen) == list(range(n))


def test_shard_order_is_seeded_per_epoch_and_labels_and_channels_round_trip(tmp_path) -> None:
    data = _indexed_shards(tmp_path / "s", 23, 2)  # 12 shards
    assert json.loads((tmp_path / "s" / "classes.json").read_text()) == {"class_names": ["a", "b", "c"], "channels": 1}
    stream = ShardedImages(tmp_path / "s", image_size=4, seed=7)
    items = list(stream)
    first = _ids(items)
    assert sorted(first) == list(range(23)) and all(int(y) == i % 3 for i, (_, y) in zip(first, items, strict=True))
    stream.set_epoch(1)
    second = _ids(stream)
    stream.set_epoch(0)
    assert _ids(stream) == first and second != first and sorted(second) == sorted(first)
    assert _ids(ShardedImages(tmp_path / "s", image_size=4, seed=8)) != first
    rgb = ShardedImages(tmp_path / "s", image_size=4, channels=3)
    (x, _) = next(iter(rgb))
    assert rgb.channels == 3 and x.shape == (3, 4, 4) and torch.equal(x[0], x[2])
    write_shards(ImageSet(data.images.expand(-1, 3, -1, -1).clone()), tmp_path / "rgb")
    assert ShardedImages(tmp_path / "rgb").channels == 3


def test_bad_stream_and_folder_arguments_are_one_sentence(tmp_path) -> None:
    data = _indexed_shards(tmp_path / "s", 4, 4)
    with pytest.raises(InputError, match=r"channels must be 1 \(grayscale\), 3 \(RGB\) or None"):
        ShardedImages(tmp_path / "s", channels=2)  # would stream RGB images while saying 2 channels
    for size in (0, 2.5):
        with pytest.raises(ConfigError, match=r"image_size must be"):
            ShardedImages(tmp_path / "s", image_size=size)
        with pytest.raises(ConfigError, match=r"image_size must be"):
            load_image_folder(tmp_path, image_size=size)
    with pytest.raises(InputError, match=r"labelled images need class_names"):
        write_shards(ImageSet(data.images, data.labels), tmp_path / "no-names")  # the labels would not come back
    with pytest.raises(InputError, match=r"labels must be in 0\.\.1 \(2 class names\), got 2"):
        write_shards(ImageSet(data.images, data.labels, ["a", "b"]), tmp_path / "too-few")
    assert not (tmp_path / "no-names").exists() and not (tmp_path / "too-few").exists()


def test_photo_patches_are_the_documented_tiles() -> None:
    from genimage.data.bundled import _photos, load_photo_patches

    photos = load_photo_patches(patch=8, photo_side=40)
    assert photos.shape == (3, 8, 8) and len(photos) == 1008 and photos.labels is None
    first = _photos()[0]  # astronaut, 512 x 512 -> 40 x 40: 9 x 9 tiles with stride 4
    ref = np.asarray(first.resize((40, 40), Image.BICUBIC))
    for index, (r, k) in ((0, (0, 0)), (1, (0, 1)), (9, (1, 0)), (80, (8, 8))):
        want = ref[4 * r : 4 * r + 8, 4 * k : 4 * k + 8]
        assert np.array_equal(to_uint8(photos.images[index : index + 1])[0], want), index
    second = _photos()[1]  # coffee, 600 x 400 -> 60 x 40: the first tile of the next photo
    assert second.size == (600, 400)
    want = np.asarray(second.resize((60, 40), Image.BICUBIC))[:8, :8]
    assert np.array_equal(to_uint8(photos.images[81:82])[0], want)


def test_a_folder_with_one_colour_image_packs_as_rgb_wherever_it_sorts(tmp_path) -> None:
    """classes.json says 1 channel only when every image is gray: a colour image before a gray one counts too."""
    from genimage.data.shards import shard_image_folder

    colour = np.zeros((6, 6, 3), dtype=np.uint8)
    colour[..., 0] = 200  # pure red: its gray value (0.299 * 200 = 60) differs from every band
    for order, names in enumerate((("a.png", "b.png"), ("b.png", "a.png"))):
        root = tmp_path / f"f{order}"
        root.mkdir()
        Image.fromarray(colour).save(root / names[0])
        Image.fromarray(np.full((6, 6), 90, dtype=np.uint8)).save(root / names[1])
        shard_image_folder(root, tmp_path / f"s{order}", progress=False)
        stream = ShardedImages(tmp_path / f"s{order}", image_size=6)
        assert stream.channels == 3 == load_image_folder(root, image_size=6).shape[0]
        got = sorted(to_uint8(x[None])[0].reshape(-1, 3).tolist()[0] for (x,) in stream)
        assert got == [[90, 90, 90], [200, 0, 0]]


def test_packed_shards_keep_grayscale_png_members_grayscale(tmp_path) -> None:
    import io
    import tarfile

    from genimage.data.shards import shard_image_folder

    (tmp_path / "f").mkdir()
    Image.new("L", (5, 3), 77).save(tmp_path / "f" / "g.png")
    Image.new("RGB", (5, 3), (1, 2, 3)).save(tmp_path / "f" / "c.png")
    (shard,), _, _ = shard_image_folder(tmp_path / "f", tmp_path / "s", progress=False)
    with tarfile.open(shard) as tar:
        modes = [Image.open(io.BytesIO(tar.extractfile(m).read())).mode for m in tar]
    assert modes == ["RGB", "L"]  # sorted file order: c.png, g.png; sizes are kept (ShardedImages resizes)


def test_float_and_32bit_gray_images_scale_or_are_refused(tmp_path) -> None:
    """Float TIFFs in [0, 1] are scaled to 8 bits (Pillow's own conversion clips them to 0 or 1, a black image);
    float in [0, 255] is kept; values beyond, non-finite ones and 32-bit integers past 16 bits are refused."""
    unit = np.array([[0.0, 0.25, 0.5], [0.75, 0.999, 1.0]], dtype=np.float32)
    Image.fromarray(unit, mode="F").save(tmp_path / "unit.tif")
    assert np.asarray(decode_still(tmp_path / "unit.tif", "unit")).tolist() == [[0, 64, 128], [191, 255, 255]]
    Image.fromarray(unit * 200 + 3.4, mode="F").save(tmp_path / "wide.tif")
    assert np.asarray(decode_still(tmp_path / "wide.tif", "wide")).tolist() == [[3, 53, 103], [153, 203, 203]]
    for name, bad in (("neg", unit - 0.5), ("big", unit * 300), ("nan", np.full((2, 3), np.nan, np.float32))):
        Image.fromarray(bad, mode="F").save(tmp_path / f"{name}.tif")
        with pytest.raises(InputError, match=rf"{name}.tif: a float image must hold finite values in \[0, 1\]"):
            decode_still(tmp_path / f"{name}.tif", f"{name}.tif")
    Image.fromarray(np.array([[0, 70000]], dtype=np.int32), mode="I").save(tmp_path / "i32.tif")
    with pytest.raises(InputError, match=r"i32.tif: a 32-bit integer image with values in \[0, 70000\]"):
        decode_still(tmp_path / "i32.tif", "i32.tif")
