"""Smoke test: genimage installs beside gencore alone and its command answers."""

from __future__ import annotations

from pathlib import Path

from gencore.testing import (
    check_benchmark_scripts,
    check_console_script,
    check_engine_refusals_leave_no_folder,
    check_out_folder_refused,
)


def test_console_script() -> None:
    check_console_script("genimage")


def test_benchmark_scripts_answer_help() -> None:
    check_benchmark_scripts(Path(__file__).parents[1] / "benchmarks")


def test_train_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("genimage", tmp_path, "train", "--data", "digits", "--steps", "1")


def test_train_checks_engine_settings_before_making_its_folder(tmp_path) -> None:
    check_engine_refusals_leave_no_folder("genimage", tmp_path, "train", "--data", "digits", "--steps", "1")


def test_watermark_embed_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("genimage", tmp_path, "watermark", "embed", "--key", "k.json", "--run", "r")
