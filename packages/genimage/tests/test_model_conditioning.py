"""The backbones' conditioning pinned by independent computations: the time features are DiT's / DDPM's
``timestep_embedding(1000 t)`` (cosines then sines of ``1000 t`` times geometric frequencies ``1 .. 1/10000``),
a DiT size name cannot silently override explicitly given dimensions, and the KL-VAE's posterior log-variance is
clamped to LDM's ``[-30, 20]`` and no tighter."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError
from genimage.models import KLVAE, DiT, UNet, VideoDiT


def _reference_time_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    """DiT's ``TimestepEmbedder.timestep_embedding`` of the DDPM step ``1000 t``, written out in float64."""
    half = dim // 2
    out = torch.empty(t.shape[0], dim, dtype=torch.float64)
    for i, step in enumerate((1000 * t.double()).tolist()):
        for k in range(half):
            arg = step * math.exp(-math.log(10000) * k / half)
            out[i, k], out[i, half + k] = math.cos(arg), math.sin(arg)
    return out


@pytest.mark.parametrize(
    "build, dim",
    [
        (lambda: DiT(image_size=4, channels=1, patch_size=2, size=None, depth=1, hidden=16, heads=2), 256),
        (lambda: VideoDiT(image_size=4, frames=2, channels=1, size=None, depth=1, hidden=12, heads=2), 256),
        (lambda: UNet(image_size=4, channels=1, base=8, channel_mults=(1, 2)), 8),
    ],
)
def test_time_features_are_the_ddpm_embedding_of_1000_t(build, dim: int) -> None:
    t = torch.tensor([0.0, 1e-3, 0.25, 0.5, 0.999, 1.0])
    features = build().t_embed[0](t)
    assert features.shape == (6, dim)
    assert torch.allclose(features.double(), _reference_time_features(t, dim), atol=2e-4)


def test_a_size_name_with_explicit_dimensions_is_refused() -> None:
    with pytest.raises(ConfigError, match="size=None"):
        DiT(image_size=4, channels=1, depth=2, hidden=16, heads=2)  # size defaults to DiT-Mi
    with pytest.raises(ConfigError, match="size=None"):
        VideoDiT(image_size=4, frames=2, channels=1, size="DiT-Ti", hidden=12)
    net = DiT(image_size=4, channels=1, size=None, depth=2, hidden=16, heads=2)
    assert (net.config["depth"], net.config["hidden"], net.config["heads"]) == (2, 16, 2) and len(net.blocks) == 2
    assert DiT(image_size=4, channels=1, size="DiT-Ti").config["hidden"] == 192


def test_klvae_logvar_is_the_encoder_output_clamped_to_minus_30_20() -> None:
    vae = KLVAE(channels=1, latent_channels=3, width=8)
    head = vae.encoder[-1]  # 2 * latent_channels outputs: means, then log-variances
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([0.5, -1.0, 2.0, 5.0, -40.0, 25.0]))
        mean, logvar = vae.encode(torch.randn(2, 1, 4, 4))
    assert torch.equal(mean[0, :, 0, 0], torch.tensor([0.5, -1.0, 2.0]))
    assert torch.equal(logvar[0, :, 0, 0], torch.tensor([5.0, -30.0, 20.0]))  # variance e^5 kept, not capped at 1
