"""SAE quality metrics, streamed over an activation store (one pass, float64 sums).

Keys of :func:`evaluate_sae`'s record (``x`` activations, ``x_hat`` reconstruction, ``mu`` the
evaluation set's mean, ``N`` tokens, ``d`` features):

* ``mse``: ``sum ||x - x_hat||^2 / (N d)`` in the model's activation units;
* ``fvu``: fraction of variance unexplained, ``sum ||x - x_hat||^2 / sum ||x - mu||^2``;
* ``explained_variance``: ``1 - sum_j Var(x_j - x_hat_j) / sum_j Var(x_j)`` (ignores a constant
  offset of the error, so it can exceed ``1 - fvu``);
* ``l0``: mean number of non-zero (sparse) codes per token; ``dead_frac``: latents that never
  fire on the evaluation set; ``dense_frac``: latents firing on more than 10% of tokens;
* ``skip_positions``: the first positions of every sequence left out (a decoder's first token is an
  attention sink whose norm is ~100x the others' and would hold nearly all the variance): as in
  training, the SAE sees only the later positions (a Temporal SAE's context starts after them), and
  the splice keeps the model's own activations there;
* Temporal SAE: ``pred_share = sum ||x_pred||^2 / (sum ||x_pred||^2 + sum ||x_novel||^2)``,
  its profile ``pred_share_by_position`` over sequence positions (index ``i`` is position
  ``skip_positions + i``), and ``l0_pred``.

:func:`downstream_effect` splices the reconstruction back into the language model: for a causal
LM the next-token loss with and without the splice (and with the layer zero-ablated, giving the
fraction of loss recovered); for an encoder, the cosine between mean-pooled output embeddings.
"""

from __future__ import annotations

from typing import Any

import torch

from gencore.errors import ConfigError, InputError
from geninterp.capture import OutputReplacement
from geninterp.saes import SparseAutoencoder
from geninterp.store import ActivationStore

DENSE_THRESHOLD = 0.1


@torch.no_grad()
def evaluate_sae(
    sae: SparseAutoencoder, store: ActivationStore, batch_sequences: int = 32, skip_positions: int = 0
) -> dict[str, Any]:
    """Reconstruction, sparsity and (Temporal SAE) predicted/novel metrics over ``store`` (a view).

    Positions ``< skip_positions`` of every sequence are left out of every metric.
    """
    sae.eval()
    d, width, length = store.d_model, sae.config.width, store.seq_len - skip_positions
    if not 0 <= skip_positions < store.seq_len:
        raise ConfigError(f"skip_positions must be in 0..{store.seq_len - 1}, got {skip_positions}.")
    if batch_sequences < 1:
        raise ConfigError(f"batch_sequences must be a positive integer, got {batch_sequences}.")
    if len(store) == 0:
        raise InputError("the evaluation store (view) holds no sequences; there is nothing to evaluate.")
    if d != sae.config.d_in:
        raise InputError(f"the store holds activations of width {d}, but the SAE takes d_in = {sae.config.d_in}.")
    n = 0
    s_x = torch.zeros(d, dtype=torch.float64)
    s_xx = 0.0
    s_e = torch.zeros(d, dtype=torch.float64)
    s_ee = 0.0
    fires = torch.zeros(width, dtype=torch.float64)
    l0 = 0.0
    l0_pred = 0.0
    pred_pos = torch.zeros(length, dtype=torch.float64)
    novel_pos = torch.zeros(length, dtype=torch.float64)
    for acts, _ in store.iter_batches(batch_sequences):
        x = _on_sae(sae, acts[:, skip_positions:])  # as in training: a Temporal SAE's context starts there too
        x = x if sae.is_sequence else x.reshape(-1, d)
        out = sae(x)
        xf, err = x.reshape(-1, d).double().cpu(), (x - out.recon).reshape(-1, d).double().cpu()
        codes = out.codes.reshape(-1, width).cpu()
        n += xf.shape[0]
        s_x += xf.sum(0)
        s_xx += float(xf.pow(2).sum())
        s_e += err.sum(0)
        s_ee += float(err.pow(2).sum())
        active = codes > 0
        fires += active.sum(0).double()
        l0 += float(active.sum())
        if out.pred_recon is not None:
            pred_pos += out.pred_recon.double().pow(2).sum(-1).sum(0).cpu()
            novel_pos += out.novel_recon.double().pow(2).sum(-1).sum(0).cpu()
            l0_pred += float((out.pred_codes.abs() > 0).sum())
    mu = s_x / n
    total_var = s_xx - n * float(mu.pow(2).sum())
    if not total_var > 0:
        raise InputError("the evaluation activations have no variance (all tokens equal): FVU is undefined.")
    err_mean = s_e / n
    err_var = s_ee - n * float(err_mean.pow(2).sum())
    freq = fires / n
    record: dict[str, Any] = {
        "n_tokens": n,
        "mse": s_ee / (n * d),
        "fvu": s_ee / total_var,
        "explained_variance": 1.0 - err_var / total_var,
        "l0": l0 / n,
        "dead_frac": float((freq == 0).double().mean()),
        "dense_frac": float((freq > DENSE_THRESHOLD).double().mean()),
        "width": width,
        "arch": sae.config.arch,
        "skip_positions": skip_positions,
    }
    if sae.is_sequence:
        p, q = float(pred_pos.sum()), float(novel_pos.sum())
        record["pred_share"] = p / max(p + q, 1e-30)
        record["pred_share_by_position"] = (pred_pos / (pred_pos + novel_pos).clamp_min(1e-30)).tolist()
        record["l0_pred"] = l0_pred / n
    return record


def _on_sae(sae: SparseAutoencoder, x: torch.Tensor) -> torch.Tensor:
    """``x`` on the device and in the dtype of ``sae``'s weights (a CUDA or float64 SAE on a float32 CPU store)."""
    w = next(sae.parameters())
    return x.to(device=w.device, dtype=w.dtype)


def _splice_fn(sae: SparseAutoencoder, skip_positions: int = 0) -> Any:
    def fn(h: torch.Tensor) -> torch.Tensor:
        x = _on_sae(sae, h)
        tail = x[:, skip_positions:]
        recon = sae(tail).recon if sae.is_sequence else sae(tail.reshape(-1, x.shape[-1])).recon.reshape(tail.shape)
        return torch.cat([x[:, :skip_positions], recon], dim=1).to(h)

    return fn


def _zero_fn(skip_positions: int = 0) -> Any:
    def fn(h: torch.Tensor) -> torch.Tensor:
        return torch.cat([h[:, :skip_positions], torch.zeros_like(h[:, skip_positions:])], dim=1)

    return fn


@torch.no_grad()
def downstream_effect(
    lm: Any,
    module_name: str,
    sae: SparseAutoencoder,
    store: ActivationStore,
    max_sequences: int = 16,
    skip_positions: int = 0,
) -> dict[str, Any]:
    """Splice ``sae``'s reconstruction into ``lm`` at ``module_name`` on the store's token sequences.

    The first ``skip_positions`` positions keep the model's own activations, in the splice and in the
    zero-ablation baseline of ``loss_recovered`` alike.
    """
    from geninterp.models import next_token_loss, run_model

    if max_sequences < 1:
        raise ConfigError(f"the downstream effect needs max_sequences >= 1, got {max_sequences}.")
    if not 0 <= skip_positions < store.seq_len:
        raise ConfigError(f"skip_positions must be in 0..{store.seq_len - 1}, got {skip_positions}.")
    n = min(max_sequences, len(store))
    tokens = torch.stack([store.tokens(i) for i in range(n)])
    clean = run_model(lm, tokens)
    with OutputReplacement(lm.model, module_name, _splice_fn(sae, skip_positions)):
        spliced = run_model(lm, tokens)
    if lm.kind == "causal":
        # the baseline zeroes what the splice replaces, not the kept positions (attention sinks, for SmolLM2,
        # whose zeroing alone ruins the model and made the loss recovered look far better than it is)
        with OutputReplacement(lm.model, module_name, _zero_fn(skip_positions)):
            ablated = run_model(lm, tokens)
        base, spl, abl = (float(next_token_loss(o.logits, tokens)) for o in (clean, spliced, ablated))
        return {
            "lm_loss_clean": base,
            "lm_loss_spliced": spl,
            "lm_loss_delta": spl - base,
            "lm_loss_zero_ablated": abl,
            "loss_recovered": (abl - spl) / (abl - base) if abl != base else float("nan"),
            "downstream_sequences": n,
        }
    a = clean.last_hidden_state.mean(1)
    b = spliced.last_hidden_state.mean(1)
    return {
        "embedding_cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=-1).mean()),
        "downstream_sequences": n,
    }
