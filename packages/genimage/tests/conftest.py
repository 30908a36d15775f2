"""Shared fixtures: one tiny trained digits run for the sampling, evaluation and CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A class-conditional DiT-Mi trained for 30 steps on the digits, through the command line."""
    from genimage.cli import main

    out = tmp_path_factory.mktemp("runs") / "d"
    code = main(
        ["train", "--data", "digits", "--steps", "30", "--batch-size", "64", "--out", str(out), "--no-progress"]
    )
    assert code == 0
    return out
