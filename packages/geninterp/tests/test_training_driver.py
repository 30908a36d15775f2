"""What the SAE driver hands the engine, and which sequences and positions ``evaluate-sae`` measures."""

from __future__ import annotations

import json

import pytest
import torch

import geninterp.training as training
from geninterp.cli import main
from geninterp.training import SAETrainConfig, load_run, train_sae


@pytest.mark.parametrize(("steps", "warmup"), [(6, 2), (3, 20)])
def test_the_engine_gets_the_runs_batch_schedule_lr_and_seed(tmp_path, store_dir, monkeypatch, steps, warmup):
    seen = []

    class Recording(training.Trainer):
        def __init__(self, config):
            seen.append(config)
            super().__init__(config)

    monkeypatch.setattr(training, "Trainer", Recording)
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=steps, warmup_steps=warmup, batch_tokens=80, lr=3e-4,
                         seed=7, progress=False)  # fmt: skip
    train_sae(cfg, store_dir, tmp_path / "run")
    (config,) = seen
    assert config.global_batch_size == 80 // 16  # whole sequences of the store's 16 tokens
    assert config.steps == steps and config.lr == 3e-4 and config.seed == 7
    assert config.warmup_steps == min(warmup, steps) and config.schedule == "cosine"


def test_evaluate_sae_measures_the_held_out_sequences_past_the_skipped_positions(tmp_path, store_dir, seq_acts):
    cfg = SAETrainConfig(arch="topk", width=16, k=2, steps=2, batch_tokens=64, eval_fraction=0.25, skip_positions=3,
                         progress=False)  # fmt: skip
    train_sae(cfg, store_dir, tmp_path / "run")
    out = tmp_path / "e.json"
    assert main(["evaluate-sae", "--run", str(tmp_path / "run"), "--json", str(out), "--no-downstream"]) == 0
    rec = json.loads(out.read_text())
    sae, record = load_run(tmp_path / "run")
    assert record["eval_sequences"] == [18, 24]  # the last ceil(0.25 * 24) sequences
    x = seq_acts[18:, 3:].reshape(-1, 8).double()
    with torch.no_grad():
        err = x - sae(x.float()).recon.double()
    assert rec["n_tokens"] == 6 * 13
    assert rec["fvu"] == pytest.approx(float(err.pow(2).sum() / (x - x.mean(0)).pow(2).sum()), rel=1e-5)


def test_a_resumed_run_ends_where_the_uninterrupted_one_does_dead_latent_counts_included(tmp_path, store_dir):
    """Killed after step 4 of 8 and resumed: the same SAE, and the same silent-token counts of its latents (with
    ``dead_after_tokens`` small enough that AuxK acts on latents the counts call dead). The encoder is stored
    transposed, and fused Adam paired its contiguous reloaded moments with the wrong weights (W_enc off by 4.8e-3)
    until the engine gave loaded optimiser state its parameter's strides."""
    import shutil

    from gencore.train import find_checkpoints
    from geninterp.saes import SparseAutoencoder

    cfg = SAETrainConfig(arch="topk", width=32, k=1, steps=8, batch_tokens=64, dead_after_tokens=64, progress=False)
    whole, _ = train_sae(cfg, store_dir, tmp_path / "whole")
    train_sae(cfg, store_dir, tmp_path / "run", checkpoint_every=4)
    shutil.rmtree(find_checkpoints(tmp_path / "run" / "checkpoints")[0])  # as if killed after step 4
    shutil.rmtree(tmp_path / "run" / "sae")
    (tmp_path / "run" / "run.json").unlink()
    train_sae(cfg, store_dir, tmp_path / "run", checkpoint_every=4, resume="auto")
    resumed = SparseAutoencoder.from_pretrained(tmp_path / "run" / "sae")
    counts = whole.state_dict()["tokens_since_fired"]
    assert (counts >= 64).any() and counts.max() > 0  # some latents were dead: the counts shaped the loss
    for name, value in whole.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=0, msg=name)
