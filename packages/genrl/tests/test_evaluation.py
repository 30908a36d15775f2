"""Evaluation's return accounting against episodes rolled out one by one, on episodes of different lengths."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from genrl.agents import EnvSpec, make_agent
from genrl.evaluation import evaluate

ENV_ID = "GenrlTestCountdown-v0"


class Countdown(gym.Env):
    """Episodes of 1 to 6 steps drawn from the reset seed; reward ``1 + action`` per step; odd lengths terminate,
    even ones are truncated; ``success`` is reported on the last step of a terminated episode."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.left = self.length = int(self.np_random.integers(1, 7))
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.left, self.length], np.float32)

    def step(self, action):
        self.left -= 1
        end = self.left == 0
        term, trunc = end and self.length % 2 == 1, end and self.length % 2 == 0
        return self._obs(), 1.0 + float(action[0]), term, trunc, {"success": float(term)}


@pytest.fixture(scope="module")
def countdown() -> str:
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=Countdown)
    return ENV_ID


def test_returns_lengths_and_success_match_episodes_rolled_out_one_by_one(countdown: str) -> None:
    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,), obs_mean=(3.0, 3.0))
    agent = make_agent("fql", spec, {"hidden": 16, "depth": 1})
    seed, episodes = 11, 7
    rets, lens, succ = [], [], []
    env = gym.make(countdown)
    for i in range(episodes):  # episode i is reset with seed + i, whatever the number of parallel copies
        obs, _ = env.reset(seed=seed + i)
        ret, n, done, success = 0.0, 0, False, 0.0
        while not done:
            obs, r, term, trunc, info = env.step(agent.act(obs, deterministic=True))
            ret, n, done, success = ret + r, n + 1, term or trunc, max(success, info["success"])
        rets, lens, succ = [*rets, ret], [*lens, n], [*succ, success]
    env.close()
    assert len(set(lens)) > 2 and 0 < np.mean(succ) < 1  # the copies of a round end at different steps
    for max_envs in (3, 7):
        res = evaluate(agent, countdown, episodes=episodes, seed=seed, max_envs=max_envs, latency_calls=1)
        np.testing.assert_allclose(res["returns"], rets, rtol=1e-5)
        assert res["episode_length_mean"] == pytest.approx(np.mean(lens))
        assert res["success_rate"] == pytest.approx(np.mean(succ))


def test_stochastic_returns_are_those_of_the_policy_sampled_from_the_seeded_stream(countdown: str) -> None:
    """``deterministic=False`` samples the policy with the agent's generator seeded by ``seed`` (one copy at a time:
    the noise is drawn in the same order as one by one), which is not the deterministic policy's result."""
    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,), obs_mean=(3.0, 3.0))
    agent = make_agent("flow-bc", spec, {"hidden": 16, "depth": 1})
    seed, episodes = 3, 5
    state = agent.generator.get_state()
    agent.generator.manual_seed(seed)
    agent.eval()
    rets = []
    env = gym.make(countdown)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        ret, done = 0.0, False
        while not done:
            action = agent.act(obs.reshape(1, -1).astype(np.float32), deterministic=False)[0]
            obs, r, term, trunc, _ = env.step(action)
            ret, done = ret + r, term or trunc
        rets.append(ret)
    env.close()
    agent.generator.set_state(state)
    agent.train()
    res = evaluate(agent, countdown, episodes=episodes, seed=seed, deterministic=False, max_envs=1, latency_calls=1)
    assert res["deterministic"] is False
    np.testing.assert_allclose(res["returns"], rets, rtol=1e-5)
    greedy = evaluate(agent, countdown, episodes=episodes, seed=seed, max_envs=1, latency_calls=1)
    assert not np.allclose(greedy["returns"], rets)
