"""Shared fixtures: small datasets made locally (no downloads), one thread per test process."""

from __future__ import annotations

import pytest
import torch

from genrl.agents import EnvSpec
from genrl.dataset import OfflineDataset
from genrl.toy_mdp import BimodalChain

torch.set_num_threads(1)

# a small agent setting and batches for it, shared by the agent tests
SPEC = EnvSpec(obs_dim=3, action_dim=2, action_low=(-2.0, 0.0), action_high=(2.0, 1.0), reward_scale=0.5)
SMALL = {"hidden": 32, "depth": 2, "batch_size": 16}


def small_batch(seed: int = 0, n: int = 16) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    low, high = torch.tensor(SPEC.action_low), torch.tensor(SPEC.action_high)
    return {
        "observations": torch.randn(n, 3, generator=g),
        "actions": low + (high - low) * torch.rand(n, 2, generator=g),
        "rewards": torch.randn(n, generator=g),
        "terminals": torch.rand(n, generator=g) < 0.2,
        "next_observations": torch.randn(n, 3, generator=g),
    }


@pytest.fixture(scope="session")
def toy_dataset() -> OfflineDataset:
    return BimodalChain().dataset(100, seed=0)


@pytest.fixture(scope="session")
def pendulum_dataset() -> tuple[OfflineDataset, dict]:
    from genrl.generate import make_dataset

    return make_dataset("Pendulum-v1", "random", 450, seed=3, progress=False)
