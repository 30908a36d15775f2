"""Training configuration and the task protocol of :mod:`gencore.train`.

A run is described by one frozen :class:`TrainConfig` and one *task*: an object with a
``model`` (``torch.nn.Module``) and a ``loss(model, batch, generator) -> (loss, metrics)``
method, optionally ``sample(model_ema, step, out_dir)`` for periodic evaluation.

Batch semantics (global batch, as in large-scale practice, e.g. Goyal et al. 2017,
"Accurate, large minibatch SGD"): ``global_batch_size`` samples contribute to every
optimiser step. With ``W`` processes and ``A`` accumulation steps each process sees
micro-batches of ``b = global_batch_size / (W * A)`` samples; the loss of a micro-batch is
its per-sample mean, each backward is scaled by ``1/A`` and DDP averages over ``W``, so the
gradient is exactly the per-sample mean over the global batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from gencore.checks import check_int, check_seed
from gencore.errors import ConfigError

OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "constant")
PRECISIONS = ("fp32", "bf16")
NAN_POLICIES = ("skip", "stop")
PARALLELISMS = ("ddp", "fsdp")


DEFAULTS_KEY = "__defaults__"  # where an identity built from a dataclass keeps its settings' defaults


def run_identity(settings: Any, exclude: tuple[str, ...] = (), prefix: str = "") -> dict[str, Any]:
    """The settings that define a run, as JSON values, for :attr:`TrainConfig.identity`.

    ``settings``: a dataclass or a mapping of the task's configuration; ``exclude``: the fields a
    resumed run may change (the step count, progress bars, sampling cadence, ...). A dataclass's
    field defaults travel with its identity under :data:`DEFAULTS_KEY`, for :func:`identity_changes`.
    ``prefix`` is put before every setting's name (and its default's), e.g. ``"config."`` for settings that
    sit beside others in one identity.
    """
    if dataclasses.is_dataclass(settings):
        items = dataclasses.asdict(settings)
        defaults = {
            f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(settings)
            if f.name not in exclude and not (f.default is f.default_factory is dataclasses.MISSING)
        }
        items[DEFAULTS_KEY] = {prefix + k: v for k, v in defaults.items()}
    else:
        items = dict(settings)
    kept = {(k if k == DEFAULTS_KEY else prefix + k): v for k, v in items.items() if k not in exclude}
    return json.loads(json.dumps(kept, default=str))


def identity_changes(saved: dict[str, Any], current: dict[str, Any], limit: int = 4) -> str:
    """``"name: saved -> current; ..."`` for the settings that differ between two identities, sorted by name and
    cut after ``limit`` of them; ``""`` when they agree.

    A setting that ``saved`` lacks is a setting added in a later version, next to a checkpoint written before it
    existed: it agrees when ``current`` holds the setting's default (from ``current``'s :data:`DEFAULTS_KEY`, as
    :func:`run_identity` records it for a dataclass; ``None`` otherwise), since a setting is added with the
    behaviour of the runs before it as its default. (Changing that default later would make the runs written
    before the setting existed agree with the new default; runs written since record the setting and are compared
    by value.) A setting only ``saved`` holds is not compared: the current run no longer counts it among those
    that define a run (a later version made it resumable, like a stage's step count, or dropped it).
    """
    saved, current = run_identity(saved), run_identity(current)
    defaults = current.pop(DEFAULTS_KEY, None) or {}
    missing = "(unset)"
    changes = [
        f"{n}: {saved.get(n, missing)!r} -> {current[n]!r}"
        for n in sorted(current)
        if (saved[n] if n in saved else defaults.get(n)) != current[n]
    ]
    return "; ".join(changes[:limit]) + ("; ..." if len(changes) > limit else "")


def holds_settings(saved: dict[str, Any], current: Any, exclude: tuple[str, ...] = ("progress",)) -> bool:
    """True when a finished run's stored settings ``saved`` (which may hold more keys) agree with ``current`` on
    every setting of ``current`` but ``exclude``: resuming that run would train nothing."""
    now = run_identity(current, exclude)
    return not identity_changes({k: v for k, v in run_identity(saved).items() if k in now}, now)


@runtime_checkable
class Task(Protocol):
    """What the trainer trains.

    ``model``: the network (its parameters are optimised; the trainer wraps it in DDP).
    ``loss(model, batch, generator)``: ``model`` is the (possibly DDP-wrapped) network - call
    it as ``model(...)`` so that gradients are synchronised; ``batch`` is the collated
    micro-batch moved to the run's device; ``generator`` is this rank's ``torch.Generator``
    (all randomness of the loss should come from it). Returns a scalar loss, the *mean* over
    the micro-batch, and a dict of float-able metrics: prefer detached 0-dim tensors, which the
    trainer averages on the device and reads back only on logging steps (a Python float costs a
    host sync on every step).
    Optional ``sample(model_ema, step, out_dir)`` is called on rank 0 every
    ``TrainConfig.sample_every`` steps with the EMA network in eval mode under ``no_grad``.
    """

    model: torch.nn.Module

    def loss(
        self, model: torch.nn.Module, batch: Any, generator: torch.Generator
    ) -> tuple[torch.Tensor, dict[str, Any]]: ...


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Settings of one training run (see the module docstring for batch semantics)."""

    steps: int = 1000  # optimiser steps in the whole run
    global_batch_size: int = 256  # samples per optimiser step, over all processes
    grad_accum_steps: int = 1  # micro-batches per step and process
    optimizer: str = "adamw"  # adamw | adam | sgd
    lr: float = 1e-3
    weight_decay: float = 0.0
    betas: tuple[float, ...] = (0.9, 0.999)  # adam(w); sgd uses betas[0] as momentum
    warmup_steps: int = 0  # linear warm-up: lr * (s + 1) / warmup_steps for s < warmup_steps
    schedule: str = "cosine"  # after warm-up: cosine decay to 0 at `steps`, or constant
    clip_grad_norm: float | None = None  # max global L2 norm of the gradient; None: no clipping
    ema_decay: float = 0.999  # EMA decay, warmed up as min(ema_decay, (1 + s) / (10 + s))
    precision: str = "fp32"  # fp32 | bf16 (autocast; on CPU only when cpu_autocast)
    cpu_autocast: bool = False  # allow bf16 autocast on CPU (off by default: slow, inexact)
    checkpoint_every: int = 0  # steps between checkpoints; 0: only at the end / on a signal
    keep_last: int = 3  # checkpoints kept
    nan_policy: str = "skip"  # skip: drop a step with a non-finite loss/gradient; stop: raise GenError
    log_every: int = 10  # steps between metrics.jsonl records
    sample_every: int = 0  # steps between task.sample calls (rank 0, EMA model); 0: never
    seed: int = 0
    out_dir: str | Path = "runs/train"
    resume: str | Path | None = None  # None | "auto" (newest valid in out_dir/checkpoints) | a folder
    progress: bool = True  # tqdm bar on rank 0 (hidden automatically when not a TTY)
    num_workers: int = 0  # DataLoader worker processes per rank
    layersync_pairs: tuple[tuple[str, str], ...] = ()  # (weak, strong) module names; () disables
    layersync_weight: float = 0.2
    find_unused_parameters: bool = False  # passed to DDP
    parallel: str = "ddp"  # ddp | fsdp (FSDP2 fully_shard; see gencore.train.sharding)
    fsdp_units: tuple[str, ...] = ()  # class names of submodules sharded as their own units (fsdp)
    # the task's settings that define the run (data, architecture, objective, ...; JSON values): stored in
    # every checkpoint, and a resume that asks for different ones is refused (see `run_identity`; a setting
    # added after the checkpoint was written agrees at its default)
    identity: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> TrainConfig:
        """Check every field, raising :class:`ConfigError` naming the first bad one."""
        # whole numbers only: a float passed `< 1` and then failed with a traceback (steps=4.0 in range()), after the
        # whole run (keep_last=1.5 at the first save), or silently (checkpoint_every=1.5 saved at step 3)
        for name in ("steps", "global_batch_size", "grad_accum_steps", "keep_last", "log_every"):
            check_int(getattr(self, name), name, low=1)
        for name in ("warmup_steps", "checkpoint_every", "sample_every", "num_workers"):
            check_int(getattr(self, name), name, low=0)
        for name, value, options in (
            ("optimizer", self.optimizer, OPTIMIZERS),
            ("schedule", self.schedule, SCHEDULES),
            ("precision", self.precision, PRECISIONS),
            ("nan_policy", self.nan_policy, NAN_POLICIES),
            ("parallel", self.parallel, PARALLELISMS),
        ):
            if value not in options:
                raise ConfigError(f"{name} must be one of {', '.join(options)}, got {value!r}.")
        check_seed(self.seed)  # each rank's seeds are seed * 1_000_003 + rank, within torch's 64 bits
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a positive number, got {self.lr}.")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):  # inf trained to inf weights
            raise ConfigError(f"weight_decay must be a non-negative finite number, got {self.weight_decay}.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be in [0, 1), got {self.ema_decay}.")
        if self.clip_grad_norm is not None and not self.clip_grad_norm > 0:
            raise ConfigError(f"clip_grad_norm must be positive or None, got {self.clip_grad_norm}.")
        if len(self.betas) != 2 or not all(0.0 <= b < 1.0 for b in self.betas):
            raise ConfigError(f"betas must be two numbers in [0, 1), got {self.betas}.")
        if self.warmup_steps > self.steps:
            raise ConfigError(f"warmup_steps ({self.warmup_steps}) must not exceed steps ({self.steps}).")
        if not (math.isfinite(self.layersync_weight) and self.layersync_weight >= 0):
            raise ConfigError(f"layersync_weight must be a non-negative finite number, got {self.layersync_weight}.")
        for pair in self.layersync_pairs:
            if len(pair) != 2 or not all(isinstance(n, str) for n in pair):
                raise ConfigError(f"layersync_pairs must hold (weak, strong) module-name pairs, got {pair!r}.")
        if isinstance(self.resume, str) and self.resume != "auto" and not self.resume:
            raise ConfigError("resume must be None, 'auto' or a checkpoint folder, got ''.")
        if self.resume not in (None, "auto") and not Path(self.resume).is_dir():
            raise ConfigError(f"checkpoint folder {str(self.resume)!r} given to resume does not exist.")
        return self

    def micro_batch_size(self, world_size: int) -> int:
        """Per-process micro-batch ``global_batch_size / (world_size * grad_accum_steps)``."""
        denom = world_size * self.grad_accum_steps
        if world_size < 1 or self.global_batch_size % denom:
            raise ConfigError(
                f"global_batch_size ({self.global_batch_size}) must be divisible by world size ({world_size}) "
                f"x grad_accum_steps ({self.grad_accum_steps}) = {denom}."
            )
        return self.global_batch_size // denom

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``lr`` for the update taken at 0-based ``step``.

        ``(s + 1) / W`` for ``s < W`` (warm-up), then ``1`` (constant) or
        ``(1 + cos(pi (s - W) / (steps - W))) / 2`` (cosine, reaching 0 after the last step).
        """
        w = self.warmup_steps
        if step < w:
            return (step + 1) / w
        if self.schedule == "constant":
            return 1.0
        span = max(self.steps - w, 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(step - w, span) / span))
