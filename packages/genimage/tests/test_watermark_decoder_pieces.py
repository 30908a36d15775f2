"""Small pieces of the decoder-based schemes (HiDDeN, guidance, MOLM) against hand-computed answers."""

from __future__ import annotations

import math

import pytest
import torch

from genimage.watermark.generators import FlowGenerator
from genimage.watermark.guidance import GaussianNull, _augment, decoder_detection
from genimage.watermark.hidden import HiddenConfig, HiddenEncoder, noise_layer
from genimage.watermark.molm import RoutedLoRALinear, route, sample_marked


def test_gaussian_null_and_decoder_score_by_hand():
    """Scores -1 and 1: mean 0, sample sd sqrt(2); P(N(0, 2) >= sqrt(2)) = 1 - Phi(1) = 0.158655. A linear
    decoder with logits (2, -1, 0.5) and message (1, 0, 0) scores mean(2, 1, -0.5) = 5/6 and reads bits (1, 0, 1)."""
    null = GaussianNull(torch.tensor([-1.0, 1.0]))
    assert (null.mu, null.sd) == (0.0, pytest.approx(math.sqrt(2)))
    torch.testing.assert_close(
        null.pvalue(torch.tensor([0.0, math.sqrt(2), -math.sqrt(2)])),
        torch.tensor([0.5, 0.158655254, 0.841344746], dtype=torch.float64),
    )
    dec = torch.nn.Linear(1, 3)
    with torch.no_grad():
        dec.weight.zero_()
        dec.bias.copy_(torch.tensor([2.0, -1.0, 0.5]))
    det = decoder_detection(dec, torch.zeros(2, 1), torch.tensor([1, 0, 0]), null)
    torch.testing.assert_close(det.score, torch.full((2,), 5 / 6, dtype=torch.float64))
    assert det.bits.tolist() == [[1, 0, 1]] * 2
    torch.testing.assert_close(det.pvalue, torch.full((2,), 0.5 * math.erfc(5 / 6 / 2), dtype=torch.float64))


def test_hidden_residual_is_bounded_by_the_strength():
    torch.manual_seed(0)
    enc = HiddenEncoder(HiddenConfig(channels=1, message_bits=4, hidden=8, strength=0.05))
    for p in enc.parameters():
        torch.nn.init.normal_(p, std=3.0)  # saturates tanh: the residual reaches the bound
    x = 0.5 * torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        delta = enc(x, torch.tensor([[1, 0, 1, 1]] * 3)) - x
    assert float(delta.abs().max()) <= 0.05 + 1e-6 and float(delta.abs().max()) > 0.04


@pytest.mark.parametrize("apply", [lambda x, g: noise_layer(x, 5, g), lambda x, g: _augment(x, "jpeg", g)])
def test_jpeg_distortions_pass_the_gradient_straight_through(apply):
    """JPEG is not differentiable: the value is the JPEG image, the gradient that of the identity."""
    x = (torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8).requires_grad_(True)
    w = torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    out = apply(x, torch.Generator().manual_seed(2))
    assert float((out - x).detach().abs().max()) > 1e-3  # the value is changed
    (out * w).sum().backward()
    torch.testing.assert_close(x.grad, w)


def test_sample_marked_routes_each_image_with_its_own_key_across_batches():
    """Sampled in batches of 2, image i is the one sampled alone with keys[i]; the adapters are off afterwards."""
    torch.manual_seed(0)
    lora = RoutedLoRALinear(torch.nn.Linear(4, 4), [[0], [1]], rank=2)
    torch.nn.init.normal_(lora.B)
    net = torch.nn.Sequential(lora)
    gen = FlowGenerator(lambda x, t: net(x), (1, 1, 4), steps=3)
    noise = torch.randn(5, 1, 1, 4, generator=torch.Generator().manual_seed(1))
    keys = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0], [1, 1]])
    out = sample_marked(gen, net, noise, keys, batch=2)
    assert lora.keys is None
    for i in range(5):
        route(net, keys[i : i + 1])
        torch.testing.assert_close(out[i : i + 1], gen.generate(noise[i : i + 1]))
    route(net, None)
    assert not torch.allclose(out[1], gen.generate(noise[1:2])[0])  # the key changed the image
