"""A small KL-regularised autoencoder for latent training (Kingma & Welling 2014; the "KL-f" VAE of
Rombach et al. 2022, "High-Resolution Image Synthesis with Latent Diffusion Models"), with the
scale-consistency term of Latent Wavelet Diffusion (LWD; Sigillo et al., ICLR 2026, "Latent Wavelet
Diffusion: Enabling 4K Image Synthesis for Free").

``encode(x: [B, C, H, W]) -> (mean, logvar): [B, z, H/f, W/f]`` with ``f = 2 ** downsamples``,
``decode(z) -> [B, C, H', W']`` (fully convolutional, so any latent size decodes). The training loss of
one batch is

    L = mean (D(z) - x)^2 + beta * KL(q(z|x) || N(0, I)) / (C H W)
        + lambda_sc * mean (D(down2(z)) - down2(x))^2,

with ``z ~ q(z|x)`` by reparameterisation and ``down2`` a 2x2 average pool: the last term is LWD's
scale-consistency objective -- the decoder must turn the downsampled latent into the downsampled
image, so latent frequencies line up with image frequencies. ``lambda_sc = 0`` gives the plain KL-VAE.
Latent diffusion uses ``scale * mean`` of the encoder (``scale`` makes the latents unit-variance,
measured on the training set as in Rombach et al.).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError, InputError
from gencore.io import Pretrained


def _block(cin: int, cout: int) -> nn.Sequential:
    groups = next(g for g in range(min(8, cout), 0, -1) if cout % g == 0)  # 8, or the largest divisor below it
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.GroupNorm(groups, cout), nn.SiLU())


class KLVAE(Pretrained, nn.Module):
    """Convolutional KL-VAE (see the module docstring); ``latent_scale`` is stored with the weights."""

    def __init__(self, *, channels: int, latent_channels: int = 4, width: int = 64, downsamples: int = 1) -> None:
        super().__init__()
        if downsamples < 1:
            raise ConfigError(f"the VAE needs at least one downsampling, got {downsamples}.")
        if min(channels, latent_channels, width) < 1:
            raise ConfigError(
                f"the VAE's channels, latent_channels and width must be positive, got {channels}, {latent_channels}, "
                f"{width}."
            )
        self.config: dict[str, Any] = {
            "channels": channels,
            "latent_channels": latent_channels,
            "width": width,
            "downsamples": downsamples,
        }
        self.factor = 2**downsamples
        enc: list[nn.Module] = [_block(channels, width)]
        for _ in range(downsamples):
            enc += [nn.Conv2d(width, width, 3, stride=2, padding=1), _block(width, width)]
        enc.append(nn.Conv2d(width, 2 * latent_channels, 3, padding=1))
        self.encoder = nn.Sequential(*enc)
        dec: list[nn.Module] = [_block(latent_channels, width)]
        for _ in range(downsamples):
            dec += [nn.Upsample(scale_factor=2, mode="nearest"), _block(width, width)]
        dec.append(nn.Conv2d(width, channels, 3, padding=1))
        self.decoder = nn.Sequential(*dec)
        self.register_buffer("latent_scale", torch.ones(()))

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior ``(mean, logvar)``, each ``[B, z, H/f, W/f]`` (logvar clamped to [-30, 20])."""
        mean, logvar = self.encoder(x).chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Image ``[B, C, f h, f w]`` from an (unscaled) latent ``[B, z, h, w]``."""
        return self.decoder(z)

    def to_latent(self, x: torch.Tensor) -> torch.Tensor:
        """Diffusion latent of images: ``latent_scale * posterior mean``."""
        return self.latent_scale * self.encode(x)[0]

    def from_latent(self, z: torch.Tensor) -> torch.Tensor:
        """Images from diffusion latents (inverse of the scaling, then the decoder)."""
        return self.decode(z / self.latent_scale)

    def forward(self, x: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(D(z), D(down2(z)), mean, logvar)`` for ``z = mean + exp(logvar / 2) eps`` (``eps`` like the latent)."""
        mean, logvar = self.encode(x)
        z = mean + torch.exp(0.5 * logvar) * eps
        return self.decode(z), self.decode(F.avg_pool2d(z, 2)), mean, logvar

    def latent_shape(self, x: torch.Tensor) -> tuple[int, ...]:
        """Shape of the latent of ``x: [B, C, H, W]``: ``[B, z, ceil(H/f), ceil(W/f)]`` (each stride-2 convolution
        rounds up)."""
        f = self.factor
        return (x.shape[0], self.config["latent_channels"], -(-x.shape[2] // f), -(-x.shape[3] // f))


def klvae_loss(
    model: torch.nn.Module,
    x: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    beta: float = 1e-3,
    scale_weight: float = 0.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of the module docstring for ``x: [B, C, H, W]`` and its parts.

    ``model`` is a :class:`KLVAE` or a wrapper of one (DDP): it is called, so gradients synchronise.
    """
    vae = model.module if isinstance(getattr(model, "module", None), KLVAE) else model
    mult = vae.factor * (2 if scale_weight > 0 else 1)  # the scale-consistency term pools the latent 2x2 once more
    if x.dim() != 4 or x.shape[-2] % mult or x.shape[-1] % mult:
        raise InputError(
            f"the KL-VAE loss needs images [B, C, H, W] with H and W divisible by {mult} "
            f"(downsampling factor {vae.factor}{', times 2 for scale consistency' if scale_weight > 0 else ''}), "
            f"got {tuple(x.shape)}."
        )
    eps = torch.randn(vae.latent_shape(x), generator=generator, device=x.device, dtype=x.dtype)
    rec_full, rec_small, mean, logvar = model(x, eps)
    rec = (rec_full - x).square().mean()
    kl = 0.5 * (mean.square() + logvar.exp() - 1.0 - logvar).sum(dim=(1, 2, 3)).mean() / x[0].numel()
    loss = rec + beta * kl
    parts = {"reconstruction": rec.detach(), "kl": kl.detach()}
    if scale_weight > 0:
        sc = (rec_small - F.avg_pool2d(x, 2)).square().mean()
        loss = loss + scale_weight * sc
        parts["scale_consistency"] = sc.detach()
    return loss, parts
