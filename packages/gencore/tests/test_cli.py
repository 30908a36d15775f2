"""The gencore command: happy paths on tiny runs, and one-sentence errors for bad input."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gencore.cli import main
from gencore.command import ENGINE_OPTIONS, add_commands, benchmark_parser, make_parser
from gencore.testing import (
    check_benchmark_scripts,
    check_console_script,
    check_engine_refusals_leave_no_folder,
    check_out_folder_refused,
    check_seed_refused,
    undocumented_options,
)

TINY = ["--steps", "30", "--n-data", "256", "--n-eval", "128", "--no-progress"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gencore.cli", *args], capture_output=True, text=True)


def test_console_script() -> None:
    check_console_script("gencore")
    assert "toy" in _cli("--help").stdout


def test_benchmark_parser(capsys) -> None:
    parser = benchmark_parser("\nTime the thing.\n\nDetails.\n", "bench_thing.json")
    assert parser.parse_args([]).out_json == "bench_thing.json"
    assert parser.parse_args(["r.json"]).out_json == "r.json"
    assert benchmark_parser("Time it.").parse_args([]).out_json is None  # no file: the records are printed only
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["--help"])
    help_text = capsys.readouterr().out
    assert stop.value.code == 0 and "Time the thing." in help_text and "(default bench_thing.json)" in help_text


def test_benchmark_scripts_answer_help(tmp_path) -> None:
    check_benchmark_scripts(Path(__file__).parents[1] / "benchmarks")
    (tmp_path / "by_hand.py").write_text('import sys\n\nif __name__ == "__main__":\n    print(sys.argv[1])\n')
    (tmp_path / "helper.py").write_text("X = 1\n")  # no main block: not a script, not checked
    with pytest.raises(AssertionError, match=r"argparse: by_hand\.py$"):
        check_benchmark_scripts(tmp_path)


def test_undocumented_options_are_found_at_any_depth() -> None:
    parser = make_parser("prog", "0", "a test parser")
    parser.add_argument("--top")
    sub = add_commands(parser)
    a = sub.add_parser("a", aliases=["alias"], help="the first command")
    a.add_argument("--documented", help="says what it does")
    a.add_argument("name")
    nested = add_commands(sub.add_parser("b", help="a command group"))
    nested.add_parser("c", help="a nested command").add_argument("--deep", action="store_true")
    nested.add_parser("d")
    assert undocumented_options(parser) == ["prog --top", "prog a name", "prog b d", "prog b c --deep"]


def test_help_names_every_default_once() -> None:
    parser = make_parser("prog", "0", "a test parser")
    parser.add_argument("--steps", type=int, default=0, help="optimiser steps")
    parser.add_argument("--names", default=("a", "b"), help="names")
    parser.add_argument("--rate", default="5%", help="a rate")
    parser.add_argument("--lr", type=float, default=1e-3, help="learning rate (default 1e-3)")
    parser.add_argument("--seed", type=int, help="seed")
    parser.add_argument("--quiet", action="store_true", help="say less")
    text = " ".join(parser.format_help().split())
    assert "optimiser steps (default 0)" in text and "names (default a,b)" in text and "a rate (default 5%)" in text
    assert "learning rate (default 1e-3)" in text and text.count("default") == 4
    assert "seed --quiet" in text and "say less" in text


def test_engine_options_are_train_config_fields_with_its_choices_and_defaults() -> None:
    from gencore.train.config import NAN_POLICIES, PARALLELISMS, PRECISIONS, TrainConfig

    stated = {  # the default each help text names, as TrainConfig holds it
        "checkpoint-every": ("default 0", 0),
        "keep-last": ("default 3", 3),
        "precision": ("default fp32", "fp32"),
        "nan-policy": ("skip the step (default)", "skip"),
        "clip-grad-norm": ("default: none", None),
        "parallel": ("DDP (default)", "ddp"),
    }
    assert set(stated) == set(ENGINE_OPTIONS)
    choices = {"precision": PRECISIONS, "nan-policy": NAN_POLICIES, "parallel": PARALLELISMS}
    for name, spec in ENGINE_OPTIONS.items():
        field = spec.get("dest", name)
        text, value = stated[name]
        assert text in spec["help"] and getattr(TrainConfig(), field) == value, name
        assert tuple(spec.get("choices", ())) == tuple(choices.get(name, ())), name


def test_toy_train_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("gencore", tmp_path, "toy", "train")


def test_toy_train_checks_engine_settings_before_making_its_folder(tmp_path) -> None:
    check_engine_refusals_leave_no_folder("gencore", tmp_path, "toy", "train", "--steps", "2")


@pytest.mark.parametrize("steps", ["0", "-1"])
def test_demo_refuses_bad_steps_before_making_its_folder(tmp_path, capsys, steps) -> None:
    # a refused demo left an empty report folder behind
    assert main(["demo", "--steps", steps, "--out", str(tmp_path / "report"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gencore: error: --steps must be a positive integer, got {steps}."]
    assert not (tmp_path / "report").exists()


def test_toy_train_writes_its_folder(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    assert (
        main(
            [
                "toy",
                "train",
                "--dataset",
                "moons",
                "--coupling",
                "exact",
                "--nfe",
                "1,2",
                "--out",
                str(out),
                *TINY,
            ]
        )
        == 0
    )
    for name in ("config.json", "metrics.json", "metrics.jsonl", "samples.png", "loss.png", "model/model.safetensors"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert [r["nfe"] for r in metrics["records"]] == [1, 2]
    assert all(r["w2"] > 0 for r in metrics["records"])
    assert not [p for p in out.rglob("*.tmp")]


def test_toy_train_keeps_the_yaml_values_of_flags_not_given(tmp_path) -> None:
    cfg = tmp_path / "toy.yaml"
    cfg.write_text("dataset: moons\ncoupling: exact\nema_decay: 0.9\nhidden: 16\nsteps: 500\nnfe: [1]\n")
    out = tmp_path / "run"
    assert main(["toy", "train", "--config", str(cfg), "--out", str(out), *TINY]) == 0
    saved = json.loads((out / "config.json").read_text())
    saved = saved.get("config", saved)
    # --coupling and --ema-decay were not given: the file's values stand; TINY's --steps overrides the file's 500
    assert (saved["coupling"], saved["ema_decay"], saved["hidden"], saved["steps"]) == ("exact", 0.9, 16, 30)


def test_toy_compare_records(tmp_path) -> None:
    js = tmp_path / "res" / "out.json"
    rc = main(
        [
            "toy",
            "compare",
            "--dataset",
            "8gaussians",
            "--couplings",
            "independent,sinkhorn",
            "--nfe",
            "1,4",
            "--json",
            str(js),
            *TINY,
        ]
    )
    assert rc == 0
    records = json.loads(js.read_text())["records"]
    assert {(r["coupling"], r["nfe"]) for r in records} == {(c, k) for c in ("independent", "sinkhorn") for k in (1, 4)}
    assert all({"coupling", "nfe", "w2"} <= set(r) for r in records)
    assert (tmp_path / "res" / "out_samples.png").is_file()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["toy", "train", "--dataset", "cifar", "--out", "{tmp}/x"], "unknown dataset 'cifar'"),
        (["toy", "train", "--coupling", "magic", "--out", "{tmp}/x"], "unknown coupling 'magic'"),
        (
            ["toy", "compare", "--couplings", "independent,nope", "--json", "{tmp}/o.json"],
            "unknown coupling(s) nope",
        ),
        (
            ["toy", "compare", "--couplings", "independent", "--nfe", "1,x", "--json", "{tmp}/o.json"],
            "comma-separated",
        ),
        (
            ["toy", "compare", "--couplings", " , ", "--json", "{tmp}/o.json"],
            "expected one or more comma-separated names such as a,b, got ' , '",
        ),
        (["toy", "train", "--out", "{tmp}/file/sub"], "'{tmp}/file' is a file, not a folder"),
        (["toy", "train", "--steps", "0", "--out", "{tmp}/x"], "steps must be a positive integer"),
        (["toy", "compare", "--couplings", "independent", "--json", "{tmp}/file/o.json"], "is a file, not a folder"),
        (["toy", "compare", "--couplings", "independent", "--json", "{tmp}"], "is a folder; name a file"),
    ],
)
def test_bad_input_is_one_sentence(tmp_path, args: list[str], needle: str) -> None:
    (tmp_path / "file").write_text("occupied")
    proc = _cli(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert needle.replace("{tmp}", str(tmp_path)) in proc.stderr
    assert (tmp_path / "file").read_text() == "occupied"


@pytest.mark.distributed
def test_toy_train_with_two_processes_then_refuses_to_overwrite(tmp_path) -> None:
    out = tmp_path / "run"
    args = ["toy", "train", "--dataset", "moons", "--nfe", "1", "--out", str(out), *TINY]
    proc = _cli(*args, "--nproc", "2", "--checkpoint-every", "10")
    assert proc.returncode == 0, proc.stderr
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 30
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [f"step-{s:09d}" for s in (10, 20, 30)]
    before = (out / "config.json").read_text()
    again = _cli(*args)  # same folder, no --resume: refused, nothing touched
    assert again.returncode == 2 and "--resume auto" in again.stderr and "Traceback" not in again.stderr
    assert (out / "config.json").read_text() == before


def test_resuming_a_finished_toy_run_trains_and_rewrites_nothing(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    args = ["toy", "train", "--dataset", "moons", "--nfe", "1", "--out", str(out), *TINY]
    assert main(args) == 0
    before = {str(p): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*args, "--resume", "auto"]) == 0
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    assert {str(p): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("signum", [2, 15])
def test_an_interrupted_command_exits_128_plus_the_signal(signum: int, capsys) -> None:
    import argparse

    from gencore.command import run
    from gencore.errors import Interrupted

    def stopped(args: argparse.Namespace) -> int:
        raise Interrupted("checkpoints are saved under runs/x; continue with --resume auto", signum)

    parser = argparse.ArgumentParser(prog="tool")
    parser.set_defaults(func=stopped)
    assert run(parser, []) == 128 + signum
    assert (
        capsys.readouterr().err
        == "tool: interrupted: checkpoints are saved under runs/x; continue with --resume auto\n"
    )


def test_a_warning_in_a_command_is_one_line(capsys) -> None:
    import argparse
    import warnings

    from gencore.command import run

    def warns(args: argparse.Namespace) -> int:
        message = "skipping unusable checkpoint 'c/step-3': bad digest. Falling back to an older one."
        warnings.warn(message, stacklevel=1)
        return 0

    parser = argparse.ArgumentParser(prog="tool")
    parser.set_defaults(func=warns)
    before = warnings.showwarning
    assert run(parser, []) == 0
    err = capsys.readouterr().err
    assert err == "tool: warning: skipping unusable checkpoint 'c/step-3': bad digest. Falling back to an older one.\n"
    assert warnings.showwarning is before


def test_seed_int_takes_the_train_config_range() -> None:
    from gencore.command import SEED_LIMIT, seed_int
    from gencore.train.config import TrainConfig

    assert seed_int("0") == 0 and seed_int(str(SEED_LIMIT - 1)) == SEED_LIMIT - 1
    TrainConfig(seed=SEED_LIMIT - 1).validate()  # the top of the range is one the engine takes
    for text in ("-1", str(SEED_LIMIT), str(2**64), "1.5", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match=r"expected a seed, an integer in \[0, 2\*\*32\)"):
            seed_int(text)


@pytest.mark.parametrize("value", ["-1", str(10**20)])
@pytest.mark.parametrize(
    "verb",
    [
        ["toy", "train", "--out", "{tmp}/run"],
        ["toy", "compare", "--couplings", "independent", "--json", "{tmp}/o.json"],
        ["flowmap", "compare", "--methods", "regress", "--json", "{tmp}/o.json"],
        ["discrete", "compare", "--json", "{tmp}/o.json"],
        ["manifold", "compare", "--json", "{tmp}/o.json"],
    ],
)
def test_a_seed_outside_the_range_is_refused_before_any_work(tmp_path, capsys, verb, value) -> None:
    """10**20 was a traceback from torch's generator ("Overflow when unpacking long long"); -1 trained the flowmap,
    discrete and manifold comparisons although the toy commands refused it."""
    check_seed_refused(main, capsys, [[a.replace("{tmp}", str(tmp_path)) for a in verb]], value)
    assert list(tmp_path.iterdir()) == []


def test_refuse_overwriting_input_compares_files_not_spellings(tmp_path, monkeypatch) -> None:
    from gencore.command import refuse_overwriting_input
    from gencore.errors import StorageError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.sdf").write_text("input")
    (tmp_path / "other.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    refuse_overwriting_input(None, "--json", "in.sdf")
    refuse_overwriting_input("new.json", "--json", "in.sdf", "new.json")  # not written yet: nothing to destroy
    refuse_overwriting_input("other.json", "--json", "in.sdf", None, "sub", "missing.sdf")
    for spelling in ("in.sdf", "./in.sdf", "sub/../in.sdf", str(tmp_path / "in.sdf")):
        with pytest.raises(StorageError, match=r"^--json .+ is the input file 'in.sdf', which writing it would"):
            refuse_overwriting_input(spelling, "--json", None, "in.sdf")
    os.link(tmp_path / "in.sdf", tmp_path / "hard.sdf")  # one file under two names
    with pytest.raises(StorageError, match="is the input file"):
        refuse_overwriting_input("hard.sdf", "--out", "in.sdf")
    assert (tmp_path / "in.sdf").read_text() == "input"


@pytest.mark.parametrize(
    "verb",
    [
        ["toy", "compare", "--couplings", "independent"],
        ["flowmap", "compare", "--methods", "regress"],
        ["discrete", "compare"],
        ["manifold", "compare"],
    ],
)
def test_a_comparison_never_writes_its_records_over_its_config(tmp_path, capsys, verb) -> None:
    """--json naming the --config file replaced the YAML settings with the records once the comparison finished."""
    config = tmp_path / "settings.yaml"
    config.write_text("seed: 3\n")
    assert main([*verb, "--config", str(config), "--json", str(config), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gencore: error: --json {str(config)!r} is the input file {str(config)!r}, which writing it would destroy; "
        "choose another --json."
    ]
    assert config.read_text() == "seed: 3\n" and sorted(tmp_path.iterdir()) == [config]
