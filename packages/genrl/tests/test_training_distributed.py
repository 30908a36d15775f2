"""Two learner processes (gloo): gradients averaged every step keep the replicas identical although each
rank draws its own transitions and noise; a 2-process checkpoint resumes every rank exactly; the CLI flag."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from gencore.train import launch

pytestmark = pytest.mark.distributed

SMALL = {"hidden": 32, "depth": 2, "batch_size": 16}


def _worker(out: str, steps: int, resume: bool, average: bool) -> dict[str, torch.Tensor]:
    import genrl.agents.base
    from genrl.agents import EnvSpec, make_agent
    from genrl.toy_mdp import BimodalChain
    from genrl.training import ReplayBuffer, train_offline

    if not average:  # the control: without averaging, the ranks' different batches pull them apart
        genrl.agents.base.average_gradients = lambda params: None
    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,))
    agent = make_agent("fql", spec, SMALL)
    buf = ReplayBuffer.from_dataset(BimodalChain().dataset(100, seed=0))
    train_offline(agent, buf, steps, out, checkpoint_every=3, resume=resume, progress=False)
    return {k: v.detach().clone() for k, v in agent.state_dict().items()}


def test_replicas_stay_identical_only_with_averaging_and_resume_exactly(tmp_path) -> None:
    full = launch(_worker, str(tmp_path / "a"), 6, False, True, nproc=2)
    assert all(torch.equal(full[0][k], full[1][k]) for k in full[0])
    apart = launch(_worker, str(tmp_path / "b"), 6, False, False, nproc=2)
    assert not all(torch.equal(apart[0][k], apart[1][k]) for k in apart[0])
    ckpt = tmp_path / "a" / "checkpoints"
    assert {"rng.safetensors", "rng-rank1.safetensors"} <= {p.name for p in (ckpt / "step-000000006").iterdir()}
    shutil.rmtree(ckpt / "step-000000006")
    resumed = launch(_worker, str(tmp_path / "a"), 6, True, True, nproc=2)
    for k, v in full[0].items():
        assert torch.equal(resumed[0][k], v) and torch.equal(resumed[1][k], v), k


def test_cli_trains_with_two_processes(tmp_path, capsys) -> None:
    from genrl.agents import load_agent
    from genrl.cli import main

    make = ["dataset", "make", "--env", "toy-bimodal", "--steps", "60", "--out", str(tmp_path / "d"), "--no-progress"]
    assert main(make) == 0
    args = ["train", "--agent", "flow-bc", "--data", str(tmp_path / "d"), "--steps", "4", "--batch-size", "16"]
    assert main([*args, "--nproc", "2", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "r" / "run.json").read_text())["nproc"] == 2
    assert load_agent(tmp_path / "r" / "agent").name == "flow-bc"
    assert main([*args[:-1], "15", "--nproc", "2", "--out", str(tmp_path / "s")]) == 2
    assert "divisible by --nproc 2" in capsys.readouterr().err
