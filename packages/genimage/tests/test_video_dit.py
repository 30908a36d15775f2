"""VideoDiT: tubelet patchify/unpatchify layout, 3-D sine-cosine positions, adaLN-Zero start, conditioning,
save/load, errors, and the structural match with DiT on a single frame."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from gencore.train import LayerSync
from genimage.models import DiT, ImageBackbone, VideoDiT, build_model, sincos_3d
from genimage.models.dit import sincos_2d


def _perturb(net: torch.nn.Module, seed: int = 0) -> None:
    """Move every weight off its (partly zero) initialisation so outputs depend on all of them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def _net(**kw) -> VideoDiT:
    torch.manual_seed(0)
    args = {"image_size": 8, "frames": 4, "channels": 3, "patch_size": 2, "temporal_patch": 1, "num_classes": 5}
    return VideoDiT(**{**args, **kw})


@pytest.mark.parametrize(("frames", "pt", "p"), [(4, 1, 2), (4, 2, 2), (6, 3, 4), (1, 1, 2), (4, 4, 8)])
def test_output_shape_token_count_and_zero_init(frames, pt, p) -> None:
    net = _net(frames=frames, temporal_patch=pt, patch_size=p)
    assert net.num_tokens == (frames // pt) * (8 // p) ** 2
    assert net.pos.shape == (1, net.num_tokens, 128)
    x = torch.randn(2, 3, frames, 8, 8)
    seen = []
    hook = net.blocks[0].register_forward_hook(lambda m, i, o: seen.append(o.shape))
    out = net(x, torch.rand(2), y=torch.tensor([0, 4]))
    hook.remove()
    assert out.shape == x.shape
    assert seen == [(2, net.num_tokens, 128)]  # named tap blocks.0 returns tokens [B, N, D]
    assert torch.count_nonzero(out) == 0  # adaLN-Zero: final layer starts at zero
    assert net(x, 0.5).shape == x.shape  # scalar time, null class


def test_gradients_reach_every_parameter_after_one_step() -> None:
    net = _net(temporal_patch=2)
    with torch.no_grad():  # open only the zero-initialised final linear; everything else stays as initialised
        net.final.linear.weight.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(2)
    x, t = torch.randn(6, 3, 4, 8, 8, generator=g), torch.rand(6, generator=g)
    y = torch.tensor([0, 1, 2, 3, 4, 5])  # every class and the null class 5

    def toy_loss() -> torch.Tensor:
        return (net(x, t, y=y) - x).square().mean()

    opt.zero_grad()
    toy_loss().backward()
    assert torch.count_nonzero(net.blocks[0].ada[-1].weight.grad) > 0  # the gates get gradient first
    opt.step()
    opt.zero_grad()
    toy_loss().backward()
    dead = [n for n, p in net.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    dead += [n for n, p in net.named_parameters() if p.grad is not None and torch.count_nonzero(p.grad) == 0]
    assert not dead


def test_tubelet_maps_back_to_its_own_location() -> None:
    """A one-hot output entry (frame a, row r, column s, channel ch) of token (f, i, j) lands at pixel
    (ch, f*pt + a, i*p + r, j*p + s); tokens are time-major."""
    net = _net(frames=6, temporal_patch=3, patch_size=4, channels=2)
    pt, p, c, g, gt = 3, 4, 2, 2, 2
    k = pt * p * p * c
    rng = torch.Generator().manual_seed(0)
    for _ in range(20):
        f, i, j = (int(v) for v in torch.randint(0, 2, (3,), generator=rng))
        a, r, s, ch = (int(torch.randint(0, n, (1,), generator=rng)) for n in (pt, p, p, c))
        tokens = torch.zeros(1, gt * g * g, k)
        tokens[0, (f * g + i) * g + j, ((a * p + r) * p + s) * c + ch] = 1.0
        out = net.unpatchify(tokens)
        assert out.shape == (1, c, 6, 8, 8)
        assert torch.nonzero(out[0]).tolist() == [[ch, f * pt + a, i * p + r, j * p + s]]


@pytest.mark.parametrize(("pt", "p"), [(1, 2), (2, 2), (4, 4)])
def test_unpatchify_inverts_the_tubelet_embedding(pt, p) -> None:
    """Make the model's own Conv3d tubelet embedding copy each tubelet into its token (in the final layer's
    (frame, row, column, channel) order); unpatchify of those tokens must give back the clip."""
    c = 3
    k = pt * p * p * c
    net = _net(temporal_patch=pt, patch_size=p, size=None, depth=1, hidden=max(k, 12), heads=2)
    with torch.no_grad():
        net.patch_embed.weight.zero_()
        net.patch_embed.bias.zero_()
        for a in range(pt):
            for r in range(p):
                for s in range(p):
                    for ch in range(c):
                        net.patch_embed.weight[((a * p + r) * p + s) * c + ch, ch, a, r, s] = 1.0
    x = torch.randn(2, c, 4, 8, 8)
    tokens = net.patch_embed(x).flatten(2).transpose(1, 2)[..., :k]  # what forward() feeds the blocks, minus pos
    assert tokens.shape == (2, net.num_tokens, k)
    assert torch.equal(net.unpatchify(tokens), x)


@pytest.mark.parametrize(("dim", "t", "h", "w"), [(128, 4, 4, 4), (192, 8, 4, 4), (128, 2, 16, 16), (30, 3, 2, 5)])
def test_sincos_3d_layout(dim, t, h, w) -> None:
    pos = sincos_3d(dim, t, h, w)
    assert pos.shape == (t * h * w, dim) and pos.dtype == torch.float32
    assert torch.unique(pos, dim=0).shape[0] == t * h * w  # every (frame, row, column) has its own code
    spatial = 4 * (dim // 6)
    tdim = dim - spatial
    assert tdim >= spatial // 2 and tdim % 2 == 0  # time gets the remainder
    grid = pos.reshape(t, h * w, dim)
    # the time channels depend only on the frame index, and differ between frames
    assert torch.equal(grid[:, :, :tdim], grid[:, :1, :tdim].expand(t, h * w, tdim))
    assert torch.unique(grid[:, 0, :tdim], dim=0).shape[0] == t
    # ... and are sin/cos of the frame index at geometric frequencies 1 .. 1/10000
    omega = [10000 ** (-k / (tdim // 2)) for k in range(tdim // 2)]
    for f in range(t):
        expected = [math.sin(f * o) for o in omega] + [math.cos(f * o) for o in omega]
        assert torch.allclose(grid[f, 0, :tdim], torch.tensor(expected), atol=1e-6)
    # the row and column channels are the 2-D code of the frame's grid, the same in every frame
    assert torch.equal(grid[:, :, tdim:], sincos_2d(spatial, h, w)[None].expand(t, h * w, spatial))
    # rows within a frame share the row part; columns share the column part
    rows = grid[0].reshape(h, w, dim)
    half = spatial // 2
    assert torch.equal(rows[:, :, tdim : tdim + half], rows[:, :1, tdim : tdim + half].expand(h, w, half))
    assert torch.equal(rows[:, :, tdim + half :], rows[:1, :, tdim + half :].expand(h, w, half))


def test_sincos_3d_needs_an_even_width() -> None:
    for dim in (127, 4, 2):
        with pytest.raises(ConfigError):
            sincos_3d(dim, 2, 2, 2)
    with pytest.raises(ConfigError):
        VideoDiT(image_size=8, frames=2, channels=1, size=None, depth=1, hidden=63, heads=3)
    assert VideoDiT(image_size=8, frames=2, channels=1, size="DiT-Ti").pos.shape == (1, 32, 192)


def test_temporal_order_matters_through_the_positions() -> None:
    net = _net(frames=4)
    _perturb(net)
    x, t, y = torch.randn(2, 3, 4, 8, 8), torch.rand(2), torch.tensor([1, 2])
    perm = torch.tensor([2, 0, 3, 1])
    out, out_perm = net(x, t, y=y), net(x[:, :, perm], t, y=y)
    assert not torch.allclose(out_perm, out[:, :, perm], atol=1e-4)
    # control: without positions, full space-time attention is equivariant to reordering the frames
    net.pos.zero_()
    out, out_perm = net(x, t, y=y), net(x[:, :, perm], t, y=y)
    assert torch.allclose(out_perm, out[:, :, perm], atol=1e-5)


def test_labels_change_the_output_and_null_class_is_default() -> None:
    net = _net(temporal_patch=2)
    _perturb(net)
    x, t = torch.randn(2, 3, 4, 8, 8), torch.rand(2)
    a = net(x, t, y=torch.tensor([0, 0]))
    b = net(x, t, y=torch.tensor([1, 1]))
    assert not torch.allclose(a, b)
    assert torch.equal(net(x, t), net(x, t, y=torch.tensor([5, 5])))  # y=None is the null class 5
    with pytest.raises(ConfigError):
        net(x, t, y=torch.tensor([7, 0]))
    uncond = _net(num_classes=None)
    _perturb(uncond)
    assert uncond.y_embed is None and uncond(x, t).shape == x.shape


def test_save_load_round_trip(tmp_path) -> None:
    net = _net(frames=4, temporal_patch=2, patch_size=4)
    _perturb(net)
    net.save_pretrained(tmp_path / "vdit")
    saved = json.loads((tmp_path / "vdit" / "config.json").read_text())
    assert saved["class"] == "video-dit" and saved["frames"] == 4 and saved["temporal_patch"] == 2
    assert saved["size"] is None and saved["hidden"] == 128
    again = ImageBackbone.from_pretrained(tmp_path / "vdit")
    assert type(again) is VideoDiT and again.config == net.config
    x, t, y = torch.randn(3, 3, 4, 8, 8), torch.rand(3), torch.tensor([0, 2, 5])
    assert torch.equal(net(x, t, y=y), again(x, t, y=y))
    assert torch.equal(VideoDiT.from_pretrained(tmp_path / "vdit")(x, t, y=y), net(x, t, y=y))
    with pytest.raises(StorageError):
        DiT.from_pretrained(tmp_path / "vdit")
    built = build_model("video-dit", **net.config)
    assert type(built) is VideoDiT and built.config == net.config


def test_bad_shapes_and_sizes() -> None:
    net = _net(frames=4, temporal_patch=2)
    t = torch.rand(2)
    for shape in [(2, 3, 2, 8, 8), (2, 1, 4, 8, 8), (2, 3, 4, 8, 6), (2, 3, 8, 8), (2, 3, 4, 8, 8, 1)]:
        with pytest.raises(InputError, match=r"\[B, 3, 4, 8, 8\]"):
            net(torch.randn(shape), t)
    with pytest.raises(InputError):
        net(torch.randn(2, 3, 4, 8, 8), torch.rand(3))
    with pytest.raises(ConfigError):
        VideoDiT(image_size=10, frames=4, channels=1, patch_size=4)
    with pytest.raises(ConfigError):
        VideoDiT(image_size=8, frames=5, channels=1, temporal_patch=2)
    with pytest.raises(ConfigError):
        VideoDiT(image_size=8, frames=4, channels=1, size="DiT-Huge")
    with pytest.raises(ConfigError):
        VideoDiT(image_size=8, frames=4, channels=1, size=None, depth=2)


def test_named_taps_feed_layersync() -> None:
    net = _net()
    _perturb(net)
    ls = LayerSync(net, [("blocks.0", "blocks.3")], weight=0.2)
    with ls.capture():
        net(torch.randn(2, 3, 4, 8, 8), torch.rand(2))
    assert -1.0 <= float(ls.loss().detach()) <= 1.0
    ls.remove()


def test_single_frame_matches_dit_when_given_its_positions() -> None:
    """With frames = temporal_patch = 1 and DiT's weights, VideoDiT is DiT except for the positions:
    ``sincos_3d(D, 1, h, w)`` is not ``sincos_2d(D, h, w)`` (the time third of the channels holds the constant
    code of frame 0, and rows/columns get ``2 * (D // 6)`` channels each instead of ``D / 2``), so the plain
    "same output as DiT" does not hold by design. Swapping in DiT's position table, the outputs must agree:
    this checks that the tubelet embedding, token order, conditioning, blocks and unpatchify match DiT's."""
    torch.manual_seed(0)
    dit = DiT(image_size=8, channels=3, patch_size=2, size="DiT-Mi", num_classes=5)
    _perturb(dit)
    video = _net(frames=1)
    state = dict(dit.state_dict())
    state["patch_embed.weight"] = state["patch_embed.weight"][:, :, None]  # [D, C, p, p] -> [D, C, 1, p, p]
    assert set(state) == set(video.state_dict())
    video.load_state_dict(state)
    assert not torch.allclose(video.pos, dit.pos)  # why the unmodified comparison is not tested
    video.pos.copy_(dit.pos)
    x, t, y = torch.randn(3, 3, 8, 8), torch.rand(3), torch.tensor([0, 4, 5])
    assert torch.allclose(video(x[:, :, None], t, y=y)[:, :, 0], dit(x, t, y=y), atol=1e-5)


def test_axial_blocks_are_dit_blocks_on_one_frame_or_one_position() -> None:
    """A space block over one frame, or a time block over one position, is the full-attention DiTBlock."""
    from genimage.models.dit import DiTBlock
    from genimage.models.video_dit import AxialDiTBlock

    torch.manual_seed(0)
    full = DiTBlock(32, 4)
    x, c = torch.randn(2, 6, 32), torch.randn(2, 32)
    for axis, grid in (("space", {"frames": 1, "positions": 6}), ("time", {"frames": 6, "positions": 1})):
        axial = AxialDiTBlock(32, 4, 4.0, axis=axis, **grid)
        axial.load_state_dict(full.state_dict())  # the same parameters
        torch.testing.assert_close(axial(x, c), full(x, c))
    with pytest.raises(ConfigError, match="axis must be 'space' or 'time'"):
        AxialDiTBlock(32, 4, 4.0, axis="depth", frames=1, positions=6)


@pytest.mark.parametrize("axis", ["space", "time"])
def test_axial_attention_sees_only_its_own_frame_or_position(axis) -> None:
    from genimage.models.video_dit import AxialDiTBlock

    torch.manual_seed(0)
    frames, positions = 3, 4
    block = AxialDiTBlock(32, 4, 4.0, axis=axis, frames=frames, positions=positions)
    x, c = torch.randn(2, frames * positions, 32), torch.randn(2, 32)
    grid = torch.arange(frames * positions).reshape(frames, positions)  # time-major token index
    moved = grid[1] if axis == "space" else grid[:, 1]  # every token of frame 1, or of position 1
    y = x.clone()
    y[:, moved] += torch.randn(2, len(moved), 32)
    changed = (block(y, c) - block(x, c)).abs().amax(dim=(0, 2)) > 0
    assert changed.tolist() == [bool((moved == i).any()) for i in range(frames * positions)]


def test_factorised_video_dit_reaches_every_frame_and_position_in_two_blocks() -> None:
    """One space block keeps frames apart; a space and a time block connect every token to every other."""
    grad_of_first_pixel = []
    for depth in (1, 2):
        net = _net(attention="factorised", size=None, depth=depth, hidden=32, heads=4, patch_size=2)
        _perturb(net)
        assert [type(b).__name__ for b in net.blocks] == ["AxialDiTBlock"] * depth
        x = torch.randn(1, 3, 4, 8, 8, requires_grad=True)
        net(x, 0.5)[0, :, 0, :2, :2].sum().backward()  # the first token's output (frame 0, patch (0, 0))
        grad_of_first_pixel.append(x.grad[0].abs().sum(dim=(0, 2, 3)) > 0)  # per frame
    assert grad_of_first_pixel[0].tolist() == [True, False, False, False]  # space only: frame 0 alone
    assert grad_of_first_pixel[1].all()
    full = _net()
    assert full.config["attention"] == "full" and all(type(b).__name__ == "DiTBlock" for b in full.blocks)
    with pytest.raises(ConfigError, match="attention must be one of full, factorised"):
        _net(attention="axial")


def test_factorised_weights_fit_the_full_model_and_round_trip(tmp_path) -> None:
    net = _net(attention="factorised", temporal_patch=2)
    _perturb(net)
    net.save_pretrained(tmp_path / "f")
    again = ImageBackbone.from_pretrained(tmp_path / "f")
    assert again.config["attention"] == "factorised"
    x, t = torch.randn(2, 3, 4, 8, 8), torch.rand(2)
    assert torch.equal(again(x, t), net(x, t))
    full = _net(temporal_patch=2)
    full.load_state_dict(net.state_dict())  # the same parameters; only what each attention sees differs
    assert not torch.allclose(full(x, t), net(x, t))


@pytest.mark.parametrize("attention", ["full", "factorised"])
@pytest.mark.parametrize("pt", [1, 2])
def test_batch_items_never_mix_and_follow_a_permutation_of_the_batch(attention, pt) -> None:
    """Each clip's output depends on that clip (and its t, y) alone: permuting the batch permutes the output,
    changing one clip leaves the others exactly as they were, and a batch of one gives the same rows (float64)."""
    net = _net(attention=attention, temporal_patch=pt, size=None, depth=2, hidden=24, heads=2).double()
    _perturb(net)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 3, 4, 8, 8, generator=g, dtype=torch.float64)
    t, y = torch.rand(3, generator=g, dtype=torch.float64), torch.tensor([0, 3, 5])
    out = net(x, t, y=y)
    assert out.dtype == torch.float64
    perm = torch.tensor([2, 0, 1])
    torch.testing.assert_close(net(x[perm], t[perm], y=y[perm]), out[perm], rtol=0, atol=1e-12)
    changed = x.clone()
    changed[1] += torch.randn(changed[1].shape, generator=g, dtype=torch.float64)
    other = net(changed, t, y=y)
    torch.testing.assert_close(other[[0, 2]], out[[0, 2]], rtol=0, atol=1e-12)
    assert not torch.allclose(other[1], out[1])
    for i in range(3):
        torch.testing.assert_close(net(x[i : i + 1], t[i : i + 1], y=y[i : i + 1]), out[i : i + 1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("attention", ["full", "factorised"])
def test_layersync_on_video_taps_is_the_token_cosine_with_the_later_block_as_fixed_guide(attention) -> None:
    """On the video DiT's block taps, LayerSync is -(1/(B N)) sum over (clip, token) of cos(weak, strong), computed
    here from the tokens directly; its gradient reaches the weak block and what precedes it, never the blocks
    from the weak tap up to the strong one (the guide is a stop-gradient target)."""
    net = _net(attention=attention, size=None, depth=4, hidden=24, heads=2).double()
    _perturb(net)
    seen: dict[str, torch.Tensor] = {}
    hooks = [net.blocks[i].register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(i, o)) for i in (1, 3)]
    ls = LayerSync(net, [("blocks.1", "blocks.3")], weight=0.2)
    g = torch.Generator().manual_seed(4)
    x, t = torch.randn(2, 3, 4, 8, 8, generator=g, dtype=torch.float64), torch.rand(2, generator=g, dtype=torch.float64)
    with ls.capture():
        net(x, t)
    reg = ls.loss()
    for h in hooks:
        h.remove()
    ls.remove()
    weak, strong = seen[1].detach(), seen[3].detach()
    assert weak.shape == (2, net.num_tokens, 24)
    cos = (weak * strong).sum(-1) / (weak.norm(dim=-1) * strong.norm(dim=-1))  # [B, N]
    assert reg.dtype == torch.float64
    torch.testing.assert_close(reg, -cos.sum() / cos.numel(), rtol=0, atol=1e-12)
    reg.backward()
    grads = {n: p.grad for n, p in net.named_parameters()}
    assert all(grads[n] is not None and grads[n].abs().sum() > 0 for n in ("patch_embed.weight", "blocks.0.qkv.weight"))
    assert grads["blocks.1.mlp.0.weight"].abs().sum() > 0
    later = [n for n in grads if n.startswith(("blocks.2.", "blocks.3.", "final."))]
    assert later and all(grads[n] is None or grads[n].abs().sum() == 0 for n in later)
