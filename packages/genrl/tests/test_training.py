"""Offline loop: exact resume from a gencore checkpoint; vectorised evaluation."""

from __future__ import annotations

import json
import math
import os
import signal

import numpy as np
import pytest
import torch

from gencore.errors import ConfigError, InputError
from genrl.agents import EnvSpec, make_agent
from genrl.evaluation import evaluate
from genrl.training import ReplayBuffer, train_offline

SMALL = {"hidden": 32, "depth": 2, "batch_size": 16}


def test_resume_is_exact(tmp_path, toy_dataset) -> None:
    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,))
    buf = ReplayBuffer.from_dataset(toy_dataset)
    straight = make_agent("fql", spec, SMALL)
    train_offline(straight, buf, 6, tmp_path / "a", progress=False)
    first = make_agent("fql", spec, SMALL)
    train_offline(first, buf, 3, tmp_path / "b", checkpoint_every=3, progress=False)
    resumed = make_agent("fql", spec, SMALL)
    records = train_offline(resumed, buf, 6, tmp_path / "b", resume=True, log_every=1, progress=False)
    assert [r["step"] for r in records] == [4, 5, 6]
    for k, v in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v, rtol=0, atol=0)
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 4  # step 3 from the first run, then 4, 5, 6


def test_actions_outside_the_bounds_are_refused_before_training(tmp_path, pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    assert abs(ds.actions).max() > 1.5  # Pendulum's torques span [-2, 2]
    no_bounds = {k: v for k, v in card.items() if k not in ("action_low", "action_high")}
    agent = make_agent("flow-bc", EnvSpec.from_dataset(ds, no_bounds), SMALL)  # a card without bounds: [-1, 1]
    with pytest.raises(InputError, match=r"dimension 0 span .* outside the agent's action bounds \[-1, 1\]"):
        train_offline(agent, ReplayBuffer.from_dataset(ds), 2, tmp_path / "r", progress=False)
    assert not (tmp_path / "r").exists()
    # with the card's bounds, and with float32 rounding just past them, the same data trains
    agent = make_agent("flow-bc", EnvSpec.from_dataset(ds, card), SMALL)
    buf = ReplayBuffer.from_dataset(ds)
    buf.data["actions"][0] = np.nextafter(np.float32(2.0), np.float32(3.0))
    assert len(train_offline(agent, buf, 2, tmp_path / "ok", progress=False)) == 1


def test_replay_buffer_sampling_is_checked() -> None:
    buf = ReplayBuffer(2, 1, capacity=4)
    with pytest.raises(InputError, match="empty"):
        buf.sample(2, torch.Generator())
    buf.add(np.zeros(2), np.zeros(1), 0.0, False, np.zeros(2))
    with pytest.raises(ConfigError, match="batch_size"):
        buf.sample(0, torch.Generator())


def test_replay_buffer_batches_match_single_adds_and_shapes_are_checked() -> None:
    rng = np.random.default_rng(0)
    for capacity, first, n in [(7, 3, 4), (7, 5, 6), (5, 2, 12), (4, 0, 4)]:
        one, many = ReplayBuffer(3, 2, capacity), ReplayBuffer(3, 2, capacity)
        m = first + n
        rows = [rng.normal(size=(m, 3)), rng.normal(size=(m, 2)), rng.normal(size=m), rng.random(m) < 0.5]
        rows.append(rng.normal(size=(m, 3)))
        for i in range(first):  # both start part-way round the ring
            one.add(*(r[i] for r in rows))
            many.add(*(r[i] for r in rows))
        for i in range(first, first + n):
            one.add(*(r[i] for r in rows))
        many.add_batch(*(r[first:] for r in rows))
        assert (one.pos, one.size) == (many.pos, many.size)
        for key in one.data:
            np.testing.assert_array_equal(one.data[key], many.data[key])
    buf = ReplayBuffer(3, 2, capacity=4)
    with pytest.raises(InputError, match=r"observations: expected shape \(3,\), got \(1,\)"):
        buf.add(np.zeros(1), np.zeros(2), 0.0, False, np.zeros(3))  # numpy would broadcast it to 3 dimensions
    with pytest.raises(InputError, match=r"actions: expected shape \(2, 2\), got \(2,\)"):
        buf.add_batch(np.zeros((2, 3)), np.zeros(2), np.zeros(2), np.zeros(2, bool), np.zeros((2, 3)))
    assert buf.size == 0


def test_vectorised_evaluation(pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    agent = make_agent("flow-bc", EnvSpec.from_dataset(ds, card), SMALL)
    res = evaluate(agent, "Pendulum-v1", episodes=3, seed=5, max_envs=2, latency_calls=3)
    assert res["episodes"] == 3 and len(res["returns"]) == 3
    assert all(math.isfinite(r) and r < 0 for r in res["returns"])
    assert res["episode_length_mean"] == 200 and res["success_rate"] is None
    assert res["nfe_per_decision"] == agent.config.flow_steps and res["latency_ms"] > 0
    again = evaluate(agent, "Pendulum-v1", episodes=3, seed=5, max_envs=3, latency_calls=3)
    # flow-bc with deterministic=True starts every decision from zero noise: the result ignores the batch size
    assert abs(again["return_mean"] - res["return_mean"]) < 1e-4


def test_evaluation_repeats_itself_and_leaves_the_agent_stream_alone(pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    # best-of-n draws noise even when deterministic: it comes from a stream seeded by evaluate's seed
    agent = make_agent("value-flows", EnvSpec.from_dataset(ds, card), {**SMALL, "n_candidates": 4})
    agent.train()
    state = agent.generator.get_state()
    first = evaluate(agent, "Pendulum-v1", episodes=2, seed=5, latency_calls=1)
    assert torch.equal(agent.generator.get_state(), state) and agent.training
    second = evaluate(agent, "Pendulum-v1", episodes=2, seed=5, latency_calls=1)
    assert first["returns"] == second["returns"]


def test_evaluation_arguments_are_checked(pendulum_dataset) -> None:
    ds, card = pendulum_dataset
    agent = make_agent("flow-bc", EnvSpec.from_dataset(ds, card), SMALL)
    for kwargs in ({"episodes": 0}, {"max_envs": 0}, {"latency_calls": 0}):
        with pytest.raises(ConfigError, match=next(iter(kwargs))):
            evaluate(agent, "Pendulum-v1", **{"episodes": 1, **kwargs})


def test_offline_to_online_fills_the_buffer_and_updates(tmp_path, pendulum_dataset) -> None:
    from genrl.training import train_online

    ds, card = pendulum_dataset
    agent = make_agent("value-flows", EnvSpec.from_dataset(ds, card), SMALL)
    agent.use_extraction("one-step")
    buf = ReplayBuffer.from_dataset(ds, extra_capacity=40)
    before = {k: v.clone() for k, v in agent.state_dict().items()}
    records = train_online(agent, "Pendulum-v1", buf, 40, tmp_path / "online", seed=0, log_every=20, progress=False)
    assert buf.size == len(ds) + 40 and [r["step"] for r in records] == [20, 40]
    assert agent.steps == 40 and any(not torch.equal(v, before[k]) for k, v in agent.state_dict().items())
    assert (tmp_path / "online" / "metrics.jsonl").is_file()


def _online(tmp_path, pendulum_dataset, name: str, steps: int, **kw):
    from genrl.training import train_online

    ds, card = pendulum_dataset
    agent = make_agent("value-flows", EnvSpec.from_dataset(ds, card), SMALL)
    agent.use_extraction("one-step")
    buf = ReplayBuffer.from_dataset(ds, extra_capacity=420)
    records = train_online(
        agent, "Pendulum-v1", buf, steps, tmp_path / name, seed=0, log_every=100, progress=False, **kw
    )
    return agent, buf, records


def test_online_resume_at_an_episode_end_is_exact(tmp_path, pendulum_dataset) -> None:
    """Pendulum's episodes are 200 steps: a checkpoint at step 200 resumes as if the run never stopped."""
    straight, buf, records = _online(tmp_path, pendulum_dataset, "a", 400)
    _online(tmp_path, pendulum_dataset, "b", 200, checkpoint_every=200)
    resumed, rbuf, rrecords = _online(tmp_path, pendulum_dataset, "b", 400, resume=True)
    assert [r["step"] for r in rrecords] == [300, 400] and rrecords == records[2:]
    assert resumed.steps == straight.steps == 400  # one update per environment step
    for k, v in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[k], v, rtol=0, atol=0)
    assert (rbuf.size, rbuf.pos) == (buf.size, buf.pos)
    for k, v in buf.data.items():
        assert (rbuf.data[k] == v).all(), k
    logged = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert logged == [100, 200, 300, 400]


def test_online_sigterm_checkpoints_mid_episode_and_resumes(tmp_path, pendulum_dataset) -> None:
    """A SIGTERM at step 50 stops after that step with a checkpoint; the resumed run cuts the episode and goes on."""
    from gencore.train import find_checkpoints, signal_received
    from gencore.train.signals import record_signal

    def kill_at_50(n: int) -> None:
        if n == 50:
            os.kill(os.getpid(), signal.SIGTERM)

    try:
        _, buf, _ = _online(tmp_path, pendulum_dataset, "r", 400, on_step=kill_at_50)
        assert signal_received() == signal.SIGTERM
    finally:
        record_signal(None)
    assert [p.name for p in find_checkpoints(tmp_path / "r" / "checkpoints")] == ["step-000000050"]
    assert buf.size == 450 + 50
    resumed, rbuf, records = _online(tmp_path, pendulum_dataset, "r", 400, resume=True)
    assert signal_received() is None and [r["step"] for r in records] == [100, 200, 300, 400]
    assert rbuf.size == 450 + 400 and resumed.steps == 400
    assert (rbuf.data["observations"][:500] == buf.data["observations"][:500]).all()
    # the cut episode's last transition does not lead into the resumed run's first observation: a new episode
    assert not (rbuf.data["next_observations"][499] == rbuf.data["observations"][500]).all()
    assert records[-1]["episode_return"] < 0  # Pendulum's returns, from the episodes after the cut


def test_a_non_finite_update_stops_the_run_before_anything_is_saved(tmp_path, toy_dataset, pendulum_dataset) -> None:
    """A NaN loss means NaN weights (the optimiser step is inside the update): stop there, naming the update and
    the metric, with no checkpoint from that state, offline and online."""
    import pytest

    from gencore.errors import GenError
    from gencore.train import find_checkpoints
    from genrl.training import train_online

    def poisoned(agent, at: int):
        real = agent.update

        def update(batch):
            metrics = real(batch)
            return metrics | {"critic_loss": math.nan} if agent.steps >= at else metrics

        agent.update = update
        return agent

    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,))
    agent = poisoned(make_agent("fql", spec, SMALL), 3)
    with pytest.raises(GenError, match=r"training diverged at update 3: critic_loss = nan is not finite"):
        train_offline(agent, ReplayBuffer.from_dataset(toy_dataset), 6, tmp_path / "off", checkpoint_every=3)
    assert not find_checkpoints(tmp_path / "off" / "checkpoints")
    ds, card = pendulum_dataset
    agent = poisoned(make_agent("flow-bc", EnvSpec.from_dataset(ds, card), SMALL), 5)
    buf = ReplayBuffer.from_dataset(ds, extra_capacity=20)
    with pytest.raises(GenError, match=r"training diverged at update 5: critic_loss = nan"):
        train_online(agent, "Pendulum-v1", buf, 20, tmp_path / "on", seed=0, checkpoint_every=5, progress=False)
    assert not find_checkpoints(tmp_path / "on" / "checkpoints")
