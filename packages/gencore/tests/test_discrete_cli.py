"""``gencore discrete compare`` end to end on tiny settings, the process registry and user errors."""

from __future__ import annotations

import json
import math
import sys

import pytest

from gencore.cli import main
from gencore.discrete import MaskedDiffusion, UniformDiffusion
from gencore.discrete.registry import PROCESSES, make_process
from gencore.discrete.tasks import make_task
from gencore.errors import ConfigError

TINY = ["--steps", "3", "--n-eval", "8", "--n-time", "2", "--n-samples", "16", "--sample-steps", "4"]
TINY += ["--hidden", "8", "--depth", "1", "--no-progress"]


@pytest.mark.parametrize(
    ("task", "extra", "stats", "nfe"),
    [
        ("grid", [], ["hist_tv"], 4),
        ("dna", ["--guidance-scale", "2.0"], ["kmer3_tv", "motif_rate"], 8),
        ("digits", [], ["mean_pixel", "mmd2_rbf"], 4),
    ],
)
def test_compare_writes_records_table_and_figures(tmp_path, capsys, task, extra, stats, nfe):
    out = tmp_path / "run" / "cmp.json"
    rc = main(
        ["discrete", "compare", "--task", task, "--processes", "masked,uniform", "--json", str(out), *TINY, *extra]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["process"] for r in data["records"]] == ["masked", "uniform"]
    for r in data["records"]:
        assert math.isfinite(r["nll_nats_per_token"]) and r["nll_nats_per_token"] > 0
        assert r["nfe"] == nfe and r["train_seconds"] >= 0 and r["steps"] == 3
        assert all(math.isfinite(r[s]) for s in stats)
    assert data["config"]["task"] == task and data["reference"]["process"].startswith("data")
    assert (
        0 < data["reference"]["independent_nll_nats_per_token"] <= math.log({"grid": 16, "dna": 4, "digits": 2}[task])
    )
    assert (out.parent / "cmp_bound.png").is_file() and (out.parent / "cmp_samples.png").is_file()
    printed = capsys.readouterr().out
    assert "nll_nats_per_token" in printed and "uniform" in printed


def test_unknown_process_is_one_sentence_and_exit_2(tmp_path, capsys):
    rc = main(["discrete", "compare", "--processes", "masked,bogus", "--json", str(tmp_path / "x.json"), *TINY])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "unknown discrete process(es) bogus" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("lr", ["inf", "-1", "nan"])
def test_a_non_finite_lr_is_refused_before_training(tmp_path, capsys, lr):
    # --lr inf trained to NaN and was reported as "every row of probs must have a positive finite total weight."
    rc = main(["discrete", "compare", "--processes", "masked", "--lr", lr, "--json", str(tmp_path / "x.json"), *TINY])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.splitlines() == [f"gencore: error: lr must be a positive finite number, got {float(lr)}."]
    assert not (tmp_path / "x.json").exists()


def test_unknown_task_is_exit_2(tmp_path, capsys):
    rc = main(["discrete", "compare", "--task", "text", "--processes", "masked", "--json", str(tmp_path / "x.json")])
    assert rc == 2 and "unknown discrete task 'text'" in capsys.readouterr().err


def test_registry_builds_processes_and_names_a_missing_module(monkeypatch):
    task = make_task("grid", n=64)
    assert isinstance(make_process("masked", task, 8), MaskedDiffusion)
    uniform = make_process("uniform", task, 8)
    assert isinstance(uniform, UniformDiffusion) and uniform.input_dim == task.vocab_size == 16
    assert set(PROCESSES) >= {"masked", "uniform", "wf-simplex", "learned-forward", "fixed-mask", "dirichlet-sde"}
    monkeypatch.setitem(sys.modules, "gencore.discrete.wright_fisher", None)  # makes the import fail
    with pytest.raises(ConfigError, match=r"gencore\.discrete\.wright_fisher"):
        make_process("wf-simplex", task, 8)
    with pytest.raises(ConfigError, match="unknown discrete process"):
        make_process("absorbing", task, 8)


def test_compare_reads_a_yaml_config_and_flags_override_it(tmp_path, capsys):
    cfg = tmp_path / "cmp.yaml"
    cfg.write_text("task: grid\nprocesses: [masked]\nheads: 2\nlabel_drop: 0.2\nsteps: 500\n")
    out = tmp_path / "cmp.json"
    assert main(["discrete", "compare", "--config", str(cfg), "--json", str(out), *TINY]) == 0
    config = json.loads(out.read_text())["config"]
    # heads and label_drop have no flag; TINY's --steps 3 overrides the file's 500
    assert (config["task"], config["processes"], config["heads"], config["label_drop"]) == ("grid", ["masked"], 2, 0.2)
    assert (config["steps"], config["hidden"], config["progress"]) == (3, 8, False)
    cfg.write_text("processes: [masked, bogus]\n")
    capsys.readouterr()
    assert main(["discrete", "compare", "--config", str(cfg), "--json", str(tmp_path / "x.json"), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown discrete process(es) bogus" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.json").exists()
