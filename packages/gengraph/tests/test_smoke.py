"""Smoke test: gengraph installs beside gencore alone and its command answers."""

from __future__ import annotations

from gencore.testing import check_console_script, check_out_folder_refused


def test_console_script() -> None:
    check_console_script("gengraph")


def test_train_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("gengraph", tmp_path, "train", "--data", "community-small", "--steps", "1")
