"""LayerSync on the genimage backbones: what the named taps return, and the pairs a run refuses because LayerSync
would compute them silently wrong (a channel-first feature map, a strong layer before the weak one)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gencore.errors import ConfigError
from gencore.train import LayerSync
from genimage.config import ImageTrainConfig
from genimage.models import DiT, UNet, VideoDiT
from genimage.training import layersync_pairs


def _unet() -> UNet:
    torch.manual_seed(0)
    net = UNet(image_size=8, channels=1, base=16, channel_mults=(1, 2), num_classes=None)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return net


def test_unet_taps_are_the_feature_maps_before_and_after_the_middle_channel_last() -> None:
    """``taps.mid_in`` is the input of the middle blocks, ``taps.mid_out`` the output of the last one and
    ``taps.down{i}`` the skip of level ``i``, each ``[B, H, W, C]``; LayerSync's term on the pair is the mean over
    pixels of ``-cos`` over the channels (the old range-only check passed with channel-first taps, whose cosine
    runs over the image width, or with both taps on one side of the middle blocks)."""
    net = _unet()
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        net.mid1.register_forward_pre_hook(lambda m, a: seen.__setitem__("mid_in", a[0])),
        net.mid2.register_forward_hook(lambda m, a, o: seen.__setitem__("mid_out", o)),
        net.down[0].register_forward_hook(lambda m, a, o: seen.__setitem__("down0", o)),
    ]
    ls = LayerSync(net, [("taps.mid_in", "taps.mid_out"), ("taps.down0", "taps.down1")])
    x = torch.randn(3, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    with ls.capture():
        net(x, torch.rand(3, generator=torch.Generator().manual_seed(2)))
    for h in hooks:
        h.remove()
    feats = dict(ls._features)
    assert feats["taps.mid_in"].shape == (3, 4, 4, 32)  # [B, H, W, C]
    assert torch.equal(feats["taps.mid_in"], seen["mid_in"].movedim(1, -1))
    assert torch.equal(feats["taps.mid_out"], seen["mid_out"].movedim(1, -1))
    assert torch.equal(feats["taps.down0"], seen["down0"].movedim(1, -1))
    assert not torch.allclose(seen["mid_in"], seen["mid_out"])  # the middle blocks change the features
    reg = LayerSync(net, [("taps.mid_in", "taps.mid_out")])
    with reg.capture():
        net(x, torch.rand(3, generator=torch.Generator().manual_seed(2)))
    expected = -F.cosine_similarity(seen["mid_in"], seen["mid_out"], dim=1).mean()
    torch.testing.assert_close(reg.loss(), expected)


def _cfg(*pairs: str) -> ImageTrainConfig:
    return ImageTrainConfig(layersync=True, layersync_pairs=pairs).validate()


@pytest.mark.parametrize("pair", ["mid1:mid2", "mid_attn:mid2", "down.1:taps.mid_out"])
def test_unet_pairs_must_name_its_taps(pair: str) -> None:
    """``mid1:mid2`` has equal shapes ``[B, C, H, W]``: LayerSync used to take the width as the feature axis and
    returned a number (-0.77 on this net) instead of an error."""
    net = _unet()
    with pytest.raises(ConfigError, match="UNet LayerSync pairs must name its channel-last taps"):
        layersync_pairs(_cfg(pair), net)


@pytest.mark.parametrize(
    ("model", "pair"),
    [
        ("dit", "blocks.3:blocks.1"),
        ("dit", "blocks.2.mlp:blocks.0"),
        ("dit", "blocks.2:blocks.2.mlp"),  # the block's output comes after its own MLP
        ("video", "blocks.3:blocks.1"),
        ("video", "blocks.1:blocks.1.mlp"),
        ("unet", "taps.mid_out:taps.mid_in"),
        ("unet", "taps.down1:taps.mid_in"),  # the same tensor: the middle input is the last level's skip
        ("unet", "taps.mid_out:taps.down0"),
    ],
)
def test_a_strong_layer_before_the_weak_one_is_refused(model: str, pair: str) -> None:
    if model == "video":
        net = VideoDiT(image_size=8, frames=2, channels=1, patch_size=4, size="DiT-Mi")
    else:
        net = DiT(image_size=8, channels=1, patch_size=2, size="DiT-Mi") if model == "dit" else _unet()
    with pytest.raises(ConfigError, match="LayerSync pair"):
        layersync_pairs(_cfg(pair), net)


def test_shallow_to_deep_pairs_and_defaults_are_kept() -> None:
    dit = DiT(image_size=8, channels=1, patch_size=2, size="DiT-Mi")
    assert layersync_pairs(_cfg("blocks.1:blocks.3", "blocks.0.mlp:blocks.2"), dit) == (
        ("blocks.1", "blocks.3"),
        ("blocks.0.mlp", "blocks.2"),
    )
    assert layersync_pairs(_cfg("blocks.1.mlp:blocks.1", "blocks.2.qkv:blocks.2.mlp"), dit) == (
        ("blocks.1.mlp", "blocks.1"),
        ("blocks.2.qkv", "blocks.2.mlp"),
    )
    unet = _unet()
    assert layersync_pairs(_cfg("taps.down1:taps.mid_out"), unet) == (("taps.down1", "taps.mid_out"),)
    assert layersync_pairs(ImageTrainConfig(layersync=True), unet) == (("taps.mid_in", "taps.mid_out"),)
    assert layersync_pairs(ImageTrainConfig(layersync=True), dit) == (("blocks.1", "blocks.3"),)


def test_the_command_line_refuses_a_channel_first_unet_pair_in_one_line(tmp_path, capsys) -> None:
    from genimage.cli import main

    args = ["train", "--data", "digits", "--model", "unet", "--steps", "2", "--no-progress"]
    assert main([*args, "--layersync-pairs", "mid1:mid2", "--out", str(tmp_path / "u")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "channel-last taps" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "u" / "checkpoints").exists()
