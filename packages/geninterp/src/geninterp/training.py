"""Train an SAE on an activation store through the gencore engine (:class:`gencore.train.Trainer`).

The store is a map-style dataset of sequences, so the engine samples sequences epoch by epoch
(exact resume, DDP over ranks, gradient accumulation) while only the sampled sequences are
read from disk. Per-token architectures see the micro-batch flattened to ``[b * L, d]``;
the Temporal SAE sees ``[b, L, d]``.

``nproc > 1`` trains in that many processes (``gencore.train.launch``; DDP, the batch split over the
ranks, the TopK dead-latent counts shared); rank 0 writes the SAE.

A run folder holds ``sae/`` (``model.safetensors`` + ``config.json``), ``run.json`` (resolved
settings, the store and the held-out split, timings), the engine's ``metrics.jsonl`` and
``checkpoints/``, and ``loss.png``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gencore.checks import check_seed
from gencore.errors import ConfigError, StorageError
from gencore.io import read_json, require_fields, write_json
from gencore.train import TrainConfig, Trainer, holds_settings, interruption, launch, run_identity
from geninterp.saes import SparseAutoencoder, make_objective, make_sae
from geninterp.saes.registry import ARCHITECTURES
from geninterp.store import ActivationStore

# settings a resumed run may change; every other field must match the checkpoint's (TrainConfig.identity)
RESUMABLE = ("steps", "progress")


@dataclass(frozen=True, kw_only=True)
class SAETrainConfig:
    """Settings of one SAE training run."""

    arch: str = "topk"  # relu | topk | temporal
    width: int = 1024
    k: int = 32  # topk / temporal
    l1_coeff: float = 5e-3  # relu
    aux_k: int | None = None  # topk / temporal: None = d_in // 2
    aux_coeff: float = 1.0 / 32.0
    dead_after_tokens: int = 100_000
    n_heads: int = 4  # temporal
    attn_dim: int = 64  # temporal
    steps: int = 1000
    batch_tokens: int = 4096  # tokens per optimiser step (rounded down to whole sequences)
    lr: float = 1e-3
    warmup_steps: int = 20
    eval_fraction: float = 0.1
    skip_positions: int = 0  # first positions of every sequence left out of the loss and the scaling
    seed: int = 0
    progress: bool = True

    def validate(self) -> SAETrainConfig:
        check_seed(self.seed)
        if self.arch not in ARCHITECTURES:
            raise ConfigError(f"arch must be one of {', '.join(ARCHITECTURES)}, got {self.arch!r}.")
        if self.skip_positions < 0:
            raise ConfigError(f"skip_positions must be non-negative, got {self.skip_positions}.")
        for name in ("width", "k", "steps", "batch_tokens", "n_heads", "attn_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.arch != "relu" and self.k > self.width:
            raise ConfigError(f"k ({self.k}) must not exceed width ({self.width}).")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be positive, got {self.lr}.")
        _objective(self)  # its settings (l1_coeff, aux_k, ...) checked before any process starts
        return self


def _objective(cfg: SAETrainConfig) -> Any:
    return make_objective(
        cfg.arch,
        l1_coeff=cfg.l1_coeff,
        aux_k=cfg.aux_k,
        aux_coeff=cfg.aux_coeff,
        dead_after_tokens=cfg.dead_after_tokens,
    )


class SAETask:
    """The engine task: ``loss(model, batch, generator)`` = the architecture's objective."""

    def __init__(self, sae: SparseAutoencoder, objective: Any, skip_positions: int = 0) -> None:
        self.model = sae
        self.objective = objective
        self.skip_positions = skip_positions

    def loss(self, model: torch.nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        x = batch[0] if isinstance(batch, tuple | list) else batch
        x = x[:, self.skip_positions :]  # the Temporal SAE's context then starts at skip_positions too
        sae = getattr(model, "module", model)
        if not sae.is_sequence:
            x = x.reshape(-1, x.shape[-1])
        return self.objective(sae, x, forward=model)


def position_stats(store: ActivationStore, skip_positions: int, max_sequences: int = 512) -> tuple[torch.Tensor, float]:
    """Mean and mean squared norm of the activations at positions ``>= skip_positions`` of ``store`` (a view).

    The store's running statistics when nothing is skipped and the view is the whole store; otherwise one pass
    over at most ``max_sequences`` sequences spread evenly over the view (so a training view's statistics never
    include its held-out sequences).
    """
    if skip_positions == 0 and len(store) == store.index["n_sequences"]:
        return store.mean, store.mean_sq_norm
    picks = torch.linspace(0, len(store) - 1, min(len(store), max_sequences)).round().long().unique().tolist()
    acts = torch.stack([store[i][skip_positions:] for i in picks]).reshape(-1, store.d_model).double()
    return acts.mean(0).float(), float(acts.pow(2).sum(1).mean())


def build_sae_for_store(cfg: SAETrainConfig, store: ActivationStore) -> SparseAutoencoder:
    """An SAE sized for ``store`` with ``act_scale`` so that ``E ||x * act_scale||^2 = d``, decoder bias at the mean.

    Both statistics are taken over positions ``>= cfg.skip_positions``.
    """
    d = store.d_model
    if cfg.skip_positions >= store.seq_len:
        raise ConfigError(f"skip_positions ({cfg.skip_positions}) must be below the sequence length {store.seq_len}.")
    mean, mean_sq_norm = position_stats(store, cfg.skip_positions)
    fields = {"d_in": d, "width": cfg.width, "act_scale": math.sqrt(d / max(mean_sq_norm, 1e-12))}
    if cfg.arch in ("topk", "temporal"):
        fields["k"] = cfg.k
    if cfg.arch == "temporal":
        fields |= {"n_heads": cfg.n_heads, "attn_dim": cfg.attn_dim}
    torch.manual_seed(cfg.seed)
    sae = make_sae(cfg.arch, **fields)
    sae.init_from_data(mean)
    return sae


def train_sae(
    cfg: SAETrainConfig, acts: str | os.PathLike, out_dir: str | os.PathLike, *, nproc: int = 1, **engine: Any
) -> tuple[SparseAutoencoder, dict[str, Any]]:
    """Train on the training split of the store at ``acts``; write the run folder; return ``(sae, run_record)``.

    ``nproc`` processes share each batch (DDP); ``engine`` overrides :class:`~gencore.train.TrainConfig` fields
    (``resume``, ``checkpoint_every``, ...).
    """
    cfg.validate()
    store = ActivationStore(acts)
    train_view, eval_view = store.split(cfg.eval_fraction)
    if cfg.batch_tokens < store.seq_len:
        raise ConfigError(
            f"a batch of {cfg.batch_tokens} tokens holds less than one sequence of {str(acts)!r} "
            f"({store.seq_len} tokens); batches are whole sequences, so choose --batch-tokens >= {store.seq_len}."
        )
    seqs = cfg.batch_tokens // store.seq_len
    if seqs > len(train_view):
        raise ConfigError(
            f"a batch of {cfg.batch_tokens} tokens needs {seqs} sequences but the training split of "
            f"{str(acts)!r} has {len(train_view)}; capture more tokens or lower --batch-tokens."
        )
    if nproc < 1:
        raise ConfigError(f"nproc must be a positive integer, got {nproc}.")
    if seqs % nproc:
        raise ConfigError(
            f"a batch of {seqs} sequences ({cfg.batch_tokens} tokens of {store.seq_len}) cannot be split over "
            f"{nproc} processes; choose --batch-tokens as a multiple of {nproc * store.seq_len}."
        )
    out = Path(out_dir)
    saved = read_json(out / "run.json") if engine.get("resume") and (out / "run.json").is_file() else {}
    if not isinstance(saved, dict):  # a damaged record: one sentence, not an AttributeError
        raise StorageError(f"{str(out / 'run.json')!r} does not hold a JSON object; move it away to resume the run.")
    if (
        (out / "sae").is_dir()
        and saved.get("acts") == str(Path(acts).resolve())
        and holds_settings(saved.get("config") or {}, cfg)
    ):  # a finished run of these settings: nothing to train, and its record keeps its own throughput
        return SparseAutoencoder.from_pretrained(out / "sae").eval(), saved | {"already_finished": True}
    outcome = launch(_fit_worker, cfg, str(acts), str(out), seqs, engine, nproc=nproc).get(0)
    if outcome is None or outcome["interrupted"]:
        raise interruption(out)
    sae = SparseAutoencoder.from_pretrained(out / "sae").eval()
    seconds = outcome["seconds"]
    tokens_per_step = seqs * (store.seq_len - cfg.skip_positions)
    tokens = cfg.steps * tokens_per_step
    record = {
        "config": dataclasses.asdict(cfg),
        "acts": str(Path(acts).resolve()),
        "nproc": nproc,
        "train_sequences": [train_view.sequences.start, train_view.sequences.stop],
        "eval_sequences": [eval_view.sequences.start, eval_view.sequences.stop],
        "seq_len": store.seq_len,
        "d_in": store.d_model,
        "train_seconds": round(seconds, 3),  # of the last session (a resumed run: since the resume)
        "steps_run": outcome["steps_run"],  # steps of that session
        "train_tokens": tokens,
        "tokens_per_second": round(outcome["steps_run"] * tokens_per_step / max(seconds, 1e-9), 1),
        "last_loss": outcome["last_loss"],
        "source": store.metadata,
    }
    write_json(out / "run.json", record)
    _loss_plot(out)
    return sae, record


def _fit_worker(cfg: SAETrainConfig, acts: str, out: str, seqs: int, engine: dict[str, Any]) -> dict[str, Any]:
    """Every rank: build the SAE for the store, fit it through the engine; rank 0 saves it."""
    store = ActivationStore(acts)
    train_view, _ = store.split(cfg.eval_fraction)
    sae = build_sae_for_store(cfg, train_view)  # the held-out sequences never shape act_scale or b_dec
    objective = _objective(cfg)
    settings = {
        "steps": cfg.steps,
        "global_batch_size": seqs,
        "optimizer": "adam",
        "lr": cfg.lr,
        "warmup_steps": min(cfg.warmup_steps, cfg.steps),
        "schedule": "cosine",
        "ema_decay": 0.0,
        "seed": cfg.seed,
        "progress": cfg.progress,
        "out_dir": out,
        "identity": run_identity(cfg, RESUMABLE) | {"acts": str(Path(acts).resolve())},
    }
    start = time.perf_counter()
    result = Trainer(TrainConfig(**(settings | engine))).fit(SAETask(sae, objective, cfg.skip_positions), train_view)
    seconds = time.perf_counter() - start
    if not result.interrupted and int(os.environ.get("RANK", "0") or 0) == 0:
        result.model.save_pretrained(Path(out) / "sae")
    return {
        "interrupted": bool(result.interrupted),
        "seconds": seconds,
        "steps_run": result.step - result.start_step,  # this process's share of a resumed run
        "last_loss": result.last_loss,
    }


def _loss_plot(out: Path) -> None:
    from gencore.plots import loss_curve

    path = out / "metrics.jsonl"
    if not path.is_file():
        return
    import json

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    losses = [(int(r["step"]), float(r["loss"])) for r in rows if "loss" in r]
    if losses:
        loss_curve(losses, out / "loss.png", title="SAE training loss")


def load_run(run_dir: str | os.PathLike) -> tuple[SparseAutoencoder, dict[str, Any]]:
    """The trained SAE and ``run.json`` of a run folder written by :func:`train_sae`."""
    run = Path(run_dir)
    if not (run / "run.json").is_file():
        raise StorageError(
            f"{str(run)!r} is not a geninterp SAE run folder (no run.json); train one with `geninterp train-sae`."
        )
    record = read_json(run / "run.json")
    where = repr(str(run / "run.json"))
    require_fields(record, ("config", "acts", "eval_sequences"), where, "; it was not written by `geninterp train-sae`")
    if not isinstance(record["config"], dict):
        raise StorageError(f"{where}: field 'config' must be a mapping, got {record['config']!r}.")
    span = record["eval_sequences"]
    if not (isinstance(span, list) and len(span) == 2 and all(isinstance(v, int) for v in span)):
        raise StorageError(f"{where}: field 'eval_sequences' must be [start, stop], got {span!r}.")
    return SparseAutoencoder.from_pretrained(run / "sae"), record
