"""Smoke test: geninterp installs beside gencore alone and its command answers."""

from __future__ import annotations

from pathlib import Path

from gencore.testing import (
    check_benchmark_scripts,
    check_console_script,
    check_engine_refusals_leave_no_folder,
    check_out_folder_refused,
)


def test_console_script() -> None:
    check_console_script("geninterp")


def test_benchmark_scripts_answer_help() -> None:
    check_benchmark_scripts(Path(__file__).parents[1] / "benchmarks")


def test_train_sae_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("geninterp", tmp_path, "train-sae", "--acts", "acts")


def test_train_sae_checks_engine_settings_before_making_its_folder(tmp_path, store_dir) -> None:
    args = ("train-sae", "--acts", str(store_dir), "--steps", "2", "--batch-tokens", "32", "--width", "16")
    check_engine_refusals_leave_no_folder("geninterp", tmp_path, *args, flags=("--nproc", "--resume"))


def test_capture_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("geninterp", tmp_path, "capture", "--layer", "3")
