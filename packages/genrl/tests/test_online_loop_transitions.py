"""The online loop's stored transitions, warm-up and update count, and the replay buffer's sampling range, against
a hand-run environment whose every observation says where it is (counting, no learned quantity)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_loop_arguments import _Counting  # episode k: 2 steps terminated (k odd), 3 truncated (k even)

from genrl.agents import EnvSpec, make_agent
from genrl.training import ReplayBuffer, train_online

ENV_ID = "GenrlTestLabelledSteps-v0"
SPEC = EnvSpec(obs_dim=3, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
SMALL = {"hidden": 8, "depth": 1}


@pytest.fixture(scope="module")
def env_id() -> str:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=_Counting)
    return ENV_ID


def _expected_rows(n: int) -> dict[str, np.ndarray]:
    """The first ``n`` transitions of :class:`_Counting`, written out by hand."""
    obs, nxt, rew, term = [], [], [], []
    k = 0
    while len(obs) < n:
        k += 1
        length = 2 if k % 2 else 3
        for t in range(length):
            obs.append([t, length, k])
            nxt.append([t + 1, length, k])  # the episode's real last observation, also when it is truncated
            rew.append(k)
            term.append(t + 1 == length and length == 2)  # a time limit is not a termination
    return {
        "observations": np.asarray(obs[:n], np.float32),
        "next_observations": np.asarray(nxt[:n], np.float32),
        "rewards": np.asarray(rew[:n], np.float32),
        "terminals": np.asarray(term[:n]),
    }


def test_online_rows_keep_terminal_apart_from_truncation_and_the_real_last_observation(tmp_path, env_id) -> None:
    agent = make_agent("flow-bc", SPEC, {**SMALL, "batch_size": 64})  # no update: the buffer stays below 64
    buf = ReplayBuffer(3, 1, 40)
    train_online(agent, env_id, buf, 17, tmp_path / "on", progress=False)
    assert (buf.size, buf.pos) == (17, 17)
    for key, value in _expected_rows(17).items():
        np.testing.assert_array_equal(buf.data[key][:17], value, err_msg=key)


@pytest.mark.parametrize(("start_random", "batch_size", "updates"), [(20, 8, 20), (4, 8, 23), (0, 1, 30)])
def test_warm_up_takes_random_actions_and_updates_start_halfway_once_a_batch_is_stored(
    tmp_path, env_id, start_random: int, batch_size: int, updates: int
) -> None:
    """30 steps: the first ``start_random`` actions are the action space's own draws (seeded by ``seed``); updates run
    from step ``start_random // 2`` (0-based), and not before the buffer holds a batch (``batch_size - 1``)."""
    agent = make_agent("flow-bc", SPEC, {**SMALL, "batch_size": batch_size})
    buf = ReplayBuffer(3, 1, 40)
    train_online(agent, env_id, buf, 30, tmp_path / "on", seed=7, start_random=start_random, progress=False)
    assert agent.steps == updates == 30 - max(start_random // 2, batch_size - 1)
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    space.seed(7)
    draws = np.stack([space.sample() for _ in range(start_random + 1)])
    np.testing.assert_array_equal(buf.data["actions"][:start_random], draws[:start_random])
    assert not np.array_equal(buf.data["actions"][start_random], draws[start_random])  # the agent acts from here


def test_replay_sampling_covers_exactly_the_stored_rows() -> None:
    g = torch.Generator().manual_seed(0)
    for capacity, n, kept in [(10, 3, {1, 2, 3}), (4, 6, {3, 4, 5, 6}), (5, 5, {1, 2, 3, 4, 5})]:
        buf = ReplayBuffer(2, 1, capacity)
        for i in range(1, n + 1):
            buf.add(np.full(2, i), np.zeros(1), float(i), False, np.full(2, i))
        batch = buf.sample(400, g)
        assert set(batch["observations"][:, 0].tolist()) == kept  # never an empty row, never one row left out
        assert torch.equal(batch["rewards"], batch["observations"][:, 0])  # the fields of one row stay together


def test_an_online_run_resumed_into_a_larger_buffer_appends_after_its_rows(tmp_path, env_id) -> None:
    """A buffer checkpointed exactly full (``pos == 0``) moves into a larger one; the resumed steps go after its rows
    instead of over them."""
    agent = make_agent("flow-bc", SPEC, {**SMALL, "batch_size": 64})
    first = ReplayBuffer(3, 1, 10)
    train_online(agent, env_id, first, 10, tmp_path / "on", checkpoint_every=10, progress=False)
    assert (first.size, first.pos) == (10, 0)
    agent = make_agent("flow-bc", SPEC, {**SMALL, "batch_size": 64})
    more = ReplayBuffer(3, 1, 15)
    train_online(agent, env_id, more, 15, tmp_path / "on", resume=True, progress=False)
    assert (more.size, more.pos) == (15, 0)
    for key, value in first.data.items():
        np.testing.assert_array_equal(more.data[key][:10], value, err_msg=key)
    assert (more.data["observations"][10:, 1] >= 2).all()  # five new rows (an episode lasts 2 or 3 steps)
