"""TrainConfig validation, batch arithmetic, LR schedule and EMA warm-up."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import ConfigError
from gencore.train import EMA, TrainConfig


def test_micro_batch_is_global_over_world_times_accum() -> None:
    cfg = TrainConfig(global_batch_size=48, grad_accum_steps=3)
    assert cfg.micro_batch_size(1) == 16
    assert cfg.micro_batch_size(2) == 8
    assert cfg.micro_batch_size(4) == 4
    with pytest.raises(ConfigError, match="divisible"):
        cfg.micro_batch_size(5)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 0},
        {"optimizer": "lion"},
        {"schedule": "linear"},
        {"precision": "fp16"},
        {"nan_policy": "ignore"},
        {"ema_decay": 1.0},
        {"lr": -1.0},
        {"clip_grad_norm": 0.0},
        {"warmup_steps": 20, "steps": 10},
        {"layersync_pairs": (("a",),)},
        {"seed": -1},
        {"seed": 2**45},  # seed * 1_000_003 overflowed torch.manual_seed ("Overflow when unpacking long long")
        {"seed": 1.5},
        {"steps": 4.0},  # range() traceback at the start of the fit
        {"keep_last": 1.5},  # InputError from the first save, after the run had trained
        {"checkpoint_every": 1.5},  # silently saved at step 3 (3 % 1.5 == 0)
        {"global_batch_size": 16.0},
        {"steps": None},
        {"grad_accum_steps": True},
    ],
)
def test_bad_settings_are_config_errors(kwargs) -> None:
    with pytest.raises(ConfigError):
        TrainConfig(**kwargs).validate()


def test_a_resume_folder_that_does_not_exist_is_refused_by_validate(tmp_path) -> None:
    """Callers validate before they make a run folder: a typo in --resume must not leave an empty run behind."""
    with pytest.raises(ConfigError, match=r"checkpoint folder .*missing.* given to resume does not exist"):
        TrainConfig(resume=str(tmp_path / "missing")).validate()
    assert TrainConfig(resume=tmp_path).validate().resume == tmp_path
    assert TrainConfig(resume="auto").validate().resume == "auto"


def test_lr_factor_warmup_then_cosine_and_constant() -> None:
    cfg = TrainConfig(steps=14, warmup_steps=4, schedule="cosine")
    assert [cfg.lr_factor(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert cfg.lr_factor(4) == 1.0
    assert cfg.lr_factor(9) == pytest.approx(0.5 * (1 + math.cos(math.pi * 5 / 10)))
    assert cfg.lr_factor(14) == pytest.approx(0.0, abs=1e-12)
    const = TrainConfig(steps=14, warmup_steps=2, schedule="constant")
    assert [const.lr_factor(s) for s in (0, 1, 5, 13)] == [0.5, 1.0, 1.0, 1.0]


def test_ema_warmup_recursion_matches_closed_form() -> None:
    model = torch.nn.Linear(3, 2)
    ema = EMA(model, decay=0.9)
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    for s in range(12):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * (s + 1))
        d = min(0.9, (1 + s) / (10 + s))
        assert ema.decay_at(s) == pytest.approx(d)
        ema.update(model)
        for k, v in model.state_dict().items():
            ref[k] = d * ref[k] + (1 - d) * v
    for k, v in ema.state_dict().items():
        torch.testing.assert_close(v, ref[k], rtol=1e-6, atol=1e-6)
    assert not any(p.requires_grad for p in ema.module.parameters())


def test_ema_decay_is_capped_by_the_configured_decay_after_the_warm_up() -> None:
    """d_s = min(decay, (1 + s) / (10 + s)): with decay 0.5 the warm-up term wins for s < 8, the cap from s = 8 on."""
    model = torch.nn.Linear(2, 2, bias=False)
    ema = EMA(model, decay=0.5)
    assert [ema.decay_at(s) for s in (0, 7, 8, 9, 100)] == pytest.approx([0.1, 8 / 17, 0.5, 0.5, 0.5])
    with torch.no_grad():
        for s in range(12):
            before = ema.module.weight.clone()
            model.weight.add_(1.0)
            ema.update(model)
            d = min(0.5, (1 + s) / (10 + s))
            torch.testing.assert_close(ema.module.weight, d * before + (1 - d) * model.weight, rtol=0, atol=1e-6)
    assert ema.updates == 12
