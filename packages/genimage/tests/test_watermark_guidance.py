"""HiDDeN training, PCGrad reconciliation, watermark guidance and MOLM on small CPU problems."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from gencore.errors import ConfigError
from genimage.watermark.generators import FlowGenerator, GaussianFlowGenerator, RunGenerator
from genimage.watermark.guidance import GaussianNull, decoder_detection, guided_generate, reconcile_gradients
from genimage.watermark.hidden import HiddenConfig, HiddenModel, train_hidden
from genimage.watermark.metrics import bit_accuracy, psnr
from genimage.watermark.molm import (
    MOLMScheme,
    RoutedLoRALinear,
    attach_markers,
    route,
    sample_marked,
    train_extractor,
    train_molm,
    train_through_sampler,
)


def _digits(size: int = 16):
    from gencore.data.digits import load_digits

    x = load_digits().reshape(-1, 1, 8, 8)[:512]
    return x if size == 8 else F.interpolate(x, size=(size, size), mode="bilinear").clamp(-1, 1)


@pytest.fixture(scope="module")
def hidden():
    cfg = HiddenConfig(channels=1, message_bits=8, hidden=16, steps=250, batch_size=32, strength=0.15, seed=0)
    return train_hidden(_digits(), cfg, progress=False)


def test_pcgrad_removes_conflicts_and_keeps_agreeing_gradients():
    a = torch.tensor([[1.0, 0.0]])
    b = torch.tensor([[-1.0, 1.0]])
    out = reconcile_gradients(torch.stack([a, b]))
    # each projected gradient is orthogonal to the one it conflicted with, so the mean agrees with both
    assert float((out * a).sum()) >= 0 and float((out * b).sum()) >= 0
    same = reconcile_gradients(torch.stack([a, 2 * a]))
    assert torch.allclose(same, 1.5 * a)


def test_hidden_post_hoc_marks_decode_and_save_load(hidden, tmp_path):
    x = _digits()[:128]
    g = torch.Generator().manual_seed(1)
    m = torch.randint(0, 2, (128, 8), generator=g)
    with torch.no_grad():
        marked = hidden.encoder(x, m)
        acc = bit_accuracy((hidden.decoder(marked) > 0).long(), m)
    assert acc > 0.9
    assert psnr(marked, x) > 20
    hidden.save_pretrained(tmp_path / "h")
    back = HiddenModel.from_pretrained(tmp_path / "h")
    with torch.no_grad():
        assert torch.equal(back.decoder(marked), hidden.decoder(marked))


def test_guidance_writes_the_message_during_sampling(hidden):
    gen = GaussianFlowGenerator(torch.zeros(1, 16, 16), torch.full((1, 16, 16), 0.3), steps=20)
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(32, 1, 16, 16, generator=g)
    msg = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0])
    for p in hidden.parameters():
        p.requires_grad_(False)
    plain = gen._solve(noise, 0.0, 1.0, 20).clamp(-1, 1)
    guided = guided_generate(gen, noise, hidden.decoder, msg, scale=2.0)
    null = GaussianNull(decoder_detection(hidden.decoder, plain, msg, GaussianNull(torch.zeros(2))).score)
    det = decoder_detection(hidden.decoder, guided, msg, null)
    assert bit_accuracy(det.bits, msg) > 0.9
    assert float((det.pvalue < 0.01).double().mean()) > 0.9
    assert bit_accuracy(decoder_detection(hidden.decoder, plain, msg, null).bits, msg) < 0.8


def test_guidance_in_a_latent_space_marks_the_decoded_image(hidden):
    # an 8x8 "latent" flow decoded to 16x16 images by a fixed differentiable map: the decoder reads
    # decoded predictions and the guidance gradient flows back through the map to the latent state
    gen = GaussianFlowGenerator(torch.zeros(1, 8, 8), torch.full((1, 8, 8), 0.3), steps=20)

    def to_image(z):
        return F.interpolate(z, scale_factor=2, mode="bilinear", align_corners=False)

    gen.to_image = to_image

    noise = torch.randn(32, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    msg = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0])
    for p in hidden.parameters():
        p.requires_grad_(False)
    plain = to_image(gen._solve(noise, 0.0, 1.0, 20)).clamp(-1, 1)
    guided = guided_generate(gen, noise, hidden.decoder, msg, scale=2.0)
    assert guided.shape == (32, 1, 16, 16)
    null = GaussianNull(decoder_detection(hidden.decoder, plain, msg, GaussianNull(torch.zeros(2))).score)
    assert bit_accuracy(decoder_detection(hidden.decoder, guided, msg, null).bits, msg) > 0.9
    assert bit_accuracy(decoder_detection(hidden.decoder, plain, msg, null).bits, msg) < 0.8


def test_routed_lora_matches_the_explicit_sum_and_is_off_without_a_key():
    torch.manual_seed(0)
    base = torch.nn.Linear(6, 5)
    lora = RoutedLoRALinear(base, [[0], [1], [2]], rank=2)  # bit routing: every bit picks one of two
    torch.nn.init.normal_(lora.B)
    x = torch.randn(4, 7, 6)
    keys = torch.tensor([[0, 1, 1], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    assert torch.equal(lora(x), base(x))
    lora.route(keys)
    expect = base(x).clone()
    for n in range(4):
        for b in range(3):
            expect[n] += (lora.alpha / 3) * x[n] @ lora.A[b, keys[n, b]].T @ lora.B[b, keys[n, b]].T
    assert torch.allclose(lora(x), expect, atol=1e-5)


def test_segment_routing_reads_each_segment_as_a_binary_adapter_index():
    torch.manual_seed(0)
    base = torch.nn.Linear(6, 5)
    lora = RoutedLoRALinear(base, [[1, 3, 4]], rank=2)  # one group: bits 1, 3, 4 pick one of 8 adapters
    assert lora.A.shape == (1, 8, 2, 6) and lora.B.shape == (1, 8, 5, 2)
    torch.nn.init.normal_(lora.B)
    x = torch.randn(3, 7, 6)
    keys = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 1, 0, 0], [0, 1, 1, 0, 1]])
    lora.route(keys)
    for n, s in enumerate((1 + 2 + 4, 0, 1 + 4)):  # bit 1 is the lowest digit, bit 4 the highest
        expect = base(x[n]) + lora.alpha * x[n] @ lora.A[0, s].T @ lora.B[0, s].T
        assert torch.allclose(lora(x)[n], expect, atol=1e-5)


def test_segment_routing_spreads_the_key_over_the_layers_in_order():
    from genimage.models.dit import DiT

    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2)
    names = attach_markers(net, bits=7, routing="segment", rank=2)  # 4 target layers: segments of 2 bits
    assert names == ["blocks.0.proj", "blocks.0.mlp.2", "blocks.1.proj", "blocks.1.mlp.2"]
    markers = [net.get_submodule(n) for n in names]
    assert [m.bit_index.tolist() for m in markers] == [[[0, 1]], [[2, 3]], [[4, 5]], [[6]]]
    assert [m.bit_weight.tolist() for m in markers] == [[[1, 2]], [[1, 2]], [[1, 2]], [[1]]]
    assert [m.A.shape[1] for m in markers] == [4, 4, 4, 2]  # the last, one-bit segment has two adapters
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2)
    assert len(attach_markers(net, bits=2, routing="segment")) == 2  # one bit per layer: two layers carry them
    with pytest.raises(ConfigError, match="at most 8 bits per layer"):
        attach_markers(DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2), 40,
                       routing="segment")  # fmt: skip
    with pytest.raises(ConfigError, match="routing must be one of bit, segment, got 'pair'"):
        attach_markers(net, 4, routing="pair")


@pytest.mark.parametrize(("latent", "routing"), [(False, "bit"), (True, "bit"), (False, "segment")])
def test_molm_markers_route_by_key_and_the_extractor_reads_them(latent, routing):
    from genimage.models.dit import DiT

    def to_image(z):  # latent: 8x8 states read by the extractor as 16x16 images
        return F.interpolate(z, scale_factor=2, mode="nearest") if latent else z

    torch.manual_seed(0)
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2)
    for p in net.parameters():  # stands in for a trained network (adaLN-Zero starts with closed gates)
        torch.nn.init.normal_(p, std=0.05)
    load = _digits(8)[:256]
    with torch.no_grad():
        base_out = net(load[:4], torch.rand(4))
    names = attach_markers(net, bits=4, rank=2, routing=routing)
    assert len(names) == 4  # proj and mlp.2 of two blocks (segment routing: one bit each)
    with torch.no_grad():
        assert torch.allclose(net(load[:4], torch.rand(4) * 0 + 0.5), net(load[:4], torch.full((4,), 0.5)))
        route(net, None)
        assert base_out.shape == net(load[:4], torch.rand(4)).shape
    extractor = train_molm(net, load, bits=4, steps=150, batch_size=32, seed=0, progress=False, to_image=to_image)
    gen = FlowGenerator(lambda x, t: net(x, t.expand(x.shape[0])), (1, 8, 8), steps=10)
    g = torch.Generator().manual_seed(3)
    noise = torch.randn(64, 1, 8, 8, generator=g)
    keys = torch.randint(0, 2, (64, 4), generator=g)
    route(net, keys)
    with torch.no_grad():
        marked = to_image(gen.generate(noise))
        route(net, None)
        acc = bit_accuracy((extractor(marked) > 0).long(), keys)
        plain = to_image(gen.generate(noise))
        acc_plain = bit_accuracy((extractor(plain) > 0).long(), keys)
    assert acc > 0.7
    assert acc_plain < 0.6  # without the adapters the extractor cannot know the key


@pytest.fixture(scope="module")
def tiny_molm():
    """A tiny DiT with markers after the joint phase, its extractor, and a sampler over it."""
    from genimage.models.dit import DiT

    torch.manual_seed(0)
    net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.05)
    attach_markers(net, bits=4, rank=2)
    extractor = train_molm(net, _digits(8)[:256], bits=4, steps=150, batch_size=32, seed=0, progress=False)
    gen = FlowGenerator(lambda x, t: net(x, t.expand(x.shape[0])), (1, 8, 8), steps=10)
    g = torch.Generator().manual_seed(3)
    noise, keys = torch.randn(256, 1, 8, 8, generator=g), torch.randint(0, 2, (256, 4), generator=g)
    return net, extractor, gen, sample_marked(gen, net, noise, keys), keys


def test_molm_extractor_trained_on_full_samples_reads_unseen_full_samples_better(tiny_molm):
    """The joint phase sees one-step predictions only; training the extractor on fully sampled images (the
    adapters frozen) must raise its accuracy on full samples it never saw, with other noise and keys."""
    net, joint_extractor, gen, held_out, keys = tiny_molm
    extractor = copy.deepcopy(joint_extractor)

    def accuracy() -> float:
        with torch.no_grad():
            return bit_accuracy((extractor(held_out) > 0).long(), keys)

    adapters = [p.clone() for n, p in net.named_parameters() if n.endswith((".A", ".B"))]
    scheme = MOLMScheme(net, extractor, torch.tensor([1, 0, 1, 1]), held_out[:64])
    null_before, before = scheme.null, accuracy()
    report = scheme.finetune(gen, steps=100, images=2048, held_out=256, seed=0, progress=False)
    after = accuracy()
    assert after > before + 0.03, (before, after)  # measured: 0.738 -> 0.785 (1,024 bits: 3 standard errors)
    assert report["held_out_bit_accuracy_after"] > report["held_out_bit_accuracy_before"] and report["step_kept"] > 0
    after_adapters = [p for n, p in net.named_parameters() if n.endswith((".A", ".B"))]
    assert all(torch.equal(a, b) for a, b in zip(adapters, after_adapters))  # only the extractor moved
    assert scheme.null is not null_before  # the null is refitted on the new extractor
    assert all(m.keys is None for m in net.modules() if isinstance(m, RoutedLoRALinear))  # adapters off again


def test_molm_extractor_phase_keeps_the_joint_weights_when_training_does_not_help(tiny_molm):
    """Trained on keys that do not belong to the images, the extractor reads held-out images worse at every
    check: the phase must hand back the starting weights unchanged."""
    net, joint_extractor, gen, held_out, keys = tiny_molm
    extractor = copy.deepcopy(joint_extractor)
    g = torch.Generator().manual_seed(5)
    noise, train_keys = torch.randn(512, 1, 8, 8, generator=g), torch.randint(0, 2, (512, 4), generator=g)
    images = sample_marked(gen, net, noise, train_keys)
    wrong = train_keys[torch.randperm(512, generator=g)]
    report = train_extractor(extractor, images, wrong, held_out, keys, steps=100, seed=0, progress=False)
    assert report["step_kept"] == 0
    assert report["held_out_bit_accuracy_after"] == report["held_out_bit_accuracy_before"]
    for k, v in joint_extractor.state_dict().items():
        assert torch.equal(extractor.state_dict()[k], v)


@pytest.mark.parametrize("objective", ["flow", "vp"])
def test_generate_with_grad_draws_generate_s_images_with_gradients_through_the_last_steps(objective, tmp_path):
    from genimage.cli import main

    out = tmp_path / objective
    args = ["--steps", "5", "--batch-size", "16", "--objective", objective, "--unconditional", "--no-progress"]
    assert main(["train", "--data", "digits", *args, "--out", str(out)]) == 0
    gen = RunGenerator(out, steps=4)
    noise = torch.randn(6, *gen.noise_shape, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(gen.generate_with_grad(noise, 2).detach().clamp(-1, 1), gen.generate(noise))
    model = gen.run.model.requires_grad_(True)
    x = noise.clone().requires_grad_(True)
    gen.generate_with_grad(x, 2).sum().backward()
    assert x.grad is None  # the first two steps ran without autograd
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    assert sum(float(p.grad.abs().sum()) for p in model.parameters()) > 0
    x = noise.clone().requires_grad_(True)
    gen.generate_with_grad(x, 4).sum().backward()
    assert x.grad is not None and float(x.grad.abs().sum()) > 0  # every step differentiated
    with pytest.raises(ConfigError, match=r"last_steps must be in \[1, 4\]"):
        gen.generate_with_grad(noise, 5)


def test_molm_trained_through_the_sampler_reads_unseen_full_samples_better(tiny_molm):
    """The adapters and the extractor trained together on full samples (gradients through the last two of the
    ten solver steps) must read full samples of other noise and keys better than after the joint phase, with
    the marked images no further from the unmarked ones."""
    net0, extractor0, _, held_out0, keys = tiny_molm
    net, extractor = copy.deepcopy(net0), copy.deepcopy(extractor0)
    gen = FlowGenerator(lambda x, t: net(x, t.expand(x.shape[0])), (1, 8, 8), steps=10)
    noise = torch.randn(256, 1, 8, 8, generator=torch.Generator().manual_seed(3))  # the fixture's held-out draw
    assert torch.equal(sample_marked(gen, net, noise, keys), held_out0)

    def accuracy() -> float:
        with torch.no_grad():
            return bit_accuracy((extractor(sample_marked(gen, net, noise, keys)) > 0).long(), keys)

    adapters = {n: p.clone() for n, p in net.named_parameters() if n.endswith((".A", ".B"))}
    before = accuracy()
    report = train_through_sampler(gen, net, extractor, bits=4, steps=60, seed=0, progress=False)
    after = accuracy()
    assert after > before + 0.05, (before, after)  # measured: 0.738 -> 0.831 (1,024 bits)
    assert report["bce_last"] < report["bce_first"]
    assert report["mse_last"] < report["mse_first"]  # measured 0.160 -> 0.122: fidelity is not traded away
    moved = {n: not torch.equal(p, adapters[n]) for n, p in net.named_parameters() if n in adapters}
    assert all(moved.values()), moved  # the gradient reached every adapter through the sampler
    assert all(not p.requires_grad for p in net.parameters())
    assert all(m.keys is None for m in net.modules() if isinstance(m, RoutedLoRALinear))


def test_molm_and_guidance_refuse_analytic_generators():
    gen = GaussianFlowGenerator(torch.zeros(1, 8, 8), torch.ones(1, 8, 8))
    with pytest.raises(ConfigError, match="needs a generator with a network"):
        MOLMScheme.build(gen, message_bits=4, progress=False)


def test_molm_fidelity_weight_keeps_the_marked_velocity_near_the_unmarked_one():
    """The joint phase's fidelity term penalises ``|v_k - v_base|^2``: a larger weight must leave the marked
    velocity closer to the base network's on states it never trained on."""
    from genimage.models.dit import DiT

    states = _digits(8)
    g = torch.Generator().manual_seed(5)
    xt, t = torch.randn(128, 1, 8, 8, generator=g), 0.3 + 0.7 * torch.rand(128, generator=g)
    xt = (1 - t[:, None, None, None]) * xt + t[:, None, None, None] * states[384:]
    keys = torch.randint(0, 2, (128, 4), generator=g)
    gap = {}
    for fidelity in (0.0, 10.0):
        torch.manual_seed(0)
        net = DiT(image_size=8, channels=1, patch_size=2, size=None, depth=2, hidden=32, heads=2)
        for p in net.parameters():
            torch.nn.init.normal_(p, std=0.05)
        attach_markers(net, bits=4, rank=2)
        train_molm(net, states[:256], bits=4, steps=150, batch_size=32, fidelity=fidelity, seed=0, progress=False)
        with torch.no_grad():
            v_base = net(xt, t)
            route(net, keys)
            gap[fidelity] = float((net(xt, t) - v_base).pow(2).mean())
            route(net, None)
    assert gap[10.0] < 0.01 * gap[0.0], gap  # measured: 0.48 without the term, 7e-7 with weight 10


def test_pcgrad_projection_by_hand_per_sample():
    """Two conflicting gradients a = (2, 0), b = (-1, 3): a' = a - (a.b / |b|^2) b = (1.8, 0.6) and
    b' = b - (a.b / |a|^2) a = (0, 3), mean (0.9, 1.8); a second sample without conflict keeps the plain mean."""
    grads = torch.tensor([[[2.0, 0.0], [1.0, 1.0]], [[-1.0, 3.0], [3.0, 1.0]]], dtype=torch.float64)
    out = reconcile_gradients(grads, torch.Generator().manual_seed(0))
    torch.testing.assert_close(out, torch.tensor([[0.9, 1.8], [2.0, 1.0]], dtype=torch.float64))
