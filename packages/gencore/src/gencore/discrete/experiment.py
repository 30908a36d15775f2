"""Train and compare discrete generative processes on token tasks (``gencore discrete compare``).

Every process of a comparison trains the same :class:`~gencore.discrete.network.TokenDenoiser`
(only its input width differs) with the same loop: AdamW on the network (plus the process's
own parameters when it is an ``nn.Module``), cosine learning-rate decay, gradient clipping at
norm 1, ``process.update_schedule(step / steps)`` before each step when the process has it, and
batches of the training split with their class labels passed as ``y`` for class-conditional
tasks (dropped to the null label with probability ``label_drop`` so that classifier-free
guidance works). Steps whose loss or gradient is not finite are skipped and counted (``nonfinite_steps``).

Each record reports, on the same test sequences and with the same random numbers:

- ``nll_nats_per_token``: the process's negative ELBO on the test split in nats per position,
  unconditional (null label) -- the one unit shared by every process; ``nll_stderr`` its
  standard error over sequences, and ``nll_cond_nats_per_token`` the bound given the true labels;
- ``train_seconds``, ``sample_seconds``, ``nfe`` (network evaluations of the sampler);
- a statistic of samples drawn with the test labels (guidance scale ``guidance_scale``):
  dna: ``kmer3_tv`` (total variation between 3-mer frequencies of samples and the test split)
  and ``motif_rate`` (fraction of samples that contain their class's planted motif);
  grid: ``hist_tv`` (total variation between the 2-D histograms); digits: ``mean_pixel`` and
  ``mmd2_rbf`` (squared MMD of binary vectors, RBF bandwidths from the test split).

The same statistics of the training split (as many sequences as samples) are the ``reference``:
the value a perfect sampler would reach up to sampling noise. The reference also holds
``independent_nll_nats_per_token``, the test NLL of the context-free model (per-position token
frequencies of the training split): a bound below it shows that a model learned dependencies.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from gencore.checks import check_seed
from gencore.discrete.base import DiscreteProcess
from gencore.discrete.guidance import GuidedDenoiser
from gencore.discrete.network import TokenDenoiser
from gencore.discrete.registry import PROCESSES, make_process
from gencore.discrete.tasks import TASKS, TokenTask, make_task
from gencore.errors import ConfigError
from gencore.metrics import DEFAULT_BANDWIDTH_MULTIPLIERS, median_pairwise_distance, mmd

__all__ = [
    "DiscreteConfig",
    "TrainedProcess",
    "class_motifs",
    "compare",
    "config_dict",
    "evaluate_process",
    "sample_statistics",
    "train_process",
]

MOTIF_LENGTH = 6  # the planted motif length of the dna task


@dataclass(frozen=True, kw_only=True)
class DiscreteConfig:
    """Settings shared by every process of a comparison."""

    task: str = "dna"
    processes: tuple[str, ...] = ("masked", "uniform")
    steps: int = 2000  # optimiser steps per process
    batch_size: int = 64
    lr: float = 2e-3
    hidden: int = 32
    depth: int = 2
    heads: int = 4
    sample_steps: int = 32  # reverse steps of the samplers (and T of few-step processes)
    n_eval: int = 256  # test sequences in the bound
    n_time: int = 16  # time strata per sequence in the bound
    n_samples: int = 512
    guidance_scale: float = 1.0  # 1: the conditional model (no extra evaluations)
    label_drop: float = 0.1
    seed: int = 0
    progress: bool = True

    def validate(self) -> DiscreteConfig:
        check_seed(self.seed)
        if self.task not in TASKS:
            raise ConfigError(f"unknown discrete task {self.task!r}; expected one of: {', '.join(TASKS)}.")
        unknown = [p for p in self.processes if p not in PROCESSES]
        if unknown or not self.processes:
            raise ConfigError(
                f"unknown discrete process(es) {', '.join(unknown) or '(none given)'}; "
                f"expected some of: {', '.join(PROCESSES)}."
            )
        for name in ("steps", "batch_size", "hidden", "depth", "heads", "sample_steps", "n_eval", "n_time"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.n_samples < 2:
            raise ConfigError(f"n_samples must be at least 2, got {self.n_samples}.")
        if not (math.isfinite(self.lr) and self.lr > 0):  # inf trained to NaN and was reported as bad probs
            raise ConfigError(f"lr must be a positive finite number, got {self.lr}.")
        if not 0.0 <= self.label_drop < 1.0:
            raise ConfigError(f"label_drop must lie in [0, 1), got {self.label_drop}.")
        if not math.isfinite(self.guidance_scale):
            raise ConfigError(f"guidance_scale must be a finite number, got {self.guidance_scale}.")
        return self


@dataclass
class TrainedProcess:
    """A trained denoiser with its process and training log."""

    name: str
    process: DiscreteProcess
    model: TokenDenoiser
    train_seconds: float
    losses: list[float] = field(default_factory=list)
    nonfinite_steps: int = 0


def _labels_with_dropout(y: torch.Tensor, null: int, p: float, generator: torch.Generator) -> torch.Tensor:
    drop = torch.rand(y.shape, generator=generator) < p
    return torch.where(drop, torch.full_like(y, null), y)


def train_process(name: str, task: TokenTask, cfg: DiscreteConfig) -> TrainedProcess:
    """Build process ``name`` and train a fresh denoiser for it (see module docstring)."""
    process = make_process(name, task, cfg.sample_steps)
    torch.manual_seed(cfg.seed)
    model = TokenDenoiser(
        process.input_dim,
        process.output_dim,
        task.length,
        hidden=cfg.hidden,
        depth=cfg.depth,
        heads=cfg.heads,
        num_classes=task.num_classes,
    )
    params = list(model.parameters())
    if isinstance(process, nn.Module):
        params += [p for p in process.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.01)
    warmup = min(100, max(cfg.steps // 10, 1))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(s / cfg.steps, 1.0)))),
    )
    g = torch.Generator().manual_seed(cfg.seed + 1)
    update = getattr(process, "update_schedule", None)
    losses, bad = [], 0
    start = time.perf_counter()
    model.train()
    if isinstance(process, nn.Module):
        process.train()
    bar = tqdm(range(cfg.steps), desc=f"train {name}", disable=None if cfg.progress else True, leave=False)
    for step in bar:
        if update is not None:
            update(step / cfg.steps)
        idx = torch.randint(0, task.train.shape[0], (cfg.batch_size,), generator=g)
        cond = {}
        if task.num_classes and task.train_labels is not None:
            cond["y"] = _labels_with_dropout(task.train_labels[idx], task.num_classes, cfg.label_drop, g)
        loss, _ = process.loss(model, task.train[idx], generator=g, **cond)
        if not torch.isfinite(loss):
            bad += 1
            continue
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if not torch.isfinite(torch.nn.utils.clip_grad_norm_(params, 1.0)):
            bad += 1  # a non-finite gradient: skip the update rather than corrupt the weights
            continue
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.4f}")
    bar.close()
    model.eval()
    if isinstance(process, nn.Module):
        process.eval()
    return TrainedProcess(name, process, model, time.perf_counter() - start, losses, bad)


# sample statistics ----------------------------------------------------------------------------
def _kmer_frequencies(x: torch.Tensor, vocab_size: int, k: int) -> torch.Tensor:
    codes = (x.unfold(1, k, 1) * vocab_size ** torch.arange(k - 1, -1, -1)).sum(-1)
    counts = torch.bincount(codes.reshape(-1), minlength=vocab_size**k).double()
    return counts / counts.sum()


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p - q).abs().sum())


def class_motifs(x: torch.Tensor, labels: torch.Tensor, num_classes: int, k: int = MOTIF_LENGTH) -> torch.Tensor:
    """Per class, the ``k``-mer (as a code in base ``4``) whose presence rate most exceeds the other classes'."""
    codes = (x.unfold(1, k, 1) * 4 ** torch.arange(k - 1, -1, -1)).sum(-1)  # [n, L-k+1]
    present = torch.zeros(x.shape[0], 4**k, dtype=torch.bool)
    present.scatter_(1, codes, True)
    out = []
    for c in range(num_classes):
        inside = present[labels == c].double().mean(0)
        outside = present[labels != c].double().mean(0)
        out.append(int((inside - outside).argmax()))
    return torch.tensor(out)


def _motif_rate(x: torch.Tensor, labels: torch.Tensor, motifs: torch.Tensor, k: int = MOTIF_LENGTH) -> float:
    codes = (x.unfold(1, k, 1) * 4 ** torch.arange(k - 1, -1, -1)).sum(-1)
    return float((codes == motifs[labels][:, None]).any(1).double().mean())


def sample_statistics(
    task: TokenTask, tokens: torch.Tensor, labels: torch.Tensor | None = None, *, motifs: torch.Tensor | None = None
) -> dict[str, float]:
    """The task's sample statistics of ``tokens: [n, L]`` against the test split (see module docstring)."""
    tokens = tokens.cpu().long()
    if task.name == "dna":
        stats = {"kmer3_tv": _tv(_kmer_frequencies(tokens, 4, 3), _kmer_frequencies(task.test, 4, 3))}
        if labels is not None and motifs is not None:
            stats["motif_rate"] = _motif_rate(tokens, labels.cpu(), motifs)
        return stats
    if task.name == "grid":
        k = task.vocab_size

        def hist(x: torch.Tensor) -> torch.Tensor:
            return torch.bincount(x[:, 0] * k + x[:, 1], minlength=k * k).double() / x.shape[0]

        return {"hist_tv": _tv(hist(tokens), hist(task.test))}
    reference = task.test.double()
    median = median_pairwise_distance(reference)
    bandwidths = [c * median for c in DEFAULT_BANDWIDTH_MULTIPLIERS]
    return {
        "mean_pixel": float(tokens.double().mean()),
        "mmd2_rbf": mmd(tokens.double(), reference, bandwidths=bandwidths, estimator="unbiased").value,
    }


def _sample_labels(task: TokenTask, n: int) -> torch.Tensor | None:
    if not task.num_classes or task.test_labels is None:
        return None
    return task.test_labels.repeat(math.ceil(n / task.test_labels.shape[0]))[:n]


def independent_nll(task: TokenTask, n_eval: int) -> float:
    """Test NLL (nats per position) of the context-free model: per-position token frequencies of the train split.

    Any denoiser that ignores context reaches this bound at best; a value below it shows learned dependencies.
    """
    counts = torch.stack([torch.bincount(col, minlength=task.vocab_size) for col in task.train.T]).double() + 1.0
    log_probs = (counts / counts.sum(-1, keepdim=True)).log()  # [L, K], add-one smoothed
    x = task.test[:n_eval]
    return float(-log_probs[torch.arange(task.length), x].mean())


def reference_statistics(task: TokenTask, n: int, motifs: torch.Tensor | None, n_eval: int) -> dict[str, Any]:
    """The sample statistics of ``n`` training sequences (what a perfect sampler reaches up to noise) and the
    test NLL of the context-free model (:func:`independent_nll`)."""
    labels = task.train_labels[:n] if task.train_labels is not None else None
    stats = sample_statistics(task, task.train[:n], labels, motifs=motifs)
    return {"process": "data (train split)", "independent_nll_nats_per_token": independent_nll(task, n_eval), **stats}


@torch.no_grad()
def evaluate_process(
    trained: TrainedProcess, task: TokenTask, cfg: DiscreteConfig, motifs: torch.Tensor | None = None
) -> tuple[dict[str, Any], torch.Tensor]:
    """The bound on the test split and the sample statistics of one trained process: ``(record, samples)``."""
    process, model = trained.process, trained.model
    x = task.test[: cfg.n_eval]
    null = {"y": torch.full((x.shape[0],), task.num_classes)} if task.num_classes else {}
    bound = process.nll_bound(
        model, x, n_time=cfg.n_time, generator=torch.Generator().manual_seed(cfg.seed + 2), **null
    )
    bound = bound.double()
    record: dict[str, Any] = {
        "process": trained.name,
        "nll_nats_per_token": float(bound.mean()),
        "nll_stderr": float(bound.std() / math.sqrt(bound.numel())) if bound.numel() > 1 else float("nan"),
    }
    if task.num_classes and task.test_labels is not None:
        cond = process.nll_bound(
            model,
            x,
            n_time=cfg.n_time,
            generator=torch.Generator().manual_seed(cfg.seed + 2),
            y=task.test_labels[: cfg.n_eval],
        )
        record["nll_cond_nats_per_token"] = float(cond.double().mean())
    labels = _sample_labels(task, cfg.n_samples)
    sampler_model: nn.Module = model
    cond_kw = {}
    if labels is not None:
        cond_kw["y"] = labels
        if cfg.guidance_scale != 1.0:
            sampler_model = GuidedDenoiser(model, cfg.guidance_scale, task.num_classes)
    start = time.perf_counter()
    sample = process.sample(
        sampler_model,
        cfg.n_samples,
        task.length,
        steps=cfg.sample_steps,
        generator=torch.Generator().manual_seed(cfg.seed + 3),
        **cond_kw,
    )
    record["sample_seconds"] = round(time.perf_counter() - start, 3)
    record["nfe"] = sample.nfe
    record.update(sample_statistics(task, sample.tokens, labels, motifs=motifs))
    record["train_seconds"] = round(trained.train_seconds, 3)
    record["final_loss"] = sum(trained.losses[-100:]) / max(len(trained.losses[-100:]), 1)
    record["nonfinite_steps"] = trained.nonfinite_steps
    record["steps"] = cfg.steps
    return record, sample.tokens


def compare(
    cfg: DiscreteConfig, processes: Sequence[str] | None = None
) -> tuple[list[dict[str, Any]], dict[str, torch.Tensor], dict[str, Any], TokenTask]:
    """Train and evaluate every process: ``(records, samples per process, reference statistics, task)``."""
    cfg.validate()
    names = tuple(processes or cfg.processes)
    task = make_task(cfg.task, seed=cfg.seed)
    for name in names:
        make_process(name, task, cfg.sample_steps)  # an unknown or unavailable process fails before any training
    motifs = None
    if task.name == "dna" and task.train_labels is not None and task.num_classes:
        motifs = class_motifs(task.train, task.train_labels, task.num_classes)
    records, samples = [], {}
    for name in names:
        trained = train_process(name, task, cfg)
        record, samples[name] = evaluate_process(trained, task, cfg, motifs)
        records.append(record)
    return records, samples, reference_statistics(task, cfg.n_samples, motifs, cfg.n_eval), task


def config_dict(cfg: DiscreteConfig) -> dict[str, Any]:
    """JSON-ready resolved configuration."""
    d = asdict(cfg)
    d["processes"] = list(cfg.processes)
    return d
