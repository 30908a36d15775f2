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
    assert not torch.allclose(a, b, atol=1e-4)  # more than rounding: a UNet blind to labels differed by ~1e-6
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


def _reference_adaln_zero_block(blk: torch.nn.Module, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """adaLN-Zero (Peebles & Xie 2023) composed from the block's own submodules, chunk order
    (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp)."""

    def mod(h: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return h * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = blk.ada(c).chunk(6, dim=1)
    h = x + gate_msa.unsqueeze(1) * blk.attention(mod(blk.norm1(x), shift_msa, scale_msa))
    return h + gate_mlp.unsqueeze(1) * blk.mlp(mod(blk.norm2(h), shift_mlp, scale_mlp))


def test_dit_block_is_the_adaln_zero_composition_with_nonzero_weights() -> None:
    torch.manual_seed(0)
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=1, hidden=32, heads=2)
    blk = net.blocks[0]
    _perturb(blk)
    with torch.no_grad():  # a modulation large enough that shift, scale and gate differ clearly
        blk.ada[-1].weight.normal_(0.0, 0.3)
        blk.ada[-1].bias.normal_(0.0, 0.3)
    x, c = torch.randn(3, 16, 32), torch.randn(3, 32)
    with torch.no_grad():
        out = blk(x, c)
        ref = _reference_adaln_zero_block(blk, x, c)
    assert float((out - x).abs().max()) > 0.1  # the block is not the identity here
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_every_dit_block_is_the_identity_at_initialisation() -> None:
    torch.manual_seed(0)
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2, num_classes=3)
    x, c = torch.randn(2, 16, 32), torch.randn(2, 32)
    for i, blk in enumerate(net.blocks):
        assert torch.count_nonzero(blk.ada[-1].weight) == 0 and torch.count_nonzero(blk.ada[-1].bias) == 0, i
        assert torch.equal(blk(x, c), x), i
    # and inside the model: the tokens reaching every block tap are the embedded patches
    seen: list[torch.Tensor] = []
    hooks = [blk.register_forward_hook(lambda m, args, out: seen.append(out)) for blk in net.blocks]
    img = torch.randn(2, 1, 8, 8)
    net(img, torch.rand(2), y=torch.tensor([0, 2]))
    for h in hooks:
        h.remove()
    tokens = net.patch_embed(img).flatten(2).transpose(1, 2) + net.pos
    assert len(seen) == 2 and all(torch.equal(s, tokens) for s in seen)


def test_klvae_kl_term_is_the_analytic_gaussian_kl_per_image_element() -> None:
    torch.manual_seed(0)
    vae = KLVAE(channels=1, latent_channels=2, width=8)
    _perturb(vae)
    x = torch.rand(3, 1, 8, 8) * 2 - 1
    beta = 0.25
    loss, parts = klvae_loss(vae, x, torch.Generator().manual_seed(1), beta=beta, scale_weight=0.0)
    with torch.no_grad():
        mean, logvar = vae.encode(x)
    assert float(logvar.std()) > 0.01 and float(mean.abs().mean()) > 0.01  # a non-trivial posterior
    q = torch.distributions.Normal(mean, torch.exp(0.5 * logvar))
    p = torch.distributions.Normal(torch.zeros_like(mean), torch.ones_like(mean))
    # documented: KL(q(z|x) || N(0, I)) summed over the latent, averaged over the batch, divided by C H W
    kl = torch.distributions.kl_divergence(q, p).sum(dim=(1, 2, 3)).mean() / x[0].numel()
    assert torch.allclose(parts["kl"], kl, rtol=1e-5, atol=1e-7)
    assert torch.allclose(loss, parts["reconstruction"] + beta * kl, rtol=1e-5, atol=1e-7)


def test_vae_latent_scale_is_one_over_the_std_of_the_fitted_latents(tmp_path) -> None:
    from genimage.config import ImageTrainConfig
    from genimage.training import _train_vae

    cfg = ImageTrainConfig(
        latent=True, vae_steps=1, vae_width=8, vae_latent_channels=2, batch_size=16, progress=False, warmup_steps=0
    ).validate()
    images = torch.rand(32, 1, 8, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    vae, stopped = _train_vae(cfg, images, tmp_path, {})
    assert stopped is None and vae is not None
    with torch.no_grad():
        means = vae.encode(images)[0]
        latents = vae.to_latent(images)
    assert float(vae.latent_scale) == pytest.approx(1.0 / float(means.std()), rel=1e-5)
    assert float(latents.std()) == pytest.approx(1.0, rel=1e-5)
    assert float(KLVAE.from_pretrained(tmp_path / "vae").latent_scale) == pytest.approx(float(vae.latent_scale))


def test_dit_attention_is_torch_multihead_attention() -> None:
    """The block's fused qkv / head split / output projection against nn.MultiheadAttention with the same weights."""
    from genimage.models.dit import DiTBlock

    torch.manual_seed(0)
    blk = DiTBlock(32, 4)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(blk.qkv.weight)  # rows [q; k; v], each split into heads in order
        mha.in_proj_bias.copy_(blk.qkv.bias)
        mha.out_proj.weight.copy_(blk.proj.weight)
        mha.out_proj.bias.copy_(blk.proj.bias)
        x = torch.randn(2, 10, 32)
        torch.testing.assert_close(blk.attention(x), mha(x, x, x, need_weights=False)[0], rtol=1e-5, atol=1e-5)


def test_unet_attention_is_single_head_attention_over_positions() -> None:
    from genimage.models.unet import SelfAttention2d

    torch.manual_seed(0)
    attn = SelfAttention2d(16)
    _perturb(attn)
    mha = torch.nn.MultiheadAttention(16, 1, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.qkv.weight[:, :, 0, 0])
        mha.in_proj_bias.copy_(attn.qkv.bias)
        mha.out_proj.weight.copy_(attn.out.weight[:, :, 0, 0])
        mha.out_proj.bias.copy_(attn.out.bias)
        x = torch.randn(2, 16, 3, 5)  # a non-square map: rows and columns must not be mixed up
        h = attn.norm(x).flatten(2).transpose(1, 2)  # [B, H W, C]
        ref = x + mha(h, h, h, need_weights=False)[0].transpose(1, 2).reshape(x.shape)
        torch.testing.assert_close(attn(x), ref, rtol=1e-5, atol=1e-5)


def test_sincos_2d_is_the_mae_code_with_the_row_half_first() -> None:
    """MAE / DiT's ``get_2d_sincos_pos_embed`` written out independently: 1-D code = [sin(p w_k), cos(p w_k)],
    w_k = 10000^(-k / (D/4)); MAE puts the column code first, ours the row code (a fixed channel permutation,
    equivalent when training from scratch; pinned so that saved runs keep their positions)."""
    import math

    from genimage.models.dit import sincos_2d

    dim, h, w = 16, 3, 5
    quarter = dim // 4
    omega = [10000 ** (-k / quarter) for k in range(quarter)]

    def code(p: int) -> list[float]:
        return [math.sin(p * o) for o in omega] + [math.cos(p * o) for o in omega]

    expected = torch.tensor([code(i) + code(j) for i in range(h) for j in range(w)])
    pos = sincos_2d(dim, h, w)
    assert pos.shape == (h * w, dim) and pos.dtype == torch.float32
    torch.testing.assert_close(pos, expected, rtol=0, atol=1e-6)


def test_time_changes_the_output(backbone) -> None:
    _, net = backbone
    _perturb(net)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 2])
    with torch.no_grad():
        assert not torch.allclose(net(x, 0.2, y=y), net(x, 0.7, y=y), atol=1e-4)
        torch.testing.assert_close(net(x, torch.tensor([0.2, 0.2]), y=y), net(x, 0.2, y=y))


def test_klvae_reconstruction_decodes_the_reparameterised_sample() -> None:
    """``z = mean + exp(logvar / 2) eps`` with the loss's own noise, not the posterior mean."""
    torch.manual_seed(0)
    vae = KLVAE(channels=1, latent_channels=2, width=8)
    _perturb(vae)
    with torch.no_grad():
        vae.encoder[-1].bias[2:].fill_(1.0)  # logvar ~ 1: the sample is far from the mean
        x = torch.rand(3, 1, 8, 8) * 2 - 1
        _, parts = klvae_loss(vae, x, torch.Generator().manual_seed(3))
        mean, logvar = vae.encode(x)
        eps = torch.randn(vae.latent_shape(x), generator=torch.Generator().manual_seed(3))
        sampled = (vae.decode(mean + torch.exp(0.5 * logvar) * eps) - x).square().mean()
        at_mean = (vae.decode(mean) - x).square().mean()
    assert abs(float(sampled - at_mean)) > 1e-3  # the two differ here, so the check below has teeth
    torch.testing.assert_close(parts["reconstruction"], sampled)


@pytest.mark.parametrize(("width", "groups"), [(12, 6), (20, 5), (36, 6), (6, 6), (64, 8)])
def test_klvae_builds_for_widths_that_eight_does_not_divide(width: int, groups: int) -> None:
    """The config accepts any positive VAE width; the GroupNorms use 8 groups or the largest divisor below."""
    vae = KLVAE(channels=1, latent_channels=2, width=width)
    norms = [m for m in vae.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_groups == groups for m in norms)
    assert vae.decode(vae.to_latent(torch.zeros(1, 1, 8, 8))).shape == (1, 1, 8, 8)


@pytest.mark.parametrize(
    "build",
    [
        lambda: DiT(image_size=8, channels=1, patch_size=0),
        lambda: DiT(image_size=8, channels=1, patch_size=-2),
        lambda: UNet(image_size=8, channels=1, base=8, channel_mults=(1, 0)),
        lambda: UNet(image_size=8, channels=1, base=8, channel_mults=(-1,)),
        lambda: KLVAE(channels=1, width=0),
    ],
)
def test_non_positive_sizes_are_refused(build) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        build()


def test_fractional_labels_are_refused_and_whole_float_labels_accepted(backbone) -> None:
    _, net = backbone
    _perturb(net)
    x, t = torch.randn(2, 3, 8, 8), torch.rand(2)
    with pytest.raises(ConfigError, match="whole class indices"):
        net(x, t, y=torch.tensor([1.7, 0.0]))  # used to be truncated silently to class 1
    with torch.no_grad():
        assert torch.equal(net(x, t, y=torch.tensor([1.0, 2.0])), net(x, t, y=torch.tensor([1, 2])))


@pytest.mark.parametrize("base", [8, 16, 32])
def test_every_unet_block_sees_the_time_and_class_embedding(base: int) -> None:
    """The embedding is added per channel before a GroupNorm, which subtracts each group's mean: with one channel
    per group (the old grouping for widths of 32 or less) a block's output did not depend on it at all."""
    torch.manual_seed(0)
    net = UNet(image_size=8, channels=1, base=base, channel_mults=(1, 2), num_classes=3)
    _perturb(net)
    blocks = [m for m in net.modules() if type(m).__name__ == "ResBlock"]
    assert len(blocks) == 6
    e1, e2 = torch.randn(2, 4 * base), torch.randn(2, 4 * base)
    with torch.no_grad():
        for blk in blocks:
            x = torch.randn(2, blk.norm1.num_channels, 4, 4)
            out1, out2 = blk(x, e1), blk(x, e2)
            assert float((out1 - out2).abs().max()) > 0.01 * float(out1.abs().max()), blk
            assert blk.norm2.num_channels // blk.norm2.num_groups >= 2


def test_unet_saved_without_the_group_setting_loads_with_its_old_grouping(tmp_path) -> None:
    import json

    torch.manual_seed(0)
    old = UNet(image_size=8, channels=3, base=16, channel_mults=(1, 2), num_classes=5, min_group_channels=1)
    _perturb(old)
    old.save_pretrained(tmp_path / "old")
    config_file = tmp_path / "old" / "config.json"
    saved = json.loads(config_file.read_text())
    del saved["min_group_channels"]  # what a model saved before the setting existed holds
    config_file.write_text(json.dumps(saved))
    again = ImageBackbone.from_pretrained(tmp_path / "old")
    assert again.config["min_group_channels"] == 1
    x, t = torch.randn(2, 3, 8, 8), torch.rand(2)
    with torch.no_grad():
        assert torch.equal(again(x, t), old(x, t))
    assert UNet(image_size=8, channels=3).config["min_group_channels"] == 2  # new models use the fixed grouping
