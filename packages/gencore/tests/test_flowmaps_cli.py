"""``gencore flowmap compare`` end to end on tiny settings, and its one-sentence errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gencore.cli import main


def test_flowmap_compare_writes_records_and_figures(tmp_path, capsys) -> None:
    js = tmp_path / "res" / "fm.json"
    figs = tmp_path / "figs"
    args = ["flowmap", "compare", "--methods", "meanflow,cmt,piflow,regress,teacher", "--nfe", "1,2"]
    args += ["--steps", "15", "--teacher-steps", "20", "--cmt-steps", "10", "--n-eval", "64", "--batch-size", "32"]
    assert main([*args, "--json", str(js), "--out", str(figs), "--no-progress", "--seed", "3"]) == 0
    out = json.loads(js.read_text())
    records = out["records"]
    keys = {(r["method"], r["nfe"]) for r in records}
    expected = {(m, k) for m in ("meanflow", "cmt", "piflow") for k in (1, 2)} | {("regress", 1), ("teacher", 32)}
    assert keys == expected
    for r in records:
        assert r["w2"] > 0 and "mmd2_rbf_unbiased" in r and "train_seconds" in r and 0 <= r["modes_covered"] <= 8
    assert out["config"]["seed"] == 3 and out["config"]["steps"] == 15
    assert (figs / "fm_samples.png").is_file() and (figs / "fm_w2.png").is_file()
    printed = capsys.readouterr().out
    assert "meanflow" in printed and "nfe=1" in printed


def test_bad_method_exits_2_with_one_sentence(tmp_path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gencore.cli",
            "flowmap",
            "compare",
            "--methods",
            "meanflow,bogus",
            "--json",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "bogus" in lines[0] and "meanflow, cmt, piflow" in lines[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("lr", float("nan"), "lr must be a positive finite number, got nan."),
        ("lr", float("inf"), "lr must be a positive finite number, got inf."),
        ("cmt_lr", -1.0, "cmt_lr must be a positive finite number, got -1.0."),
        ("cmt_lr", float("inf"), "cmt_lr must be a positive finite number, got inf."),
        ("ema_decay", 1.0, "ema_decay must be in [0, 1), got 1.0."),
        ("meanflow_ratio", 1.5, "meanflow_ratio must be in [0, 1], got 1.5."),
        ("meanflow_weight_power", float("nan"), "meanflow_weight_power must be >= 0, got nan."),
    ],
)
def test_each_bad_rate_is_named(field: str, value: float, message: str) -> None:
    from gencore.errors import ConfigError
    from gencore.flowmaps.experiment import FlowMapConfig

    with pytest.raises(ConfigError) as err:
        FlowMapConfig(**{field: value}).validate()
    assert str(err.value) == message
