"""Single-process engine checks: accumulation, exact in-process resume, NaN policies, metrics, LayerSync wiring."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import IterableDataset

from gencore.errors import ConfigError, GenError
from gencore.train import (
    DataPosition,
    RankBatches,
    TrainConfig,
    Trainer,
    find_checkpoints,
    holds_settings,
    identity_changes,
    run_identity,
)
from gencore.train.config import DEFAULTS_KEY
from gencore.train.data import data_shard
from gencore.train.example import RegressionTask, regression_data
from gencore.train.trainer import MAX_SKIPS_IN_A_ROW


def _cfg(tmp: Path, **kw) -> TrainConfig:
    base = {
        "steps": 8,
        "global_batch_size": 16,
        "lr": 1e-2,
        "warmup_steps": 2,
        "ema_decay": 0.9,
        "progress": False,
        "log_every": 1,
        "out_dir": tmp,
    }
    return TrainConfig(**(base | kw))


def _run(cfg: TrainConfig, **task_kw):
    return Trainer(cfg, device="cpu").fit(RegressionTask(**task_kw), regression_data(64))


def _same(a: torch.nn.Module, b: torch.nn.Module, exact: bool = True) -> None:
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        if exact:
            assert torch.equal(x, y), k
        else:
            torch.testing.assert_close(x, y, rtol=0, atol=1e-6)


def test_accumulation_matches_one_big_batch(tmp_path: Path) -> None:
    # SGD: the update scales with the gradient, so a wrong 1/A would show (Adam would hide it)
    one = _run(_cfg(tmp_path / "a", grad_accum_steps=1, steps=6, optimizer="sgd", lr=0.2))
    four = _run(_cfg(tmp_path / "b", grad_accum_steps=4, steps=6, optimizer="sgd", lr=0.2))
    _same(one.model, four.model, exact=False)
    _same(one.ema, four.ema, exact=False)


def test_resume_from_checkpoint_is_bit_identical(tmp_path: Path) -> None:
    kw = {"noise": 0.3, "dropout": 0.2}
    full = _run(_cfg(tmp_path / "full", steps=10, clip_grad_norm=0.5, checkpoint_every=4), **kw)
    part = tmp_path / "part"
    first = _run(_cfg(part, steps=10, clip_grad_norm=0.5, checkpoint_every=4), **kw)
    _same(first.model, full.model)
    # forget everything after step 4 (64 samples / 16 = 4 steps per epoch: resume crosses an epoch boundary)
    for p in find_checkpoints(part / "checkpoints")[:-1]:
        shutil.rmtree(p)
    assert [p.name for p in find_checkpoints(part / "checkpoints")] == ["step-000000004"]
    resumed = _run(_cfg(part, steps=10, clip_grad_norm=0.5, checkpoint_every=4, resume="auto"), **kw)
    assert (resumed.start_step, resumed.step, first.start_step) == (4, 10, 0)
    _same(resumed.model, full.model)
    _same(resumed.ema, full.ema)
    steps = [json.loads(line)["step"] for line in (part / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))


@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_resume_is_bit_identical_for_a_transposed_parameter(tmp_path: Path, optimizer: str) -> None:
    """A parameter stored transposed (``W.T.clone()``, as an SAE's encoder is initialised) gets transposed optimiser
    moments, but a checkpoint gives them back contiguous; torch's fused Adam pairs moments and weights in memory
    order, so the resumed run drifted (5e-3 on an SAE's encoder in four steps) until the loaded state was given
    its parameter's strides."""

    def run(out: Path, **kw):
        task = RegressionTask()
        first = task.model[0]
        first.weight = torch.nn.Parameter(first.weight.detach().T.contiguous().T.clone())
        assert not first.weight.is_contiguous()
        return Trainer(_cfg(out, steps=8, optimizer=optimizer, checkpoint_every=4, **kw), device="cpu").fit(
            task, regression_data(64)
        )

    full = run(tmp_path / "full")
    run(tmp_path / "part")
    shutil.rmtree(find_checkpoints(tmp_path / "part" / "checkpoints")[0])  # newest first: forget step 8
    resumed = run(tmp_path / "part", resume="auto")
    assert resumed.start_step == 4
    _same(resumed.model, full.model)


class _Augmented(torch.utils.data.Dataset):
    """Rows read one at a time (the DataLoader path) with an augmentation drawn from the global torch RNG."""

    def __init__(self, n: int) -> None:
        self.rows = regression_data(n)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        x, y = self.rows[i]
        return x + 0.1 * torch.randn(x.shape), y


def test_resume_mid_epoch_with_accumulation_and_augmentation_is_bit_identical(tmp_path: Path) -> None:
    """44 samples in micro-batches of 4, 2 per step: 5 whole steps (10 micro-batches) per epoch, the last 4 samples
    dropped, so step 6's checkpoint sits one step (2 micro-batches) into epoch 1; the augmentation draws must continue
    exactly too."""

    def run(out: Path, **kw):
        cfg = _cfg(out, steps=11, global_batch_size=8, grad_accum_steps=2, clip_grad_norm=0.5, checkpoint_every=3)
        cfg = dataclasses.replace(cfg, **kw)
        return Trainer(cfg, device="cpu").fit(RegressionTask(noise=0.3, dropout=0.2), _Augmented(44))

    full = run(tmp_path / "full")
    run(tmp_path / "part")
    for p in find_checkpoints(tmp_path / "part" / "checkpoints"):
        if p.name != "step-000000006":
            shutil.rmtree(p)
    state = json.loads((tmp_path / "part" / "checkpoints" / "step-000000006" / "state.json").read_text())
    assert (state["extra"]["data_epoch"], state["extra"]["data_micro"]) == (1, 2)
    resumed = run(tmp_path / "part", resume="auto")
    _same(resumed.model, full.model)
    _same(resumed.ema, full.ema)
    logs = [
        [json.loads(line) for line in (tmp_path / k / "metrics.jsonl").read_text().splitlines()]
        for k in ("full", "part")
    ]
    assert [(r["step"], r["loss"], r["lr"]) for r in logs[1]] == [(r["step"], r["loss"], r["lr"]) for r in logs[0]]


def test_a_data_set_smaller_than_a_batch_is_refused_before_out_dir_exists(tmp_path: Path) -> None:
    """A refused run leaves nothing behind: a corrected command must not find a half-made output folder."""
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="the dataset has 8 samples, fewer than one micro-batch"):
        Trainer(_cfg(out), device="cpu").fit(RegressionTask(), regression_data(8))
    assert not out.exists()


def test_resuming_with_fewer_steps_than_done_is_refused(tmp_path: Path) -> None:
    """The model would stay at the checkpoint's step while the caller recorded the smaller count."""
    _run(_cfg(tmp_path, steps=4, checkpoint_every=2))
    with pytest.raises(ConfigError, match=r"step-000000004' has already trained 4 steps, more than the 3 asked for"):
        _run(_cfg(tmp_path, steps=3, resume="auto"))
    assert _run(_cfg(tmp_path, steps=4, resume="auto")).step == 4  # the same count, or more, continues


def test_resuming_a_named_checkpoint_with_fewer_steps_than_done_is_refused(tmp_path: Path) -> None:
    """As for resume='auto': the run returned the checkpoint's step-8 model as a 5-step run, and wrote nothing."""
    _run(_cfg(tmp_path / "a", steps=8, checkpoint_every=4))
    named = tmp_path / "a" / "checkpoints" / "step-000000008"
    with pytest.raises(ConfigError, match=r"step-000000008' has already trained 8 steps, more than the 5 asked for"):
        _run(_cfg(tmp_path / "b", steps=5, resume=named))
    assert _run(_cfg(tmp_path / "c", steps=8, resume=tmp_path / "a" / "checkpoints" / "step-000000004")).step == 8


def test_branching_from_an_older_checkpoint_in_place_replaces_the_newer_history(tmp_path: Path) -> None:
    """Resuming step 4 of a run that reached step 8, in its own folder, left the abandoned step-8 checkpoint as the
    newest: a later resume='auto' continued that history instead of the one just trained."""
    _run(_cfg(tmp_path, steps=8, checkpoint_every=4, keep_last=5))
    root = tmp_path / "checkpoints"
    with pytest.warns(UserWarning, match=r"newer checkpoints \(step-000000008\): they are removed at this run's first"):
        branch = _run(_cfg(tmp_path, steps=6, checkpoint_every=4, keep_last=5, resume=root / "step-000000004"))
    assert [p.name for p in find_checkpoints(root)] == ["step-000000006", "step-000000004"]
    resumed = _run(_cfg(tmp_path, steps=6, keep_last=5, resume="auto"))
    _same(resumed.model, branch.model)


def test_existing_checkpoints_need_resume(tmp_path: Path) -> None:
    _run(_cfg(tmp_path, steps=2))
    with pytest.raises(ConfigError, match="resume"):
        _run(_cfg(tmp_path, steps=2))


def test_resume_refuses_a_run_defined_by_other_settings(tmp_path: Path) -> None:
    identity = run_identity({"data": "moons", "hidden": 16, "steps": 4, "layers": (2, 3)}, exclude=("steps",))
    assert identity == {"data": "moons", "hidden": 16, "layers": [2, 3]}  # JSON values, steps left out
    _run(_cfg(tmp_path, steps=4, identity=identity))
    saved = tmp_path / "checkpoints"
    with pytest.raises(ConfigError, match=r"trained with other settings \(data: 'moons' -> 'rings'\)"):
        _run(_cfg(tmp_path, steps=6, resume="auto", identity=identity | {"data": "rings"}))
    with pytest.raises(ConfigError, match=r"hidden: 16 -> 32; new: '\(unset\)' -> 1"):
        _run(_cfg(tmp_path, steps=6, resume="auto", identity=identity | {"hidden": 32, "new": 1}))
    assert [p.name for p in find_checkpoints(saved)] == ["step-000000004"]  # nothing was trained or written
    # a checkpoint whose tensors do not fit the model is one sentence too (runs without an identity)
    with pytest.raises(ConfigError, match=r"does not fit this model \(size mismatch for 0.weight"):
        _run(_cfg(tmp_path, steps=6, resume="auto"), hidden=32)
    # a setting added later and off (None) matches a checkpoint written before it existed
    resumed = _run(_cfg(tmp_path, steps=6, resume="auto", identity=identity | {"frames": None}))
    assert resumed.step == 6  # the step count may change too
    # a setting the run no longer counts as defining (it became resumable) is not compared with the saved one
    without_layers = {k: v for k, v in identity.items() if k != "layers"}
    assert _run(_cfg(tmp_path, steps=7, resume="auto", identity=without_layers)).step == 7
    with pytest.raises(ConfigError, match=r"hidden: 16 -> 8"):  # the others still are
        _run(_cfg(tmp_path, steps=8, resume="auto", identity=without_layers | {"hidden": 8}))


def test_holds_settings_ignores_stored_extras_progress_and_new_unset_settings() -> None:
    saved = {"data": "moons", "steps": 4, "progress": True, "image_shape": [1, 8, 8]}  # a run record, with extras
    assert holds_settings(saved, {"data": "moons", "steps": 4, "progress": False, "frames": None})
    assert not holds_settings(saved, {"data": "moons", "steps": 6})  # more steps: there is more to train
    assert not holds_settings(saved, {"data": "rings", "steps": 4})
    assert not holds_settings(saved, {"data": "moons", "steps": 4, "frames": 8})


@dataclasses.dataclass(frozen=True)
class _Settings:
    data: str
    hidden: int = 16
    layers: tuple[int, ...] = (2, 3)
    widths: list[int] = dataclasses.field(default_factory=lambda: [8])
    steps: int = 4


def test_a_setting_added_later_agrees_at_its_default() -> None:
    """A checkpoint written before a setting existed lacks it: resuming agrees while the setting keeps its default
    (the behaviour runs had before it was added), and names it when it does not."""
    identity = run_identity(_Settings("moons"), exclude=("steps",))
    assert identity[DEFAULTS_KEY] == {"hidden": 16, "layers": [2, 3], "widths": [8]}  # JSON values; data has none
    old = {k: v for k, v in identity.items() if k not in ("layers", "widths", DEFAULTS_KEY)}  # written before
    assert identity_changes(old, identity) == ""
    deeper, wider = run_identity(_Settings("moons", layers=(4,))), run_identity(_Settings("moons", widths=[8, 8]))
    assert identity_changes(old, deeper) == "layers: '(unset)' -> [4]"  # steps, at its default, agrees
    assert identity_changes(old, wider) == "widths: '(unset)' -> [8, 8]"
    # a saved value is compared as before, the default does not stand in for it
    assert identity_changes(identity | {"layers": [5]}, identity) == "layers: [5] -> [2, 3]"
    # a run record (config.json) written before the setting existed still holds the current settings
    assert holds_settings({"data": "moons", "hidden": 16, "steps": 4}, _Settings("moons"))
    assert not holds_settings({"data": "moons", "hidden": 16, "steps": 4}, _Settings("moons", layers=(4,)))
    # a mapping has no defaults: a setting it adds agrees only when None (off), as before
    assert identity_changes({"data": "moons"}, {"data": "moons", "frames": None}) == ""
    assert identity_changes({"data": "moons"}, {"data": "moons", "frames": 8}) == "frames: '(unset)' -> 8"
    # a prefix names the settings and their defaults alike (settings that sit beside others in one identity)
    prefixed = run_identity(_Settings("moons", layers=(4,)), exclude=("steps",), prefix="config.")
    assert set(prefixed) == {"config.data", "config.hidden", "config.layers", "config.widths", DEFAULTS_KEY}
    assert prefixed[DEFAULTS_KEY] == {"config.hidden": 16, "config.layers": [2, 3], "config.widths": [8]}
    assert (
        identity_changes({"config.data": "moons", "config.hidden": 16}, prefixed) == "config.layers: '(unset)' -> [4]"
    )


def test_nan_skip_drops_the_update(tmp_path: Path) -> None:
    # constant LR so that the first 3 steps are the same in both runs
    ref = _run(_cfg(tmp_path / "ref", steps=3, warmup_steps=0, schedule="constant"))
    bad = _run(_cfg(tmp_path / "bad", steps=4, warmup_steps=0, schedule="constant"), nan_at=(3,))
    assert bad.skipped_steps == [3]
    _same(bad.model, ref.model)
    _same(bad.ema, ref.ema)
    records = [json.loads(line) for line in (tmp_path / "bad" / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["skipped"] is True and records[-1]["loss"] == "nan"
    assert all(torch.isfinite(p).all() for p in bad.model.parameters())


def test_nan_skip_gives_up_when_the_model_stops_training(tmp_path: Path) -> None:
    """A run whose every step was skipped finished "successfully" and saved its untrained weights (an infinite
    loss weight did this to an SAE); a long streak of skips means the weights, which skipped steps leave alone,
    keep failing."""
    with pytest.raises(GenError, match=r"steps 0 to 2 were all skipped .* the model is not training"):
        _run(_cfg(tmp_path / "all", steps=3), nan_at=(0, 1, 2))
    assert not find_checkpoints(tmp_path / "all" / "checkpoints")
    streak = tuple(range(4, 4 + MAX_SKIPS_IN_A_ROW))
    with pytest.raises(GenError, match=rf"steps 4 to {3 + MAX_SKIPS_IN_A_ROW} were all skipped"):
        _run(_cfg(tmp_path / "streak", steps=40), nan_at=streak)
    sparse = _run(_cfg(tmp_path / "sparse", steps=40), nan_at=tuple(range(0, 40, 2)))  # half, never in a row
    assert sparse.skipped_steps == list(range(0, 40, 2))
    shorter = _run(_cfg(tmp_path / "shorter", steps=40), nan_at=streak[:-1])
    assert shorter.skipped_steps == list(streak[:-1])


class _NormTask(RegressionTask):
    """The example network with a BatchNorm layer, whose running statistics move in every forward pass."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.BatchNorm1d(16), torch.nn.SiLU(), torch.nn.Linear(16, 4)
        )


def test_nan_skip_leaves_the_buffers_as_they_were(tmp_path: Path) -> None:
    """A skipped step puts the BatchNorm statistics back too: a batch holding NaN made them NaN for good, and the
    EMA copy (used for sampling) answered NaN to every input while the loss of later steps stayed finite."""

    def run(out: Path, steps: int, data=None, **kw):
        cfg = _cfg(out, steps=steps, warmup_steps=0, schedule="constant")
        return Trainer(cfg, device="cpu").fit(_NormTask(**kw), data or regression_data(64))

    ref = run(tmp_path / "ref", 3)
    bad = run(tmp_path / "bad", 4, nan_at=(3,))  # the loss, not the forward, is NaN at step 3
    assert bad.skipped_steps == [3]
    _same(bad.model, ref.model)  # running mean, variance and num_batches_tracked included
    _same(bad.ema, ref.ema)
    x, y = regression_data(64).tensors
    x = x.clone()
    x[5, 0] = math.nan  # one corrupted sample: its batch's forward pass computes NaN statistics
    hit = run(tmp_path / "data", 8, data=torch.utils.data.TensorDataset(x, y))
    assert hit.skipped_steps and len(hit.skipped_steps) < 8 and math.isfinite(hit.last_loss)
    assert all(torch.isfinite(b).all() for b in [*hit.model.buffers(), *hit.ema.buffers()])
    assert torch.isfinite(hit.ema(torch.randn(3, 4))).all()


def test_nan_stop_raises_naming_the_step(tmp_path: Path) -> None:
    with pytest.raises(GenError, match="step 2"):
        _run(_cfg(tmp_path, steps=5, nan_policy="stop", grad_accum_steps=2), nan_at=(5,))
    assert find_checkpoints(tmp_path / "checkpoints") == []


def test_resuming_with_more_steps_follows_the_new_schedule_from_its_first_step(tmp_path: Path) -> None:
    # the optimiser's saved lr was the old schedule's: extending a finished cosine run spent a step at lr 0
    def lrs(out: Path) -> dict[int, float]:
        return {r["step"]: r["lr"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}

    full = tmp_path / "full"
    _run(_cfg(full, steps=8, schedule="cosine"))
    part = tmp_path / "part"
    _run(_cfg(part, steps=4, schedule="cosine", checkpoint_every=4))
    _run(_cfg(part, steps=8, schedule="cosine", resume="auto"))
    want, got = lrs(full), lrs(part)
    assert [got[k] for k in range(5, 9)] == pytest.approx([want[k] for k in range(5, 9)], rel=1e-12)
    assert got[5] > 0.5 * want[4]


def test_metrics_and_final_checkpoint(tmp_path: Path) -> None:
    res = _run(_cfg(tmp_path, steps=4, log_every=2))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [2, 4]
    for key in ("loss", "lr", "grad_norm", "samples_per_s", "peak_memory_mb", "mse"):
        assert key in records[0]
    assert records[0]["lr"] == pytest.approx(1e-2)  # step index 1 of a 2-step warm-up
    assert res.checkpoint is not None and res.checkpoint.name == "step-000000004"


def test_layersync_through_config(tmp_path: Path) -> None:
    res = _run(_cfg(tmp_path / "ls", steps=3, layersync_pairs=(("0", "2"), ("2", "4")), layersync_weight=0.2))
    records = [json.loads(line) for line in (tmp_path / "ls" / "metrics.jsonl").read_text().splitlines()]
    assert all(-1.0 <= r["layersync"] <= 1.0 for r in records)
    zero = _run(_cfg(tmp_path / "zero", steps=3, layersync_pairs=(("0", "2"),), layersync_weight=0.0))
    plain = _run(_cfg(tmp_path / "plain", steps=3))
    _same(zero.model, plain.model)
    assert any(not torch.equal(a, b) for a, b in zip(res.model.parameters(), plain.model.parameters()))


def test_rank_batches_union_is_the_single_process_batch() -> None:
    data = regression_data(50)
    one = RankBatches(data, micro_batch_size=8, rank=0, world_size=1, seed=3)
    two = [RankBatches(data, micro_batch_size=2, rank=r, world_size=2, seed=3) for r in range(2)]
    assert one.per_epoch == 6  # 50 // 8
    for _ in range(14):  # crosses two epoch boundaries
        (x1, _), parts = next(one), []
        for _ in range(2):  # two accumulation micro-batches per rank
            parts += [next(b)[0] for b in two]
        got = torch.cat(parts)
        assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, x1.tolist()))
    pos = two[0].position
    resumed = RankBatches(data, micro_batch_size=2, rank=0, world_size=2, seed=3, position=pos)
    assert torch.equal(next(resumed)[0], next(two[0])[0])


def test_sample_callback_gets_the_ema_model(tmp_path: Path) -> None:
    calls = []

    class Sampling(RegressionTask):
        def sample(self, model_ema, step, out_dir):
            assert not torch.is_grad_enabled() and not model_ema.training
            calls.append(step)

    Trainer(_cfg(tmp_path, steps=6, sample_every=2), device="cpu").fit(Sampling(), regression_data(64))
    assert calls == [2, 4, 6]


class _Stream(IterableDataset):
    """A deterministic stream per (epoch, shard): 37 items split over shards, reshuffled per epoch."""

    def __init__(self) -> None:
        self.epoch = 0
        self.data = regression_data(37)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self):
        index, count = data_shard()
        order = torch.randperm(37, generator=torch.Generator().manual_seed(100 + self.epoch))
        for i in order[index::count].tolist():
            yield self.data[i]


def test_stream_resumes_at_the_exact_batch() -> None:
    full = RankBatches(_Stream(), micro_batch_size=5, rank=0, world_size=1, seed=0)
    seq = [next(full)[0] for _ in range(20)]  # 7 batches per epoch: crosses two epochs
    part = RankBatches(_Stream(), micro_batch_size=5, rank=0, world_size=1, seed=0)
    for _ in range(9):
        next(part)
    assert part.position == DataPosition(1, 2)
    resumed = RankBatches(_Stream(), micro_batch_size=5, rank=0, world_size=1, seed=0, position=part.position)
    for k in range(9, 20):
        assert torch.equal(next(resumed)[0], seq[k])
    assert not torch.equal(seq[0], seq[7])  # epochs differ


def test_stream_training_resume_is_bit_identical(tmp_path: Path) -> None:
    def run(out: Path, **kw):
        cfg = _cfg(out, steps=9, global_batch_size=5, checkpoint_every=3, **kw)
        return Trainer(cfg, device="cpu").fit(RegressionTask(noise=0.2), _Stream())

    full = run(tmp_path / "full")
    run(tmp_path / "part")
    for p in find_checkpoints(tmp_path / "part" / "checkpoints")[:-1]:
        shutil.rmtree(p)
    _same(run(tmp_path / "part", resume="auto").model, full.model)


def test_bf16_is_off_on_cpu_unless_forced(tmp_path: Path) -> None:
    fp32 = _run(_cfg(tmp_path / "a", steps=3))
    with pytest.warns(UserWarning, match="bf16"):
        same = _run(_cfg(tmp_path / "b", steps=3, precision="bf16"))
    _same(same.model, fp32.model)
    forced = _run(_cfg(tmp_path / "c", steps=3, precision="bf16", cpu_autocast=True))
    assert all(p.dtype == torch.float32 for p in forced.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(forced.model.parameters(), fp32.model.parameters()))


def test_non_finite_gradient_with_finite_loss_is_caught(tmp_path: Path) -> None:
    class BadGrad(RegressionTask):
        def loss(self, model, batch, generator):
            loss, metrics = super().loss(model, batch, generator)
            if self.calls == 3:  # the call just made was step 2
                w = self.model[0].weight[0, 0]
                loss = loss + torch.sqrt(w - w.detach())  # value 0, d/dw = +inf
            return loss, metrics

    with pytest.raises(GenError, match="step 2"):
        Trainer(_cfg(tmp_path / "stop", steps=4, nan_policy="stop"), device="cpu").fit(BadGrad(), regression_data(64))
    res = Trainer(_cfg(tmp_path / "skip", steps=4), device="cpu").fit(BadGrad(), regression_data(64))
    assert res.skipped_steps == [2] and all(torch.isfinite(p).all() for p in res.model.parameters())


def test_tensorboard_scalars_match_the_jsonl_log(tmp_path: Path) -> None:
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _run(_cfg(tmp_path, steps=4, log_every=1))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    for key in ("loss", "lr", "grad_norm", "mse"):
        scalars = events.Scalars(key)
        assert [e.step for e in scalars] == [r["step"] for r in records], key
        assert [e.value for e in scalars] == pytest.approx([r[key] for r in records], rel=1e-6), key


def test_tensorboard_hides_the_events_after_the_resumed_step(tmp_path: Path) -> None:
    """As the JSON lines are cut back on resume, TensorBoard must not plot the killed run's later steps twice."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    _run(_cfg(tmp_path, steps=8, checkpoint_every=4))
    for p in find_checkpoints(tmp_path / "checkpoints")[:-1]:
        shutil.rmtree(p)
    _run(_cfg(tmp_path, steps=8, resume="auto"))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    events = accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [r["step"] for r in records] == list(range(1, 9))


def test_fsdp_setting_is_validated_and_ignored_by_one_process(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="parallel"):
        TrainConfig(parallel="zero3").validate()
    plain = _run(_cfg(tmp_path / "a"))
    single = _run(_cfg(tmp_path / "b", parallel="fsdp"))  # one process: nothing to shard
    _same(plain.model, single.model)


def test_grad_norm_matches_torch_total_norm() -> None:
    from gencore.train.trainer import _grad_norm

    g = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(3, 4), (5,), (2, 2, 2)]]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    expected = torch.sqrt(sum((p.grad**2).sum() for p in params))
    torch.testing.assert_close(_grad_norm(params, None), expected)
    torch.testing.assert_close(_grad_norm(params, None), torch.nn.utils.get_total_norm([p.grad for p in params]))
    mixed = [params[0], torch.nn.Parameter(params[1].detach().double())]  # mixed dtypes: torch's grouping path
    mixed[1].grad = params[1].grad.double()
    expected_mixed = torch.sqrt((params[0].grad ** 2).sum() + (params[1].grad ** 2).sum())
    torch.testing.assert_close(_grad_norm(mixed, None).float(), expected_mixed)
    params[0].grad = None  # parameters without a gradient are left out
    expected = torch.sqrt(sum((p.grad**2).sum() for p in params[1:]))
    torch.testing.assert_close(_grad_norm(params, None), expected)


def test_optimizer_is_fused_where_possible_and_follows_torchs_update() -> None:
    from gencore.train.trainer import _build_optimizer

    g = torch.Generator().manual_seed(0)
    for name, reference in (("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)):
        cfg = TrainConfig(optimizer=name, lr=1e-2, weight_decay=0.1)
        ours = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(4, 3), (3,)]]
        theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        opt = _build_optimizer(cfg, ours, sharded=False)
        assert opt.defaults["fused"] is True
        ref = reference(theirs, lr=1e-2, betas=tuple(cfg.betas), weight_decay=0.1)  # torch's default (per tensor)
        for _ in range(5):
            grads = [torch.randn(p.shape, generator=g) for p in ours]
            for p, q, gr in zip(ours, theirs, grads):
                p.grad, q.grad = gr.clone(), gr.clone()
            opt.step()
            ref.step()
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-6)
    assert not _build_optimizer(TrainConfig(optimizer="adam"), ours, sharded=True).defaults["fused"]


def test_tensor_metrics_are_averaged_over_micro_batches_like_the_loss(tmp_path: Path) -> None:
    """Tasks return their metrics as device tensors (no host sync per step); the engine averages them over the
    accumulation micro-batches and logs floats. The example task's ``mse`` metric is its loss."""
    _run(_cfg(tmp_path, steps=3, grad_accum_steps=4))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(records) == 3
    for r in records:
        assert isinstance(r["mse"], float) and r["mse"] == pytest.approx(r["loss"], rel=1e-6)


def test_metrics_to_floats_keeps_order_and_values_in_one_read_back() -> None:
    from gencore.train.metrics_log import metrics_to_floats

    metrics = {"a": torch.tensor(0.1, dtype=torch.float32), "b": 2, "c": torch.tensor([3.5], dtype=torch.float64),
               "d": math.nan, "e": torch.tensor(True)}  # fmt: skip
    out = metrics_to_floats(metrics)
    assert list(out) == list(metrics) and all(type(v) is float for v in out.values())
    assert out["a"] == float(torch.tensor(0.1, dtype=torch.float32)) and out["b"] == 2.0 and out["c"] == 3.5
    assert math.isnan(out["d"]) and out["e"] == 1.0
