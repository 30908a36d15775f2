"""The command line end to end (small), and bad input as one line on stderr with exit code 2."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from gencore.testing import (
    check_benchmark_scripts,
    check_console_script,
    check_engine_refusals_leave_no_folder,
    check_out_folder_refused,
    check_seed_refused,
)
from genrl.cli import main
from genrl.dataset import DATA_NAME


def test_console_script() -> None:
    check_console_script("genrl")


def test_benchmark_scripts_answer_help() -> None:
    check_benchmark_scripts(Path(__file__).parents[1] / "benchmarks")


def test_train_refuses_an_unusable_out_folder_before_any_work(tmp_path) -> None:
    check_out_folder_refused("genrl", tmp_path, "train", "--agent", "value-flows", "--data", "d")


def test_train_checks_engine_settings_before_making_its_folder(tmp_path) -> None:
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(tmp_path / "d")]) == 0
    args = ("train", "--agent", "flow-bc", "--data", str(tmp_path / "d"), "--steps", "2")
    check_engine_refusals_leave_no_folder("genrl", tmp_path, *args, flags=("--nproc", "--checkpoint-every"))


def test_dataset_make_refuses_an_unusable_out_folder_before_any_episode(tmp_path) -> None:
    check_out_folder_refused("genrl", tmp_path, "dataset", "make", "--env", "toy-bimodal", "--steps", "30")


def test_dataset_make_never_overwrites_a_dataset(tmp_path, capsys) -> None:
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    before = {name: (d / name).read_bytes() for name in ("data.npz", "card.json")}
    capsys.readouterr()
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "50", "--out", str(d), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already holds a genrl dataset" in err and "Traceback" not in err
    assert {name: (d / name).read_bytes() for name in before} == before


def test_make_train_evaluate(tmp_path, capsys) -> None:
    d, run, out = tmp_path / "d", tmp_path / "runs" / "r", tmp_path / "e.json"
    assert (
        main(
            [
                "dataset",
                "make",
                "--env",
                "Pendulum-v1",
                "--policy",
                "random",
                "--steps",
                "400",
                "--out",
                str(d),
                "--no-progress",
            ]
        )
        == 0
    )
    assert main(["dataset", "info", str(d)]) == 0
    assert "Pendulum-v1" in capsys.readouterr().out
    args = ["train", "--agent", "value-flows", "--data", str(d), "--steps", "4", "--out", str(run), "--no-progress"]
    assert main([*args, "--batch-size", "32", "--log-every", "2"]) == 0
    assert (run / "agent" / "model.safetensors").is_file() and (run / "run.json").is_file()
    assert main(["evaluate", "--run", str(run), "--episodes", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["episodes"] == 2 and all(math.isfinite(r) for r in res["returns"])
    assert res["agent"] == "value-flows" and res["nfe_per_decision"] == 11
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--episodes", "1", "--env", "MountainCarContinuous-v0"]) == 2
    err = capsys.readouterr().err
    assert "observations of size 2 and actions of size 1, but the agent was trained for 3 and 1" in err
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(args) == 2  # a finished run is not overwritten
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "already holds a genrl run" in err[0] and "--resume" in err[0]
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # --resume continues only a checkpointed run, with the agent, data and config it was started with
    other = [a if a != "value-flows" else "fql" for a in args]
    more = [a if a != "4" else "6" for a in args]  # a longer run than the finished one
    for argv, message in [
        ([*other, "--batch-size", "32", "--resume"], "trained with other settings (agent: 'value-flows' -> 'fql')"),
        ([*args, "--batch-size", "64", "--resume"], "(config.batch_size: 32 -> 64)"),
        ([*more, "--batch-size", "32", "--resume"], "a run without checkpoints, so there is nothing to resume"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert main([*args, "--batch-size", "32", "--resume"]) == 0  # the finished run itself: nothing to train
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def _sigterm_once_written(cmd: list[str], log, sig: int = signal.SIGTERM) -> str:
    """Start ``cmd``, send it ``sig`` once ``log`` holds a record, check it exits 128 + ``sig``; its stderr."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    start = time.monotonic()
    while not (log.is_file() and log.read_text()):
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() - start < 120, "the run did not start"
        time.sleep(0.05)
    proc.send_signal(sig)
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert code in (128 + sig, -sig), (code, err[-2000:])  # -sig: killed outright (SIGKILL cannot be handled)
    return err


def test_sigterm_checkpoints_exits_143_and_resumes(tmp_path, capsys) -> None:
    """A scheduler's SIGTERM mid-run: a checkpoint, no agent (the run is unfinished), exit 128 + 15; then --resume."""
    from gencore.train import find_checkpoints

    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "fql", "--data", str(d), "--out", str(run), "--no-progress", "--batch-size", "8"]
    cmd = [sys.executable, "-m", "genrl.cli", *args, "--steps", "1000000", "--log-every", "1"]
    err = _sigterm_once_written(cmd, run / "metrics.jsonl")
    assert "interrupted: checkpoints are saved under" in err and "--resume" in err
    (ckpt,) = find_checkpoints(run / "checkpoints")
    done = int(ckpt.name.split("-")[1])
    assert done > 0 and not (run / "agent").exists()
    assert main([*args, "--steps", str(done + 2), "--log-every", "1", "--resume"]) == 0
    assert (run / "agent" / "model.safetensors").is_file()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, done + 3))


def test_sigterm_in_the_online_phase_checkpoints_exits_143_and_resumes(tmp_path) -> None:
    """The online phase stops like the offline one: a checkpoint, no agent/, exit 143; --resume skips the offline
    phase (the checkpoint holds the whole agent) and finishes the online one."""
    from gencore.train import find_checkpoints

    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "Pendulum-v1", "--steps", "300", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--out", str(run), "--no-progress", "--steps", "3"]
    cmd = [sys.executable, "-m", "genrl.cli", *args, "--batch-size", "16", "--online-steps", "1000000"]
    err = _sigterm_once_written(cmd, run / "online" / "metrics.jsonl")
    assert f"interrupted: checkpoints are saved under {run / 'online'}" in err and "--resume" in err
    (ckpt,) = find_checkpoints(run / "online" / "checkpoints")
    done = int(ckpt.name.split("-")[1])
    assert done > 0 and not (run / "agent").exists() and not find_checkpoints(run / "checkpoints")
    offline_log = (run / "metrics.jsonl").read_text()
    assert main([*args, "--batch-size", "16", "--online-steps", str(done + 3), "--resume"]) == 0
    assert (run / "agent" / "model.safetensors").is_file() and (run / "loss.png").is_file()
    assert (run / "metrics.jsonl").read_text() == offline_log  # the offline phase did not run again
    steps = [json.loads(line)["step"] for line in (run / "online" / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == done + 3


def test_a_run_killed_in_its_online_phase_has_no_agent_and_resumes(tmp_path, capsys) -> None:
    """SIGKILL cannot be handled: a run killed during its online phase must still not look finished. The offline
    agent goes to offline_agent/, agent/ is written only at the end, evaluate refuses the run, and --resume finishes
    it (from the offline checkpoint, or from an online one if it was written in time)."""
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "Pendulum-v1", "--steps", "300", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--out", str(run), "--no-progress", "--steps", "3"]
    args += ["--batch-size", "16", "--checkpoint-every", "3", "--log-every", "1"]
    cmd = [sys.executable, "-m", "genrl.cli", *args, "--online-steps", "1000000"]
    _sigterm_once_written(cmd, run / "online" / "metrics.jsonl", signal.SIGKILL)
    assert not (run / "agent").exists() and (run / "offline_agent" / "model.safetensors").is_file()
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds no trained agent (agent/)" in err[0] and "--resume" in err[0], err
    assert main([*args, "--online-steps", "100", "--resume"]) == 0  # past any online checkpoint the kill left
    assert (run / "agent" / "model.safetensors").is_file()
    assert main(["evaluate", "--run", str(run), "--episodes", "1"]) == 0


def test_a_finished_online_run_goes_on_with_more_online_steps_and_refuses_before_writing(tmp_path, capsys) -> None:
    """--online-steps may grow on --resume (the never-wrapped replay buffer moves into the larger one); what cannot
    continue (fewer online steps than taken, another --steps after the online phase began) is refused before
    run.json or agent/ change."""
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "Pendulum-v1", "--steps", "300", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--out", str(run), "--no-progress", "--batch-size", "16"]
    args += ["--checkpoint-every", "10", "--log-every", "10"]
    assert main([*args, "--steps", "4", "--online-steps", "20"]) == 0
    assert main([*args, "--steps", "4", "--online-steps", "40", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in (run / "online" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40]
    before = {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    for extra, message in [
        (["--steps", "4", "--online-steps", "30"], "holds 340 transitions, more than this run's replay buffer (330)"),
        (["--steps", "8", "--online-steps", "40"], "has begun its online phase after 4 offline steps"),
    ]:
        assert main([*args, *extra, "--resume"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert {str(p): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_resume_accepts_a_run_written_before_a_config_field_existed_while_at_its_default(tmp_path, capsys) -> None:
    """A run.json whose config lacks a field (written by a version before the field was added) resumes while the
    field holds its default, and is refused, naming the field, when the field is set to something else."""
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "value-flows", "--data", str(d), "--out", str(run), "--no-progress"]
    args += ["--steps", "2", "--batch-size", "8", "--checkpoint-every", "1"]
    assert main(args) == 0
    record = json.loads((run / "run.json").read_text())
    assert record["config"].pop("q_noises") == 1  # the field's default
    (run / "run.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert "already holds this run, finished; nothing to train" in capsys.readouterr().out
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"q_noises": 2}))
    assert main([*args, "--config", str(cfg), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(config.q_noises: '(unset)' -> 2)" in err[0], err


def test_resume_past_a_corrupt_checkpoint_warns_once_and_falls_back(tmp_path, capsys) -> None:
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "fql", "--data", str(d), "--out", str(run), "--no-progress", "--batch-size", "8"]
    args += ["--checkpoint-every", "1", "--log-every", "1"]
    assert main([*args, "--steps", "3"]) == 0
    (run / "checkpoints" / "step-000000003" / "state.json").write_text("{")
    capsys.readouterr()
    assert main([*args, "--steps", "4", "--resume", "auto"]) == 0  # '--resume auto', as the other gen* commands take
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "skipping unusable checkpoint" in err[0] and "step-000000003" in err[0], err
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-2:] == [3, 4]  # trained again from step 2


def test_bad_dataset_is_one_line_exit_2(tmp_path, capsys, toy_dataset) -> None:
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    arrays = dict(np.load(d / DATA_NAME))
    arrays.pop("actions")
    np.savez_compressed(d / DATA_NAME, **arrays)
    capsys.readouterr()
    code = main(
        ["train", "--agent", "fql", "--data", str(d), "--steps", "2", "--out", str(tmp_path / "r"), "--no-progress"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "SHA-256" in err or "actions" in err
    code = main(["train", "--agent", "nope", "--data", str(d), "--steps", "2", "--out", str(tmp_path / "r")])
    assert code == 2 and "unknown offline agent 'nope'" in capsys.readouterr().err
    code = main(["dataset", "make", "--env", "CartPole-v1", "--steps", "10", "--out", str(tmp_path / "c")])
    assert code == 2 and "Discrete actions" in capsys.readouterr().err


def test_actions_outside_the_card_bounds_are_one_line_exit_2_before_run_json(tmp_path, capsys) -> None:
    from genrl.dataset import save_dataset
    from genrl.generate import make_dataset

    ds, card = make_dataset("Pendulum-v1", "random", 60, seed=0, progress=False)  # torques in [-2, 2]
    save_dataset(tmp_path / "d", ds, {k: v for k, v in card.items() if k not in ("action_low", "action_high")})
    run = tmp_path / "r"
    capsys.readouterr()
    code = main(["train", "--agent", "fql", "--data", str(tmp_path / "d"), "--steps", "2", "--out", str(run)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "outside the agent's action bounds [-1, 1]" in err
    assert not run.exists()


def test_out_of_range_settings_are_one_line_exit_2(tmp_path, capsys) -> None:
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    (tmp_path / "c.yaml").write_text("discount: 1.5\n")
    (tmp_path / "one.yaml").write_text("discount: 1.0\n")  # a bare ZeroDivisionError before
    (tmp_path / "inf.yaml").write_text("lr: .inf\n")  # trained to NaN weights before
    base = ["train", "--agent", "value-flows", "--data", str(d), "--steps", "2", "--no-progress"]
    cases = [
        (["--batch-size", "0"], "agent config field 'batch_size' must be a positive integer, got 0"),
        (["--config", str(tmp_path / "c.yaml")], "agent config field 'discount' must be in [0, 1], got 1.5"),
        (["--config", str(tmp_path / "one.yaml")], "field 'discount' must be below 1 for the FQL family, got 1.0"),
        (["--config", str(tmp_path / "inf.yaml")], "agent config field 'lr' must be a finite number, got inf"),
        (["--log-every", "0"], "--log-every must be a positive integer"),
        (["--online-steps", "-3"], "--online-steps must be 0 (none) or positive"),
    ]
    capsys.readouterr()
    for k, (extra, message) in enumerate(cases):
        run = tmp_path / f"r{k}"
        assert main([*base, "--out", str(run), *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not run.exists()


def test_device_cuda_without_cuda_is_one_line_exit_2(tmp_path, capsys, monkeypatch) -> None:
    import torch

    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    capsys.readouterr()
    run = tmp_path / "r"
    code = main(["train", "--agent", "fql", "--data", str(d), "--steps", "2", "--out", str(run), "--device", "cuda"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no usable CUDA device" in err
    assert not run.exists()  # refused before anything is written
    args = ["train", "--agent", "fql", "--data", str(d), "--steps", "2", "--out", str(run), "--no-progress"]
    assert main([*args, "--batch-size", "16"]) == 0  # auto falls back to the CPU
    assert json.loads((run / "run.json").read_text())["device"] == "cpu"


def test_config_file_seed_is_used_unless_seed_is_given(tmp_path) -> None:
    """--seed and --batch-size override the --config file only when given (a default --seed 0 hid the file's seed)."""
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    (tmp_path / "c.yaml").write_text("seed: 7\nbatch_size: 8\n")
    base = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--no-progress"]
    base += ["--config", str(tmp_path / "c.yaml")]
    assert main([*base, "--out", str(tmp_path / "r1")]) == 0
    assert json.loads((tmp_path / "r1" / "run.json").read_text())["config"]["seed"] == 7
    assert main([*base, "--out", str(tmp_path / "r2"), "--seed", "3", "--batch-size", "4"]) == 0
    config = json.loads((tmp_path / "r2" / "run.json").read_text())["config"]
    assert config["seed"] == 3 and config["batch_size"] == 4


def test_bad_run_json_is_one_line_exit_2(tmp_path, capsys) -> None:
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(run), "--no-progress"]
    assert main([*args, "--batch-size", "8"]) == 0
    for text, message in [("[1]", "does not hold a JSON object"), ('{"env_id": 5}', "field 'env_id' must be")]:
        (run / "run.json").write_text(text)
        capsys.readouterr()
        for argv in (["evaluate", "--run", str(run), "--episodes", "1"], [*args, "--resume"]):
            assert main(argv) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "run.json" in err[0] and message in err[0], err


def test_resume_with_another_nproc_is_refused_before_run_json_changes(tmp_path, capsys) -> None:
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--out", str(run), "--no-progress", "--batch-size", "8"]
    assert main([*args, "--steps", "2", "--checkpoint-every", "2"]) == 0
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([*args, "--steps", "4", "--nproc", "2", "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "was written by 1 process(es); resume it with --nproc 1" in err[0], err
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_finished_run_extended_and_stopped_keeps_no_stale_agent(tmp_path, capsys) -> None:
    """--resume with more --steps, stopped by SIGTERM: agent/ is not the run's result any more, so it is gone
    (evaluate refuses the run) and the same --resume command goes on training instead of saying 'finished'."""
    from gencore.train import find_checkpoints

    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--out", str(run), "--no-progress", "--batch-size", "8"]
    args += ["--log-every", "1"]
    assert main([*args, "--steps", "2", "--checkpoint-every", "2"]) == 0 and (run / "agent").is_dir()
    log = run / "metrics.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "genrl.cli", *args, "--steps", "1000000", "--resume"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    start = time.monotonic()
    while len(log.read_text().splitlines()) < 4:  # two records of the resumed run beside the first run's two
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() - start < 120, "the run did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 143, err[-2000:]
    done = int(find_checkpoints(run / "checkpoints")[0].name.split("-")[1])  # newest first
    assert done > 2 and not (run / "agent").exists()
    assert main([*args, "--steps", str(done + 1), "--resume"]) == 0
    assert (run / "agent" / "model.safetensors").is_file() and "nothing to train" not in capsys.readouterr().out


def test_an_agent_folder_that_does_not_fit_its_weights_is_one_line_exit_2(tmp_path, capsys) -> None:
    """A damaged agent/config.json (spec or config edited, fields missing) is one sentence naming the folder, not a
    RuntimeError from load_state_dict or a TypeError from EnvSpec."""
    from genrl.agents import EnvSpec, make_agent

    spec = EnvSpec(obs_dim=3, action_dim=1, action_low=(-2.0,), action_high=(2.0,), env_id="Pendulum-v1")
    run = tmp_path / "r"
    make_agent("flow-bc", spec, {"hidden": 8, "depth": 1}).save(run / "agent")
    (run / "run.json").write_text(json.dumps({"agent": "flow-bc", "env_id": "Pendulum-v1"}))
    saved = json.loads((run / "agent" / "config.json").read_text())
    edits = [
        (lambda c: c["spec"].update(obs_dim=5), "do not fit the flow-bc agent"),
        (lambda c: c["config"].update(hidden=16), "do not fit the flow-bc agent"),
        (lambda c: c["spec"].pop("action_dim"), "field 'spec' does not describe an environment"),
        (lambda c: c["spec"].update(obs_dim="three"), "field 'obs_dim' must be an integer"),
        (lambda c: c["spec"].update(obs_dim=0), "obs_dim"),
        (lambda c: c.update(spec=[1, 2]), "is not a genrl agent config"),
        (lambda c: c.update(config=[1]), "field 'config' must be an object"),
    ]
    for edit, message in edits:
        config = json.loads(json.dumps(saved))
        edit(config)
        (run / "agent" / "config.json").write_text(json.dumps(config))
        capsys.readouterr()
        assert main(["evaluate", "--run", str(run), "--episodes", "1", "--device", "cpu", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and str(run / "agent") in err[0], err


def test_threads_below_one_is_one_line_exit_2(tmp_path, capsys) -> None:
    """--threads 0 was taken silently as 1 (exit 0 on bad input)."""
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    capsys.readouterr()
    run = tmp_path / "r"
    argv = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(run), "--threads", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--threads must be a positive integer, got 0" in err[0] and not run.exists()
    assert main(["evaluate", "--run", str(run), "--threads", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--threads must be a positive integer, got -1" in err[0]


def test_a_seed_outside_the_range_is_refused_before_any_work(tmp_path, capsys) -> None:
    """--seed 10**20 was a traceback from torch's generator (dataset make with a trained policy, train, evaluate);
    -1 was a traceback from gymnasium, in `train --online-steps` only after the offline phase had written its run."""
    d = tmp_path / "d"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    capsys.readouterr()
    verbs = [
        ["dataset", "make", "--env", "Pendulum-v1", "--steps", "10", "--out", str(tmp_path / "d2")],
        ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(tmp_path / "r")],
        ["evaluate", "--run", str(tmp_path / "r"), "--episodes", "1"],
    ]
    for value in ("-1", str(10**20)):
        check_seed_refused(main, capsys, verbs, value)
    for value in ("-1", str(10**20)):  # the same seed from a --config file
        (tmp_path / "c.yaml").write_text(f"seed: {value}\n")
        argv = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--config", str(tmp_path / "c.yaml")]
        assert main([*argv, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"genrl: error: seed must be an integer from 0 to {2**32 - 1}, got {value}."]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "d"]


def test_evaluate_never_writes_its_record_over_the_run(tmp_path, capsys) -> None:
    """``evaluate --json RUN/run.json`` replaced the run's description with the result: the run could be neither
    evaluated nor resumed again."""
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(run), "--no-progress"]
    assert main([*args, "--batch-size", "8"]) == 0
    capsys.readouterr()
    # the weights too: --json RUN/agent/model.safetensors replaced them with the record (rc 0 on a gymnasium run)
    for target in (run / "run.json", run / "agent" / "config.json", run / "agent" / "model.safetensors"):
        before = target.read_bytes()
        assert main(["evaluate", "--run", str(run), "--episodes", "1", "--json", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"genrl: error: --json {str(target)!r} is the input file {str(target)!r}, which writing it would "
            "destroy; choose another --json."
        ]
        assert target.read_bytes() == before


def test_evaluate_with_env_toy_bimodal_says_what_is_wrong(tmp_path, capsys) -> None:
    """``--env toy-bimodal`` was answered with "pass --env", which the user had done."""
    d, run = tmp_path / "d", tmp_path / "r"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(run), "--no-progress"]
    assert main([*args, "--batch-size", "8"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--run", str(run), "--episodes", "1", "--env", "toy-bimodal"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "genrl: error: --env toy-bimodal is genrl's offline toy chain, not a gymnasium environment to roll out in."
    ]
    assert main(["evaluate", "--run", str(run), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"genrl: error: run {str(run)!r} has no gymnasium environment; pass --env."]


def test_a_run_folder_of_another_command_is_named_as_such(tmp_path, capsys) -> None:
    """gengraph, genmol and geninterp write a run.json too: evaluate took their run for an unfinished genrl run
    ("continue it with the same `genrl train` command and --resume", or "pass --env"), and train said the folder
    already held a genrl run."""
    d, run = tmp_path / "d", tmp_path / "graphs"
    assert main(["dataset", "make", "--env", "toy-bimodal", "--steps", "30", "--out", str(d), "--no-progress"]) == 0
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"format": "gengraph.run", "config": {"model": "ggball"}}))
    before = (run / "run.json").read_bytes()
    capsys.readouterr()
    train = ["train", "--agent", "flow-bc", "--data", str(d), "--steps", "1", "--out", str(run), "--no-progress"]
    for argv in (
        ["evaluate", "--run", str(run), "--episodes", "1"],
        ["evaluate", "--run", str(run), "--episodes", "1", "--env", "Pendulum-v1"],
        train,
        [*train, "--resume"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        path = str(run / "run.json")
        assert err == [f"genrl: error: {path!r} lacks the field 'agent'; it was not written by `genrl train`."], argv
    assert (run / "run.json").read_bytes() == before and sorted(p.name for p in run.iterdir()) == ["run.json"]
