"""Leaving the first positions out (a decoder's attention sink): metrics, scaling, loss and splice."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError
from geninterp.metrics import _splice_fn, evaluate_sae
from geninterp.saes import make_objective, make_sae
from geninterp.store import ActivationStore, ActivationWriter
from geninterp.training import SAETask, SAETrainConfig, build_sae_for_store, train_sae


def _write(path, acts: torch.Tensor):
    tokens = torch.zeros(acts.shape[:2], dtype=torch.long)
    with ActivationWriter(path, d_model=acts.shape[-1], seq_len=acts.shape[1], shard_sequences=10) as w:
        w.write(acts, tokens)
    return ActivationStore(path)


@pytest.fixture
def sink_acts(seq_acts) -> torch.Tensor:
    """``seq_acts`` with a position 0 of ~100x the norm, like SmolLM2's first token."""
    out = seq_acts.clone()
    out[:, 0] = out[:, 0] * 100 + 300
    return out


@pytest.mark.parametrize("arch", ["topk", "relu"])
def test_per_token_metrics_equal_those_of_the_store_without_the_skipped_positions(tmp_path, sink_acts, arch):
    sae = make_sae(arch, d_in=8, width=16, **({"k": 3} if arch == "topk" else {}))
    full = evaluate_sae(sae, _write(tmp_path / "a", sink_acts), skip_positions=1)
    cut = evaluate_sae(sae, _write(tmp_path / "b", sink_acts[:, 1:].contiguous()))
    for key in ("n_tokens", "mse", "fvu", "explained_variance", "l0", "dead_frac", "dense_frac"):
        assert full[key] == pytest.approx(cut[key], rel=1e-9, abs=1e-12), key
    assert full["n_tokens"] == 24 * 15 and full["skip_positions"] == 1


def test_temporal_metrics_drop_the_skipped_positions_from_the_context(tmp_path, sink_acts):
    """As in training, the Temporal SAE's context starts after the skipped positions."""
    torch.manual_seed(0)
    sae = make_sae("temporal", d_in=8, width=16, k=2, n_heads=2, attn_dim=4)
    store = _write(tmp_path / "a", sink_acts)
    skip = evaluate_sae(sae, store, skip_positions=2)
    cut = evaluate_sae(sae, _write(tmp_path / "b", sink_acts[:, 2:].contiguous()))
    for key in ("n_tokens", "fvu", "l0", "l0_pred", "pred_share"):
        assert skip[key] == pytest.approx(cut[key], rel=1e-9), key
    assert skip["pred_share_by_position"] == pytest.approx(cut["pred_share_by_position"], rel=1e-9)
    assert skip["n_tokens"] == 24 * 14 and len(skip["pred_share_by_position"]) == 14
    with pytest.raises(ConfigError, match="skip_positions"):
        evaluate_sae(sae, store, skip_positions=16)


@pytest.mark.parametrize("arch", ["topk", "temporal"])
def test_splice_keeps_the_skipped_positions(arch, sink_acts):
    torch.manual_seed(0)
    kw = {"n_heads": 2, "attn_dim": 4} if arch == "temporal" else {}
    sae = make_sae(arch, d_in=8, width=16, k=2, **kw)
    out = _splice_fn(sae, 1)(sink_acts)
    assert torch.equal(out[:, 0], sink_acts[:, 0])
    with torch.no_grad():
        assert torch.allclose(out[:, 1:], sae(sink_acts[:, 1:]).recon)


def test_scaling_and_decoder_bias_come_from_the_kept_positions(tmp_path, sink_acts):
    store = _write(tmp_path / "a", sink_acts)
    kept = sink_acts[:, 1:].reshape(-1, 8).double()
    sae = build_sae_for_store(SAETrainConfig(width=16, k=2, skip_positions=1), store)
    assert float((kept * sae.config.act_scale).pow(2).sum(-1).mean()) == pytest.approx(8.0, rel=1e-5)
    assert torch.allclose(sae.b_dec.double() / sae.config.act_scale, kept.mean(0), atol=1e-5)
    plain = build_sae_for_store(SAETrainConfig(width=16, k=2), store)
    assert plain.config.act_scale < 0.1 * sae.config.act_scale  # the sink would dominate the scale


@pytest.mark.parametrize("arch", ["topk", "temporal"])
def test_the_loss_ignores_the_skipped_positions(sink_acts, arch):
    torch.manual_seed(0)
    kw = {"n_heads": 2, "attn_dim": 4} if arch == "temporal" else {}
    sae = make_sae(arch, d_in=8, width=16, k=2, **kw)
    other = sink_acts.clone()
    other[:, 0] = torch.randn(24, 8) * 1e4
    losses = []
    for x in (sink_acts, other):
        task = SAETask(sae, make_objective(arch, aux_k=4), skip_positions=1)
        losses.append(task.loss(sae, x, torch.Generator())[0].item())
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    task = SAETask(sae, make_objective(arch, aux_k=4))
    assert task.loss(sae, other, torch.Generator())[0].item() > 10 * losses[0]


def test_training_with_skip_positions_records_it(tmp_path, store_dir):
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=3, batch_tokens=64, progress=False, skip_positions=1)
    _, record = train_sae(cfg, store_dir, tmp_path / "run")
    assert record["config"]["skip_positions"] == 1 and record["train_tokens"] == 3 * 4 * 15
    with pytest.raises(ConfigError, match="skip_positions"):
        train_sae(SAETrainConfig(width=16, k=2, batch_tokens=64, skip_positions=16), store_dir, tmp_path / "r")
    with pytest.raises(ConfigError, match="skip_positions"):
        SAETrainConfig(skip_positions=-1).validate()


class _SinkLM(torch.nn.Module):
    """A causal toy LM whose every position reads position 0 through the hooked ``layer`` (an attention sink)."""

    def __init__(self, vocab: int = 7, d: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.layer, self.head = torch.nn.Embedding(vocab, d), torch.nn.Identity(), torch.nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        h = self.layer(self.emb(input_ids))
        return SimpleNamespace(logits=self.head(h + 3.0 * h[:, :1]))


@pytest.mark.parametrize("skip", [0, 1])
def test_loss_recovered_zero_ablates_only_the_positions_the_splice_replaces(tmp_path, skip):
    # an SAE that reconstructs nothing recovers nothing; zeroing the kept sink too made it look like 0.69
    from types import SimpleNamespace

    from geninterp.metrics import downstream_effect

    lm = SimpleNamespace(model=_SinkLM().eval(), kind="causal", max_len=64)
    tokens = (torch.arange(4)[:, None] + torch.arange(6)) % 7
    with ActivationWriter(tmp_path / "s", d_model=4, seq_len=6) as w:
        w.write(torch.randn(4, 6, 4), tokens)
    sae = make_sae("relu", d_in=4, width=8)
    with torch.no_grad():
        sae.b_enc.fill_(-1e6)  # no latent fires
        sae.b_dec.zero_()
    rec = downstream_effect(lm, "layer", sae, ActivationStore(tmp_path / "s"), max_sequences=4, skip_positions=skip)
    assert rec["lm_loss_zero_ablated"] != rec["lm_loss_clean"]
    assert rec["lm_loss_spliced"] == rec["lm_loss_zero_ablated"] and rec["loss_recovered"] == 0.0
