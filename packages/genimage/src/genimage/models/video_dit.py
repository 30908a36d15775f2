"""Video Diffusion Transformer on spatio-temporal tubelets, with full or factorised space-time attention.

The DiT of Peebles & Xie 2023 ("Scalable Diffusion Models with Transformers", ICCV) lifted to video as
in Ma et al. 2024 ("Latte: Latent Diffusion Transformer for Video Generation"): the clip ``[B, C, T, H, W]``
is cut into ``pt x p x p`` tubelets embedded by one 3-D convolution (the tubelet embedding of Arnab et al.
2021, "ViViT: A Video Vision Transformer"), giving ``N = (T/pt)(H/p)(W/p)`` tokens in time-major order with
fixed 3-D sine-cosine positions (:func:`sincos_3d`), in the same adaLN-Zero
:class:`~genimage.models.dit.DiTBlock` s as DiT, conditioned on ``c = emb(t) + emb(y)`` exactly as DiT;
a modulated, zero-initialised final layer maps each token back to its ``pt * p * p * C`` tubelet.
It works directly on pixels (or whatever cells it is given; no latent autoencoder is involved).

``attention="full"`` (default): every token attends to every other across space and time (Latte's
unfactorised variant), ``O(N^2)`` per block. ``attention="factorised"``: the blocks alternate, as in Latte's
variant 1 and ViViT's factorised encoder, between attention within each tubelet frame (even blocks,
``T/pt`` groups of ``(H/p)(W/p)`` tokens) and attention across frames at each spatial position (odd blocks,
``(H/p)(W/p)`` groups of ``T/pt`` tokens); the MLPs, the conditioning and the weights' shapes are those of
the full model, so the two differ only in which tokens each attention sees (:class:`AxialDiTBlock`).

Named taps: block ``i`` is the module ``blocks.{i}`` and returns the tokens ``[B, N, D]`` (what
:class:`gencore.train.LayerSync` hooks). Time ``t`` is in ``[0, 1]``; the null class is ``num_classes``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gencore.errors import ConfigError, InputError
from genimage.models.base import ImageBackbone
from genimage.models.dit import (
    DiTBlock,
    FinalLayer,
    conditioning_embeddings,
    dit_condition,
    dit_dims,
    init_dit_weights,
    sincos_1d,
    sincos_2d,
)


def sincos_3d(dim: int, t: int, h: int, w: int) -> torch.Tensor:
    """Fixed 3-D sine-cosine positions ``[t * h * w, dim]``, rows in time-major order ``(frame, row, column)``.

    The channels are ``[time | row | column]``: row and column get ``2 * (dim // 6)`` channels each and time
    the rest (``dim - 4 * (dim // 6)``, e.g. 44/42/42 for 128, 64/64/64 for 192); each part codes its integer
    coordinate with sines then cosines of geometric frequencies ``1 .. 1/10000`` as :func:`sincos_2d` does
    (the row and column parts are exactly ``sincos_2d(4 * (dim // 6), h, w)``). Needs an even ``dim >= 6``.
    """
    if dim % 2 or dim < 6:
        raise ConfigError(f"VideoDiT hidden size must be an even number >= 6 for 3-D positions, got {dim}.")
    spatial = 4 * (dim // 6)
    frames = sincos_1d(dim - spatial, torch.arange(t)).float()  # [t, dim - spatial]
    space = sincos_2d(spatial, h, w)  # [h * w, spatial]
    pos = torch.cat([frames[:, None].expand(t, h * w, -1), space[None].expand(t, h * w, -1)], dim=2)
    return pos.reshape(t * h * w, dim)  # time-major: row f * h * w + i * w + j is (frame f, row i, column j)


ATTENTION = ("full", "factorised")


class AxialDiTBlock(DiTBlock):
    """A :class:`~genimage.models.dit.DiTBlock` whose attention runs along one axis of the time-major token grid
    ``[B, frames * positions, D]``: ``axis="space"`` within each frame, ``axis="time"`` across the frames at each
    position. Input, output and parameters are those of ``DiTBlock``."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float, *, axis: str, frames: int, positions: int) -> None:
        super().__init__(hidden, heads, mlp_ratio)
        if axis not in ("space", "time"):
            raise ConfigError(f"axis must be 'space' or 'time', got {axis!r}.")
        self.axis, self.frames, self.positions = axis, frames, positions

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        t, s = self.frames, self.positions
        if self.axis == "space":
            return super().attention(x.reshape(b * t, s, d)).reshape(b, n, d)
        across = x.reshape(b, t, s, d).transpose(1, 2).reshape(b * s, t, d)
        return super().attention(across).reshape(b, s, t, d).transpose(1, 2).reshape(b, n, d)


class VideoDiT(ImageBackbone):
    """Video DiT ``model(x_t: [B, C, T, H, W], t: [B] or scalar, y: [B] | None) -> [B, C, T, H, W]``.

    Args:
        image_size: ``H = W``; must be divisible by ``patch_size``.
        frames: ``T``; must be divisible by ``temporal_patch``.
        channels: ``C``.
        patch_size: spatial tubelet side ``p``.
        temporal_patch: tubelet length ``pt`` in frames.
        size: a name of :data:`~genimage.models.dit.DIT_SIZES` (sets depth, hidden, heads), or None to give them.
        num_classes: number of classes for class conditioning (None: unconditional).
        attention: ``"full"`` space-time attention or ``"factorised"`` (alternating space and time blocks).

    Example::

        net = VideoDiT(image_size=8, frames=4, channels=1, temporal_patch=2, num_classes=10)
        v = net(torch.randn(2, 1, 4, 8, 8), torch.rand(2), y=torch.tensor([0, 1]))   # [2, 1, 4, 8, 8]
    """

    kind = "video-dit"

    def __init__(
        self,
        *,
        image_size: int,
        frames: int,
        channels: int,
        patch_size: int = 2,
        temporal_patch: int = 1,
        size: str | None = "DiT-Mi",
        depth: int | None = None,
        hidden: int | None = None,
        heads: int | None = None,
        mlp_ratio: float = 4.0,
        num_classes: int | None = None,
        attention: str = "full",
    ) -> None:
        super().__init__()
        depth, hidden, heads = dit_dims(size, depth, hidden, heads)
        if attention not in ATTENTION:
            raise ConfigError(f"VideoDiT attention must be one of {', '.join(ATTENTION)}, got {attention!r}.")
        if patch_size < 1 or temporal_patch < 1 or image_size < 1 or frames < 1:
            raise ConfigError("image_size, frames, patch_size and temporal_patch must be positive.")
        if image_size % patch_size:
            raise ConfigError(f"image size {image_size} must be divisible by the patch size {patch_size}.")
        if frames % temporal_patch:
            raise ConfigError(f"frames {frames} must be divisible by the temporal patch {temporal_patch}.")
        self.config: dict[str, Any] = {
            "image_size": image_size,
            "frames": frames,
            "channels": channels,
            "patch_size": patch_size,
            "temporal_patch": temporal_patch,
            "size": None,
            "depth": depth,
            "hidden": hidden,
            "heads": heads,
            "mlp_ratio": mlp_ratio,
            "num_classes": num_classes,
            "attention": attention,
        }
        self.num_classes = num_classes
        self.image_size, self.frames, self.channels = image_size, frames, channels
        self.patch, self.tpatch = patch_size, temporal_patch
        self.grid, self.tgrid = image_size // patch_size, frames // temporal_patch
        kernel = (temporal_patch, patch_size, patch_size)
        self.patch_embed = nn.Conv3d(channels, hidden, kernel_size=kernel, stride=kernel)
        self.register_buffer("pos", sincos_3d(hidden, self.tgrid, self.grid, self.grid)[None], persistent=False)
        self.t_embed, self.y_embed = conditioning_embeddings(hidden, num_classes)
        if attention == "full":
            self.blocks = nn.ModuleList(DiTBlock(hidden, heads, mlp_ratio) for _ in range(depth))
        else:
            grid = {"frames": self.tgrid, "positions": self.grid * self.grid}
            axes = ("space", "time")
            self.blocks = nn.ModuleList(
                AxialDiTBlock(hidden, heads, mlp_ratio, axis=axes[i % 2], **grid) for i in range(depth)
            )
        # a token's output is its tubelet, laid out (frame, row, column, channel): p * p * (pt * C) values
        self.final = FinalLayer(hidden, patch_size, temporal_patch * channels)
        init_dit_weights(self)

    @property
    def num_tokens(self) -> int:
        """``N = (T / pt) (H / p) (W / p)``."""
        return self.tgrid * self.grid * self.grid

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, N, pt * p * p * C] -> [B, C, T, H, W]``; token ``(f, i, j)`` (time-major) holds the tubelet of
        frames ``f*pt ..``, rows ``i*p ..``, columns ``j*p ..`` as ``(frame, row, column, channel)``."""
        b, p, pt, c = tokens.shape[0], self.patch, self.tpatch, self.channels
        g, gt = self.grid, self.tgrid
        x = tokens.reshape(b, gt, g, g, pt, p, p, c).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, c, gt * pt, g * p, g * p)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        expected = (self.channels, self.frames, self.image_size, self.image_size)
        if x.dim() != 5 or x.shape[1:] != expected:
            raise InputError(
                f"VideoDiT expects inputs [B, C, T, H, W] = [B, {', '.join(map(str, expected))}], got {tuple(x.shape)}."
            )
        h = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos.to(x.dtype)
        c = dit_condition(self, x, t, y)
        for blk in self.blocks:
            h = blk(h, c)
        return self.unpatchify(self.final(h, c))
