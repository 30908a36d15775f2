"""Shared fixtures: small datasets made locally (no downloads), one thread per test process."""

from __future__ import annotations

import pytest
import torch

from genrl.dataset import OfflineDataset
from genrl.toy_mdp import BimodalChain

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def toy_dataset() -> OfflineDataset:
    return BimodalChain().dataset(100, seed=0)


@pytest.fixture(scope="session")
def pendulum_dataset() -> tuple[OfflineDataset, dict]:
    from genrl.generate import make_dataset

    return make_dataset("Pendulum-v1", "random", 450, seed=3, progress=False)
