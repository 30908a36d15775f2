"""Attacks: deterministic given a seed, keep dtype/shape/range, and do what their names say."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError
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
