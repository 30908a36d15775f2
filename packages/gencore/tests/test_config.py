"""YAML configs with type checks and command-line overrides."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from gencore.config import config_from_flags, load_config
from gencore.errors import ConfigError
from gencore.toy_experiment import ToyConfig


def test_yaml_then_overrides(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("dataset: moons\nsteps: 10\nnfe: [1, 3]\nlr: 0.01\n")
    cfg = load_config(ToyConfig, path, {"steps": 20, "seed": None})
    assert (cfg.dataset, cfg.steps, cfg.nfe, cfg.lr, cfg.seed) == ("moons", 20, (1, 3), 0.01, 0)


@dataclasses.dataclass(frozen=True)
class _NoProgress:
    steps: int = 1


def test_config_from_flags_keeps_yaml_values_of_flags_not_given(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("dataset: moons\nsteps: 10\nlr: 0.01\n")
    # steps given, lr left out (None), out is not a ToyConfig field; extra wins over both
    args = argparse.Namespace(config=path, steps=30, lr=None, out="runs/x", seed=None)
    cfg = config_from_flags(ToyConfig, args, progress=False)
    assert (cfg.dataset, cfg.steps, cfg.lr, cfg.seed, cfg.progress) == ("moons", 30, 0.01, 0, False)
    no_file = config_from_flags(ToyConfig, argparse.Namespace(config=None, steps=7))
    assert (no_file.steps, no_file.dataset, no_file.progress) == (7, ToyConfig().dataset, True)
    quiet = config_from_flags(ToyConfig, argparse.Namespace(config=None, no_progress=True))
    assert quiet.progress is False  # --no-progress reaches any config with a progress field
    assert config_from_flags(_NoProgress, argparse.Namespace(config=None, no_progress=True, steps=2)).steps == 2
    with pytest.raises(ConfigError, match="field 'steps' must be an integer"):
        config_from_flags(ToyConfig, argparse.Namespace(config=None, steps="7.5"))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("stepz: 3\n", "unknown field"),
        ("steps: many\n", "field 'steps' must be an integer"),
        ("steps: 2.5\n", "must be an integer"),
        ("steps: .inf\n", "field 'steps' must be an integer, got inf"),
        ("progress: 3\n", "true or false"),
        ("- 1\n- 2\n", "mapping"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_bad_yaml_names_file_and_field(tmp_path, text: str, match: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as exc:
        load_config(ToyConfig, path)
    assert "bad.yaml" in str(exc.value)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(ToyConfig, tmp_path / "nope.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"dataset: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1\.yaml' is not UTF-8 text"):
        load_config(ToyConfig, tmp_path / "latin1.yaml")
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match=r"folder\.yaml' is a folder"):
        load_config(ToyConfig, tmp_path / "folder.yaml")
    with pytest.raises(ConfigError, match=r"latin1\.yaml/c\.yaml' cannot be read \(Not a directory\)"):
        load_config(ToyConfig, tmp_path / "latin1.yaml" / "c.yaml")  # a path below a file


def test_validate_rejects_bad_values() -> None:
    with pytest.raises(ConfigError, match="dataset"):
        ToyConfig(dataset="cifar").validate()
    with pytest.raises(ConfigError, match="coupling"):
        ToyConfig(coupling="magic").validate()
    with pytest.raises(ConfigError, match="steps"):
        ToyConfig(steps=0).validate()


@dataclasses.dataclass(frozen=True)
class _Names:
    methods: tuple[str, ...] = ("a",)


def test_a_comma_separated_list_of_names_drops_the_blanks_around_each_name(tmp_path) -> None:
    """``methods: rfm, gfm-lsd`` in a YAML file gave (' gfm-lsd'), a name no registry knows; the command line's
    ``--methods rfm, gfm-lsd`` (gencore.command.name_list) strips them."""
    path = tmp_path / "run.yaml"
    path.write_text("methods: rfm,  gfm-lsd , gfm-psd\n")
    assert load_config(_Names, path).methods == ("rfm", "gfm-lsd", "gfm-psd")
    assert load_config(_Names, None, {"methods": " x ,y"}).methods == ("x", "y")


@pytest.mark.parametrize("text", ["1: 2\nsteps: 3\n", "off: 2\nstepz: 3\n"])
def test_a_yaml_key_that_is_not_a_string_is_named_as_an_unknown_field(tmp_path, text: str) -> None:
    """YAML reads ``1:`` as an int key and ``off:`` as a bool key; listing them was a TypeError traceback."""
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"keys\.yaml: unknown field\(s\) .*(1|False)"):
        load_config(ToyConfig, path)
