"""Captured activations against the model's own ``hidden_states`` (tiny random transformers models, no download)."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import InputError
from geninterp.capture import ActivationCapture, capture_to_store
from geninterp.models import LanguageModel, run_model
from geninterp.store import ActivationStore

pytest.importorskip("transformers")
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM  # slow to import: once, here


def _tiny(kind: str) -> LanguageModel:
    """A 3-layer Llama decoder or BERT encoder (d = 16) built from a config, as ``load_model`` names its layers."""
    torch.manual_seed(0)
    sizes = {"vocab_size": 50, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 3}
    if kind == "causal":
        cfg = LlamaConfig(**sizes, num_attention_heads=2, num_key_value_heads=2)
        model, template = LlamaForCausalLM(cfg), "model.layers.{layer}"
    else:
        model, template = BertModel(BertConfig(**sizes, num_attention_heads=2)), "encoder.layer.{layer}"
    return LanguageModel(kind, model.eval(), None, kind, 3, 16, 32, template)


@pytest.mark.parametrize("kind", ["causal", "encoder"])
def test_layer_i_is_the_residual_stream_after_block_i(tmp_path, kind):
    """Layer ``i`` is ``hidden_states[i + 1]`` (``hidden_states[0]`` is the embeddings); a decoder's last entry
    has the final norm applied, so its last layer is the stream before that norm."""
    lm = _tiny(kind)
    tokens = torch.randint(50, (5, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = lm.model(input_ids=tokens, output_hidden_states=True).hidden_states
    assert len(hidden) == lm.n_layers + 1
    for layer in range(lm.n_layers):
        name = lm.module_name(layer)
        with ActivationCapture(lm.model, [name], stop_early=True) as cap, torch.no_grad():
            got = cap.run(lambda: run_model(lm, tokens))[name]
        if kind == "causal" and layer == lm.n_layers - 1:
            got = lm.model.model.norm(got)
        torch.testing.assert_close(got, hidden[layer + 1], rtol=1e-6, atol=1e-6)
    w = capture_to_store(
        lambda t: run_model(lm, t), lm.model, lm.module_name(1), iter(tokens), tmp_path / "a",
        n_tokens=4 * 9, batch_size=3, shard_sequences=3, progress=False,
    )  # fmt: skip
    store = ActivationStore(w.dir)
    assert len(store) == 4 and [s["n_sequences"] for s in store.index["shards"]] == [3, 1]
    assert torch.equal(torch.stack([store.tokens(i) for i in range(4)]), tokens[:4])
    torch.testing.assert_close(store.load(), hidden[2][:4], rtol=1e-6, atol=1e-6)


def test_run_model_refuses_sequences_longer_than_the_model_takes():
    lm = _tiny("encoder")
    with pytest.raises(InputError, match=r"L <= 32, got \(1, 33\)"):
        run_model(lm, torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(InputError, match=r"got \(8,\)"):
        run_model(lm, torch.zeros(8, dtype=torch.long))
