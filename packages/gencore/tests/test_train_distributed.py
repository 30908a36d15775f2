"""Multi-process checks: 2 gloo processes equal 1 process; SIGKILL + resume is bit-identical; SIGTERM saves."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gencore.io import load_tensors
from gencore.train import TrainConfig, Trainer, find_checkpoints, launch, setup, teardown
from gencore.train.example import RegressionTask, main, regression_data, worker

pytestmark = pytest.mark.distributed


def _script(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gencore.train.example", "--out", str(out), *extra]


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"worker exited early with {proc.returncode}: {proc.stderr.read().decode()}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            raise AssertionError("timed out waiting for the worker")
        time.sleep(0.02)


def test_two_processes_equal_one_with_the_same_global_batch(tmp_path: Path) -> None:
    cfg = {
        "steps": 6,
        "global_batch_size": 16,
        "optimizer": "sgd",  # scale-sensitive, unlike Adam: a wrong gradient average would show
        "lr": 0.2,
        "warmup_steps": 2,
        "progress": False,
        "checkpoint_every": 3,
    }
    task = {"noise": 0.0, "dropout": 0.0}
    one = worker(cfg | {"out_dir": str(tmp_path / "a")}, task, 64)
    two = launch(worker, cfg | {"out_dir": str(tmp_path / "b"), "grad_accum_steps": 2}, task, 64, nproc=2)
    assert sorted(two) == [0, 1]
    for k, v in one.items():
        torch.testing.assert_close(two[0][k], v, rtol=0, atol=1e-6)
        assert torch.equal(two[0][k], two[1][k])  # DDP keeps the ranks identical
    # the logged task metrics are global too (they were rank 0's own before)
    logs = [[json.loads(line) for line in (tmp_path / k / "metrics.jsonl").read_text().splitlines()] for k in "ab"]
    for a, b in zip(*logs, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["mse"] == pytest.approx(a["mse"], rel=1e-5)
    ck = find_checkpoints(tmp_path / "b" / "checkpoints")
    assert [p.name for p in ck] == ["step-000000006", "step-000000003"]
    assert {"rng-rank0.safetensors", "rng-rank1.safetensors"} <= {p.name for p in ck[0].iterdir()}


def _fit_from_a_rank_own_init(out_dir: str) -> dict[str, dict[str, torch.Tensor]]:
    """A fit whose network each rank initialises differently (a task that leaves the seeding to DDP's broadcast)."""
    cfg = TrainConfig(steps=3, global_batch_size=16, lr=1e-2, ema_decay=0.9, progress=False, out_dir=out_dir)
    task = RegressionTask(seed=100 + int(os.environ.get("RANK", "0")))
    res = Trainer(cfg, device="cpu").fit(task, regression_data(32))
    return {
        name: {k: v.detach().clone() for k, v in m.state_dict().items()}
        for name, m in (("model", res.model), ("ema", res.ema))
    }


def test_the_ema_starts_from_the_weights_ddp_gives_every_rank(tmp_path: Path) -> None:
    """DDP hands every rank rank 0's initial weights; the EMA copy was taken from each rank's own initialisation
    before that, so rank 1's average disagreed with rank 0's (and with what a resume restores on every rank)."""
    one = _fit_from_a_rank_own_init(str(tmp_path / "one"))  # rank 0's initialisation, the whole batch
    two = launch(_fit_from_a_rank_own_init, str(tmp_path / "two"), nproc=2)
    for name in ("model", "ema"):
        for k, v in one[name].items():
            assert torch.equal(two[0][name][k], two[1][name][k]), (name, k)
            torch.testing.assert_close(two[1][name][k], v, rtol=0, atol=1e-6)


def _gloo_threads() -> int:
    return sum("gloo" in (task / "comm").read_text() for task in Path("/proc/self/task").iterdir())


def _fit_then_count_gloo_threads(out_dir: str) -> tuple[int, int]:
    """A DDP fit in this rank's group; gloo's threads alive before and after the group's teardown."""
    info = setup("cpu")  # the fit joins this group and leaves its teardown to us
    worker({"steps": 2, "global_batch_size": 16, "progress": False, "out_dir": out_dir}, {}, 32)
    during = _gloo_threads()
    teardown(info)
    return during, _gloo_threads()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through Linux's /proc")
def test_teardown_frees_the_gloo_group_after_a_ddp_fit(tmp_path: Path) -> None:
    """destroy_process_group must free gloo's threads. If DDP's first construction imports
    torch.distributed.nn.functional after the group exists, its ``group=group.WORLD`` defaults keep the group
    alive to interpreter exit, where tearing down its running threads can abort a finished run (exit -6)."""
    counts = launch(_fit_then_count_gloo_threads, str(tmp_path), nproc=2)
    assert sorted(counts) == [0, 1]
    for during, after in counts.values():
        assert during > 0 and after == 0, counts


def test_two_process_resume_restores_every_rank_exactly(tmp_path: Path) -> None:
    # noise (per-rank generator) and dropout (per-rank global RNG): each rank's RNG must come back
    cfg = {"steps": 6, "global_batch_size": 16, "progress": False, "checkpoint_every": 3, "out_dir": str(tmp_path)}
    task = {"noise": 0.3, "dropout": 0.2}
    full = launch(worker, cfg, task, 40, nproc=2)[0]
    shutil.rmtree(tmp_path / "checkpoints" / "step-000000006")
    resumed = launch(worker, cfg | {"resume": "auto"}, task, 40, nproc=2)[0]
    for k, v in full.items():
        assert torch.equal(resumed[k], v), k


def test_sigkill_then_resume_auto_is_bit_identical(tmp_path: Path) -> None:
    args = ["--steps", "24", "--checkpoint-every", "4"]
    main(["--out", str(tmp_path / "ref"), *args])
    out = tmp_path / "killed"
    proc = subprocess.Popen(_script(out, *args, "--sleep", "0.05"), stderr=subprocess.PIPE)
    # kill between checkpoints, a few steps after step 8 was saved
    _wait_for(lambda: (out / "checkpoints" / "step-000000008").exists(), proc)
    _wait_for(lambda: len((out / "metrics.jsonl").read_text().splitlines()) >= 10, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "final.safetensors").exists()
    subprocess.run(_script(out, *args, "--resume", "auto"), check=True, capture_output=True)
    ref, got = load_tensors(tmp_path / "ref" / "final.safetensors"), load_tensors(out / "final.safetensors")
    assert ref.keys() == got.keys()
    for k in ref:
        assert torch.equal(ref[k], got[k]), k
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 25))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_saves_a_checkpoint_and_exits_zero(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        _script(out, "--steps", "500", "--checkpoint-every", "0", "--sleep", "0.02"), stderr=subprocess.PIPE
    )
    _wait_for(lambda: (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text()) > 0, proc)
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    (ck,) = find_checkpoints(out / "checkpoints")
    assert 0 < int(ck.name.split("-")[1]) < 500
    assert not (out / "final.safetensors").exists()
    assert os.path.exists(ck / "state.json")


FSDP_CFG = {
    "steps": 6,
    "global_batch_size": 16,
    "optimizer": "adamw",
    "lr": 0.05,
    "warmup_steps": 2,
    "progress": False,
    "checkpoint_every": 3,
    "clip_grad_norm": 0.5,  # the global norm must be taken over all shards
    "grad_accum_steps": 2,
}


def test_fsdp_matches_ddp_and_resumes_exactly(tmp_path: Path) -> None:
    task = {"noise": 0.2, "dropout": 0.0}
    ddp = launch(worker, FSDP_CFG | {"out_dir": str(tmp_path / "ddp")}, task, 64, nproc=2)[0]
    fsdp_cfg = FSDP_CFG | {"parallel": "fsdp", "fsdp_units": ("Linear",), "out_dir": str(tmp_path / "fsdp")}
    fsdp = launch(worker, fsdp_cfg, task, 64, nproc=2)[0]
    assert sorted(fsdp) == sorted(ddp)
    for k, v in ddp.items():
        torch.testing.assert_close(fsdp[k], v, rtol=0, atol=1e-6)
    # the checkpoint holds whole tensors (gathered from the shards) and resumes to the same weights
    last = find_checkpoints(tmp_path / "fsdp" / "checkpoints")[0]
    assert load_tensors(last / "model.safetensors")["0.weight"].shape == (16, 4)
    shutil.rmtree(last)
    resumed = launch(worker, fsdp_cfg | {"resume": "auto"}, task, 64, nproc=2)[0]
    for k, v in fsdp.items():
        assert torch.equal(resumed[k], v), k


def test_two_node_rendezvous_equals_one_process(tmp_path: Path) -> None:
    """Two torchrun agents (one process per 'node') meet through a c10d rendezvous, as on a cluster.

    Node 0 hosts the rendezvous store and node 1 only connects (``is_host``), as on two machines: left to
    guess, both agents on one host try to serve the store on the same port, which can leave each waiting
    for the other. A failed join ends after ``join_timeout`` with both agents' logs instead of a hang. The
    workers run with Python's fault handler on, so one that dies in C++ (SIGABRT) leaves its Python stack there.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["--steps", "8", "--noise", "0", "--dropout", "0"]
    main(["--out", str(tmp_path / "one"), *args])
    nodes, logs = [], []
    for node in range(2):
        agent = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
        agent += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "gencore-test"]
        agent += ["--rdzv-conf", f"is_host={int(node == 0)},join_timeout=60"]
        agent += ["-m", "gencore.train.example", "--out", str(tmp_path / "two"), *args]
        logs.append(tmp_path / f"node{node}.log")
        with logs[-1].open("wb") as log:  # a file, not a pipe nobody reads while waiting
            env = os.environ | {"PYTHONFAULTHANDLER": "1"}
            nodes.append(subprocess.Popen(agent, stdout=log, stderr=subprocess.STDOUT, env=env))
    codes = None
    try:
        codes = [node.wait(timeout=120) for node in nodes]
    except subprocess.TimeoutExpired:
        pass  # reported with the logs below
    finally:
        for node in nodes:
            node.kill()
    assert codes == [0, 0], "\n".join(f"node {i} log:\n{log.read_text()[-4000:]}" for i, log in enumerate(logs))
    one = load_tensors(tmp_path / "one" / "final.safetensors")
    two = load_tensors(tmp_path / "two" / "final.safetensors")
    for k, v in one.items():
        torch.testing.assert_close(two[k], v, rtol=0, atol=1e-6)


def test_ctrl_c_on_a_two_process_launch_checkpoints_and_exits_promptly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gencore.cli", "toy", "train", "--dataset", "moons", "--steps", "100000"]
    cmd += ["--nproc", "2", "--no-progress", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    _wait_for(lambda: (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text()) > 0, proc, 120)
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the launcher and its workers
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 128 + signal.SIGINT, stderr[-2000:]  # as a shell reports a Ctrl-C'd process
    assert time.monotonic() - start < 20  # not the elastic agent's 30 s shutdown timeout
    assert "interrupted: checkpoints are saved under" in stderr and "--resume auto" in stderr
    assert find_checkpoints(out / "checkpoints")


def test_sigterm_to_a_training_command_checkpoints_and_exits_143(tmp_path: Path) -> None:
    """A scheduler's SIGTERM: the run saves a checkpoint and the command exits 128 + 15, not 0 (unfinished)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gencore.cli", "toy", "train", "--dataset", "moons", "--steps", "100000"]
    cmd += ["--no-progress", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for(lambda: (out / "metrics.jsonl").exists() and len((out / "metrics.jsonl").read_text()) > 0, proc, 120)
    proc.send_signal(signal.SIGTERM)
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, stderr[-2000:]
    assert "interrupted: checkpoints are saved under" in stderr
    assert find_checkpoints(out / "checkpoints")
    assert not (out / "metrics.json").exists()  # the unfinished run was not evaluated
