"""Smoke test: the package installs beside gencore alone and its command answers."""

from __future__ import annotations

import subprocess
import sys

import pytest

import gencore
import gengraph
from gengraph.cli import main


def test_version_matches_metadata() -> None:
    from importlib.metadata import version

    assert gengraph.__version__ == version("gengraph")


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gengraph {gengraph.__version__}"


def test_cli_info(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    assert gencore.__version__ in capsys.readouterr().out


def test_console_script_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gengraph.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: gengraph" in out


def test_unknown_verb_is_one_sentence() -> None:
    proc = subprocess.run([sys.executable, "-m", "gengraph.cli", "nope"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "invalid choice" in proc.stderr
