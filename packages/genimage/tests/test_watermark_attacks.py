"""Attacks: deterministic given a seed, keep dtype/shape/range, and do what their names say."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from genimage.watermark.attacks import AttackContext, apply_attack, gaussian_blur, parse_attack
from genimage.watermark.metrics import psnr

ATTACKS = [
    "none",
    "jpeg75",
    "jpeg50",
    "crop0.8",
    "resize0.5",
    "rotate10",
    "blur",
    "noise0.1",
    "brightness0.2",
    "contrast0.7",
    "jpeg75+noise0.05+blur0.5",
]


def _images(dtype=torch.float32, c=1):
    g = torch.Generator().manual_seed(0)
    smooth = gaussian_blur(torch.rand(4, c, 32, 32, generator=g, dtype=torch.float64) * 2 - 1, 1.5)
    return (smooth / smooth.abs().amax()).to(dtype)


@pytest.mark.parametrize("name", ATTACKS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attacks_are_deterministic_and_keep_dtype_shape_and_range(name, dtype):
    x = _images(dtype)
    a = apply_attack(x, name, seed=3)
    b = apply_attack(x, name, seed=3)
    assert torch.equal(a, b)
    assert a.dtype == dtype and a.shape == x.shape
    assert float(a.min()) >= -1 and float(a.max()) <= 1


def test_random_attacks_depend_on_the_seed_and_rgb_works():
    x = _images()
    assert not torch.equal(apply_attack(x, "noise0.1", seed=1), apply_attack(x, "noise0.1", seed=2))
    assert not torch.equal(apply_attack(x, "crop0.7", seed=1), apply_attack(x, "crop0.7", seed=2))
    rgb = _images(c=3)
    assert apply_attack(rgb, "jpeg75", seed=0).shape == rgb.shape


def test_noise_is_added_in_float_without_8bit_wraparound():
    x = torch.full((2, 1, 16, 16), 0.98)
    y = apply_attack(x, "noise0.05", seed=0)
    # uint8 arithmetic would wrap bright pixels to near-black; float + clip keeps them bright
    assert float(y.min()) > 0.7


def test_attack_strength_orders_damage():
    x = _images()
    assert psnr(apply_attack(x, "jpeg90"), x) > psnr(apply_attack(x, "jpeg30"), x)
    assert psnr(apply_attack(x, "noise0.02"), x) > psnr(apply_attack(x, "noise0.2"), x)
    assert torch.equal(apply_attack(x, "none"), x)
    ident = apply_attack(x, "rotate0")
    assert torch.allclose(ident, x, atol=1e-5)


def test_blur_preserves_constants_and_averaging_removes_a_shared_pattern():
    c = torch.full((1, 1, 16, 16), 0.3)
    assert torch.allclose(gaussian_blur(c, 1.0), c, atol=1e-6)
    g = torch.Generator().manual_seed(0)
    clean = torch.rand(32, 1, 16, 16, generator=g) * 0.5 - 0.25
    pattern = 0.2 * torch.sign(torch.randn(1, 1, 16, 16, generator=g))
    marked = (torch.rand(32, 1, 16, 16, generator=g) * 0.5 - 0.25) + pattern
    out = apply_attack(marked, "average32", context=AttackContext(reference=clean))
    assert float((out - marked).mean(0).sub(-pattern[0]).abs().mean()) < 0.1


def test_unknown_or_incomplete_attacks_raise():
    assert parse_attack("jpeg75+blur") == [("jpeg", 75.0), ("blur", 1.0)]
    with pytest.raises(ConfigError, match="unknown attack"):
        parse_attack("sharpen")
    # parameters outside an attack's range are refused when parsed (blur0 and average0 would give NaN images)
    for name, bound in [("jpeg0", r"\[1, 100\]"), ("jpeg101", r"\[1, 100\]"), ("crop1.5", r"\(0, 1\]"),
                        ("blur0", r"\(0, inf\)"), ("resize0", r"\(0, inf\)"), ("regen2", r"\(0, 1\]"),
                        ("average0", r"\[1, inf\)"), ("none+noise0.1+contrast0.5+jpeg", None)]:  # fmt: skip
        if bound is None:
            assert len(parse_attack(name)) == 4
            continue
        with pytest.raises(ConfigError, match=rf"attack '{name}': the [a-z]+ parameter must lie in {bound}"):
            parse_attack(name)
    with pytest.raises(ConfigError, match="needs a generator"):
        apply_attack(_images(), "regen0.3")


@pytest.mark.parametrize("shape", [(2, 3, 5, 3), (1, 1, 1, 4), (1, 2, 4, 4)])
@pytest.mark.parametrize("sigma", [1.0, 2.5, 4.0])
def test_blur_with_a_kernel_wider_than_the_image_mirrors_again(shape, sigma):
    """A radius ``ceil(3 sigma)`` at or beyond the image side (where torch's reflect padding refuses) reflects
    repeatedly: the result is scipy's ``mode="mirror"`` Gaussian filter with the same radius."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2 - 1
    want = ndimage.gaussian_filter(x.numpy(), sigma=(0, 0, sigma, sigma), mode="mirror", truncate=3.0)
    torch.testing.assert_close(gaussian_blur(x, sigma), torch.from_numpy(want), rtol=0, atol=1e-12)
    y = apply_attack(x.float(), f"blur{sigma}")
    assert y.shape == x.shape and float(y.min()) >= -1 and float(y.max()) <= 1


@pytest.mark.parametrize("channels", [2, 4])
def test_jpeg_names_the_channel_counts_it_supports(channels):
    x = torch.zeros(1, channels, 8, 8)
    for name in ("jpeg75", "noise0.1+jpeg75"):
        with pytest.raises(InputError, match=rf"1 \(grayscale\) or 3 \(RGB\) channels, got {channels} channels"):
            apply_attack(x, name)


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_attacks_return_on_the_input_device_and_dtype(device, dtype):
    x = _images(dtype, c=3)
    reference = _images(dtype, c=3).flip(-1)
    ctx = AttackContext(reference=reference.to(device))
    for name in ("jpeg75+noise0.05+blur0.5", "crop0.8+rotate10", "average4"):
        y = apply_attack(x.to(device), name, seed=3, context=ctx)
        assert y.device == x.to(device).device and y.dtype == dtype
        # the same seed gives the same attack whatever the device
        assert torch.equal(y.cpu(), apply_attack(x, name, seed=3, context=AttackContext(reference=reference)))


@pytest.mark.parametrize("sigma", [0.0, -1.0, float("nan"), float("inf")])
def test_blur_refuses_a_sigma_that_is_not_a_positive_number(sigma):
    with pytest.raises(ConfigError, match="sigma must be a positive number"):
        gaussian_blur(torch.zeros(1, 1, 8, 8), sigma)  # it used to return NaN (or loop on inf)


@pytest.mark.parametrize("shape", [(32, 32), (16, 40), (40, 24)])
@pytest.mark.parametrize("degrees", [10.0, 37.0])
def test_rotate_is_scipy_s_rigid_rotation_on_any_aspect_ratio(shape, degrees):
    """A rotation in pixel units about the centre (bilinear, edge-replicated borders) = ``scipy.ndimage.rotate``;
    rotating in the per-side normalised coordinates of ``affine_grid`` instead shears a non-square image."""
    ndimage = pytest.importorskip("scipy.ndimage")
    g = torch.Generator().manual_seed(0)
    x = gaussian_blur(torch.rand(2, 1, *shape, generator=g, dtype=torch.float64) * 2 - 1, 2.0)
    want = [ndimage.rotate(img[0].numpy(), degrees, reshape=False, order=1, mode="nearest") for img in x]
    got = apply_attack(x, f"rotate{degrees:g}")
    torch.testing.assert_close(got[:, 0], torch.from_numpy(np.stack(want)), rtol=0, atol=1e-6)


def test_crop_keeps_the_fraction_of_each_side_inside_the_image():
    """On a ramp image a crop keeping ``F`` of each side, resized back, is again a ramp of slope ``F`` times the
    original (bilinear sampling of a linear function is exact) wherever the window lies inside the image: every
    step but possibly the half-pixel at either end, for every image's random offset and along both axes."""
    n, side, frac = 8, 32, 0.6
    ramp = torch.linspace(-1, 1, side, dtype=torch.float64)
    step = float(ramp[1] - ramp[0])
    for axis, image in ((-1, ramp.expand(side, side)), (-2, ramp[:, None].expand(side, side))):
        out = apply_attack(image.expand(n, 1, side, side).contiguous(), f"crop{frac}", seed=5)
        steps = out.diff(dim=axis)
        good = (steps - frac * step).abs() < 1e-6  # the crop's affine map is float32
        assert float(good.double().mean(dim=(1, 2, 3)).min()) >= 1 - 2 / side
    offsets = apply_attack(ramp.expand(n, 1, side, side).contiguous(), f"crop{frac}", seed=5)[:, 0, 0, side // 2]
    assert offsets.unique().numel() == n  # per-image offsets


def test_tone_noise_resize_and_jpeg_attacks_do_what_their_names_say():
    x = _images(torch.float64) * 0.5
    torch.testing.assert_close(apply_attack(x, "brightness0.2"), x + 0.2, rtol=0, atol=1e-12)
    y = apply_attack(x, "contrast0.7")
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    torch.testing.assert_close(y, (x - mean) * 0.7 + mean, rtol=0, atol=1e-12)
    noise = apply_attack(torch.zeros(4, 1, 64, 64, dtype=torch.float64), "noise0.1", seed=1)
    assert abs(float(noise.std()) - 0.1) < 0.005 and abs(float(noise.mean())) < 0.005
    # a bilinear downscale by exactly 2 averages 2x2 blocks
    want = torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(x, 2), size=(32, 32), mode="bilinear")
    torch.testing.assert_close(apply_attack(x, "resize0.5"), want, rtol=0, atol=1e-12)
    # JPEG is Pillow's round trip of the 8-bit image, read back on the same 8-bit scale
    from PIL import Image

    u8 = ((x[0, 0] + 1) * 127.5).round().to(torch.uint8).numpy()
    buf = io.BytesIO()
    Image.fromarray(u8, mode="L").save(buf, format="JPEG", quality=40)
    want = torch.from_numpy(np.asarray(Image.open(io.BytesIO(buf.getvalue())), dtype=np.float64)) / 127.5 - 1
    torch.testing.assert_close(apply_attack(x, "jpeg40")[0, 0], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("reference", [(0, 1, 16, 16), (4, 3, 16, 16), (4, 16, 16)])
def test_average_needs_reference_images_of_the_images_shape(reference):
    """An empty reference set averaged to NaN images; a 3-channel one broadcast 1-channel images to 3 channels."""
    x = _images()[:, :, :16, :16]
    with pytest.raises(InputError, match=r"reference images \[M, 1, 16, 16\] with M >= 1"):
        apply_attack(x, "average4", context=AttackContext(reference=torch.zeros(reference)))


def test_parsed_steps_are_checked_like_names():
    x = _images()
    ctx = AttackContext(reference=x)
    # average0 gave NaN images; the ranges and names are those parse_attack enforces
    for steps, match in [([("average", 0.0)], r"\[1, inf\)"), ([("blur", float("nan"))], "blur parameter"),
                         ([("sharpen", 1.0)], "unknown attack")]:  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            apply_attack(x, steps, context=ctx)
    for name in ("blur+noise0.05", "none+jpeg75", "average2"):
        torch.testing.assert_close(
            apply_attack(x, parse_attack(name), seed=1, context=ctx), apply_attack(x, name, seed=1, context=ctx)
        )
    torch.testing.assert_close(apply_attack(x, [("blur", None)]), apply_attack(x, "blur"))  # None: the default
