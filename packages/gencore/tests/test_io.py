"""Atomic writes and safetensors persistence."""

from __future__ import annotations

import os

import pytest
import torch

from gencore.errors import StorageError
from gencore.io import atomic_path, load_pretrained, load_tensors, read_json, save_pretrained, write_json
from gencore.nn import MLPVelocity


def test_atomic_path_leaves_old_file_on_failure(tmp_path) -> None:
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("killed")
    assert read_json(target) == {"a": 1}
    assert os.listdir(tmp_path) == ["out.json"]


def test_save_load_pretrained_round_trip(tmp_path) -> None:
    state = {"w": torch.randn(3, 4), "b": torch.arange(5)}
    save_pretrained(tmp_path / "m", state, {"kind": "test", "n": 3})
    loaded, config = load_pretrained(tmp_path / "m")
    assert config == {"kind": "test", "n": 3}
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])


def test_mlp_from_pretrained_gives_same_outputs(tmp_path) -> None:
    model = MLPVelocity(3, hidden=16, depth=2, time_dim=8)
    model.save_pretrained(tmp_path)
    again = MLPVelocity.from_pretrained(tmp_path)
    x, t = torch.randn(5, 3), torch.rand(5)
    assert torch.equal(model(x, t), again(x, t))


def test_corrupt_weights_raise_storage_error(tmp_path) -> None:
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(StorageError, match=r"bad\.safetensors"):
        load_tensors(tmp_path / "bad.safetensors")
    with pytest.raises(StorageError, match="does not exist"):
        load_tensors(tmp_path / "missing.safetensors")


def test_unwritable_folder_is_a_storage_error(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match=r"cannot create output folder"):
        write_json(blocker / "sub" / "out.json", {})


def test_written_files_get_the_usual_permissions(tmp_path) -> None:
    umask = os.umask(0o022)
    try:
        write_json(tmp_path / "out.json", {})
    finally:
        os.umask(umask)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o644
