"""The training loop of :mod:`gencore.train`: DDP, accumulation, EMA, exact resume, fault policy.

One optimiser step at 0-based index ``s`` on each of ``W`` ranks:

1. ``A = grad_accum_steps`` micro-batches of ``b = B / (W A)`` samples (``B`` the global
   batch); for each, ``loss_m`` = the task's per-sample mean (plus LayerSync when
   configured), backward of ``loss_m / A`` (DDP's all-reduce only on the last, via
   ``no_sync``); DDP averages the gradients over ranks, so ``g = (1/B) sum_i grad l_i``.
2. ``||g||_2`` (clipped to ``clip_grad_norm`` if set), then one all-reduce of
   ``[sum_m loss_m / A, ||g||, stop]`` (the step's only host sync): the global mean loss (non-finite
   as soon as one rank's is) and whether any rank received SIGTERM/SIGINT.
3. A non-finite loss or norm either
   skips the update (``nan_policy="skip"``: no optimiser or EMA update, the model's buffers such as
   BatchNorm statistics are put back as they were before the step, the schedule still advances; 20
   skipped steps in a row, or every step of the fit, raise :class:`~gencore.errors.GenError`) or
   raises :class:`~gencore.errors.GenError` naming the step (``"stop"``); no checkpoint is written
   from a corrupted state.
4. Optimiser update with ``lr * lr_factor(s)`` (linear warm-up, then cosine or constant),
   EMA update with decay ``min(decay, (1+u)/(10+u))``, ``u`` the EMA updates so far (skipped steps do not count).

Checkpoints (``out_dir/checkpoints/step-*``, written by rank 0 through
:func:`gencore.train.checkpoint.save_checkpoint`) hold groups ``model``, ``ema``,
``optimizer``, ``scheduler`` and ``rng-rank{r}`` for every rank ``r`` (rank 0 gathers every
rank's python/numpy/torch RNG states and its loss generator with a collective, so one atomic
folder holds the whole run), and in ``extra`` the data position, EMA update count, world size
and the config. Resuming restores all of it on every rank, so on CPU a run killed at any
point and resumed from its last checkpoint ends bit-identical to an uninterrupted run
(same world size and config; all ranks must see ``out_dir``).

PyTorch DDP: Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
Parallel Training" (VLDB).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import random
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset
from tqdm.auto import tqdm

from gencore.errors import ConfigError, GenError
from gencore.io import ensure_dir
from gencore.train import checkpoint as ckpt
from gencore.train import sharding
from gencore.train.config import Task, TrainConfig, identity_changes
from gencore.train.data import DataPosition, RankBatches, per_rank_batches
from gencore.train.distributed import (
    DistInfo,
    all_reduce_sum,
    barrier,
    gather_state,
    group_size,
    setup,
    teardown,
)
from gencore.train.ema import EMA
from gencore.train.layersync import LayerSync
from gencore.train.metrics_log import MetricsLogger, metrics_to_floats, peak_memory_mb
from gencore.train.signals import signal_received, stop_signals

#: ``nan_policy="skip"`` gives up after this many consecutive skipped steps (or when every step of a fit was skipped)
MAX_SKIPS_IN_A_ROW = 20


@dataclass
class TrainResult:
    """What :meth:`Trainer.fit` returns (on every rank)."""

    step: int  # optimiser steps completed (including skipped ones)
    model: torch.nn.Module  # the trained network (unwrapped)
    ema: torch.nn.Module  # its EMA copy, used for sampling
    interrupted: bool = False  # True when stopped by SIGTERM/SIGINT (a checkpoint was written)
    start_step: int = 0  # steps already done when this fit began (the resumed checkpoint's step)
    skipped_steps: list[int] = field(default_factory=list)  # steps dropped by nan_policy="skip"
    last_loss: float = math.nan
    checkpoint: Path | None = None  # the last checkpoint written (rank 0), if any
    out_dir: Path = Path(".")


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _config_record(cfg: TrainConfig) -> dict[str, Any]:
    out = dataclasses.asdict(cfg)
    out["out_dir"] = str(cfg.out_dir)
    out["resume"] = None if cfg.resume is None else str(cfg.resume)
    return out


def _build_optimizer(cfg: TrainConfig, params: list[torch.nn.Parameter], sharded: bool) -> torch.optim.Optimizer:
    """The configured optimiser; Adam/AdamW use torch's fused kernel when every parameter allows it.

    ``fused=True`` updates all tensors in one kernel (on CPU 3x faster than torch's default
    per-tensor loop for a small network) with the same update rule. It needs plain (unsharded)
    floating-point parameters on CPU or CUDA, so FSDP-sharded runs keep the default.
    """
    fused = not sharded and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    adam_kw = {"lr": cfg.lr, "betas": tuple(cfg.betas), "weight_decay": cfg.weight_decay, "fused": fused or None}
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(params, **adam_kw)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, **adam_kw)
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.betas[0], weight_decay=cfg.weight_decay)


def _match_state_layout(opt: torch.optim.Optimizer) -> None:
    """Give each loaded per-parameter state tensor its parameter's strides.

    A checkpoint stores tensors contiguous, while an optimiser makes its state like its parameter (a transposed
    parameter, e.g. an encoder initialised as ``W.T.clone()``, gets transposed moments). torch's fused Adam reads
    state and parameter element by element in memory order, so after a resume it paired the wrong moments with
    the wrong weights (a resumed SAE drifted by 5e-3 in four steps).
    """
    for group in opt.param_groups:
        for p in group["params"]:
            state = opt.state.get(p, {})
            for key, value in state.items():
                if torch.is_tensor(value) and value.shape == p.shape and value.stride() != p.stride():
                    state[key] = torch.empty_like(p, dtype=value.dtype).copy_(value)


def _grad_norm(params: list[torch.nn.Parameter], clip: float | None) -> torch.Tensor:
    """The global L2 norm of the gradients (before clipping, as ``clip_grad_norm_`` returns it).

    Without clipping, plain tensors of one device and dtype (the common case) take a direct
    ``_foreach_norm``: ``get_total_norm`` would first regroup them by device and dtype in Python,
    which costs more than the norm itself for a small network.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if clip is not None:
        return torch.nn.utils.clip_grad_norm_(params, clip)
    first = grads[0]
    if all(type(g) is torch.Tensor and g.device == first.device and g.dtype == first.dtype for g in grads):
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    return torch.nn.utils.get_total_norm(grads)


class Trainer:
    """Train ``task`` on ``dataset`` with ``config``: ``Trainer(cfg).fit(task, dataset)``.

    Works alone, under ``torchrun``, or in workers started by :func:`gencore.train.launch.launch`
    (the process group is created from the environment when ``WORLD_SIZE > 1``).
    """

    def __init__(self, config: TrainConfig, *, device: str | torch.device | None = None) -> None:
        self.cfg = config.validate()
        self.device = device
        self._superseded: list[Path] = []  # newer checkpoints of the history an explicit resume branches from

    # ------------------------------------------------------------------ checkpoints
    def _save(
        self,
        info: DistInfo,
        step: int,
        model: torch.nn.Module,
        ema: EMA,
        opt: torch.optim.Optimizer,
        sched: torch.optim.lr_scheduler.LRScheduler,
        gen: torch.Generator,
        data: RankBatches,
    ) -> Path | None:
        """Collective: every rank contributes its RNG state; rank 0 writes the folder."""
        rng = {"global": ckpt.capture_rng_state(), "generator": gen.get_state()}
        tensors, meta = ckpt.flatten_state(rng)
        gathered = gather_state(tensors, meta, info)
        if sharding.is_sharded(model):  # collectives: every rank takes part, rank 0 receives
            weights = sharding.full_model_state(model)
            averaged = sharding.full_model_state(ema.module)
            optimizer = sharding.full_optimizer_state(model, opt)
        else:
            weights, averaged, optimizer = model.state_dict(), ema.state_dict(), opt.state_dict()
        path = None
        if info.is_main:
            groups: dict[str, Any] = {
                "model": {k: v.detach() for k, v in weights.items()},
                "ema": {k: v.detach() for k, v in averaged.items()},
                "optimizer": optimizer,
                "scheduler": sched.state_dict(),
            }
            for r, (t, m) in enumerate(gathered):
                groups[f"rng-rank{r}"] = ckpt.unflatten_state(t, m)
            extra = {
                "data_epoch": data.position.epoch,
                "data_micro": data.position.micro,
                "ema_updates": ema.updates,
                "world_size": info.world_size,
                "parallel": "fsdp" if sharding.is_sharded(model) else "ddp",
                "config": _config_record(self.cfg),
            }
            path = ckpt.save_checkpoint(
                Path(self.cfg.out_dir) / "checkpoints", step, groups, extra, keep_last=self.cfg.keep_last
            )
            for abandoned in self._superseded:  # now that this history has a newer checkpoint to resume from
                if abandoned.resolve() != path.resolve():
                    shutil.rmtree(abandoned, ignore_errors=True)
            self._superseded = []
        barrier(info)
        return path

    def _load(self, info: DistInfo) -> ckpt.Checkpoint | None:
        resume = self.cfg.resume
        root = Path(self.cfg.out_dir) / "checkpoints"
        self._superseded = []
        if resume is None:
            if ckpt.find_checkpoints(root):
                raise ConfigError(
                    f"{str(root)!r} already holds checkpoints; pass resume='auto' (--resume auto) to continue that run "
                    "or choose a new out_dir."
                )
            return None
        if resume == "auto":
            ckpt.check_resume_steps(root, self.cfg.steps)
            return ckpt.load_latest(root)
        loaded = ckpt.load_checkpoint(Path(resume))
        if loaded.step > self.cfg.steps:  # as check_resume_steps refuses for resume='auto'
            raise ConfigError(
                f"{str(loaded.path)!r} has already trained {loaded.step} steps, more than the {self.cfg.steps} asked "
                f"for; pass --steps {loaded.step} or more to continue from it, or choose another checkpoint."
            )
        # checkpoints in this run's folder beyond the one resumed belong to the history this run replaces: left in
        # place, a later resume='auto' would continue that abandoned history instead of this one
        self._superseded = [p for p in ckpt.find_checkpoints(root) if ckpt.checkpoint_step(p) > loaded.step]
        if self._superseded and info.is_main:
            warnings.warn(
                f"resuming from step {loaded.step} in {str(root)!r}, which holds newer checkpoints "
                f"({', '.join(p.name for p in self._superseded)}): they are removed at this run's first checkpoint.",
                stacklevel=2,
            )
        return loaded

    def _check_identity(self, loaded: ckpt.Checkpoint) -> None:
        """Refuse to resume a checkpoint whose run was defined by other settings (data, model, objective...)."""
        saved = (loaded.extra.get("config") or {}).get("identity") or {}
        if not saved or not self.cfg.identity:
            return
        changes = identity_changes(saved, self.cfg.identity)
        if changes:
            raise ConfigError(
                f"cannot resume from {str(loaded.path)!r}: the run was trained with other settings ({changes}); "
                "resume with the same settings (the step count may change) or choose a new output folder."
            )

    # ------------------------------------------------------------------ loop
    def fit(self, task: Task, dataset: Dataset) -> TrainResult:
        """Run (or resume) training to ``config.steps`` steps; see the module docstring."""
        if not isinstance(getattr(task, "model", None), torch.nn.Module) or not callable(getattr(task, "loss", None)):
            raise ConfigError("task must have a `model` (torch.nn.Module) and a `loss(model, batch, generator)`.")
        joined = group_size() > 1  # a group the caller set up (several fits in one worker) outlives this fit
        info = setup(self.device)
        try:
            with stop_signals():
                return self._fit(task, dataset, info)
        finally:
            if not joined:
                teardown(info)

    def _fit(self, task: Task, dataset: Dataset, info: DistInfo) -> TrainResult:
        cfg = self.cfg
        out = Path(cfg.out_dir)
        micro = cfg.micro_batch_size(info.world_size)
        # a data set too small is refused before out_dir exists
        per_rank_batches(dataset, micro, info.world_size, cfg.grad_accum_steps)
        if info.is_main:
            ensure_dir(out)
        barrier(info)
        model = task.model.to(info.device)
        fsdp = cfg.parallel == "fsdp" and info.distributed
        loaded = self._load(info)
        if loaded is not None:
            saved_mode = loaded.extra.get("parallel", "ddp")
            if saved_mode != ("fsdp" if fsdp else "ddp"):
                raise ConfigError(
                    f"checkpoint {str(loaded.path)!r} holds {saved_mode} optimiser state; resume it with "
                    f"{'parallel=fsdp in a multi-process run' if saved_mode == 'fsdp' else 'parallel=ddp'}."
                )
            self._check_identity(loaded)
            try:
                model.load_state_dict(loaded.groups["model"])  # the whole state, before any sharding
            except RuntimeError as exc:
                first = next((line.strip() for line in str(exc).splitlines()[1:] if line.strip()), str(exc))
                raise ConfigError(
                    f"checkpoint {str(loaded.path)!r} does not fit this model ({first}); resume with the settings "
                    "it was trained with or choose a new output folder."
                ) from None
        ema = EMA(model, cfg.ema_decay)
        if loaded is not None:
            ema.load_state_dict(loaded.groups["ema"], loaded.extra["ema_updates"])
        template = None
        if fsdp:
            template = copy.deepcopy(model).cpu() if info.is_main else None  # to hand back whole weights
            sharding.shard(model, cfg.fsdp_units)
            sharding.shard(ema.module, cfg.fsdp_units)
        params = [p for p in model.parameters() if p.requires_grad]
        # a skipped step leaves the buffers as they were too: the forward passes of a batch holding NaN would
        # otherwise leave NaN BatchNorm statistics in the model and, through the average, in the EMA copy
        buffers = [b for b in model.buffers() if b.numel()] if cfg.nan_policy == "skip" else []
        buffers_before = [b.detach().clone() for b in buffers]
        opt = _build_optimizer(cfg, params, sharded=fsdp)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cfg.lr_factor(s))
        gen = torch.Generator(device=info.device)

        if loaded is None:
            start = 0
            rank_seed = cfg.seed * 1_000_003 + info.rank
            random.seed(rank_seed)
            np.random.seed(rank_seed % 2**32)  # noqa: NPY002 (the global stream tasks may use)
            torch.manual_seed(rank_seed)
            gen.manual_seed(rank_seed + 17)
            position = DataPosition()
        else:
            start = int(loaded.step)
            ex = loaded.extra
            if ex.get("world_size") != info.world_size:
                warnings.warn(
                    f"resuming a {ex.get('world_size')}-process checkpoint with {info.world_size} processes: "
                    "weights and optimiser continue, but the data order and RNG streams are not those of the "
                    "original run.",
                    stacklevel=2,
                )
            if fsdp:
                sharding.load_optimizer_state(model, opt, loaded.groups["optimizer"])
            else:
                opt.load_state_dict(loaded.groups["optimizer"])
                _match_state_layout(opt)
            sched.load_state_dict(loaded.groups["scheduler"])
            # the saved learning rates are the old schedule's: a resumed run with other steps, warm-up or lr
            # follows its own (an unchanged config gives the same numbers, LambdaLR's own expression)
            sched.base_lrs = [cfg.lr] * len(opt.param_groups)
            for group in opt.param_groups:
                group["initial_lr"] = cfg.lr
                group["lr"] = cfg.lr * cfg.lr_factor(sched.last_epoch)
            rng = loaded.groups.get(f"rng-rank{info.rank}")
            if rng is not None:
                ckpt.restore_rng_state(rng["global"])
                gen.set_state(rng["generator"].to("cpu"))
            else:
                gen.manual_seed(cfg.seed * 1_000_003 + info.rank + 17 + start)
            position = DataPosition(int(ex["data_epoch"]), int(ex["data_micro"]))

        data = RankBatches(
            dataset,
            micro_batch_size=micro,
            rank=info.rank,
            world_size=info.world_size,
            seed=cfg.seed,
            num_workers=cfg.num_workers,
            pin_memory=info.device.type == "cuda",
            position=position,
            accum=cfg.grad_accum_steps,
        )
        net: torch.nn.Module = model
        if info.distributed and not fsdp:
            net = DistributedDataParallel(
                model,
                device_ids=[info.device.index] if info.device.type == "cuda" else None,
                find_unused_parameters=cfg.find_unused_parameters,
            )
            if loaded is None:  # DDP gave every rank rank 0's weights: the average starts from them too
                ema.module.load_state_dict(model.state_dict())
        loss_fn = task.loss
        layersync = None
        if cfg.layersync_pairs:
            layersync = LayerSync(model, cfg.layersync_pairs, cfg.layersync_weight)
            loss_fn = layersync.wrap_loss(task.loss)
        use_bf16 = cfg.precision == "bf16" and (info.device.type == "cuda" or cfg.cpu_autocast)
        autocast = functools.partial(torch.autocast, info.device.type, dtype=torch.bfloat16)
        if cfg.precision == "bf16" and not use_bf16 and info.is_main:
            warnings.warn("precision='bf16' ignored on CPU (set cpu_autocast=True to force it).", stacklevel=2)

        logger = MetricsLogger(out, enabled=info.is_main, resume_step=None if loaded is None else start)
        bar = tqdm(
            total=cfg.steps,
            initial=start,
            desc="train",
            disable=None if (cfg.progress and info.is_main) else True,
            dynamic_ncols=True,
        )
        result = TrainResult(step=start, start_step=start, model=model, ema=ema.module, out_dir=out)
        last_saved = start if loaded is not None else -1
        t_last, steps_since = time.perf_counter(), 0
        has_sample = callable(getattr(task, "sample", None))
        streak = 0  # consecutive skipped steps
        try:
            model.train()
            for step in range(start, cfg.steps):
                opt.zero_grad(set_to_none=True)
                if buffers:
                    torch._foreach_copy_(buffers_before, buffers)
                accum = cfg.grad_accum_steps
                loss_acc: torch.Tensor | None = None  # stays on the device: no host sync until the step's check
                metric_acc: dict[str, Any] = {}
                for m in range(accum):
                    batch = _to_device(next(data), info.device)
                    last = m == accum - 1
                    if fsdp:
                        model.set_requires_gradient_sync(last)  # type: ignore[operator]
                        sync = contextlib.nullcontext()
                    else:
                        sync = contextlib.nullcontext() if (last or not info.distributed) else net.no_sync()
                    with sync:
                        with autocast() if use_bf16 else contextlib.nullcontext():
                            loss, metrics = loss_fn(net, batch, gen)
                        if loss.ndim != 0:
                            raise ConfigError(f"task.loss must return a scalar, got shape {tuple(loss.shape)}.")
                        (loss.float() / accum if accum > 1 else loss.float()).backward()
                    part = loss.detach().float()
                    loss_acc = part if loss_acc is None else loss_acc + part
                    for k, v in metrics.items():
                        v = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
                        metric_acc[k] = v if accum == 1 else metric_acc.get(k, 0.0) + v / accum
                if accum > 1:
                    loss_acc = loss_acc / accum
                gnorm = _grad_norm(params, cfg.clip_grad_norm)
                if fsdp:
                    gnorm = sharding.full_tensor(gnorm)
                gnorm = gnorm.to(info.device, torch.float32)
                # one host sync per step. The grad norm is already global (DDP/FSDP reduced the gradients); the
                # summed loss is non-finite as soon as one rank's is, so every rank takes the same decision.
                if info.distributed:
                    signalled = torch.tensor(float(signal_received() is not None), device=info.device)
                    loss_sum, gnorm_sum, stop_votes = all_reduce_sum(torch.stack([loss_acc, gnorm, signalled]), info)
                    loss_value, gnorm_value = float(loss_sum) / info.world_size, float(gnorm_sum) / info.world_size
                    stop = float(stop_votes) > 0
                else:
                    loss_value, gnorm_value = torch.stack([loss_acc, gnorm]).tolist()
                    stop = signal_received() is not None
                finite = math.isfinite(loss_value) and math.isfinite(gnorm_value)
                mean_loss = loss_value if finite else math.nan
                if finite:
                    opt.step()
                    ema.update(model)
                    streak = 0
                elif cfg.nan_policy == "stop":
                    raise GenError(
                        f"non-finite loss or gradient at step {step} (loss {loss_value}, "
                        f"grad norm {gnorm_value}); stopping as nan_policy='stop' asks "
                        "(no checkpoint written from this state)."
                    )
                else:
                    opt.zero_grad(set_to_none=True)
                    if buffers:
                        torch._foreach_copy_(buffers, buffers_before)
                    result.skipped_steps.append(step)
                    streak += 1
                    if streak >= MAX_SKIPS_IN_A_ROW or streak == cfg.steps - start:
                        # a model whose weights no skipped step changes keeps failing: stop instead of finishing a
                        # run (and saving weights) that never trained
                        raise GenError(
                            f"steps {step + 1 - streak} to {step} were all skipped for a non-finite loss or gradient "
                            f"(last loss {loss_value}, grad norm {gnorm_value}): the model is not training; check "
                            "the data and the settings (learning rate, loss weights). No checkpoint was written "
                            "from this state."
                        )
                lr_used = opt.param_groups[0]["lr"]
                sched.step()
                done = step + 1
                result.step, result.last_loss = done, mean_loss
                steps_since += 1
                bar.update(1)
                if done % cfg.log_every == 0 or done == cfg.steps or not finite:  # the same on every rank
                    task_metrics = {k: v for k, v in metric_acc.items() if k not in ("step", "loss", "lr")}
                    if info.distributed and task_metrics:  # averaged over ranks, as the loss is
                        keys = sorted(task_metrics)
                        on = info.device  # metrics may be floats or tensors on the model's device
                        local = [torch.as_tensor(task_metrics[k], dtype=torch.float32, device=on) for k in keys]
                        total = all_reduce_sum(torch.stack(local), info) / info.world_size
                        task_metrics = dict(zip(keys, total.tolist()))
                    now = time.perf_counter()
                    rate = cfg.global_batch_size * steps_since / max(now - t_last, 1e-9)
                    t_last, steps_since = now, 0
                    record = {
                        "step": done,
                        "loss": mean_loss,
                        "lr": lr_used,
                        "grad_norm": gnorm_value,
                        "samples_per_s": rate,
                        "peak_memory_mb": peak_memory_mb(info.device),
                        "skipped": not finite,
                        **metrics_to_floats(task_metrics),
                    }
                    logger.log(record)
                    bar.set_postfix(loss=f"{mean_loss:.4g}", sps=f"{rate:.0f}")
                if has_sample and cfg.sample_every and done % cfg.sample_every == 0 and (info.is_main or fsdp):
                    with torch.no_grad():
                        task.sample(ema.module, done, out / "samples")  # type: ignore[attr-defined]
                if stop or done == cfg.steps or (cfg.checkpoint_every and done % cfg.checkpoint_every == 0):
                    result.checkpoint = self._save(info, done, model, ema, opt, sched, gen, data)
                    last_saved = done
                if stop:
                    result.interrupted = True
                    break
            if result.step == cfg.steps and last_saved != cfg.steps and cfg.steps > start:
                result.checkpoint = self._save(info, cfg.steps, model, ema, opt, sched, gen, data)
            if fsdp:  # hand back whole (unsharded) networks on rank 0
                weights, averaged = sharding.full_model_state(model), sharding.full_model_state(ema.module)
                if template is not None:
                    result.ema = copy.deepcopy(template).requires_grad_(False).eval()
                    result.ema.load_state_dict(averaged)
                    template.load_state_dict(weights)
                    result.model = template
        finally:
            bar.close()
            logger.close()
            if layersync is not None:
                layersync.remove()
        return result


def fit(task: Task, dataset: Dataset, config: TrainConfig, *, device: str | torch.device | None = None) -> TrainResult:
    """Shorthand for ``Trainer(config, device=device).fit(task, dataset)``."""
    return Trainer(config, device=device).fit(task, dataset)
