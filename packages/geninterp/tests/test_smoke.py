"""Smoke test: geninterp installs beside gencore alone and its command answers."""

from __future__ import annotations

from gencore.testing import check_console_script


def test_console_script() -> None:
    check_console_script("geninterp")
