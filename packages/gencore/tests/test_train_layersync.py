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


@pytest.mark.parametrize("weight", [float("nan"), float("inf"), -0.1])
def test_non_finite_or_negative_weight_is_config_error(weight: float) -> None:
    # NaN passed the old `weight < 0` check and made every training loss NaN; inf made it -inf
    with pytest.raises(ConfigError, match="non-negative finite number"):
        LayerSync(_net(), [("0", "2")], weight=weight)


def test_a_module_paired_with_itself_is_config_error() -> None:
    # -cos(h, stopgrad(h)) is -1 with zero gradient: such a pair silently regularises nothing
    net = _net()
    x = torch.randn(8, 5, requires_grad=True)
    h = net[0](x)
    (-F.cosine_similarity(h, h.detach(), dim=-1).mean()).backward()
    assert float(x.grad.abs().max()) < 1e-6
    with pytest.raises(ConfigError, match="names one module twice"):
        LayerSync(net, [("0", "2"), ("2", "2")])


def test_the_engine_steps_on_the_gradient_of_loss_plus_weight_times_layersync(tmp_path) -> None:
    """One full-batch SGD step of the engine equals ``p - lr * grad(mse + w * R)`` computed here by autograd, with
    ``R = -mean cos(h_weak, stopgrad(h_strong))``: the regulariser reaches the optimiser, with its weight, its sign
    and the stop-gradient on the strong side (a missing ``detach`` changes the gradient of ``net.2`` and ``net.4``)."""
    from gencore.train import TrainConfig, Trainer
    from gencore.train.example import RegressionTask, regression_data

    data, lr, w = regression_data(32), 0.5, 0.7
    task = RegressionTask(seed=3)
    start = {k: v.clone() for k, v in task.model.state_dict().items()}
    cfg = TrainConfig(
        steps=1,
        global_batch_size=32,
        optimizer="sgd",
        lr=lr,
        schedule="constant",
        ema_decay=0.0,
        progress=False,
        out_dir=tmp_path,
        layersync_pairs=(("0", "4"),),
        layersync_weight=w,
    )
    trained = Trainer(cfg, device="cpu").fit(task, data).model

    ref = RegressionTask(seed=3).model
    ref.load_state_dict(start)
    x, y = data.tensors
    feats = {}
    hooks = [ref[i].register_forward_hook(lambda m, a, o, i=i: feats.__setitem__(i, o)) for i in (0, 4)]
    mse = (ref(x) - y).pow(2).mean()
    reg = -F.cosine_similarity(feats[0], feats[4].detach(), dim=-1).mean()
    for h in hooks:
        h.remove()
    assert float(torch.autograd.grad(reg, ref[0].weight, retain_graph=True)[0].abs().max()) > 1e-4  # R matters
    grads = torch.autograd.grad(mse + w * reg, list(ref.parameters()))
    for (name, p), g in zip(ref.named_parameters(), grads, strict=True):
        torch.testing.assert_close(dict(trained.named_parameters())[name].detach(), p.detach() - lr * g, msg=name)
