"""Metrics with known answers, and SAE training through the gencore engine on a small store."""

from __future__ import annotations

import json
import math

import pytest
import torch

from gencore.errors import ConfigError, InputError, StorageError
from geninterp.metrics import evaluate_sae
from geninterp.saes import make_sae
from geninterp.store import ActivationStore, ActivationWriter
from geninterp.training import SAETrainConfig, load_run, train_sae


def test_perfect_reconstruction_has_zero_fvu(store_dir):
    """A ReLU SAE with atoms [I; -I] and encoder [I, -I] reconstructs x exactly: FVU 0, EV 1, L0 = d."""
    d = 8
    sae = make_sae("relu", d_in=d, width=2 * d)
    with torch.no_grad():
        sae.W_dec.copy_(torch.cat([torch.eye(d), -torch.eye(d)]))
        sae.W_enc.copy_(torch.cat([torch.eye(d), -torch.eye(d)]).T)
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    rec = evaluate_sae(sae, ActivationStore(store_dir))
    assert rec["fvu"] == pytest.approx(0.0, abs=1e-10)
    assert rec["explained_variance"] == pytest.approx(1.0, abs=1e-10)
    assert rec["l0"] == pytest.approx(d)  # exactly one of +/- e_i fires per feature (no exact zeros)
    assert rec["dead_frac"] == 0.0 and rec["dense_frac"] == 1.0


def test_mean_reconstruction_has_unit_fvu(store_dir):
    """No code ever fires and b_dec is the data mean: FVU is exactly 1, every latent is dead."""
    store = ActivationStore(store_dir)
    sae = make_sae("relu", d_in=8, width=16)
    with torch.no_grad():
        sae.b_enc.fill_(-1e6)
        mean = store.load().reshape(-1, 8).double().mean(0)
        sae.b_dec.copy_(mean.float())
    rec = evaluate_sae(sae, store)
    assert rec["fvu"] == pytest.approx(1.0, abs=1e-6)
    assert rec["explained_variance"] == pytest.approx(1.0 - 1.0, abs=1e-6)
    assert rec["l0"] == 0 and rec["dead_frac"] == 1.0


def test_temporal_metrics_split(store_dir):
    sae = make_sae("temporal", d_in=8, width=16, k=2, n_heads=2, attn_dim=4)
    rec = evaluate_sae(sae, ActivationStore(store_dir))
    assert 0.0 <= rec["pred_share"] <= 1.0
    assert len(rec["pred_share_by_position"]) == 16
    assert rec["l0"] <= 2


@pytest.mark.parametrize("arch", ["topk", "relu", "temporal"])
def test_training_reduces_fvu_and_saves_a_run(tmp_path, store_dir, arch):
    cfg = SAETrainConfig(
        arch=arch, width=32, k=4, steps=60, batch_tokens=64, lr=3e-3, progress=False, eval_fraction=0.2
    )
    _, record = train_sae(cfg, store_dir, tmp_path / "run")
    loaded, rec2 = load_run(tmp_path / "run")
    assert rec2["eval_sequences"] == record["eval_sequences"] and record["train_sequences"][1] == 19
    train_view = ActivationStore(store_dir, range(*record["train_sequences"]))
    untrained = make_sae(arch, **{k: v for k, v in loaded.config.to_dict().items() if k != "arch"})
    untrained.init_from_data(train_view.mean)
    after = evaluate_sae(loaded, train_view)["fvu"]
    before = evaluate_sae(untrained, train_view)["fvu"]
    assert math.isfinite(after) and after < 0.8 * before
    assert (tmp_path / "run" / "metrics.jsonl").is_file() and (tmp_path / "run" / "loss.png").is_file()
    if arch == "topk":  # a hand-edited run.json names its missing or malformed field
        run_json = tmp_path / "run" / "run.json"
        for edit, message in [
            ({k: v for k, v in record.items() if k != "config"}, "lacks the field 'config'"),
            ({**record, "eval_sequences": 5}, "field 'eval_sequences' must be"),
            ({**record, "config": None}, "field 'config' must be a mapping"),
        ]:
            run_json.write_text(json.dumps(edit))
            with pytest.raises(StorageError, match=message):
                load_run(tmp_path / "run")


def test_act_scale_normalises_the_input(store_dir, tmp_path):
    from geninterp.training import build_sae_for_store

    store = ActivationStore(store_dir)
    sae = build_sae_for_store(SAETrainConfig(width=16, k=2), store)
    x = store.load().reshape(-1, 8) * sae.config.act_scale
    assert float(x.pow(2).sum(-1).mean()) == pytest.approx(8.0, rel=1e-5)


def test_config_errors(store_dir, tmp_path):
    with pytest.raises(ConfigError, match="arch"):
        train_sae(SAETrainConfig(arch="jumprelu"), store_dir, tmp_path / "r")
    with pytest.raises(ConfigError, match="sequences"):
        train_sae(SAETrainConfig(batch_tokens=10**6, width=16, k=2), store_dir, tmp_path / "r")


def test_a_resumed_run_reports_the_throughput_of_its_own_steps(tmp_path, store_dir):
    """Resumed at step 4 of 6, the run records 2 steps in this session and its tokens/s from those 2 steps."""
    import shutil

    from gencore.train import find_checkpoints

    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=6, batch_tokens=64, progress=False)
    _, first = train_sae(cfg, store_dir, tmp_path / "run", checkpoint_every=2)
    # resuming the finished run trains nothing and keeps its record (and its throughput) as it was
    _, again = train_sae(cfg, store_dir, tmp_path / "run", checkpoint_every=2, resume="auto")
    assert again.pop("already_finished") and again == json.loads((tmp_path / "run" / "run.json").read_text())
    assert again["tokens_per_second"] == first["tokens_per_second"] > 0
    # as if killed after step 4: no step-6 checkpoint, no SAE, no run record
    shutil.rmtree(find_checkpoints(tmp_path / "run" / "checkpoints")[0])  # newest first
    shutil.rmtree(tmp_path / "run" / "sae")
    (tmp_path / "run" / "run.json").unlink()
    _, record = train_sae(cfg, store_dir, tmp_path / "run", checkpoint_every=2, resume="auto")
    assert record["steps_run"] == 2 and record["train_tokens"] == 6 * 64
    seconds = record["train_seconds"]  # rounded to 1 ms; the rate was taken from the unrounded time
    assert 2 * 64 / (seconds + 5e-4) - 0.1 <= record["tokens_per_second"] <= 2 * 64 / max(seconds - 5e-4, 1e-9) + 0.1


def test_evaluate_sae_refuses_what_it_cannot_measure(store_dir, tmp_path):
    sae = make_sae("topk", d_in=8, width=16, k=2)
    store = ActivationStore(store_dir)
    with pytest.raises(ConfigError, match="batch_sequences must be a positive integer"):
        evaluate_sae(sae, store, batch_sequences=0)
    with pytest.raises(ConfigError, match="batch_sequences must be a positive integer"):
        evaluate_sae(sae, store, batch_sequences=-1)
    with pytest.raises(InputError, match="holds no sequences"):
        evaluate_sae(sae, store[3:3])
    with ActivationWriter(tmp_path / "flat", d_model=8, seq_len=4) as w:
        w.write(torch.ones(2, 4, 8), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(InputError, match="no variance"):
        evaluate_sae(sae, ActivationStore(tmp_path / "flat"))


@pytest.mark.parametrize("arch", ["topk", "temporal"])
def test_evaluation_and_splice_run_in_the_saes_own_dtype(store_dir, arch):
    """A float64 SAE on a float32 store gives the float32 SAE's numbers up to float32 rounding, in evaluate_sae and in
    the downstream splice, which keeps the model's dtype and positions. (Both also move the store's activations to the
    SAE's device, which a CPU-only run cannot exercise.)"""
    from geninterp.metrics import _splice_fn

    kw = {"k": 2, "n_heads": 2, "attn_dim": 4} if arch == "temporal" else {"k": 2}
    sae32 = make_sae(arch, d_in=8, width=16, **kw)
    sae64 = make_sae(arch, d_in=8, width=16, **kw)
    sae64.load_state_dict(sae32.state_dict())
    sae64.double()
    store = ActivationStore(store_dir)
    r32, r64 = evaluate_sae(sae32, store), evaluate_sae(sae64, store)
    assert r64["fvu"] == pytest.approx(r32["fvu"], rel=1e-4) and r64["l0"] == pytest.approx(r32["l0"], rel=0.02)
    h = store.load()[:2]
    out = _splice_fn(sae64, skip_positions=1)(h)
    assert out.dtype == h.dtype and torch.equal(out[:, :1], h[:, :1])
    assert torch.allclose(out, _splice_fn(sae32, skip_positions=1)(h), atol=1e-5)


def test_a_training_views_statistics_leave_out_the_held_out_sequences(tmp_path):
    """The SAE's act_scale and decoder bias come from the view it trains on: held-out sequences at ten times the
    scale must not change them (the store's running statistics cover every sequence)."""
    from geninterp.training import position_stats

    g = torch.Generator().manual_seed(0)
    train = torch.randn(6, 4, 8, generator=g) + 1.0
    held_out = 10 * torch.randn(2, 4, 8, generator=g)
    with ActivationWriter(tmp_path / "s", d_model=8, seq_len=4) as w:
        w.write(torch.cat([train, held_out]), torch.zeros(8, 4, dtype=torch.long))
    store = ActivationStore(tmp_path / "s")
    mean, sq = position_stats(store[0:6], skip_positions=0)
    flat = train.reshape(-1, 8).double()
    assert torch.allclose(mean.double(), flat.mean(0), atol=1e-5)
    assert sq == pytest.approx(float(flat.pow(2).sum(1).mean()), rel=1e-5)
    whole_mean, _ = position_stats(store, skip_positions=0)  # the whole store: its running statistics
    assert torch.allclose(whole_mean, store.mean)
    # and training takes them from its view with nothing skipped too (it used the whole store's then)
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=1, batch_tokens=8, progress=False, eval_fraction=0.25)
    sae, record = train_sae(cfg, tmp_path / "s", tmp_path / "run")
    assert record["train_sequences"] == [0, 6]
    assert sae.config.act_scale == pytest.approx(math.sqrt(8 / sq), rel=1e-5)


def test_evaluate_sae_against_direct_sums(tmp_path):
    """Every record field of a perturbed Temporal SAE (act_scale != 1, positions skipped, batches not dividing the
    store) against the formulas of the module docstring computed on the whole tensor at once."""
    g = torch.Generator().manual_seed(0)
    acts = torch.randn(7, 6, 4, generator=g) * 2 + 1
    with ActivationWriter(tmp_path / "s", d_model=4, seq_len=6, shard_sequences=3) as w:
        w.write(acts, torch.zeros(7, 6, dtype=torch.long))
    torch.manual_seed(0)
    sae = make_sae("temporal", d_in=4, width=8, k=2, n_heads=2, attn_dim=4, act_scale=0.6)
    with torch.no_grad():
        for p in sae.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    rec = evaluate_sae(sae, ActivationStore(tmp_path / "s"), batch_sequences=3, skip_positions=1)
    with torch.no_grad():
        out = sae(acts[:, 1:])
    x = acts[:, 1:].double().reshape(-1, 4)
    err = x - out.recon.double().reshape(-1, 4)
    assert rec["n_tokens"] == 35
    assert rec["mse"] == pytest.approx(float(err.pow(2).mean()), rel=1e-6)
    assert rec["fvu"] == pytest.approx(float(err.pow(2).sum() / (x - x.mean(0)).pow(2).sum()), rel=1e-6)
    ev = 1 - err.var(0, unbiased=False).sum() / x.var(0, unbiased=False).sum()
    assert abs(float(err.mean(0).norm())) > 0.1  # the error has an offset: EV and 1 - FVU differ
    assert rec["explained_variance"] == pytest.approx(float(ev), rel=1e-6)
    codes = out.codes.reshape(-1, 8)
    assert rec["l0"] == pytest.approx(float((codes > 0).sum(-1).double().mean()))
    freq = (codes > 0).double().mean(0)
    assert rec["dead_frac"] == float((freq == 0).double().mean())
    assert rec["dense_frac"] == float((freq > 0.1).double().mean())
    p, q = out.pred_recon.double().pow(2).sum(-1), out.novel_recon.double().pow(2).sum(-1)  # [B, L]
    assert rec["pred_share"] == pytest.approx(float(p.sum() / (p.sum() + q.sum())), rel=1e-6)
    assert rec["pred_share_by_position"] == pytest.approx((p.sum(0) / (p.sum(0) + q.sum(0))).tolist(), rel=1e-6)
    assert rec["l0_pred"] == pytest.approx(float((out.pred_codes != 0).sum(-1).double().mean()))
    assert 0.05 < rec["pred_share"] < 0.95 and 0 < rec["l0_pred"]


def test_dense_latents_fire_on_more_than_a_tenth_of_the_tokens(tmp_path):
    """Latent 0 fires on exactly 10% of the tokens (not dense), latent 1 on 15% (dense)."""
    x = torch.full((2, 10, 2), -1.0)
    x.view(-1, 2)[:2, 0] = 1.0  # 2 of 20 tokens
    x.view(-1, 2)[5:8, 1] = 1.0  # 3 of 20 tokens
    with ActivationWriter(tmp_path / "s", d_model=2, seq_len=10) as w:
        w.write(x, torch.zeros(2, 10, dtype=torch.long))
    sae = make_sae("relu", d_in=2, width=2)
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.W_dec.copy_(torch.eye(2))
        sae.b_enc.zero_()
        sae.b_dec.zero_()
    rec = evaluate_sae(sae, ActivationStore(tmp_path / "s"))
    assert rec["dense_frac"] == 0.5 and rec["dead_frac"] == 0.0 and rec["l0"] == pytest.approx(5 / 20)


class _TinyLM(torch.nn.Module):
    """A causal toy LM ``logits = head(layer(emb(tokens)))`` with the hooked module ``layer``."""

    def __init__(self, vocab: int = 7, d: int = 4) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.layer, self.head = torch.nn.Embedding(vocab, d), torch.nn.Identity(), torch.nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.head(self.layer(self.emb(input_ids))))


def test_loss_recovered_against_losses_computed_by_hand(tmp_path):
    """``loss_recovered = (L_zero - L_splice) / (L_zero - L_clean)``: 1 for a perfect SAE, and for an imperfect one
    the value from the three next-token losses computed without hooks."""
    from types import SimpleNamespace

    from geninterp.metrics import downstream_effect
    from geninterp.models import next_token_loss

    model = _TinyLM().eval()
    lm = SimpleNamespace(model=model, kind="causal", max_len=64)
    tokens = (torch.arange(4)[:, None] * 3 + torch.arange(6)) % 7
    with ActivationWriter(tmp_path / "s", d_model=4, seq_len=6) as w:
        w.write(torch.randn(4, 6, 4), tokens)
    store = ActivationStore(tmp_path / "s")
    perfect = make_sae("relu", d_in=4, width=8)
    with torch.no_grad():
        perfect.W_dec.copy_(torch.cat([torch.eye(4), -torch.eye(4)]))
        perfect.W_enc.copy_(torch.cat([torch.eye(4), -torch.eye(4)]).T)
        perfect.b_enc.zero_()
        perfect.b_dec.zero_()
    rec = downstream_effect(lm, "layer", perfect, store, max_sequences=4)
    assert rec["loss_recovered"] == pytest.approx(1.0, abs=1e-6) and rec["lm_loss_delta"] == pytest.approx(0, abs=1e-6)
    torch.manual_seed(1)
    lossy = make_sae("topk", d_in=4, width=8, k=1)
    rec = downstream_effect(lm, "layer", lossy, store, max_sequences=4)
    with torch.no_grad():
        h = model.emb(tokens)
        base = float(next_token_loss(model.head(h), tokens))
        spl = float(next_token_loss(model.head(lossy(h.reshape(-1, 4)).recon.reshape(h.shape)), tokens))
        abl = float(next_token_loss(model.head(torch.zeros_like(h)), tokens))
    assert rec["lm_loss_clean"] == pytest.approx(base, rel=1e-6)
    assert rec["lm_loss_spliced"] == pytest.approx(spl, rel=1e-6)
    assert rec["lm_loss_zero_ablated"] == pytest.approx(abl, rel=1e-6)
    assert rec["lm_loss_delta"] == pytest.approx(spl - base, rel=1e-5)
    assert 0.01 < abs(spl - base) and 0.01 < abs(abl - spl)  # three distinct losses
    assert rec["loss_recovered"] == pytest.approx((abl - spl) / (abl - base), rel=1e-5)


def test_evaluate_sae_refuses_a_store_of_another_width(store_dir):
    with pytest.raises(InputError, match="width 8, but the SAE takes d_in = 4"):
        evaluate_sae(make_sae("topk", d_in=4, width=16, k=2), ActivationStore(store_dir))


def test_training_settings_that_would_train_nothing_are_refused_before_training(store_dir, tmp_path):
    """``--l1-coeff inf`` used to run every step as a skipped non-finite step and save the untrained SAE."""
    for cfg in (SAETrainConfig(arch="relu", l1_coeff=float("inf")), SAETrainConfig(aux_coeff=float("inf"))):
        with pytest.raises(ConfigError, match="finite"):
            cfg.validate()
        with pytest.raises(ConfigError, match="finite"):
            train_sae(cfg, store_dir, tmp_path / "r")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("skip", [-1, 6])
def test_downstream_effect_refuses_skip_positions_outside_the_sequence(tmp_path, skip):
    """A negative count used to splice only the last position (and report a NaN loss recovered)."""
    from types import SimpleNamespace

    from geninterp.metrics import downstream_effect

    lm = SimpleNamespace(model=_TinyLM().eval(), kind="causal", max_len=64)
    with ActivationWriter(tmp_path / "s", d_model=4, seq_len=6) as w:
        w.write(torch.randn(2, 6, 4), torch.zeros(2, 6, dtype=torch.long))
    sae = make_sae("topk", d_in=4, width=8, k=1)
    with pytest.raises(ConfigError, match=r"skip_positions must be in 0\.\.5"):
        downstream_effect(lm, "layer", sae, ActivationStore(tmp_path / "s"), skip_positions=skip)


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_a_seed_out_of_range_is_refused_by_the_sae_config(seed):
    """A YAML --config seed bypasses the --seed flag's check; torch's generator raised on 2**64."""
    with pytest.raises(ConfigError, match=r"^seed must be an integer from 0 to"):
        SAETrainConfig(seed=seed).validate()
