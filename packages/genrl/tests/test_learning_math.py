"""Learning math against hand-computed and analytic oracles: the C51 projection on a small support, the toy
MDP's return law at every position, the terminal-vs-truncated bootstrap through the replay buffers, and the
settings that used to train to garbage."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from gencore.errors import ConfigError
from genrl.agents import EnvSpec, make_agent
from genrl.critics import C51Critic, CriticConfig
from genrl.dataset import OfflineDataset
from genrl.toy_experiment import ToyCriticConfig
from genrl.toy_mdp import RANDOMNESS, BimodalChain
from genrl.training import ReplayBuffer, train_online

# Atoms -2, -1, 0, 1, 2 (spacing 1); a return r + f z lands between two atoms and splits its mass linearly.
PROBS = [0.1, 0.2, 0.3, 0.25, 0.15]
HAND = [
    # r, f, projected masses (worked out by hand, image by image)
    # images -1.3, -0.4, 0.5, 1.4, 2.3 -> 2 (clipped): 0.1 * (.3, .7), 0.2 * (.4, .6), 0.3 * (.5, .5), 0.25 * (.6, .4)
    (0.5, 0.9, [0.03, 0.07 + 0.08, 0.12 + 0.15, 0.15 + 0.15, 0.10 + 0.15]),
    (1.0, 1.0, [0.0, 0.1, 0.2, 0.3, 0.25 + 0.15]),  # images on atoms, the last one beyond the upper edge
    (-3.0, 0.5, [1.0, 0.0, 0.0, 0.0, 0.0]),  # images -4 ... -2: all below or on the lower edge
    (0.25, 0.0, [0.0, 0.0, 0.75, 0.25, 0.0]),  # discount 0 (or a terminal): the reward alone, split 3:1
    (2.0, 0.0, [0.0, 0.0, 0.0, 0.0, 1.0]),  # a terminal reward exactly on the upper edge
    (-2.5, 0.0, [1.0, 0.0, 0.0, 0.0, 0.0]),  # a terminal reward below the support
]


def test_c51_projection_matches_hand_computed_masses() -> None:
    critic = C51Critic(1, 1, CriticConfig(n_atoms=5, return_min=-2.0, return_max=2.0, ensemble=1))
    r, f, expected = (torch.tensor(col) for col in zip(*HAND))
    m = critic.project(r.float(), f.float(), torch.tensor([PROBS] * len(HAND)))
    torch.testing.assert_close(m, expected.float(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("randomness", RANDOMNESS)
def test_toy_law_matches_monte_carlo_returns_at_every_position(randomness: str) -> None:
    """Discounted returns computed backwards through each episode (``Z = r + discount * (1 - terminal) * Z'``)
    follow the analytic law at every position, not only at the start (a wrong steps-to-go inside the chain showed
    nowhere else)."""
    chain = BimodalChain(length=4, sigma=0.3, discount=0.7, randomness=randomness)
    ds = chain.dataset(3000, seed=2)
    ret = np.zeros(len(ds))
    for i in range(len(ds) - 1, -1, -1):
        ret[i] = ds.rewards[i] + (0.0 if ds.terminals[i] else chain.discount * ret[i + 1])
    togo = chain.steps_to_go(ds.observations)
    for j in range(chain.length):
        sel = togo == j
        obs, z = ds.observations[sel], ret[sel]
        if randomness == "transition" and j == 0:  # the last state's return is the point mass it shows
            np.testing.assert_allclose(z, obs[:, 2], rtol=1e-6)
            assert (chain.return_variance(obs) == 0).all()
            continue
        u = chain.return_cdf(obs, z[:, None])[:, 0]  # probability integral transform: uniform under the law
        hist = np.histogram(u, bins=10, range=(0, 1))[0] / len(u)
        assert np.abs(hist - 0.1).max() < 0.025, j
        var = chain.return_variance(obs)
        np.testing.assert_allclose(var, chain.discount ** (2 * j) * ((0.5 + obs[:, 1]) ** 2 + 0.3**2), rtol=1e-6)
        np.testing.assert_allclose(var.mean(), (z**2).mean(), rtol=0.07)


def test_offline_buffer_bootstraps_through_a_truncation_and_not_through_a_terminal() -> None:
    # episode 1: three steps cut by a time limit; episode 2: two steps ending in a terminal state
    ds = OfflineDataset(
        observations=np.arange(5, dtype=np.float32)[:, None].repeat(2, 1),
        actions=np.zeros((5, 1)),
        rewards=np.ones(5),
        terminals=[False, False, False, False, True],
        truncations=[False, False, True, False, False],
        next_observations=np.arange(1, 6, dtype=np.float32)[:, None].repeat(2, 1),
        episode_starts=[0, 3],
    )
    buf = ReplayBuffer.from_dataset(ds)
    np.testing.assert_array_equal(buf.data["terminals"], ds.terminals)
    agent = make_agent("fql", EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,)))
    b = agent.prepare({k: torch.from_numpy(v) for k, v in buf.data.items()})
    torch.testing.assert_close(b["masks"], torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0]))


class _AlternatingEnds(gym.Env):
    """Episodes alternate: two steps ending in a termination, then three steps ending in a truncation (a time
    limit). Observation ``[steps taken, episode length]``."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    episodes = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.length, self.t = (2, 0) if self.episodes % 2 == 0 else (3, 0)
        self.episodes += 1
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.length], np.float32)

    def step(self, action):
        self.t += 1
        end = self.t == self.length
        return self._obs(), 1.0, end and self.length == 2, end and self.length == 3, {}


def test_online_buffer_stores_a_time_limit_as_no_terminal(tmp_path) -> None:
    env_id = "GenrlTestAlternatingEnds-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=_AlternatingEnds)
    spec = EnvSpec(obs_dim=2, action_dim=1, action_low=(-1.0,), action_high=(1.0,))
    agent = make_agent("flow-bc", spec, {"hidden": 8, "depth": 1, "batch_size": 64})  # no update: storage only
    buf = ReplayBuffer(2, 1, capacity=10)
    train_online(agent, env_id, buf, 10, tmp_path / "on", progress=False)
    # episodes end at steps 2 (terminated), 5 (truncated), 7 (terminated), 10 (truncated)
    assert np.flatnonzero(buf.data["terminals"]).tolist() == [1, 6]
    # the truncated step keeps the observation it reached (not the reset one), to bootstrap from
    np.testing.assert_array_equal(buf.data["next_observations"][[4, 9]], [[3, 3], [3, 3]])


def test_toy_chain_refuses_a_discount_outside_the_unit_interval() -> None:
    # discount^j scales the modes' sd: a negative discount made return_cdf a point mass at odd steps to go while
    # sample_returns drew a Gaussian of sd |discount^j sigma|; NaN made every law NaN
    for bad in (-0.9, 1.5, float("nan")):
        with pytest.raises(ConfigError, match="discount"):
            BimodalChain(discount=bad)
    assert BimodalChain(discount=0.0).return_variance(np.array([[0.0, 0.5]])) == 0.0  # returns are 0 before the end


@pytest.mark.parametrize(
    "field",
    [
        {"return_min": 2.0, "return_max": 2.0},  # C51's atoms spacing 0: an index error deep in the projection
        {"return_min": 2.0, "return_max": -2.0},  # a reversed support trained silently
        {"huber_kappa": 0.0},  # IQN's loss divides by kappa: NaN
        {"n_atoms": 1},
        {"ensemble": 0},
        {"confidence_temp": float("nan")},
    ],
)
def test_critic_config_refuses_settings_that_train_to_garbage(field: dict) -> None:
    with pytest.raises(ConfigError, match=f"critic config field '{next(iter(field))}'"):
        CriticConfig(**field)


@pytest.mark.parametrize(
    "field",
    [
        {"tau": 0.0},
        {"tau": 1.5},
        {"huber_kappa": 0.0},
        {"return_bound": 0.0},
        {"return_bound": -2.0},
        {"lr": 0.0},
        {"seed": -1},
        {"eval_at": (0, 3001)},
        {"eval_at": (-1,)},
    ],
)
def test_toy_critic_config_refuses_settings_that_train_to_garbage(field: dict) -> None:
    # tau = 0 froze the target network at its initialisation; huber_kappa = 0 gave NaN IQN scores; return_bound = 0
    # raised an index error inside C51 and a negative one trained on a reversed support, all without a word; a
    # negative seed was NumPy's traceback; an eval_at count outside [0, steps] left the learning curve short silently
    with pytest.raises(ConfigError, match=f"toy critic config field '{next(iter(field))}'"):
        ToyCriticConfig(**field)
