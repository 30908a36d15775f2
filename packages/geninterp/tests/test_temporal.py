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
