"""A small convolutional ReLU U-Net velocity field for the memorisation experiments on 8x8 digits.

Zhang, Li, Li, Shi, Wu, Tao & Qu, "Generalization of Diffusion Models Arises with a Balanced
Representation Space" (ICLR 2026, arXiv:2512.20963) measure the representations of real U-Nets
(EDM, Stable Diffusion): a block's activation map ``[B, C, H, W]`` is max-pooled over space to a
channel vector ``[B, C]`` and memorised generations have a spikier vector (a larger standard
deviation across channels). :class:`ReLUUNet` gives the miniature the same kind of network: an
encoder-decoder with skip connections and a time embedding added inside every residual block, ReLU
everywhere (so every block's output is non-negative and spikiness is meaningful), and the output of
each block addressable by name for :class:`~geninterp.capture.ActivationCapture`
(:data:`UNET_TAPS`, named after the diffusers U-Net: ``down_blocks.i``, ``mid_block``, ``up_blocks.i``).

The digits stay 8x8 (two 2x down-samplings reach a 2x2 bottleneck); the network reads and returns
flat ``[B, 64]`` rows, so the flow-matching loss, the samplers and the memorisation labels are the same
as for the MLP.
"""

from __future__ import annotations

import torch
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time

UNET_TAPS = ("down_blocks.0", "down_blocks.1", "mid_block", "up_blocks.0", "up_blocks.1")


class ReLUResBlock(nn.Module):
    """``ReLU(GN(conv(ReLU(GN(conv(x)) + W t_emb))) + skip(x))``: a residual block whose output is non-negative."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm1 = nn.GroupNorm(groups, c_out)
        self.time = nn.Linear(emb_dim, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.norm1(self.conv1(x)) + self.time(emb)[:, :, None, None])
        return torch.relu(self.norm2(self.conv2(h)) + self.skip(x))


class ReLUUNet(nn.Module):
    """Velocity ``v(x, t)`` for flat ``[B, side*side]`` images through a two-level ReLU U-Net.

    ``side x side`` (one channel) -> ``down_blocks.0`` (``c1`` channels, full size) -> stride-2 conv ->
    ``down_blocks.1`` (``c2``, half size) -> stride-2 conv -> ``mid_block`` (``c2``, quarter size) ->
    nearest up-sampling, concatenation with the ``down_blocks.1`` output -> ``up_blocks.0`` (``c2``) ->
    up-sampling, concatenation with the ``down_blocks.0`` output -> ``up_blocks.1`` (``c1``) -> 3x3 conv to
    one channel. ``side`` must be divisible by 4.
    """

    def __init__(self, side: int = 8, channels: tuple[int, int] = (32, 64), time_dim: int = 32, emb_dim: int = 64):
        super().__init__()
        if side < 4 or side % 4:
            raise ConfigError(f"ReLUUNet needs an image side divisible by 4, got {side}.")
        c1, c2 = channels
        if c1 % 8 or c2 % 8:
            raise ConfigError(f"ReLUUNet channels must be multiples of 8 (GroupNorm with 8 groups), got {channels}.")
        self.side = side
        self.time_embed = nn.Sequential(
            SinusoidalTimeEmbedding(time_dim), nn.Linear(time_dim, emb_dim), nn.ReLU(), nn.Linear(emb_dim, emb_dim)
        )
        self.inp = nn.Conv2d(1, c1, 3, padding=1)
        self.down_blocks = nn.ModuleList([ReLUResBlock(c1, c1, emb_dim), ReLUResBlock(c1, c2, emb_dim)])
        self.downsamplers = nn.ModuleList(
            [nn.Conv2d(c1, c1, 3, stride=2, padding=1), nn.Conv2d(c2, c2, 3, stride=2, padding=1)]
        )
        self.mid_block = ReLUResBlock(c2, c2, emb_dim)
        self.up_blocks = nn.ModuleList([ReLUResBlock(c2 + c2, c2, emb_dim), ReLUResBlock(c2 + c1, c1, emb_dim)])
        self.out = nn.Conv2d(c1, 1, 3, padding=1)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.side * self.side:
            raise InputError(f"ReLUUNet expects rows of shape [B, {self.side * self.side}], got {tuple(x.shape)}.")
        emb = self.time_embed(broadcast_time(t, x)).to(x.dtype)
        h = self.inp(x.view(-1, 1, self.side, self.side))
        skips = []
        for block, down in zip(self.down_blocks, self.downsamplers, strict=True):
            h = block(h, emb)
            skips.append(h)
            h = down(h)
        h = self.mid_block(h, emb)
        for block in self.up_blocks:
            h = nn.functional.interpolate(h, scale_factor=2, mode="nearest")
            h = block(torch.cat([h, skips.pop()], 1), emb)
        return self.out(h).flatten(1)
