"""Vectorised evaluation of an agent in a gymnasium environment, with decision latency and NFE.

Episodes run in a :class:`gymnasium.vector.SyncVectorEnv` of up to ``max_envs`` copies; copy ``i`` of round
``k`` is reset with seed ``seed + k * n_envs + i``, so a result is reproducible and independent of the batch
size. Only the first episode of each copy in a round is counted (later auto-resets are ignored).

The agent's own noise (a stochastic policy, best-of-N candidates) is drawn from its generator reseeded with
``seed`` for the call and put back afterwards, so a call repeats itself and leaves the agent's random stream
(and hence its training, when an evaluation runs between updates) as it was. That noise is drawn for all the
copies of a round together, so with a stochastic or best-of-N agent the returns do depend on ``max_envs``.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from genrl.agents.base import Agent


def make_env(env_id: str, **kwargs: Any):
    """``gymnasium.make`` with a clear error for an unknown id or a non-continuous action space."""
    import gymnasium as gym

    from genrl.ogbench_data import ensure_registered, quiet_if

    try:
        with quiet_if(ensure_registered(env_id)):
            env = gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(f"cannot make environment {env_id!r}: {exc}") from None
    if not isinstance(env.action_space, gym.spaces.Box):
        env.close()
        raise InputError(f"environment {env_id!r} has {type(env.action_space).__name__} actions; genrl needs Box.")
    return env


@contextlib.contextmanager
def seeded_for_evaluation(agent: Agent, seed: int) -> Iterator[None]:
    """Run the block in eval mode with the agent's generator seeded by ``seed``; restore both afterwards."""
    state, was_training = agent.generator.get_state(), agent.training
    agent.generator.manual_seed(seed)
    agent.eval()
    try:
        yield
    finally:
        agent.generator.set_state(state)
        agent.train(was_training)


def evaluate(
    agent: Agent,
    env_id: str,
    episodes: int = 10,
    *,
    seed: int = 0,
    deterministic: bool = True,
    max_envs: int = 8,
    latency_calls: int = 30,
    progress: bool = False,
) -> dict[str, Any]:
    """Return per-episode returns and their mean/std, success rate where the env reports ``success``,
    the agent's ``nfe_per_decision`` and the median wall time of one single-observation decision
    (``progress``: a bar of finished episodes). The agent's noise comes from its generator reseeded with ``seed``
    for the call; its random stream and train/eval mode are restored afterwards (see the module docstring)."""
    import gymnasium as gym
    from tqdm.auto import tqdm

    for name, value in (("episodes", episodes), ("max_envs", max_envs), ("latency_calls", latency_calls)):
        check_int(value, name, low=1)
    check_int(seed, "seed", low=0)  # the environments' reset seeds: gymnasium refuses a negative one with a traceback
    n_envs = min(episodes, max_envs)
    probe = make_env(env_id)
    obs_size = int(np.prod(probe.observation_space.shape or (0,)))
    act_size = int(np.prod(getattr(probe.action_space, "shape", None) or (0,)))
    probe.close()
    if (obs_size, act_size) != (agent.spec.obs_dim, agent.spec.action_dim):
        raise ConfigError(
            f"{env_id} has observations of size {obs_size} and actions of size {act_size}, but the agent was trained "
            f"for {agent.spec.obs_dim} and {agent.spec.action_dim}."
        )
    with seeded_for_evaluation(agent, seed):
        venv = gym.vector.SyncVectorEnv([lambda: make_env(env_id) for _ in range(n_envs)])
        returns: list[float] = []
        lengths: list[int] = []
        successes: list[float] = []
        first_obs = None
        seen_success = False
        bar = tqdm(total=episodes, desc=f"evaluate {agent.name}", unit="episode", disable=None if progress else True)
        for rnd in range((episodes + n_envs - 1) // n_envs):
            obs, _ = venv.reset(seed=[seed + rnd * n_envs + i for i in range(n_envs)])
            first_obs = obs[0] if first_obs is None else first_obs
            active = np.ones(n_envs, bool)
            take = min(n_envs, episodes - len(returns))  # copies whose episode counts this round
            ep_ret, ep_len, ep_succ = np.zeros(n_envs), np.zeros(n_envs, int), np.zeros(n_envs)
            while active.any():
                action = agent.act(obs.reshape(n_envs, -1).astype(np.float32), deterministic=deterministic)
                obs, reward, term, trunc, infos = venv.step(action)
                ep_ret += np.where(active, reward, 0.0)
                ep_len += active
                if "success" in infos:
                    seen_success = True
                    ep_succ = np.maximum(ep_succ, np.where(active, np.asarray(infos["success"], float), 0.0))
                ended = active & (term | trunc)
                bar.update(int(ended[:take].sum()))
                active &= ~ended
            returns += ep_ret[:take].tolist()
            lengths += ep_len[:take].tolist()
            successes += ep_succ[:take].tolist()
        venv.close()
        bar.close()
        latencies = []
        single = np.asarray(first_obs, np.float32).ravel()
        with torch.no_grad():
            for _ in range(latency_calls + 3):
                t = time.perf_counter()
                agent.act(single, deterministic=deterministic)
                latencies.append(time.perf_counter() - t)
    arr = np.asarray(returns)
    return {
        "env_id": env_id,
        "agent": agent.name,
        "episodes": len(returns),
        "returns": returns,
        "return_mean": float(arr.mean()),
        "return_std": float(arr.std()),
        "episode_length_mean": float(np.mean(lengths)),
        "success_rate": float(np.mean(successes)) if seen_success else None,
        "nfe_per_decision": agent.nfe_per_decision,
        "latency_ms": 1000.0 * statistics.median(latencies[3:]),
        "deterministic": deterministic,
        "seed": seed,
    }
