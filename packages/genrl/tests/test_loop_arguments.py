"""The evaluation, data-generation and online loops: settings that used to end in a traceback from deep inside
gymnasium, NumPy or the loop itself (now one ConfigError naming the setting, before any work), the recorded
fields of collected data against the environment that made them, and the online episode returns."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from gencore.errors import ConfigError
from genrl.agents import EnvSpec, make_agent
from genrl.evaluation import evaluate
from genrl.generate import collect, make_dataset
from genrl.toy_mdp import BimodalChain
from genrl.training import ReplayBuffer, train_offline, train_online

PENDULUM = EnvSpec(obs_dim=3, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
SMALL = {"hidden": 8, "depth": 1, "batch_size": 8}


def test_a_negative_seed_is_refused_by_evaluation_and_data_generation() -> None:
    # gymnasium raised "Seed must be greater or equal to zero" (NumPy "expected non-negative integer" for the toy
    # chain) as a traceback, through `genrl evaluate --seed -1` and `genrl dataset make --seed -1`
    agent = make_agent("flow-bc", PENDULUM, SMALL)
    with pytest.raises(ConfigError, match="seed must be a non-negative integer, got -1"):
        evaluate(agent, "Pendulum-v1", 1, seed=-1, latency_calls=1)
    for env_id in ("Pendulum-v1", "toy-bimodal"):
        with pytest.raises(ConfigError, match="seed must be a non-negative integer, got -1"):
            make_dataset(env_id, "random", 10, seed=-1, progress=False)
    with pytest.raises(ConfigError, match="seed must be a non-negative integer, got -3"):
        collect("Pendulum-v1", None, 10, seed=-3, progress=False)
    with pytest.raises(ConfigError, match=r"episodes must be a positive integer, got 1\.5"):
        evaluate(agent, "Pendulum-v1", 1.5, latency_calls=1)  # range() of a float failed after the env was built


def test_training_loops_refuse_log_every_zero_and_a_negative_seed(tmp_path) -> None:
    data = BimodalChain().dataset(20, seed=0)
    toy = make_agent("flow-bc", EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,)), SMALL)
    with pytest.raises(ConfigError, match="log_every must be a positive integer, got 0"):  # was ZeroDivisionError
        train_offline(toy, ReplayBuffer.from_dataset(data), 3, tmp_path / "off", log_every=0, progress=False)
    assert toy.steps == 0
    agent = make_agent("flow-bc", PENDULUM, SMALL)
    buf = ReplayBuffer(3, 1, 10)
    with pytest.raises(ConfigError, match="log_every must be a positive integer, got 0"):
        train_online(agent, "Pendulum-v1", buf, 5, tmp_path / "on", log_every=0, progress=False)
    with pytest.raises(ConfigError, match="seed must be a non-negative integer, got -1"):
        train_online(agent, "Pendulum-v1", buf, 5, tmp_path / "on", seed=-1, progress=False)
    assert buf.size == 0 and agent.steps == 0


def test_collected_rows_replay_in_the_environment_they_came_from() -> None:
    """Every recorded field against a fresh copy of the environment stepped with the recorded actions: row i's
    observation, reward, next observation and end flags are those of the i-th step (no row shifted by one)."""
    ds, env = collect("Pendulum-v1", None, 230, seed=4, progress=False)
    env.close()
    replay = gym.make("Pendulum-v1")
    obs, _ = replay.reset(seed=4)
    starts = [0]
    for i in range(len(ds)):
        np.testing.assert_array_equal(ds.observations[i], obs)
        nxt, reward, term, trunc, _ = replay.step(ds.actions[i])
        np.testing.assert_array_equal(ds.next_observations[i], nxt)
        assert ds.rewards[i] == np.float32(reward) and ds.terminals[i] == term
        assert ds.truncations[i] == (trunc or i == len(ds) - 1)  # the collection's end cuts the last episode
        obs = nxt
        if term or trunc:
            obs, _ = replay.reset()
            starts.append(i + 1)
    np.testing.assert_array_equal(ds.episode_starts, starts)


class _Counting(gym.Env):
    """Episodes alternate 2 steps (terminated) and 3 steps (time limit); the k-th episode pays k per step."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    episodes = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episodes += 1
        self.length, self.t = (2 if self.episodes % 2 else 3), 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.length, self.episodes], np.float32)

    def step(self, action):
        self.t += 1
        end = self.t == self.length
        return self._obs(), float(self.episodes), end and self.length == 2, end and self.length == 3, {}


def test_online_episode_returns_are_the_finished_episodes_sums(tmp_path) -> None:
    """``episode_return`` in the online records is the mean return of the last 10 finished episodes, each the sum of
    its own rewards (an unreset or half-counted return showed nowhere before)."""
    env_id = "GenrlTestCountingEpisodes-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_Counting)
    agent = make_agent("flow-bc", PENDULUM, {**SMALL, "batch_size": 64})  # no update: the buffer stays below 64
    records = train_online(agent, env_id, ReplayBuffer(3, 1, 40), 40, tmp_path / "on", log_every=1, progress=False)
    ends, returns, expected = np.cumsum([2 if k % 2 else 3 for k in range(1, 17)]), [], {}
    for k, end in enumerate(ends, 1):
        returns.append(k * (2 if k % 2 else 3))
        expected[int(end)] = float(np.mean(returns[-10:]))
    logged = {r["step"]: r["episode_return"] for r in records if "episode_return" in r}
    assert min(logged) == 2 and all(logged[s] == pytest.approx(v) for s, v in expected.items() if s <= 40)
