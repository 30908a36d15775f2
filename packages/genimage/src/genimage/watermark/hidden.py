"""A small HiDDeN-style watermark encoder/decoder, trained in-suite.

Zhu, Kaplan, Johnson & Fei-Fei, "HiDDeN: Hiding Data With Deep Networks", ECCV 2018.

The encoder adds a bounded residual to an image given an ``L``-bit message laid out on a coarse
spatial grid; the decoder maps an image to ``L`` logits (convolutions, average pooling to a
4 x 4 grid, linear).
Both are trained jointly to decode the message through a random noise layer per step
(identity, Gaussian noise, blur, crop-and-resize, brightness/contrast, and JPEG with a
straight-through gradient, ``x + (jpeg(x) - x).detach()``), while an MSE term keeps the
residual small. The decoder alone is the "off-the-shelf" decoder that watermark guidance
steers sampling with; encoder + decoder also form a post-hoc scheme (PSNR quality cost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from gencore.checks import check_int, check_seed
from gencore.errors import ConfigError, InputError
from gencore.io import Pretrained
from gencore.rng import randn_like_with, seeded_init
from genimage.watermark.attacks import crop_resize, gaussian_blur, jpeg

__all__ = ["HiddenConfig", "HiddenDecoder", "HiddenEncoder", "HiddenModel", "noise_layer", "train_hidden"]


@dataclass(frozen=True, kw_only=True)
class HiddenConfig:
    """Architecture and training settings (``strength`` bounds the residual: ``|delta| <= strength``)."""

    channels: int = 1
    message_bits: int = 32
    hidden: int = 32
    strength: float = 0.1
    steps: int = 600
    batch_size: int = 32
    lr: float = 2e-3
    mse_weight: float = 0.2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("channels", "message_bits", "steps", "batch_size"):
            check_int(getattr(self, name), f"HiddenConfig.{name}", low=1)
        if check_int(self.hidden, "HiddenConfig.hidden", low=4) % 4:
            raise ConfigError(
                f"HiddenConfig.hidden must be a positive multiple of 4 (its norm groups), got {self.hidden}."
            )
        for name, positive in (("strength", True), ("lr", True), ("mse_weight", False)):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
                bound = "> 0" if positive else ">= 0"
                raise ConfigError(f"HiddenConfig.{name} must be a finite number {bound}, got {value}.")
        check_seed(self.seed, "HiddenConfig.seed")


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(4, cout), nn.GELU())


GRID = 4  # the message is laid out on a GRID x GRID map of feature vectors, upsampled to the image


class HiddenEncoder(nn.Module):
    """``(x: [N, C, H, W], m: [N, L] in {0, 1}) -> marked x`` (residual bounded by ``strength``).

    The message goes through a linear map to a ``hidden x 4 x 4`` feature map, upsampled to the
    image size (a spatially constant broadcast of the bits, as in the original HiDDeN, gives a
    one-channel image almost no way to lay out several bits).
    """

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.strength, self.hidden = cfg.strength, cfg.hidden
        self.message = nn.Linear(cfg.message_bits, cfg.hidden * GRID * GRID)
        self.features = nn.Sequential(_block(cfg.channels, cfg.hidden), _block(cfg.hidden, cfg.hidden))
        self.mix = nn.Sequential(
            _block(2 * cfg.hidden + cfg.channels, cfg.hidden), nn.Conv2d(cfg.hidden, cfg.channels, 1)
        )

    def forward(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        code = self.message(2 * m.to(x.dtype) - 1).reshape(-1, self.hidden, GRID, GRID)
        code = F.interpolate(code, size=x.shape[-2:], mode="bilinear", align_corners=False)
        delta = self.mix(torch.cat([self.features(x), code, x], dim=1))
        return (x + self.strength * torch.tanh(delta)).clamp(-1, 1)


class HiddenDecoder(nn.Module):
    """``x: [N, C, H, W] -> logits [N, L]`` (positive means bit 1)."""

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.net = nn.Sequential(
            _block(cfg.channels, cfg.hidden),
            _block(cfg.hidden, cfg.hidden),
            nn.Conv2d(cfg.hidden, cfg.hidden, 3, stride=2, padding=1),
            nn.GELU(),
            _block(cfg.hidden, cfg.hidden),
            nn.AdaptiveAvgPool2d(GRID),
            nn.Flatten(),
            nn.Linear(cfg.hidden * GRID * GRID, cfg.message_bits),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class HiddenModel(Pretrained, nn.Module):
    """Encoder + decoder with ``save_pretrained`` / ``from_pretrained`` (safetensors + JSON)."""

    config_class = HiddenConfig

    def __init__(self, cfg: HiddenConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder, self.decoder = HiddenEncoder(cfg), HiddenDecoder(cfg)


def noise_layer(x: torch.Tensor, kind: int, g: torch.Generator) -> torch.Tensor:
    """One differentiable distortion of ``x`` (``kind`` 0..5: identity, noise, blur, crop, tone, JPEG-STE)."""
    if kind == 1:
        return x + 0.1 * torch.rand((), generator=g) * randn_like_with(x, g)
    if kind == 2:
        return gaussian_blur(x, 0.5 + float(torch.rand((), generator=g)))
    if kind == 3:
        return crop_resize(x, 0.75 + 0.25 * float(torch.rand((), generator=g)), g)
    if kind == 4:
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        return (x - mean) * (0.7 + 0.6 * torch.rand((), generator=g)) + mean + 0.2 * (torch.rand((), generator=g) - 0.5)
    if kind == 5:
        q = 50 + int(torch.randint(0, 46, (), generator=g))
        return x + (jpeg(x.detach(), q) - x).detach()
    return x


def train_hidden(
    images: torch.Tensor, cfg: HiddenConfig, *, progress: bool = True, device: str | torch.device = "cpu"
) -> HiddenModel:
    """Train encoder + decoder on ``images: [N, C, H, W]`` in ``[-1, 1]`` (random messages per batch) on
    ``device``; the model is returned there. Initial weights and draws do not depend on the device."""
    if images.dim() != 4 or images.shape[0] < 1 or images.shape[1] != cfg.channels:
        raise InputError(
            f"HiDDeN trains on images [N >= 1, {cfg.channels}, H, W] (HiddenConfig.channels), "
            f"got shape {tuple(images.shape)}."
        )
    with seeded_init(cfg.seed):
        model = HiddenModel(cfg).to(device)
    g = torch.Generator().manual_seed(cfg.seed)
    images = images.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    for _ in tqdm(range(cfg.steps), disable=not progress, desc="train HiDDeN"):
        idx = torch.randint(0, images.shape[0], (cfg.batch_size,), generator=g)
        x = images[idx.to(images.device)]
        m = torch.randint(0, 2, (cfg.batch_size, cfg.message_bits), generator=g).to(images.device)
        marked = model.encoder(x, m)
        kind = int(torch.randint(0, 6, (), generator=g))
        logits = model.decoder(noise_layer(marked, kind, g).clamp(-1, 1))
        loss = F.binary_cross_entropy_with_logits(logits, m.float()) + cfg.mse_weight * (marked - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return model
