"""Smoke test: gengraph installs beside gencore alone and its command answers."""

from __future__ import annotations

from pathlib import Path

from gencore.testing import (
    check_benchmark_scripts,
    check_console_script,
    check_engine_refusals_leave_no_folder,
    check_out_folder_refused,
)


def test_console_script() -> None:
    check_console_script("gengraph")


def test_benchmark_scripts_answer_help() -> None:
    check_benchmark_scripts(Path(__file__).parents[1] / "benchmarks")


def test_train_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("gengraph", tmp_path, "train", "--data", "community-small", "--steps", "1")


def test_train_checks_engine_settings_before_making_its_folder(tmp_path) -> None:
    args = ("train", "--data", "community-small", "--steps", "1")
    check_engine_refusals_leave_no_folder("gengraph", tmp_path, *args, flags=("--nproc", "--checkpoint-every"))


def test_demo_report_lists_every_kernel_named_mmd_with_its_interval() -> None:
    from gengraph.cli import _demo_report
    from gengraph.datasets import load_dataset
    from gengraph.evaluation import evaluate_sets

    train, test = load_dataset("community-small", "train"), load_dataset("community-small", "test")
    record = evaluate_sets(test, test[:8], train=train, dataset="community-small", n_boot=20)
    text = _demo_report(record, steps=300, n_train=64, n_test=len(test), n_generated=8, seconds=1.0)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if "_mmd_" in line}
    assert sorted(rows) == sorted(k for k in record if "_mmd_" in k and not k.endswith(("_low", "_high")))
    for key, line in rows.items():
        low, high = (float(v) for v in line.split(" | ")[2].strip(" |").split(" - "))
        assert low == round(record[f"{key}_low"], 4) and high == round(record[f"{key}_high"], 4)
    assert "| valid |" in text and "![real and generated graphs](graphs.png)" in text
