"""Checks shared by every backbone (in the spirit of diffusers' model test mixins): output shape,
class conditioning and the null class, save/load round trip, gradients reaching every parameter,
the zero initialisation of the output, and the named taps LayerSync hooks."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from gencore.train import LayerSync
from genimage.models import DIT_SIZES, KLVAE, DiT, ImageBackbone, UNet, default_layersync_pair, klvae_loss

BACKBONES = {
    "dit": lambda: DiT(image_size=8, channels=3, patch_size=2, size="DiT-Mi", num_classes=5),
    "unet": lambda: UNet(image_size=8, channels=3, base=16, channel_mults=(1, 2), num_classes=5),
}
TAPS = {"dit": ("blocks.0", "blocks.3"), "unet": ("taps.mid_in", "taps.mid_out")}


def _perturb(net: torch.nn.Module) -> None:
    """Move every weight off its (partly zero) initialisation so outputs depend on all of them."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


@pytest.fixture(params=sorted(BACKBONES))
def backbone(request: pytest.FixtureRequest) -> tuple[str, ImageBackbone]:
    torch.manual_seed(0)
    return request.param, BACKBONES[request.param]()


def test_output_shape_and_zero_init(backbone) -> None:
    _, net = backbone
    x = torch.randn(4, 3, 8, 8)
    out = net(x, torch.rand(4), y=torch.tensor([0, 1, 2, 3]))
    assert out.shape == x.shape
    assert torch.count_nonzero(out) == 0  # adaLN-Zero / zero output convolution
    assert net(x, 0.5).shape == x.shape  # scalar time, null class


def test_labels_change_the_output_and_null_class_is_default(backbone) -> None:
    _, net = backbone
    _perturb(net)
    x, t = torch.randn(2, 3, 8, 8), torch.rand(2)
    a = net(x, t, y=torch.tensor([0, 0]))
    b = net(x, t, y=torch.tensor([1, 1]))
    assert not torch.allclose(a, b)
    assert torch.allclose(net(x, t), net(x, t, y=torch.tensor([5, 5])))  # y=None is the null class 5
    with pytest.raises(ConfigError):
        net(x, t, y=torch.tensor([7, 0]))
    with pytest.raises(InputError):
        net(torch.randn(2, 3, 6, 6), t)


def test_save_load_round_trip(backbone, tmp_path) -> None:
    kind, net = backbone
    _perturb(net)
    net.save_pretrained(tmp_path / kind)
    again = ImageBackbone.from_pretrained(tmp_path / kind)
    assert type(again) is type(net) and again.config == net.config
    x, t, y = torch.randn(3, 3, 8, 8), torch.rand(3), torch.tensor([0, 2, 4])
    assert torch.equal(net(x, t, y=y), again(x, t, y=y))
    other = DiT if kind == "unet" else UNet
    with pytest.raises(StorageError):
        other.from_pretrained(tmp_path / kind)


def test_gradients_reach_every_parameter(backbone) -> None:
    _, net = backbone
    _perturb(net)
    out = net(torch.randn(2, 3, 8, 8), torch.rand(2), y=torch.tensor([1, 5]))
    out.square().mean().backward()
    missing = [n for n, p in net.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing
    # only the rows of the labels used (1 and the null class 5) receive gradient in the label table
    table = net.y_embed.weight.grad
    assert torch.count_nonzero(table[[0, 2, 3, 4]]) == 0 and torch.count_nonzero(table[[1, 5]]) > 0


def test_named_taps_feed_layersync(backbone) -> None:
    kind, net = backbone
    _perturb(net)
    ls = LayerSync(net, [TAPS[kind]], weight=0.2)
    with ls.capture():
        net(torch.randn(2, 3, 8, 8), torch.rand(2))
    reg = ls.loss()
    assert -1.0 <= float(reg.detach()) <= 1.0
    ls.remove()


def test_dit_size_table_and_default_pair() -> None:
    net = DiT(image_size=16, channels=1, patch_size=4, size="DiT-Ti")
    assert (net.config["depth"], net.config["hidden"], net.config["heads"]) == DIT_SIZES["DiT-Ti"]
    assert len(net.blocks) == 6 and net.grid == 4
    assert default_layersync_pair(4) == ("blocks.1", "blocks.3")
    assert default_layersync_pair(28) == ("blocks.7", "blocks.21")
    with pytest.raises(ConfigError):
        DiT(image_size=10, channels=1, patch_size=4)


def test_dit_unpatchify_inverts_patchify() -> None:
    net = DiT(image_size=8, channels=3, patch_size=2)
    x = torch.randn(2, 3, 8, 8)
    p = net.patch
    tokens = x.reshape(2, 3, 4, p, 4, p).permute(0, 2, 4, 3, 5, 1).reshape(2, 16, p * p * 3)
    assert torch.equal(net.unpatchify(tokens), x)


def test_klvae_scale_consistency_term_and_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    vae = KLVAE(channels=1, latent_channels=2, width=16)
    x = torch.rand(4, 1, 8, 8) * 2 - 1
    plain, parts = klvae_loss(vae, x, torch.Generator().manual_seed(0), scale_weight=0.0)
    total, parts_sc = klvae_loss(vae, x, torch.Generator().manual_seed(0), scale_weight=0.5)
    assert "scale_consistency" not in parts and "scale_consistency" in parts_sc
    assert torch.allclose(total, plain + 0.5 * parts_sc["scale_consistency"])
    # the term is the error of decoding the 2x-pooled posterior sample against the 2x-pooled image
    mean, logvar = vae.encode(x)
    eps = torch.randn(vae.latent_shape(x), generator=torch.Generator().manual_seed(0))
    z = mean + torch.exp(0.5 * logvar) * eps
    expected = (vae.decode(torch.nn.functional.avg_pool2d(z, 2)) - torch.nn.functional.avg_pool2d(x, 2)).square().mean()
    assert torch.allclose(parts_sc["scale_consistency"], expected)
    vae.latent_scale.fill_(2.0)
    vae.save_pretrained(tmp_path / "vae")
    again = KLVAE.from_pretrained(tmp_path / "vae")
    assert torch.equal(again.to_latent(x), vae.to_latent(x)) and float(again.latent_scale) == 2.0


@pytest.mark.parametrize(("size", "scale_weight"), [(9, 0.0), (10, 0.5)])
def test_klvae_loss_refuses_sizes_its_downsampling_does_not_divide(size: int, scale_weight: float) -> None:
    vae = KLVAE(channels=1, width=8)
    x = torch.zeros(2, 1, size, size)
    assert vae.latent_shape(x) == tuple(vae.to_latent(x).shape)
    with pytest.raises(InputError, match="divisible"):
        klvae_loss(vae, x, torch.Generator().manual_seed(0), scale_weight=scale_weight)
