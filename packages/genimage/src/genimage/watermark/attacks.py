"""Image attacks on float images ``[N, C, H, W]`` in ``[-1, 1]``.

Every attack is a pure function of the images, its parameters and an explicit seed: the same
seed gives the same output, the output keeps the input's dtype and shape and lies in
``[-1, 1]``. Attacks are named by short strings (``jpeg75``, ``blur``, ``noise0.1``,
``jpeg75+noise0.05``, ...) parsed by :func:`parse_attack`.

The Gaussian-noise attack adds noise in float and then clips. Reference watermark code adds
noise to ``uint8`` arrays, which wraps around (250 + 10 -> 4) and turns a mild attack into
salt-and-pepper damage; that fault is not reproduced here.

The attacks run on the CPU (JPEG goes through Pillow, and the random draws come from a CPU generator, so a
seed gives the same attack whatever the input's device); the result is returned on the input's device.

| name | effect |
| --- | --- |
| ``none`` | identity |
| ``jpegQ`` | JPEG round trip at quality ``Q`` (Pillow, 8-bit; 1 or 3 channels) |
| ``cropF`` | random crop keeping fraction ``F`` of each side, resized back (bilinear) |
| ``resizeF`` | downscale by ``F`` and back (bilinear) |
| ``rotateD`` | rotation by ``D`` degrees (border padding) |
| ``blur`` / ``blurS`` | Gaussian blur, sigma ``S`` pixels (default 1), mirrored borders (any image size) |
| ``noiseS`` | additive Gaussian noise, std ``S`` in ``[-1, 1]`` units (default 0.1), clipped |
| ``brightnessB`` | add ``B`` (default 0.2) |
| ``contrastF`` | scale deviations from the per-image mean by ``F`` (default 0.7) |
| ``regenS`` | regeneration: noise to time ``1 - S`` and denoise with the model (needs a generator) |
| ``averageN`` | averaging attack: subtract the mean residual of ``N`` marked images against unmarked ones |
| ``a+b`` | ``a`` then ``b`` |
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from gencore.errors import ConfigError, InputError

__all__ = ["ATTACK_NAMES", "AttackContext", "apply_attack", "parse_attack"]

ATTACK_NAMES = (
    "none",
    "jpeg",
    "crop",
    "resize",
    "rotate",
    "blur",
    "noise",
    "brightness",
    "contrast",
    "regen",
    "average",
)
_DEFAULTS = {
    "jpeg": 75.0,
    "crop": 0.8,
    "resize": 0.5,
    "rotate": 10.0,
    "blur": 1.0,
    "noise": 0.1,
    "brightness": 0.2,
    "contrast": 0.7,
    "regen": 0.2,
    "average": 16.0,
}


# the parameters each attack accepts, checked when a name is parsed (so a command refuses them before any work):
# (lowest, whether the lowest is allowed, highest); names carry no sign, so values are never negative
_RANGES = {
    "jpeg": (1.0, True, 100.0),
    "crop": (0.0, False, 1.0),
    "resize": (0.0, False, math.inf),
    "rotate": (0.0, True, math.inf),
    "blur": (0.0, False, math.inf),
    "noise": (0.0, True, math.inf),
    "brightness": (0.0, True, math.inf),
    "contrast": (0.0, True, math.inf),
    "regen": (0.0, False, 1.0),
    "average": (1.0, True, math.inf),
}


def _check_parameter(part: str, kind: str, value: float) -> None:
    low, closed, high = _RANGES[kind]
    if not (math.isfinite(value) and (value >= low if closed else value > low) and value <= high):
        bound = f"{'[' if closed else '('}{low:g}, {high:g}{']' if math.isfinite(high) else ')'}"
        raise ConfigError(f"attack {part!r}: the {kind} parameter must lie in {bound}, got {value:g}.")


@dataclass
class AttackContext:
    """What some attacks need beyond the images: a generator (``regen``) and unmarked references (``average``)."""

    generator: Any = None
    reference: torch.Tensor | None = None


def parse_attack(name: str) -> list[tuple[str, float | None]]:
    """``"jpeg75+blur"`` -> ``[("jpeg", 75.0), ("blur", 1.0)]``."""
    steps = []
    for part in name.strip().lower().split("+"):
        m = re.fullmatch(r"([a-z]+)([0-9]*\.?[0-9]*)", part.strip())
        if not m or m.group(1) not in ATTACK_NAMES:
            raise ConfigError(f"unknown attack {part!r}; expected names such as {', '.join(ATTACK_NAMES)}.")
        kind, value = m.group(1), m.group(2)
        if kind == "none":
            steps.append((kind, None))
            continue
        try:
            number = float(value) if value else _DEFAULTS[kind]
        except ValueError:
            raise ConfigError(f"attack {part!r} has an unreadable parameter {value!r}.") from None
        _check_parameter(part.strip(), kind, number)
        steps.append((kind, number))
    return steps


def _check(images: torch.Tensor) -> None:
    if not torch.is_tensor(images) or images.dim() != 4 or not images.is_floating_point():
        raise InputError("images must be a float tensor [N, C, H, W] in [-1, 1].")


JPEG_CHANNELS = (1, 3)  # what JPEG (through Pillow) stores: grayscale or RGB


def _check_jpeg_channels(channels: int) -> None:
    if channels not in JPEG_CHANNELS:
        raise InputError(
            f"the JPEG attack needs images with 1 (grayscale) or 3 (RGB) channels, got {channels} channels."
        )


def jpeg(images: torch.Tensor, quality: float) -> torch.Tensor:
    """JPEG round trip through Pillow at ``quality`` (1..100), per image, 8-bit; 1 or 3 channels; the result on
    ``images``' device and dtype."""
    from PIL import Image

    q = round(float(quality))
    if not 1 <= q <= 100:
        raise ConfigError(f"JPEG quality must be in 1..100, got {quality}.")
    _check_jpeg_channels(images.shape[1])
    u8 = ((images.detach().float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu().numpy()
    out = np.empty_like(u8)
    for i, img in enumerate(u8):
        pil = Image.fromarray(img[0], mode="L") if img.shape[0] == 1 else Image.fromarray(img.transpose(1, 2, 0))
        buf = io.BytesIO()
        pil.save(buf, format="JPEG", quality=q)
        buf.seek(0)
        dec = np.asarray(Image.open(buf).convert("L" if img.shape[0] == 1 else "RGB"))
        out[i] = dec[None] if img.shape[0] == 1 else dec.transpose(2, 0, 1)
    return torch.from_numpy(out).to(device=images.device, dtype=images.dtype) / 127.5 - 1


def _mirror_index(n: int, r: int, device: torch.device) -> torch.Tensor:
    """Source indices of positions ``-r .. n - 1 + r`` of a side of ``n`` pixels padded by mirroring about the
    edge pixels (``torch``'s ``reflect``: ``... 2 1 | 0 1 2 ... n-1 | n-2 ...``, scipy's ``mirror``), the
    reflection repeated as often as ``r`` needs (a one-pixel side repeats its pixel)."""
    i = torch.arange(-r, n + r, device=device)
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = i.remainder(period)
    return torch.where(i < n, i, period - i)


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur, kernel radius ``ceil(3 sigma)``, borders padded by mirroring (reflect padding).

    A kernel wider than the image is padded by reflecting again and again (the image extended periodically
    by its mirror images, as scipy's ``mode="mirror"``), so any sigma works on any image size; while the radius
    is below the side the result is torch's ``reflect`` padding exactly.
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise ConfigError(f"the blur's sigma must be a positive number of pixels, got {sigma}.")
    r = max(1, math.ceil(3 * sigma))
    x = torch.arange(-r, r + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (x / sigma) ** 2)
    k = (k / k.sum()).to(device=images.device, dtype=images.dtype)
    c, h, w = images.shape[1:]
    out = images.index_select(-1, _mirror_index(w, r, images.device))
    out = F.conv2d(out, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    out = out.index_select(-2, _mirror_index(h, r, images.device))
    return F.conv2d(out, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def _affine(images: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta.to(device=images.device, dtype=images.dtype), list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def rotate(images: torch.Tensor, degrees: float) -> torch.Tensor:
    """Rotation by ``degrees`` about the image centre, in pixel units (a rigid rotation for any aspect ratio)."""
    a = math.radians(degrees)
    h, w = images.shape[-2:]
    # affine_grid works in coordinates normalised per side: R in pixels is S^-1 R S there, S = diag(w, h) / 2
    theta = torch.tensor([[math.cos(a), -math.sin(a) * h / w, 0.0], [math.sin(a) * w / h, math.cos(a), 0.0]])
    return _affine(images, theta.expand(images.shape[0], 2, 3))


def crop_resize(images: torch.Tensor, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Random crop keeping ``fraction`` of each side (per-image offsets), resized back."""
    if not 0 < fraction <= 1:
        raise ConfigError(f"crop fraction must be in (0, 1], got {fraction}.")
    n = images.shape[0]
    offset = (torch.rand(n, 2, generator=generator) * 2 - 1) * (1 - fraction)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = theta[:, 1, 1] = fraction
    theta[:, :, 2] = offset
    return _affine(images, theta)


def resize(images: torch.Tensor, factor: float) -> torch.Tensor:
    h, w = images.shape[-2:]
    small = F.interpolate(images, size=(max(1, round(h * factor)), max(1, round(w * factor))), mode="bilinear")
    return F.interpolate(small, size=(h, w), mode="bilinear")


def _one(kind: str, value: float | None, x: torch.Tensor, g: torch.Generator, ctx: AttackContext) -> torch.Tensor:
    if kind == "none":
        return x
    if kind == "jpeg":
        return jpeg(x, value)
    if kind == "crop":
        return crop_resize(x, value, g)
    if kind == "resize":
        return resize(x, value)
    if kind == "rotate":
        return rotate(x, value)
    if kind == "blur":
        return gaussian_blur(x, value)
    if kind == "noise":
        return x + value * torch.randn(x.shape, generator=g, dtype=x.dtype)
    if kind == "brightness":
        return x + value
    if kind == "contrast":
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * value + mean
    if kind == "regen":
        if ctx.generator is None:
            raise ConfigError("the regen attack needs a generator (a trained run).")
        return ctx.generator.regenerate(x, value, generator=g).to(device=x.device, dtype=x.dtype)
    if ctx.reference is None:
        raise ConfigError("the average attack needs unmarked reference images.")
    ref_shape = tuple(ctx.reference.shape)
    if len(ref_shape) != 4 or ref_shape[0] < 1 or ref_shape[1:] != tuple(x.shape[1:]):
        # an empty set averaged to NaN images; another C, H, W broadcast into images of another shape
        raise InputError(
            f"the average attack needs reference images [M, {', '.join(map(str, x.shape[1:]))}] with M >= 1, "
            f"got {list(ref_shape)}."
        )
    n = min(int(value), x.shape[0], ctx.reference.shape[0])
    residual = x[:n].mean(0) - ctx.reference[:n].to(device=x.device, dtype=x.dtype).mean(0)
    return x - residual


def _checked_step(kind: str, value: float | None) -> tuple[str, float | None]:
    """A step given already parsed, with the checks :func:`parse_attack` makes (``average0`` gave NaN images)."""
    if kind not in ATTACK_NAMES:
        raise ConfigError(f"unknown attack {kind!r}; expected names such as {', '.join(ATTACK_NAMES)}.")
    if kind == "none":
        return kind, None
    number = _DEFAULTS[kind] if value is None else float(value)
    _check_parameter(f"{kind}{number:g}", kind, number)
    return kind, number


def apply_attack(
    images: torch.Tensor, name: str | Sequence[tuple[str, float | None]], *, seed: int = 0, context=None
) -> torch.Tensor:
    """Apply the attack ``name`` (see the module table); deterministic given ``seed``.

    The attack runs on the CPU; the result has the shape, dtype and device of ``images``.
    """
    _check(images)
    steps = parse_attack(name) if isinstance(name, str) else [_checked_step(kind, value) for kind, value in name]
    if any(kind == "jpeg" for kind, _ in steps):
        _check_jpeg_channels(images.shape[1])  # before any other step does work
    g = torch.Generator().manual_seed(int(seed))
    ctx = context or AttackContext()
    x = images.detach().cpu()
    for kind, value in steps:
        x = _one(kind, value, x, g, ctx).clamp(-1, 1)
    return x.to(device=images.device, dtype=images.dtype)
