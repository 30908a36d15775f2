"""Temporal SAE vs TopK in miniature (Lubana et al., Temporal SAE, ICLR 2026).

* :func:`slow_events_sequences`: synthetic sequences whose tokens are a *slow state* (held for
  geometric-length segments) plus a few *sparse events* (atoms of a separate dictionary, fresh at
  every token) plus small noise. The segment starts are the event boundaries: the only tokens whose
  slow part the past cannot predict. The slow state is either one of ``n_topics`` fixed directions
  (``slow_states="dictionary"``: a stationary concept set that a per-token SAE can learn as latents)
  or a fresh random direction for every segment (``"continuous"``: predictable from the context
  but never a reusable dictionary direction, the non-stationary case the paper argues LM
  activations are in).
* :func:`boundary_auroc`: both SAEs are trained on the same store; each token gets a novelty
  score - Temporal SAE: the novel part's share of the reconstructed energy,
  ``||x_novel||^2 / (||x_pred||^2 + ||x_novel||^2)``; TopK: the share of code energy on latents
  that were silent at the previous token (the best TopK analogue of "not predictable from the
  past") - and the AUROC of the score for boundary vs non-boundary tokens is reported. It also
  measures how each SAE *separates* slow from fast information: the share of a part's variance
  that the slow state explains (:func:`state_variance_share`) for the Temporal SAE's predicted and
  novel parts, and for TopK's reconstruction split into *persistent* latents (active at ``t`` in
  more than half of the tokens after one where they were active, :func:`latent_persistence`) and
  the rest.
* :func:`compare_on_store`: TopK and Temporal SAE at the same ``k`` (matched novel L0) on a
  language-model store: FVU and the predicted/novel split by context position.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import torch

from gencore.errors import ConfigError
from gencore.metrics import roc_auc
from geninterp.metrics import evaluate_sae
from geninterp.store import ActivationStore, ActivationWriter
from geninterp.training import SAETrainConfig, train_sae


def slow_events_sequences(
    n_seq: int = 1024, length: int = 64, dim: int = 64, n_topics: int = 32, n_events: int = 256,
    events_per_token: int = 3, mean_segment: float = 16.0, slow_scale: float = 3.0, noise: float = 0.05,
    seed: int = 0, slow_states: str = "dictionary",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(x [n_seq, length, dim], boundary [n_seq, length] bool, state [n_seq, length] long)``.

    Position 0 is never a boundary. ``state`` names the slow state of each token: the topic index
    (``"dictionary"``) or a number unique to the segment (``"continuous"``). Both modes draw the
    same boundaries, events and noise for a given seed; only the slow part differs.
    """
    if slow_states not in ("dictionary", "continuous"):
        raise ConfigError(f"slow_states must be 'dictionary' or 'continuous', got {slow_states!r}.")
    counts = {"n_seq": (n_seq, 1), "length": (length, 1), "dim": (dim, 1), "n_topics": (n_topics, 2),
              "n_events": (n_events, 1), "events_per_token": (events_per_token, 0)}  # fmt: skip
    for name, (value, low) in counts.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
            raise ConfigError(f"{name} must be an integer of at least {low}, got {value!r}.")
    if events_per_token > n_events:
        raise ConfigError(f"events_per_token ({events_per_token}) must not exceed n_events ({n_events}).")
    if not (isinstance(mean_segment, int | float) and 1 <= mean_segment < math.inf):
        raise ConfigError(f"mean_segment must be a finite number of tokens of at least 1, got {mean_segment!r}.")
    for name, value in (("slow_scale", slow_scale), ("noise", noise)):
        if not (isinstance(value, int | float) and 0 <= value < math.inf):
            raise ConfigError(f"{name} must be a non-negative finite number, got {value!r}.")
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
    burst = (mags[..., None] * events[idx]).sum(-2)
    eps = noise * torch.randn(burst.shape, generator=g)
    if slow_states == "dictionary":
        return topics[topic] + burst + eps, switch, topic
    segment = switch.long().cumsum(1)  # 0, 0, 1, 1, 1, 2, ... within each sequence
    directions = torch.nn.functional.normalize(torch.randn(n_seq, length, dim, generator=g), dim=-1) * slow_scale
    slow = directions.gather(1, segment[..., None].expand(-1, -1, dim))
    state = torch.arange(n_seq)[:, None] * length + segment
    return slow + burst + eps, switch, state


def state_variance_share(rep: torch.Tensor, state: torch.Tensor) -> float:
    """Share of the variance of ``rep [..., d]`` explained by ``state [...]`` (between-state / total).

    1 when ``rep`` is a function of the state, near 0 when it ignores it (0 for a constant ``rep``).
    """
    r = rep.reshape(-1, rep.shape[-1]).double()
    _, s = torch.unique(state.reshape(-1), return_inverse=True)
    centred = r - r.mean(0)
    total = centred.pow(2).sum()
    if total <= 0:
        return 0.0
    sums = torch.zeros(int(s.max()) + 1, r.shape[1], dtype=r.dtype).index_add_(0, s, centred)
    means = sums / torch.bincount(s)[:, None]
    return float(means[s].pow(2).sum() / total)


def latent_persistence(codes: torch.Tensor) -> torch.Tensor:
    """Per latent ``[width]``: P(active at ``t`` | active at ``t - 1``) over sequences ``[B, L, width]``."""
    on = codes > 0
    stay = (on[:, 1:] & on[:, :-1]).sum((0, 1)).double()
    return stay / on[:, :-1].sum((0, 1)).clamp_min(1).double()


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
    out_dir: str | Path | None = None, slow_states: str = "dictionary", slow_scale: float = 3.0,
) -> dict[str, Any]:  # fmt: skip
    """Train TopK and Temporal SAEs on the synthetic store; boundary AUROC and slow/fast separation.

    Keys: ``{arch}_boundary_auroc``, ``{arch}_fvu``, ``{arch}_l0``, ``{arch}_tokens_per_second``,
    ``temporal_pred_share``; the separation measures ``temporal_pred_state_share`` /
    ``temporal_novel_state_share`` and ``topk_persistent_state_share`` /
    ``topk_transient_state_share`` (``None`` when no latent is persistent), with
    ``topk_persistent_latents`` and their share of code energy ``topk_persistent_energy``.
    """
    x, boundary, state = slow_events_sequences(seed=seed, slow_states=slow_states, slow_scale=slow_scale)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(out_dir) if out_dir is not None else Path(tmp)
        with ActivationWriter(root / "acts", d_model=x.shape[-1], seq_len=x.shape[1], metadata={"model": None}) as w:
            w.write(x, torch.zeros(x.shape[:2], dtype=torch.long))
        record: dict[str, Any] = {
            "tokens": x.shape[0] * x.shape[1], "boundary_rate": float(boundary.float().mean()),
            "slow_states": slow_states, "slow_scale": slow_scale, "steps": steps, "seed": seed,
        }  # fmt: skip
        for arch in ("topk", "temporal"):
            cfg = SAETrainConfig(
                arch=arch, width=width, k=k, steps=steps, batch_tokens=2048, seed=seed, progress=progress
            )
            sae, run = train_sae(cfg, root / "acts", root / arch)
            lo, hi = run["eval_sequences"]
            held, held_state = x[lo:hi], state[lo:hi]
            score = novelty_scores(sae, held)[:, 1:]
            label = boundary[lo:hi, 1:]
            record[f"{arch}_boundary_auroc"] = roc_auc(score[label], score[~label])
            record |= _separation(sae, held, held_state)
            metrics = evaluate_sae(sae, ActivationStore(root / "acts", range(lo, hi)))
            record[f"{arch}_fvu"] = metrics["fvu"]
            record[f"{arch}_l0"] = metrics["l0"]
            if arch == "temporal":
                record["temporal_pred_share"] = metrics["pred_share"]
            record[f"{arch}_tokens_per_second"] = run["tokens_per_second"]
    return record


@torch.no_grad()
def _separation(sae: Any, x: torch.Tensor, state: torch.Tensor) -> dict[str, Any]:
    """Slow-state variance shares of the parts each SAE splits a token into (see the module docstring)."""
    if sae.is_sequence:
        out = sae(x)
        return {
            "temporal_pred_state_share": state_variance_share(out.pred_recon, state),
            "temporal_novel_state_share": state_variance_share(out.novel_recon, state),
        }
    z = sae.encode(x)
    persistent = latent_persistence(z) > 0.5
    energy = z.pow(2).sum()
    rec: dict[str, Any] = {
        "topk_persistent_latents": int(persistent.sum()),
        "topk_persistent_energy": float((z * persistent).pow(2).sum() / energy.clamp_min(1e-12)),
        "topk_persistent_state_share": None,
        "topk_transient_state_share": state_variance_share(sae.decode(z * ~persistent), state),
    }
    if persistent.any():
        rec["topk_persistent_state_share"] = state_variance_share(sae.decode(z * persistent), state)
    return rec


def compare_on_store(
    acts: str | Path, out_dir: str | Path, k: int = 16, width: int = 1024, steps: int = 300,
    batch_tokens: int = 4096, seed: int = 0, progress: bool = False, skip_positions: int = 0, **engine: Any,
) -> dict[str, Any]:  # fmt: skip
    """TopK vs Temporal SAE at equal ``k`` on a real store: FVU, L0, predicted share by position, speed.

    ``skip_positions`` leaves the first positions out of training and metrics (2 for SmolLM2,
    whose first one or two tokens are attention sinks holding nearly all the variance). ``engine`` goes to
    :func:`train_sae` (e.g. ``resume="auto"`` to reuse finished runs in ``out_dir``).
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
        sae, run = train_sae(cfg, acts, Path(out_dir) / arch, **engine)
        m = evaluate_sae(sae, ActivationStore(acts, range(*run["eval_sequences"])), skip_positions=skip_positions)
        record[f"{arch}_fvu"] = m["fvu"]
        record[f"{arch}_l0"] = m["l0"]
        record[f"{arch}_tokens_per_second"] = run["tokens_per_second"]
        if arch == "temporal":
            record["temporal_pred_share"] = m["pred_share"]
            record["temporal_l0_pred"] = m["l0_pred"]
            record["pred_share_by_position"] = m["pred_share_by_position"]
    return record
