"""Atomic writes and safetensors persistence."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import torch

from gencore.errors import StorageError
from gencore.io import (
    Pretrained,
    atomic_path,
    check_folder_writable,
    check_writable,
    load_pretrained,
    load_tensors,
    read_json,
    require_fields,
    save_pretrained,
    save_tensors,
    write_json,
)
from gencore.nn import MLPVelocity


def test_atomic_path_leaves_old_file_on_failure(tmp_path) -> None:
    target = tmp_path / "out.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half written")
        raise RuntimeError("killed")
    assert read_json(target) == {"a": 1}
    assert os.listdir(tmp_path) == ["out.json"]


def test_write_json_is_strict_json(tmp_path) -> None:
    """NaN and infinities, at any depth, become null; finite values and the structure are kept."""
    import numpy as np

    obj = {"a": float("nan"), "b": [1.5, float("inf"), {"c": -float("inf")}], "d": (np.float64("nan"), 2), "e": "nan"}
    path = write_json(tmp_path / "out.json", obj)

    def reject(token: str) -> None:
        raise ValueError(f"non-standard JSON constant {token}")

    loaded = json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)
    assert loaded == {"a": None, "b": [1.5, None, {"c": None}], "d": [None, 2], "e": "nan"}


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


@dataclass(frozen=True)
class _Widths:
    inner: int = 3


class _WithDataclassConfig(Pretrained, torch.nn.Module):
    config_class = _Widths

    def __init__(self, config: _Widths) -> None:
        super().__init__()
        self.config = config
        self.lin = torch.nn.Linear(2, config.inner)


def test_pretrained_round_trips_dict_and_dataclass_configs_and_names_bad_folders(tmp_path) -> None:
    import json

    model = _WithDataclassConfig(_Widths(inner=5))
    model.save_pretrained(tmp_path / "dc")
    back = _WithDataclassConfig.from_pretrained(tmp_path / "dc")
    assert back.config == _Widths(inner=5) and torch.equal(back.lin.weight, model.lin.weight)
    assert json.loads((tmp_path / "dc" / "config.json").read_text()) == {"class": "_WithDataclassConfig", "inner": 5}
    # a config the class cannot be built from, and weights that do not fit what the config builds
    (tmp_path / "dc" / "config.json").write_text(json.dumps({"inner": 5, "depth": 2}))
    with pytest.raises(StorageError, match="does not describe a _WithDataclassConfig"):
        _WithDataclassConfig.from_pretrained(tmp_path / "dc")
    (tmp_path / "dc" / "config.json").write_text(json.dumps({"inner": 4}))
    with pytest.raises(StorageError, match=r"do not fit the _WithDataclassConfig its config\.json describes"):
        _WithDataclassConfig.from_pretrained(tmp_path / "dc")
    MLPVelocity(2, hidden=8, depth=1).save_pretrained(tmp_path / "mlp")
    (tmp_path / "mlp" / "config.json").write_text("[1, 2]")
    with pytest.raises(StorageError, match="must hold a JSON object of MLPVelocity settings"):
        MLPVelocity.from_pretrained(tmp_path / "mlp")


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


def test_check_writable_refuses_before_any_work_and_creates_nothing(tmp_path, monkeypatch) -> None:
    assert check_writable(tmp_path / "new" / "deeper" / "out.json") == tmp_path / "new" / "deeper" / "out.json"
    assert os.listdir(tmp_path) == []  # the probe creates no folder and leaves no file
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match=r"'.*file' is a file, not a folder"):
        check_writable(tmp_path / "file" / "out.json")
    with pytest.raises(StorageError, match=r"is a folder; name a file"):
        check_writable(tmp_path)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gencore.io.tempfile.TemporaryFile", refuse)
    with pytest.raises(StorageError, match=r"cannot write '.*out.json': Permission denied"):
        check_writable(tmp_path / "out.json")


def test_check_folder_writable_accepts_new_and_existing_folders_and_creates_nothing(tmp_path, monkeypatch) -> None:
    assert check_folder_writable(tmp_path / "runs" / "a") == tmp_path / "runs" / "a"
    assert check_folder_writable(tmp_path) == tmp_path
    assert os.listdir(tmp_path) == []
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match=r"^output folder '.*file' is a file; name a folder\.$"):
        check_folder_writable(tmp_path / "file")
    not_a_folder = r"^cannot write into the output folder '.*run': '.*file' is a file, not a folder\.$"
    with pytest.raises(StorageError, match=not_a_folder):
        check_folder_writable(tmp_path / "file" / "run")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("gencore.io.tempfile.TemporaryFile", refuse)
    with pytest.raises(StorageError, match=r"^cannot write into the output folder '.*run': Permission denied\.$"):
        check_folder_writable(tmp_path / "run")
    assert os.listdir(tmp_path) == ["file"]


def test_a_file_that_cannot_be_created_is_a_storage_error(tmp_path, monkeypatch) -> None:
    # the writer fails to create the temporary file (e.g. a read-only or special file system)
    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr("pathlib.Path.write_text", refuse)
    with pytest.raises(StorageError, match=r"cannot write '.*out.json': Permission denied"):
        write_json(tmp_path / "out.json", {})
    assert os.listdir(tmp_path) == []


def test_require_fields_names_the_first_missing_field() -> None:
    require_fields({"a": 1, "b": None}, ("a", "b"), "'x.json'")  # present, even when null
    with pytest.raises(StorageError, match=r"^'x.json' lacks the field 'b'; rerun it\.$"):
        require_fields({"a": 1}, ("a", "b", "c"), "'x.json'", "; rerun it")
    with pytest.raises(StorageError, match=r"^'x.json' does not hold a JSON object\.$"):
        require_fields([1, 2], ("a",), "'x.json'")


def test_written_files_get_the_usual_permissions(tmp_path) -> None:
    umask = os.umask(0o022)
    try:
        write_json(tmp_path / "out.json", {})
        save_tensors(tmp_path / "w.safetensors", {"w": torch.zeros(2)})  # safetensors itself creates 0600 files
    finally:
        os.umask(umask)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "w.safetensors").stat().st_mode & 0o777 == 0o644


def test_read_json_names_the_file_for_every_unreadable_kind(tmp_path) -> None:
    (tmp_path / "latin1.json").write_bytes(b'{"name": "caf\xe9"}')
    (tmp_path / "broken.json").write_text('{"a": ')
    (tmp_path / "folder.json").mkdir()
    for name, message in [
        ("missing.json", "does not exist"),
        ("latin1.json", r"is not valid JSON \(not UTF-8 text"),
        ("broken.json", r"is not valid JSON \(line 1"),
        ("folder.json", "is a folder, not a JSON file"),
        ("broken.json/run.json", "'.*broken.json' is a file, not a folder"),  # a run folder given as a file
    ]:
        with pytest.raises(StorageError, match=message) as exc:
            read_json(tmp_path / name)
        assert name in str(exc.value)


class _Checked(Pretrained, torch.nn.Module):
    """A module whose constructor refuses a bad setting with the suite's ConfigError, as real models do."""

    def __init__(self, width: int = 2) -> None:
        from gencore.errors import ConfigError

        super().__init__()
        if width % 2:
            raise ConfigError(f"width must be even, got {width}.")
        self.config = {"width": width}
        self.lin = torch.nn.Linear(2, width)


def test_a_config_json_the_constructor_refuses_names_the_file(tmp_path) -> None:
    """The constructor's own sentence ("width must be even") did not say which file held the setting."""
    import json

    _Checked(4).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(json.dumps({"class": "_Checked", "width": 3}))
    where = str(tmp_path / "m" / "config.json")
    with pytest.raises(StorageError) as info:
        _Checked.from_pretrained(tmp_path / "m")
    assert str(info.value) == f"{where!r} does not describe a _Checked (width must be even, got 3)."


def test_tensor_fingerprint_is_sha256_of_header_shapes_dtypes_and_bytes() -> None:
    """The digest semidiscrete couplings stored before this helper existed (so saved potentials still load):
    ``sha256(header + "(shape)|dtype" + bytes ...)``; shape, dtype, order and header each change it."""
    import hashlib

    from gencore.io import tensor_fingerprint

    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    y = torch.tensor([True, False])
    want = hashlib.sha256(b"h(2, 3)|torch.float32" + x.numpy().tobytes() + b"(2,)|torch.bool" + y.numpy().tobytes())
    assert tensor_fingerprint(x, y, header="h") == want.hexdigest()
    others = {
        tensor_fingerprint(x, y),
        tensor_fingerprint(y, x, header="h"),
        tensor_fingerprint(x.reshape(3, 2), y, header="h"),
        tensor_fingerprint(x.double(), y, header="h"),
        tensor_fingerprint(x.t(), y, header="h"),  # a non-contiguous view digests its values in order
    }
    assert want.hexdigest() not in others and len(others) == 5
    assert tensor_fingerprint(torch.tensor(2.0)) != tensor_fingerprint(torch.tensor([2.0]))
