"""Training engine: distributed, exactly resumable, observable (issue 3).

``Trainer(TrainConfig(...)).fit(task, dataset)`` trains a task (``model`` plus
``loss(model, batch, generator) -> (loss, metrics)``) on a map-style dataset, alone, under
``torchrun``, or in ``N`` local processes started with ``launch(entry, *args, nproc=N)``.
"""

from gencore.train.checkpoint import (
    Checkpoint,
    capture_rng_state,
    check_resume_steps,
    find_checkpoints,
    flatten_state,
    load_checkpoint,
    load_latest,
    restore_rng_state,
    save_checkpoint,
    unflatten_state,
)
from gencore.train.config import Task, TrainConfig, holds_settings, identity_changes, run_identity
from gencore.train.data import DataPosition, RankBatches, data_shard
from gencore.train.distributed import (
    DistInfo,
    all_gather_rows,
    average_gradients,
    broadcast_state,
    setup,
    teardown,
)
from gencore.train.ema import EMA
from gencore.train.launch import in_worker, launch
from gencore.train.layersync import LayerSync, layersync_term
from gencore.train.signals import interruption, signal_received, stop_signals
from gencore.train.trainer import Trainer, TrainResult, fit

__all__ = [
    "EMA",
    "Checkpoint",
    "DataPosition",
    "DistInfo",
    "LayerSync",
    "RankBatches",
    "Task",
    "TrainConfig",
    "TrainResult",
    "Trainer",
    "all_gather_rows",
    "average_gradients",
    "broadcast_state",
    "capture_rng_state",
    "check_resume_steps",
    "data_shard",
    "find_checkpoints",
    "fit",
    "flatten_state",
    "holds_settings",
    "identity_changes",
    "in_worker",
    "interruption",
    "launch",
    "layersync_term",
    "load_checkpoint",
    "load_latest",
    "restore_rng_state",
    "run_identity",
    "save_checkpoint",
    "setup",
    "signal_received",
    "stop_signals",
    "teardown",
    "unflatten_state",
]
