"""The shared argument checks: integers of every kind accepted, floats and bools refused, one sentence each."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gencore.checks import check_finite, check_int, check_points
from gencore.errors import ConfigError, InputError


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), torch.tensor(3)])
def test_check_int_accepts_python_numpy_and_tensor_integers(value):
    got = check_int(value, "n", low=1)
    assert got == 3 and type(got) is int


@pytest.mark.parametrize(
    ("value", "low", "high", "words"),
    [
        (0, 1, None, "a positive integer"),
        (-1, 0, None, "a non-negative integer"),
        (3, 4, None, "an integer >= 4"),
        (61, 1, 60, "an integer from 1 to 60"),
        (2.0, 1, None, "a positive integer"),  # a float is refused even when whole
        (True, 0, None, "a non-negative integer"),  # so is a bool
        ("3", None, None, "an integer"),
        (torch.tensor(2.0), 1, None, "a positive integer"),
        (torch.tensor(True), 0, None, "a non-negative integer"),  # a boolean tensor is a bool too, not 1
    ],
)
def test_check_int_refuses_with_one_sentence_naming_the_argument_and_range(value, low, high, words):
    with pytest.raises(ConfigError) as exc:
        check_int(value, "the thing", low=low, high=high)
    assert str(exc.value) == f"the thing must be {words}, got {value!r}."


def test_check_int_raises_the_requested_error_type():
    with pytest.raises(InputError, match="step must be a non-negative integer"):
        check_int(-2, "step", low=0, error=InputError)


def test_check_points_refuses_complex_and_boolean_coordinates():
    """A complex point set was cast to float64 by the metrics, silently dropping its imaginary part."""
    from gencore.metrics import mmd

    for x in (torch.randn(4, 2, dtype=torch.complex64), torch.ones(4, 2, dtype=torch.bool)):
        with pytest.raises(InputError, match=rf"x must hold real coordinates .* got dtype {x.dtype}"):
            mmd(x, torch.randn(4, 2))
    points = torch.arange(8).view(4, 2)  # integer coordinates are real and stay accepted
    assert check_points(points, "x") is points and check_points(points.double(), "x").dtype == torch.float64


@pytest.mark.parametrize("bad", [complex("nan"), complex(1.0, float("inf")), complex(float("-inf"), 0.0)])
def test_check_finite_refuses_complex_nan_and_inf(bad):
    """Only floating tensors were checked, so a complex tensor with a NaN or infinite part passed."""
    x = torch.tensor([1 + 2j, bad, 3 - 1j], dtype=torch.complex64)
    with pytest.raises(InputError, match=r"^z contains 1 NaN or inf value\(s\); expected finite numbers\.$"):
        check_finite(x, "z")
    finite = torch.tensor([1 + 2j, 3 - 1j])
    assert check_finite(finite, "z") is finite


@pytest.mark.parametrize("value", [-1, 2**32, 2**64, True, 1.0, "3"])
def test_check_seed_takes_the_suites_one_seed_range(value):
    """Every seed is in [0, 2**32): gymnasium and NumPy refuse negatives and torch's generator 2**64 or more, each
    with a traceback, and rank seeds ``seed * 1_000_003 + rank`` must fit torch's 64 bits."""
    from gencore.checks import check_seed

    assert check_seed(0) == 0 and check_seed(2**32 - 1) == 2**32 - 1
    with pytest.raises(ConfigError, match=r"^seed must be an integer from 0 to 4294967295, got "):
        check_seed(value)


def test_every_experiment_config_refuses_a_seed_out_of_range():
    """A seed from a YAML --config file reaches these configs without the --seed flag's argparse type."""
    from gencore.discrete.experiment import DiscreteConfig
    from gencore.flowmaps.experiment import FlowMapConfig
    from gencore.manifolds.experiment import ManifoldCompareConfig
    from gencore.toy_experiment import ToyConfig
    from gencore.train import TrainConfig

    for config in (DiscreteConfig, FlowMapConfig, ManifoldCompareConfig, ToyConfig, TrainConfig):
        config(seed=3).validate()
        for seed in (-1, 2**64):
            with pytest.raises(ConfigError, match=r"^seed must be an integer from 0 to"):
                config(seed=seed).validate()
