"""Smoke test: the package installs beside gencore alone and its command answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gencore
import genmol
from genmol.cli import main


def test_version_matches_metadata() -> None:
    from importlib.metadata import version

    assert genmol.__version__ == version("genmol")


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"genmol {genmol.__version__}"


def test_cli_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    assert gencore.__version__ in capsys.readouterr().out


def test_console_script_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "genmol.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: genmol" in out


def test_unknown_verb_is_one_sentence() -> None:
    proc = subprocess.run([sys.executable, "-m", "genmol.cli", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "invalid choice" in proc.stderr
