"""LayerSync: -cos(h_weak, stopgrad(h_strong)) over tokens, gradients only on the weak side, every pair counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError
from gencore.train import LayerSync, layersync_term


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6), nn.Linear(6, 2))


def test_term_is_mean_negative_cosine_over_tokens() -> None:
    g = torch.Generator().manual_seed(1)
    hw, hs = torch.randn(2, 3, 4, 7, generator=g), torch.randn(2, 3, 4, 7, generator=g)
    expected = -sum(torch.dot(a, b) / (a.norm() * b.norm()) for a, b in zip(hw.reshape(-1, 7), hs.reshape(-1, 7))) / (
        2 * 3 * 4
    )
    torch.testing.assert_close(layersync_term(hw, hs), expected)
    assert layersync_term(hw, 3.0 * hw).item() == pytest.approx(-1.0, abs=1e-6)


def test_gradient_reaches_only_the_weak_side() -> None:
    net = _net()
    ls = LayerSync(net, [("1", "3")], weight=1.0)
    with ls.capture():
        net(torch.randn(8, 5))
    ls.loss().backward()
    # net.0 produces the weak features (through Tanh "1"); net.2 lies between weak and strong, net.4+ after.
    assert net[0].weight.grad is not None and net[0].weight.grad.abs().sum() > 0
    for i in (2, 4, 5):
        assert net[i].weight.grad is None or net[i].weight.grad.abs().sum() == 0


def test_weight_zero_equals_plain_loss_and_weight_adds_term() -> None:
    net = _net()
    x = torch.randn(8, 5)

    def plain(model, batch):
        return model(batch).pow(2).mean(), {}

    base, _ = plain(net, x)
    zero = LayerSync(net, [("0", "2")], weight=0.0).wrap_loss(plain)
    assert zero(net, x)[0].item() == base.item()
    ls = LayerSync(net, [("0", "2")], weight=0.2)
    total, metrics = ls.wrap_loss(plain)(net, x)
    h0, h2 = net[0](x), net[2](net[1](net[0](x)))
    reg = -F.cosine_similarity(h0, h2, dim=-1).mean()
    torch.testing.assert_close(total, base + 0.2 * reg)
    torch.testing.assert_close(metrics["layersync"], reg.detach())


def test_every_pair_counts() -> None:
    net = _net()
    x = torch.randn(8, 5)
    feats = {}
    hooks = [net[i].register_forward_hook(lambda m, a, o, i=i: feats.__setitem__(i, o)) for i in range(5)]
    ls = LayerSync(net, [("0", "2"), ("1", "3"), ("2", "4")])
    with ls.capture():
        net(x)
    got = ls.loss()
    for h in hooks:
        h.remove()
    per_pair = [layersync_term(feats[a], feats[b]) for a, b in ((0, 2), (1, 3), (2, 4))]
    torch.testing.assert_close(got, torch.stack(per_pair).mean())
    assert not torch.allclose(got, per_pair[-1])  # not just the last pair


def test_unknown_module_is_config_error() -> None:
    with pytest.raises(ConfigError, match="not found"):
        LayerSync(_net(), [("0", "blocks.9")])


def test_layersync_term_keeps_float64_and_promotes_half_precision():
    """Float64 features give a float64 term equal to the float64 cosine (float32 would be off by ~1e-8 here);
    bfloat16 features are computed in float32."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 5, 8, generator=g, dtype=torch.float64)
    b = a + 1e-7 * torch.randn(6, 5, 8, generator=g, dtype=torch.float64)  # nearly parallel: cos ~ 1 - 1e-14
    term = layersync_term(a, b)
    exact = -(a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))
    assert term.dtype == torch.float64 and abs(float(term) - float(exact.mean())) < 1e-12
    assert layersync_term(a.bfloat16(), b.bfloat16()).dtype == torch.float32
