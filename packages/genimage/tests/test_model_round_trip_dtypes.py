"""Save / load of every genimage model class keeps the weights' dtype: a float64 model reloads as float64 and
gives bit-identical outputs (``load_state_dict`` copies into the rebuilt module's dtype, which was float32, so
float64 weights used to come back rounded and the reloaded model refused float64 inputs)."""

from __future__ import annotations

import json

import pytest
import torch

from gencore.errors import StorageError
from genimage.models import KLVAE, DiT, ImageBackbone, UNet, VideoDiT

BUILD = {
    "dit": (
        lambda: DiT(image_size=4, channels=1, patch_size=2, size=None, depth=2, hidden=16, heads=2, num_classes=3),
        (2, 1, 4, 4),
    ),
    "unet": (lambda: UNet(image_size=4, channels=1, base=8, channel_mults=(1, 2), num_classes=3), (2, 1, 4, 4)),
    "video-dit": (
        lambda: VideoDiT(
            image_size=4,
            frames=2,
            channels=1,
            size=None,
            depth=2,
            hidden=12,
            heads=2,
            num_classes=3,
            attention="factorised",
        ),
        (2, 1, 2, 4, 4),
    ),
}


def _perturb(net: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", sorted(BUILD))
def test_backbones_reload_bit_exact_in_their_own_dtype(kind: str, dtype: torch.dtype, tmp_path) -> None:
    build, shape = BUILD[kind]
    torch.manual_seed(0)
    net = build().to(dtype)
    _perturb(net)
    net.save_pretrained(tmp_path / kind)
    g = torch.Generator().manual_seed(1)
    x, t, y = (
        torch.randn(shape, generator=g, dtype=dtype),
        torch.rand(2, generator=g, dtype=dtype),
        torch.tensor([0, 3]),
    )
    for cls in (ImageBackbone, type(net)):
        again = cls.from_pretrained(tmp_path / kind)
        assert {p.dtype for p in again.parameters()} == {dtype}
        for name, w in net.state_dict().items():
            assert torch.equal(again.state_dict()[name], w), name
        out = again(x, t, y=y)
        assert out.dtype == dtype and torch.equal(out, net(x, t, y=y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_klvae_reloads_bit_exact_with_its_latent_scale_in_its_own_dtype(dtype: torch.dtype, tmp_path) -> None:
    torch.manual_seed(0)
    vae = KLVAE(channels=1, latent_channels=2, width=8).to(dtype)
    _perturb(vae)
    vae.latent_scale.fill_(1 / 3)  # not representable in float32: a float64 scale must survive unrounded
    vae.save_pretrained(tmp_path / "vae")
    again = KLVAE.from_pretrained(tmp_path / "vae")
    assert again.latent_scale.dtype == dtype and torch.equal(again.latent_scale, vae.latent_scale)
    x = torch.randn(2, 1, 4, 4, generator=torch.Generator().manual_seed(1), dtype=dtype)
    assert torch.equal(again.to_latent(x), vae.to_latent(x))
    z = vae.to_latent(x)
    assert torch.equal(again.from_latent(z), vae.from_latent(z))


@pytest.mark.parametrize(
    "change",
    [{"hidden": 32}, {"depth": 3}, {"unknown_setting": 1}, {"patch_size": 3}],
    ids=["hidden", "depth", "key", "bad"],
)
def test_a_config_that_does_not_fit_the_saved_weights_is_one_storage_error(change: dict, tmp_path) -> None:
    BUILD["dit"][0]().save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    (tmp_path / "m" / "config.json").write_text(json.dumps(config | change))
    for cls in (ImageBackbone, DiT):
        with pytest.raises(StorageError, match="/m"):
            cls.from_pretrained(tmp_path / "m")
