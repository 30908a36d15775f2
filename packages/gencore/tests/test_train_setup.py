"""gencore.train.setup and gencore.command.resolve_device: which device a process gets."""

from __future__ import annotations

import pytest
import torch

from gencore.errors import ConfigError
from gencore.train import setup


def test_setup_device_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert setup("cpu").device == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no usable CUDA device"):
        setup("cuda")
    assert setup(None).device == torch.device("cpu")
    chosen: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    assert setup("cuda").device == torch.device("cuda", 1)  # one GPU per local process
    assert setup("cuda:0").device == torch.device("cuda", 0)
    assert setup(None).device == torch.device("cuda", 1)
    assert chosen == [torch.device("cuda", 1), torch.device("cuda", 0), torch.device("cuda", 1)]


def test_resolve_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from gencore.command import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu", nproc=4) == "cpu"
    with pytest.raises(ConfigError, match="no usable CUDA device; use --device cpu"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="--device must be one of auto, cpu, cuda"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto", nproc=2) == "cuda" and resolve_device("cuda") == "cuda"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ConfigError, match="--nproc 3 needs one GPU per process but 2 are visible"):
        resolve_device("auto", nproc=3)
