"""Diffusion Transformer (DiT) with adaLN-Zero blocks.

Peebles & Xie 2023, "Scalable Diffusion Models with Transformers" (ICCV): the image ``[B, C, H, W]``
is cut into ``p x p`` patches, linearly embedded to ``N = (H/p)(W/p)`` tokens of width ``D`` with fixed
2-D sine-cosine positions, processed by ``depth`` transformer blocks whose LayerNorms are modulated by
the conditioning ``c = emb(t) + emb(y)`` (shift, scale, and a gate on each residual branch; the
modulation layers start at zero, so every block starts as the identity: "adaLN-Zero"), and mapped back
to patches by a modulated final layer that also starts at zero.

Named taps: block ``i`` is the module ``blocks.{i}`` and returns the tokens ``[B, N, D]``, which is
what :class:`gencore.train.LayerSync` hooks (feature dimension last). Label dropout for
classifier-free guidance is done by the training task (the null class is index ``num_classes``).
Time ``t`` is in ``[0, 1]`` (suite convention) and embedded at 1000x as in DiT.

Size table (:data:`DIT_SIZES`, names as in the paper plus two CPU sizes): ``depth, hidden, heads``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.nn import SinusoidalTimeEmbedding, broadcast_time
from genimage.models.base import ImageBackbone

DIT_SIZES: dict[str, tuple[int, int, int]] = {
    "DiT-Mi": (4, 128, 4),  # CPU tests and demos
    "DiT-Ti": (6, 192, 3),  # CPU reproductions
    "DiT-S": (12, 384, 6),
    "DiT-B": (12, 768, 12),
    "DiT-L": (24, 1024, 16),
    "DiT-XL": (28, 1152, 16),
}


def dit_dims(size: str | None, depth: int | None, hidden: int | None, heads: int | None) -> tuple[int, int, int]:
    """``(depth, hidden, heads)`` of a size name of :data:`DIT_SIZES`, or the three given directly (with
    ``size=None``; a size name beside any of them is refused rather than silently overriding them)."""
    if size is not None and (depth, hidden, heads) != (None, None, None):
        raise ConfigError(
            f"give a DiT size name or depth, hidden and heads, not both (size {size!r} with depth {depth}, hidden "
            f"{hidden}, heads {heads}); pass size=None to give the dimensions directly."
        )
    if size is not None:
        if size not in DIT_SIZES:
            raise ConfigError(f"unknown DiT size {size!r}; expected one of: {', '.join(DIT_SIZES)}.")
        return DIT_SIZES[size]
    if depth is None or hidden is None or heads is None:
        raise ConfigError("give a DiT size name or all of depth, hidden and heads.")
    return depth, hidden, heads


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """Sine-cosine code ``[numel(pos), dim]`` (float64) of positions: ``dim / 2`` geometric frequencies
    ``1 .. 1/10000``, sines then cosines; ``dim`` must be even."""
    half = dim // 2
    omega = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float64) / half)
    a = pos.to(torch.float64).reshape(-1, 1) * omega[None]
    return torch.cat([torch.sin(a), torch.cos(a)], dim=1)


def sincos_2d(dim: int, h: int, w: int) -> torch.Tensor:
    """Fixed 2-D sine-cosine positions ``[h * w, dim]``: half the channels encode the row, half the column."""
    if dim % 4:
        raise ConfigError(f"DiT hidden size must be divisible by 4, got {dim}.")
    rows, cols = torch.meshgrid(
        torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij"
    )
    return torch.cat([sincos_1d(dim // 2, rows), sincos_1d(dim // 2, cols)], dim=1).float()


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x * (1 + scale) + shift`` with per-sample ``shift, scale: [B, D]`` over tokens ``x: [B, N, D]``."""
    return x * (1 + scale[:, None]) + shift[:, None]


class DiTBlock(nn.Module):
    """Pre-norm transformer block with adaLN-Zero conditioning: ``[B, N, D], [B, D] -> [B, N, D]``."""

    def __init__(self, hidden: int, heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        if hidden % heads:
            raise ConfigError(f"hidden size {hidden} must be divisible by the number of heads {heads}.")
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        inner = int(hidden * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(hidden, inner), nn.GELU(approximate="tanh"), nn.Linear(inner, hidden))
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(c).chunk(6, dim=1)
        x = x + g1[:, None] * self.attention(modulate(self.norm1(x), sh1, sc1))
        return x + g2[:, None] * self.mlp(modulate(self.norm2(x), sh2, sc2))


class FinalLayer(nn.Module):
    """Modulated LayerNorm and a linear map from tokens to patches ``[B, N, p * p * C]``."""

    def __init__(self, hidden: int, patch: int, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * channels)
        self.ada = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.ada(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm(x), shift, scale))


def conditioning_embeddings(hidden: int, num_classes: int | None) -> tuple[nn.Sequential, nn.Embedding | None]:
    """DiT's time embedding (256 sinusoidal features of ``t``, then a SiLU MLP to ``hidden``) and label table
    with the extra null class (None when unconditional); a backbone stores them as ``t_embed`` and ``y_embed``."""
    t_embed = nn.Sequential(SinusoidalTimeEmbedding(256), nn.Linear(256, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
    y_embed = nn.Embedding(num_classes + 1, hidden) if num_classes else None
    return t_embed, y_embed


def dit_condition(
    model: ImageBackbone, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None
) -> torch.Tensor:
    """The conditioning ``c = emb(t) + emb(y)`` ``[B, D]`` of a backbone built with :func:`conditioning_embeddings`
    (``y=None`` is the null class of a conditional model)."""
    c = model.t_embed(broadcast_time(t, x)).to(x.dtype)
    labels = model._labels(y, x.shape[0], x.device)
    if labels is not None:
        c = c + model.y_embed(labels)
    return c


def init_dit_weights(model: nn.Module) -> None:
    """DiT's initialisation of a backbone with ``patch_embed``, ``t_embed``, ``y_embed``, ``blocks`` and ``final``:
    Xavier-uniform linears and patch embedding (as a matrix), N(0, 0.02) time-MLP and label table, and
    adaLN-Zero (every block's and the final layer's modulation, and the final linear, start at zero)."""
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    w = model.patch_embed.weight
    nn.init.xavier_uniform_(w.view(w.shape[0], -1))
    nn.init.zeros_(model.patch_embed.bias)
    if model.y_embed is not None:
        nn.init.normal_(model.y_embed.weight, std=0.02)
    for lin in (model.t_embed[1], model.t_embed[3]):
        nn.init.normal_(lin.weight, std=0.02)
    for blk in model.blocks:  # adaLN-Zero: every residual branch starts closed
        nn.init.zeros_(blk.ada[-1].weight)
        nn.init.zeros_(blk.ada[-1].bias)
    nn.init.zeros_(model.final.ada[-1].weight)
    nn.init.zeros_(model.final.ada[-1].bias)
    nn.init.zeros_(model.final.linear.weight)
    nn.init.zeros_(model.final.linear.bias)


class DiT(ImageBackbone):
    """DiT backbone ``model(x_t: [B, C, H, W], t: [B] or scalar, y: [B] | None) -> [B, C, H, W]``.

    Args:
        image_size: ``H = W`` of the input (pixels or latent cells); must be divisible by ``patch_size``.
        channels: ``C``.
        patch_size: ``p``.
        size: a name of :data:`DIT_SIZES` (sets depth, hidden, heads), or None to give them directly.
        num_classes: number of classes for class conditioning (None: unconditional).

    Example::

        net = DiT(image_size=8, channels=1, patch_size=2, size="DiT-Mi", num_classes=10)
        v = net(torch.randn(4, 1, 8, 8), torch.rand(4), y=torch.tensor([0, 1, 2, 3]))   # [4, 1, 8, 8]
    """

    kind = "dit"

    def __init__(
        self,
        *,
        image_size: int,
        channels: int,
        patch_size: int = 2,
        size: str | None = "DiT-Mi",
        depth: int | None = None,
        hidden: int | None = None,
        heads: int | None = None,
        mlp_ratio: float = 4.0,
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        depth, hidden, heads = dit_dims(size, depth, hidden, heads)
        if patch_size < 1 or image_size < 1:
            raise ConfigError(f"image_size and patch_size must be positive, got {image_size} and {patch_size}.")
        if image_size % patch_size:
            raise ConfigError(f"image size {image_size} must be divisible by the patch size {patch_size}.")
        self.config: dict[str, Any] = {
            "image_size": image_size,
            "channels": channels,
            "patch_size": patch_size,
            "size": None,
            "depth": depth,
            "hidden": hidden,
            "heads": heads,
            "mlp_ratio": mlp_ratio,
            "num_classes": num_classes,
        }
        self.num_classes = num_classes
        self.image_size, self.channels, self.patch = image_size, channels, patch_size
        self.grid = image_size // patch_size
        self.patch_embed = nn.Conv2d(channels, hidden, kernel_size=patch_size, stride=patch_size)
        self.register_buffer("pos", sincos_2d(hidden, self.grid, self.grid)[None], persistent=False)
        self.t_embed, self.y_embed = conditioning_embeddings(hidden, num_classes)
        self.blocks = nn.ModuleList(DiTBlock(hidden, heads, mlp_ratio) for _ in range(depth))
        self.final = FinalLayer(hidden, patch_size, channels)
        init_dit_weights(self)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, N, p * p * C] -> [B, C, H, W]``."""
        b, p, c, g = tokens.shape[0], self.patch, self.channels, self.grid
        x = tokens.reshape(b, g, g, p, p, c).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, c, g * p, g * p)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1:] != (self.channels, self.image_size, self.image_size):
            raise InputError(
                f"DiT expects inputs [B, {self.channels}, {self.image_size}, {self.image_size}], got {tuple(x.shape)}."
            )
        h = self.patch_embed(x).flatten(2).transpose(1, 2) + self.pos.to(x.dtype)
        c = dit_condition(self, x, t, y)
        for blk in self.blocks:
            h = blk(h, c)
        return self.unpatchify(self.final(h, c))


def default_layersync_pair(depth: int) -> tuple[str, str]:
    """The (weak, strong) blocks LayerSync aligns by default: blocks ``depth // 4`` and ``3 * depth // 4``."""
    if depth < 2:
        raise ConfigError(f"LayerSync needs a DiT with at least 2 blocks, got {depth}.")
    weak = depth // 4
    strong = max(weak + 1, (3 * depth) // 4)
    return f"blocks.{weak}", f"blocks.{min(strong, depth - 1)}"
