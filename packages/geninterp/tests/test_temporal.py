"""Temporal SAE: strictly causal use of context, and the predicted/novel decomposition."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import InputError
from geninterp.saes import TemporalSAE, TemporalSAEConfig


@pytest.fixture
def sae() -> TemporalSAE:
    torch.manual_seed(0)
    model = TemporalSAE(TemporalSAEConfig(d_in=8, width=32, k=4, n_heads=2, attn_dim=8))
    with torch.no_grad():  # make the attention sharp and the predictions non-trivial
        model.q_proj.weight.mul_(5)
        model.o_proj.bias.fill_(0.1)
    return model


def fields(out):
    return {"recon": out.recon, "codes": out.codes, "pred": out.pred_codes, "novel": out.novel_recon}


@pytest.mark.parametrize("t", [0, 3, 7])
def test_no_leakage_from_future_tokens(sae, t):
    g = torch.Generator().manual_seed(t)
    x = torch.randn(2, 10, 8, generator=g)
    y = x.clone()
    y[:, t + 1 :] = 10 * torch.randn(y[:, t + 1 :].shape, generator=g)
    a, b = fields(sae(x)), fields(sae(y))
    for name in a:
        torch.testing.assert_close(a[name][:, : t + 1], b[name][:, : t + 1], rtol=0, atol=0, msg=name)
        assert not torch.allclose(a[name][:, t + 1 :], b[name][:, t + 1 :]), name


def test_values_come_only_from_earlier_tokens(sae):
    """With the query made constant, the prediction at t ignores token t and follows token t-1."""
    with torch.no_grad():
        sae.q_proj.weight.zero_()
    g = torch.Generator().manual_seed(5)
    c = torch.relu(torch.randn(1, 6, 32, generator=g))
    changed_now, changed_before = c.clone(), c.clone()
    changed_now[:, 3] += 2 * torch.rand(32, generator=g)
    changed_before[:, 2] += 2 * torch.rand(32, generator=g)
    base = sae.predict_codes(c)
    torch.testing.assert_close(sae.predict_codes(changed_now)[:, :4], base[:, :4], rtol=0, atol=0)
    moved = sae.predict_codes(changed_before)
    torch.testing.assert_close(moved[:, :3], base[:, :3], rtol=0, atol=0)
    assert not torch.allclose(moved[:, 3], base[:, 3])


def test_first_token_has_only_the_empty_context(sae):
    """At t = 0 the keys and values are the all-zero slot: the prediction is the same for any input."""
    g = torch.Generator().manual_seed(2)
    c1, c2 = torch.relu(torch.randn(2, 1, 32, generator=g)), torch.relu(torch.randn(2, 1, 32, generator=g))
    torch.testing.assert_close(sae.predict_codes(c1), sae.predict_codes(c2))


def test_predicted_part_is_a_projection(sae):
    """The residual after removing the predicted part is orthogonal to the predicted direction."""
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(3))
    out = sae(x)
    u = x * sae.config.act_scale - sae.b_dec
    p = out.pred_recon * sae.config.act_scale
    inner = ((u - p) * p).sum(-1)
    assert inner.abs().max() < 1e-4 * u.pow(2).sum(-1).max()


def test_rejects_flat_input(sae):
    with pytest.raises(InputError, match="sequences"):
        sae(torch.randn(5, 8))


def test_forward_matches_an_explicit_per_token_loop():
    """Every step of the documented forward pass, token by token, with per-head softmax attention written out over
    the empty slot and ``c_0 .. c_{t-1}``, every parameter perturbed (biases, decoder norms, act_scale != 1)."""
    import math

    from geninterp.saes import topk_relu

    d, w, k, h, a = 6, 12, 3, 3, 6
    torch.manual_seed(0)
    sae = TemporalSAE(TemporalSAEConfig(d_in=d, width=w, k=k, n_heads=h, attn_dim=a, act_scale=0.7)).double()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))
        sae.W_dec.mul_(torch.rand(w, 1, generator=g, dtype=torch.float64) + 0.5)
    x = torch.randn(2, 5, d, generator=g, dtype=torch.float64)
    out = sae(x)
    atoms = sae.W_dec / sae.W_dec.norm(dim=1, keepdim=True)
    s = sae.config.act_scale

    def lin(layer, v):
        return v @ layer.weight.T + layer.bias

    hq, hv = a // h, w // h
    for b in range(2):
        u = x[b] * s - sae.b_dec
        c = torch.relu(u @ sae.W_enc + sae.b_enc)
        for t in range(5):
            ctx = torch.cat([torch.zeros(1, w, dtype=torch.float64), c[:t]])  # empty slot, then c_0 .. c_{t-1}
            q, keys, values = lin(sae.q_proj, c[t]), lin(sae.k_proj, ctx), lin(sae.v_proj, ctx)
            heads = []
            for j in range(h):
                logits = keys[:, j * hq : (j + 1) * hq] @ q[j * hq : (j + 1) * hq] / math.sqrt(hq)
                heads.append(torch.softmax(logits, 0) @ values[:, j * hv : (j + 1) * hv])
            pred = torch.relu(lin(sae.o_proj, torch.cat(heads)))
            direction = pred @ atoms
            coef = (direction @ u[t]) / (direction @ direction)
            pre = (u[t] - coef * direction) @ sae.W_enc + sae.b_enc  # what AuxK's dead latents are chosen from
            novel = topk_relu(pre, k)
            torch.testing.assert_close(out.pre_codes[b, t], pre)
            torch.testing.assert_close(out.pred_codes[b, t], coef * pred)
            torch.testing.assert_close(out.codes[b, t], novel)
            torch.testing.assert_close(out.pred_recon[b, t], coef * direction / s)
            torch.testing.assert_close(out.novel_recon[b, t], novel @ atoms / s)
            torch.testing.assert_close(out.recon[b, t], (coef * direction + novel @ atoms + sae.b_dec) / s)
    # decode takes the total (predicted + novel) codes
    torch.testing.assert_close(sae.decode(out.pred_codes + out.codes), out.recon)


def test_pred_share_metric_of_the_objective():
    from geninterp.saes import make_objective

    torch.manual_seed(0)
    model = TemporalSAE(TemporalSAEConfig(d_in=8, width=32, k=4, n_heads=2, attn_dim=8))
    with torch.no_grad():
        model.o_proj.bias.fill_(0.3)
    x = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(0))
    _, metrics = make_objective("temporal")(model, x)
    with torch.no_grad():
        out = model(x)
    p, n = out.pred_recon.pow(2).sum(), out.novel_recon.pow(2).sum()
    assert 0.05 < float(p / (p + n)) < 0.95
    torch.testing.assert_close(metrics["pred_share"], p / (p + n))
