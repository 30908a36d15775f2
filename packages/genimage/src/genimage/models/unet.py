"""A small UNet for images and spectrograms (Ronneberger et al. 2015; the DDPM variant of Ho et al.
2020: residual blocks with GroupNorm and SiLU, the time/class embedding added inside every block,
one self-attention layer at the lowest resolution).

``model(x_t: [B, C, H, W], t: [B] or scalar, y: [B] | None) -> [B, C, H, W]``; ``H`` and ``W`` must be
divisible by ``2 ** (len(channel_mults) - 1)``. The last convolution starts at zero, so the untrained
network outputs zeros, as DiT's adaLN-Zero does.

Named taps for regularisers: ``taps.down{i}`` (after encoder level ``i``), ``taps.mid_in`` and
``taps.mid_out`` (before and after the middle blocks) return their feature map with the channel
dimension last (``[B, H, W, C]``), the layout :class:`gencore.train.LayerSync` expects; the forward
pass itself ignores their output, so a tap costs one view. ``("taps.mid_in", "taps.mid_out")`` is a
LayerSync pair of equal shapes.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time
from genimage.models.base import ImageBackbone


def _groups(channels: int, min_size: int = 1) -> int:
    """GroupNorm groups: the most of 32, 16, ..., 1 that divide ``channels`` with ``min_size`` channels or more each."""
    for g in (32, 16, 8, 4, 2, 1):
        if channels % g == 0 and channels // g >= min_size:
            return g
    return 1


class Tap(nn.Module):
    """Identity tap: returns ``x.movedim(1, -1)`` (channels last) for forward hooks; the caller ignores it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.movedim(1, -1)


class ResBlock(nn.Module):
    """``GN-SiLU-conv, + emb, GN-SiLU-conv`` with a 1x1 skip when the width changes.

    The embedding enters as a per-channel constant before ``norm2``, which removes each group's mean: with one
    channel per group it would be removed entirely (the block blind to time and class), so groups hold at least
    ``group_size`` channels (2 by default; each block then keeps ``cout / 2`` directions of the embedding or more).
    """

    def __init__(self, cin: int, cout: int, emb: int, group_size: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(_groups(cin, group_size), cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(emb, cout)
        self.norm2 = nn.GroupNorm(_groups(cout, group_size), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.emb(e)[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class SelfAttention2d(nn.Module):
    """Single-head self-attention over the ``H * W`` positions, with a residual connection."""

    def __init__(self, channels: int, group_size: int = 2) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(_groups(channels, group_size), channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).transpose(-1, -2).unbind(1)
        out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        return x + self.out(out.transpose(-1, -2).reshape(b, c, h, w))


class UNet(ImageBackbone):
    """Small UNet backbone (see the module docstring).

    Args:
        image_size: ``H = W`` of the input.
        channels: ``C``.
        base: width of the first level; level ``i`` has ``base * channel_mults[i]`` channels.
        channel_mults: one entry per resolution level (each level after the first halves H and W).
        num_classes: number of classes (None: unconditional).
        min_group_channels: fewest channels per GroupNorm group (see :class:`ResBlock`). A model saved without
            this setting (before it existed) loads with 1, the grouping it was trained with.
    """

    kind = "unet"
    saved_config_defaults: ClassVar[dict[str, Any]] = {"min_group_channels": 1}

    def __init__(
        self,
        *,
        image_size: int,
        channels: int,
        base: int = 32,
        channel_mults: tuple[int, ...] | list[int] = (1, 2),
        num_classes: int | None = None,
        min_group_channels: int = 2,
    ) -> None:
        super().__init__()
        mults = tuple(int(m) for m in channel_mults)
        if any(m < 1 for m in mults) or base < 1 or min_group_channels < 1:
            raise ConfigError(
                f"UNet base, channel_mults and min_group_channels must be positive, got base {base}, "
                f"mults {list(mults)}, min_group_channels {min_group_channels}."
            )
        if not mults or image_size % (2 ** (len(mults) - 1)):
            raise ConfigError(f"image size {image_size} must be divisible by 2^{len(mults) - 1} for this UNet.")
        self.config: dict[str, Any] = {
            "image_size": image_size,
            "channels": channels,
            "base": base,
            "channel_mults": list(mults),
            "num_classes": num_classes,
            "min_group_channels": min_group_channels,
        }
        self.num_classes = num_classes
        self.image_size, self.channels = image_size, channels
        emb = 4 * base
        self.t_embed = nn.Sequential(
            SinusoidalTimeEmbedding(base), nn.Linear(base, emb), nn.SiLU(), nn.Linear(emb, emb)
        )
        self.y_embed = nn.Embedding(num_classes + 1, emb) if num_classes else None
        widths = [base * m for m in mults]
        self.stem = nn.Conv2d(channels, widths[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        cin = widths[0]
        for i, w in enumerate(widths):
            self.down.append(ResBlock(cin, w, emb, min_group_channels))
            cin = w
            self.downsample.append(nn.Conv2d(w, w, 3, stride=2, padding=1) if i < len(widths) - 1 else nn.Identity())
        self.mid1 = ResBlock(cin, cin, emb, min_group_channels)
        self.mid_attn = SelfAttention2d(cin, min_group_channels)
        self.mid2 = ResBlock(cin, cin, emb, min_group_channels)
        self.up = nn.ModuleList()
        self.upsample = nn.ModuleList()
        for i in reversed(range(len(widths))):
            self.up.append(ResBlock(cin + widths[i], widths[i], emb, min_group_channels))
            cin = widths[i]
            self.upsample.append(nn.Upsample(scale_factor=2, mode="nearest") if i > 0 else nn.Identity())
        self.out_norm = nn.GroupNorm(_groups(cin, min_group_channels), cin)
        self.out = nn.Conv2d(cin, channels, 3, padding=1)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.taps = nn.ModuleDict({f"down{i}": Tap() for i in range(len(widths))} | {"mid_in": Tap(), "mid_out": Tap()})

    def forward(self, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1:] != (self.channels, self.image_size, self.image_size):
            raise InputError(
                f"UNet expects inputs [B, {self.channels}, {self.image_size}, {self.image_size}], got {tuple(x.shape)}."
            )
        t = broadcast_time(t, x)
        e = self.t_embed(t).to(x.dtype)
        labels = self._labels(y, x.shape[0], x.device)
        if labels is not None:
            e = e + self.y_embed(labels)
        h = self.stem(x)
        skips = []
        for i, (block, down) in enumerate(zip(self.down, self.downsample, strict=True)):
            h = block(h, e)
            self.taps[f"down{i}"](h)
            skips.append(h)
            h = down(h)
        self.taps["mid_in"](h)
        h = self.mid2(self.mid_attn(self.mid1(h, e)), e)
        self.taps["mid_out"](h)
        for block, up in zip(self.up, self.upsample, strict=True):
            h = up(block(torch.cat([h, skips.pop()], dim=1), e))
        return self.out(F.silu(self.out_norm(h)))
