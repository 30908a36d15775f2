"""Temporal SAE vs TopK in miniature (Lubana et al., Temporal SAE, ICLR 2026).

* :func:`slow_events_sequences`: synthetic sequences whose tokens are a *slow state* (one of
  ``n_topics`` directions, held for geometric-length segments) plus a few *sparse events*
  (atoms of a separate dictionary, fresh at every token) plus small noise. The segment starts
  are the event boundaries: the only tokens whose slow part the past cannot predict.
* :func:`boundary_auroc`: both SAEs are trained on the same store; each token gets a novelty
  score - Temporal SAE: the novel part's share of the reconstructed energy,
  ``||x_novel||^2 / (||x_pred||^2 + ||x_novel||^2)``; TopK: the share of code energy on latents
  that were silent at the previous token (the best TopK analogue of "not predictable from the
  past") - and the AUROC of the score for boundary vs non-boundary tokens is reported.
* :func:`compare_on_store`: TopK and Temporal SAE at the same ``k`` (matched novel L0) on a
  language-model store: FVU and the predicted/novel split by context position.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from gencore.metrics import roc_auc
from geninterp.metrics import evaluate_sae
from geninterp.store import ActivationStore, ActivationWriter
from geninterp.training import SAETrainConfig, train_sae


def slow_events_sequences(
    n_seq: int = 1024, length: int = 64, dim: int = 64, n_topics: int = 32, n_events: int = 256,
    events_per_token: int = 3, mean_segment: float = 16.0, slow_scale: float = 3.0, noise: float = 0.05,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(x [n_seq, length, dim], boundary [n_seq, length] bool)``; position 0 is never a boundary."""
    g = torch.Generator().manual_seed(seed)
    topics = torch.nn.functional.normalize(torch.randn(n_topics, dim, generator=g), dim=-1) * slow_scale
    events = torch.nn.functional.normalize(torch.randn(n_events, dim, generator=g), dim=-1)
    switch = torch.rand(n_seq, length, generator=g) < 1.0 / mean_segment
    switch[:, 0] = False
    topic = torch.randint(n_topics, (n_seq, 1), generator=g).expand(-1, length).clone()
    for t in range(1, length):
        fresh = torch.randint(n_topics - 1, (n_seq,), generator=g)
        new = fresh + (fresh >= topic[:, t - 1]).long()  # a different topic
        topic[:, t] = torch.where(switch[:, t], new, topic[:, t - 1])
    idx = torch.rand(n_seq, length, n_events, generator=g).topk(events_per_token, -1).indices
    mags = 0.5 + torch.rand(n_seq, length, events_per_token, generator=g)
    x = topics[topic] + (mags[..., None] * events[idx]).sum(-2)
    x = x + noise * torch.randn(x.shape, generator=g)
    return x, switch


@torch.no_grad()
def novelty_scores(sae: Any, x: torch.Tensor) -> torch.Tensor:
    """Per-token novelty ``[B, L]`` (see the module docstring) for a Temporal or per-token SAE."""
    if sae.is_sequence:
        out = sae(x)
        p, n = out.pred_recon.pow(2).sum(-1), out.novel_recon.pow(2).sum(-1)
        return n / (p + n).clamp_min(1e-12)
    z = sae.encode(x)
    prev = torch.nn.functional.pad(z, (0, 0, 1, 0))[:, :-1]
    new = (z > 0) & (prev <= 0)
    return (z.pow(2) * new).sum(-1) / z.pow(2).sum(-1).clamp_min(1e-12)


def boundary_auroc(
    steps: int = 400, width: int = 256, k: int = 8, seed: int = 0, progress: bool = False,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Train TopK and Temporal SAEs on the synthetic store; event-boundary AUROC of their novelty scores."""
    x, boundary = slow_events_sequences(seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(out_dir) if out_dir is not None else Path(tmp)
        with ActivationWriter(root / "acts", d_model=x.shape[-1], seq_len=x.shape[1], metadata={"model": None}) as w:
            w.write(x, torch.zeros(x.shape[:2], dtype=torch.long))
        record: dict[str, Any] = {"tokens": x.shape[0] * x.shape[1], "boundary_rate": float(boundary.float().mean())}
        for arch in ("topk", "temporal"):
            cfg = SAETrainConfig(
                arch=arch, width=width, k=k, steps=steps, batch_tokens=2048, seed=seed, progress=progress
            )
            sae, run = train_sae(cfg, root / "acts", root / arch)
            lo, hi = run["eval_sequences"]
            held = x[lo:hi]
            score = novelty_scores(sae, held)[:, 1:]
            label = boundary[lo:hi, 1:]
            record[f"{arch}_boundary_auroc"] = roc_auc(score[label], score[~label])
            metrics = evaluate_sae(sae, ActivationStore(root / "acts", range(lo, hi)))
            record[f"{arch}_fvu"] = metrics["fvu"]
            record[f"{arch}_l0"] = metrics["l0"]
            if arch == "temporal":
                record["temporal_pred_share"] = metrics["pred_share"]
            record[f"{arch}_tokens_per_second"] = run["tokens_per_second"]
    return record


def compare_on_store(
    acts: str | Path, out_dir: str | Path, k: int = 16, width: int = 1024, steps: int = 300,
    batch_tokens: int = 4096, seed: int = 0, progress: bool = False, skip_positions: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """TopK vs Temporal SAE at equal ``k`` on a real store: FVU, L0, predicted share by position, speed.

    ``skip_positions`` leaves the first positions out of training and metrics (2 for SmolLM2,
    whose first one or two tokens are attention sinks holding nearly all the variance).
    """
    record: dict[str, Any] = {
        "acts": str(acts), "k": k, "width": width, "steps": steps, "batch_tokens": batch_tokens,
        "skip_positions": skip_positions,
    }  # fmt: skip
    for arch in ("topk", "temporal"):
        cfg = SAETrainConfig(
            arch=arch, width=width, k=k, steps=steps, batch_tokens=batch_tokens, seed=seed, progress=progress,
            skip_positions=skip_positions,
        )  # fmt: skip
        sae, run = train_sae(cfg, acts, Path(out_dir) / arch)
        m = evaluate_sae(sae, ActivationStore(acts, range(*run["eval_sequences"])), skip_positions=skip_positions)
        record[f"{arch}_fvu"] = m["fvu"]
        record[f"{arch}_l0"] = m["l0"]
        record[f"{arch}_tokens_per_second"] = run["tokens_per_second"]
        if arch == "temporal":
            record["temporal_pred_share"] = m["pred_share"]
            record["temporal_l0_pred"] = m["l0_pred"]
            record["pred_share_by_position"] = m["pred_share_by_position"]
    return record
