"""Shared fixtures: small seeded activation stores."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def seq_acts() -> torch.Tensor:
    """``[24, 16, 8]`` activations with a non-zero mean."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(24, 16, 8, generator=g) * 2 + 1


@pytest.fixture
def store_dir(tmp_path, seq_acts):
    from geninterp.store import ActivationWriter

    tokens = torch.arange(seq_acts.shape[0] * seq_acts.shape[1]).view(seq_acts.shape[:2])
    with ActivationWriter(tmp_path / "acts", d_model=8, seq_len=16, shard_sequences=10, metadata={"model": None}) as w:
        for chunk, tok in zip(seq_acts.split(7), tokens.split(7), strict=True):
            w.write(chunk, tok)
    return tmp_path / "acts"
