"""Engine behaviour that no other test pinned: each test here fails for a plausible one-line bug that every other
test let through (EMA of buffers, the logged learning rate, the last step's record, a fresh run's log, a signal's
checkpoint). Every expected value is computed by hand from the documented rule, not read from the engine."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch

from gencore.errors import ConfigError
from gencore.train import TrainConfig, Trainer, find_checkpoints, save_checkpoint
from gencore.train.ema import EMA
from gencore.train.example import RegressionTask, regression_data


def _cfg(tmp: Path, **kw) -> TrainConfig:
    base = {"steps": 6, "global_batch_size": 16, "lr": 1e-2, "ema_decay": 0.9, "progress": False, "out_dir": tmp}
    return TrainConfig(**(base | kw))


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_ema_averages_float_buffers_and_copies_integer_buffers() -> None:
    """BatchNorm running statistics follow the same EMA recursion as the weights; the batch counter is copied."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).train()
    ema = EMA(model, decay=0.5)
    ref_mean = model[1].running_mean.clone()
    ref_var = model[1].running_var.clone()
    for s in range(5):
        model(torch.randn(8, 3) * (s + 1) + s)  # moves the model's running statistics
        d = min(0.5, (1 + s) / (10 + s))
        ref_mean = d * ref_mean + (1 - d) * model[1].running_mean
        ref_var = d * ref_var + (1 - d) * model[1].running_var
        ema.update(model)
    bn = ema.module[1]
    torch.testing.assert_close(bn.running_mean, ref_mean, rtol=0, atol=1e-6)
    torch.testing.assert_close(bn.running_var, ref_var, rtol=0, atol=1e-6)
    assert not torch.equal(bn.running_mean, model[1].running_mean)  # averaged, not copied
    assert int(bn.num_batches_tracked) == int(model[1].num_batches_tracked) == 5


def test_logged_lr_is_the_lr_of_that_steps_update_and_the_last_step_is_logged(tmp_path: Path) -> None:
    """Record ``step = s + 1`` carries ``lr * factor(s)``: warm-up ``(s + 1) / W``, then cosine over the rest, whether
    or not an earlier step was skipped."""
    steps, warmup, lr = 7, 3, 1e-2
    res = Trainer(_cfg(tmp_path, steps=steps, warmup_steps=warmup, log_every=2), device="cpu").fit(
        RegressionTask(nan_at=(2,)), regression_data(64)
    )
    assert res.skipped_steps == [2]  # a skipped step still advances the schedule
    records = _records(tmp_path)
    assert [r["step"] for r in records] == [2, 3, 4, 6, 7]  # 3 was skipped; 7 is not a multiple of 2 but the last

    def factor(s: int) -> float:
        return (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))

    assert [r["lr"] for r in records] == pytest.approx([lr * factor(r["step"] - 1) for r in records], rel=1e-12)


def test_a_fresh_run_starts_a_new_metrics_log(tmp_path: Path) -> None:
    """A run killed before its first checkpoint leaves a log but no checkpoint: the next fresh run replaces it."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 123.0}) + "\n")
    Trainer(_cfg(tmp_path, steps=2, log_every=1), device="cpu").fit(RegressionTask(), regression_data(64))
    records = _records(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["loss"] != 123.0


class _SignalledTask(RegressionTask):
    """Sends this process SIGTERM during loss call ``at`` (0-based), as a scheduler's preemption would."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def loss(self, model, batch, generator):
        if self.calls == self.at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().loss(model, batch, generator)


def test_sigterm_finishes_the_step_checkpoints_it_and_stops(tmp_path: Path) -> None:
    full = Trainer(_cfg(tmp_path / "full", steps=6), device="cpu").fit(RegressionTask(), regression_data(64))
    part = tmp_path / "part"
    got = Trainer(_cfg(part, steps=6), device="cpu").fit(_SignalledTask(at=2), regression_data(64))
    assert (got.interrupted, got.step) == (True, 3)  # the signalled step (index 2) is completed, then it stops
    assert [p.name for p in find_checkpoints(part / "checkpoints")] == ["step-000000003"]
    resumed = Trainer(_cfg(part, steps=6, resume="auto"), device="cpu").fit(RegressionTask(), regression_data(64))
    assert (resumed.start_step, resumed.step, resumed.interrupted) == (3, 6, False)
    for a, b in zip(resumed.model.state_dict().values(), full.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("field", ["weight_decay", "layersync_weight"])
def test_an_infinite_weight_is_refused_by_validate(field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**{field: math.inf}).validate()


def test_a_smaller_keep_last_prunes_every_surplus_checkpoint_at_once(tmp_path: Path) -> None:
    for s in range(1, 6):
        save_checkpoint(tmp_path, s, {"m": {"w": torch.zeros(1)}}, keep_last=None)
    save_checkpoint(tmp_path, 6, {"m": {"w": torch.zeros(1)}}, keep_last=2)
    assert [p.name for p in find_checkpoints(tmp_path)] == ["step-000000006", "step-000000005"]
