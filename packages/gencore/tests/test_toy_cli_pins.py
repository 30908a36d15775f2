"""Pins of the toy command's parsing helpers, the toy sets' seeding and the toy run's early refusals."""

from __future__ import annotations

import argparse
from dataclasses import replace

import numpy as np
import pytest
import torch

from gencore.command import int_list, name_list
from gencore.data import TOY_DATASETS, toy_dataset
from gencore.errors import ConfigError
from gencore.toy_experiment import ToyConfig, compare, train


def test_name_list_strips_each_name_and_keeps_them_all_in_order() -> None:
    assert name_list("independent, sinkhorn ,semidiscrete") == ("independent", "sinkhorn", "semidiscrete")
    assert name_list(" a,,b, ") == ("a", "b")


def test_int_list_keeps_every_value_and_refuses_zero() -> None:
    assert int_list("1, 2,4,8,16") == (1, 2, 4, 8, 16)
    assert int_list("3,") == (3,)
    for text in ("0", "1,0", "2,-1", "", " , "):
        with pytest.raises(argparse.ArgumentTypeError, match="expected"):
            int_list(text)


@pytest.mark.parametrize("name", TOY_DATASETS)
def test_toy_sets_of_different_seeds_are_uncorrelated(name: str) -> None:
    # Seeds far apart in value or equal modulo a small power of two still give independent draws: the
    # coordinate-wise correlation of paired points is within 5 standard errors (1/sqrt(n)) of zero.
    n = 4000
    base = toy_dataset(name, n, seed=0).double().numpy()
    for seed in (1, 256, 2**16, 2**31, 2**32 - 1):
        other = toy_dataset(name, n, seed=seed).double().numpy()
        for k in range(2):
            assert abs(np.corrcoef(base[:, k], other[:, k])[0, 1]) < 5 / np.sqrt(n), (seed, k)


def test_a_batch_larger_than_the_training_set_is_refused_before_any_work(tmp_path) -> None:
    """The engine refused it only inside the training processes, after the semidiscrete coupling's fit (two
    minutes at the default settings) and after making the run folder."""
    cfg = ToyConfig(
        dataset="moons", coupling="semidiscrete", n_data=64, batch_size=65, steps=1, progress=False,
        semidiscrete_fit_steps=5, semidiscrete_batch_size=16,
    )  # fmt: skip
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^batch_size must be at most the 64 training points, got 65; "):
        train(cfg, out_dir=out)
    assert not out.exists()
    with pytest.raises(ConfigError, match="at most the 64 training points"):
        compare(cfg, ("independent", "semidiscrete"))
    digits = ToyConfig(dataset="digits", batch_size=1798, steps=1, progress=False)
    with pytest.raises(ConfigError, match="at most the 1797 training points"):
        train(digits)
    with pytest.raises(ConfigError, match="at most the 10 training points"):
        train(replace(cfg, batch_size=11), torch.zeros(10, 2))  # the data given, not n_data, bounds the batch
