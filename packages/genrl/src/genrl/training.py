"""Offline and offline-to-online training loops around the agent contract.

The loops are ours (environments are stepped between updates), built from the gencore engine's pieces:
:func:`gencore.train.setup` picks the device (and joins a process group under ``torchrun``; the loop then
writes only on rank 0), :class:`gencore.train.metrics_log.MetricsLogger` writes ``metrics.jsonl`` (and
TensorBoard when installed), and :func:`gencore.train.save_checkpoint` / :func:`gencore.train.load_latest`
keep verified safetensors checkpoints of the agent, its optimisers and its random generator, so an
offline run resumes exactly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gencore.errors import ConfigError
from gencore.train import load_latest, save_checkpoint, setup
from gencore.train.metrics_log import MetricsLogger
from genrl.agents.base import Agent
from genrl.dataset import OfflineDataset

BATCH_KEYS = ("observations", "actions", "rewards", "terminals", "next_observations")


class ReplayBuffer:
    """A fixed-capacity ring buffer of transitions in environment units, optionally seeded with a dataset."""

    def __init__(self, obs_dim: int, action_dim: int, capacity: int) -> None:
        if capacity < 1:
            raise ConfigError(f"replay capacity must be positive, got {capacity}.")
        self.capacity, self.size, self.pos = capacity, 0, 0
        self.data = {
            "observations": np.zeros((capacity, obs_dim), np.float32),
            "actions": np.zeros((capacity, action_dim), np.float32),
            "rewards": np.zeros(capacity, np.float32),
            "terminals": np.zeros(capacity, bool),
            "next_observations": np.zeros((capacity, obs_dim), np.float32),
        }

    @classmethod
    def from_dataset(cls, ds: OfflineDataset, extra_capacity: int = 0) -> ReplayBuffer:
        buf = cls(ds.obs_dim, ds.action_dim, len(ds) + extra_capacity)
        buf.add_batch(
            ds.observations.reshape(len(ds), -1),
            ds.actions,
            ds.rewards,
            ds.terminals,
            ds.next_observations.reshape(len(ds), -1),
        )
        return buf

    def add_batch(self, obs, actions, rewards, terminals, next_obs) -> None:
        for i in range(len(rewards)):
            self.add(obs[i], actions[i], rewards[i], terminals[i], next_obs[i])

    def add(self, obs, action, reward, terminal, next_obs) -> None:
        i = self.pos
        d = self.data
        d["observations"][i], d["actions"][i], d["rewards"][i] = obs, action, reward
        d["terminals"][i], d["next_observations"][i] = terminal, next_obs
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        idx = torch.randint(self.size, (batch_size,), generator=generator).numpy()
        return {k: torch.from_numpy(v[idx]) for k, v in self.data.items()}


def _groups(agent: Agent) -> dict[str, Any]:
    opts = {k: v.state_dict() for k, v in vars(agent).items() if isinstance(v, torch.optim.Optimizer)}
    return {"agent": agent.state_dict(), "optim": opts, "rng": {"generator": agent.generator.get_state()}}


def _restore(agent: Agent, ckpt: Any) -> int:
    agent.load_state_dict(ckpt.groups["agent"])
    for k, state in ckpt.groups["optim"].items():
        getattr(agent, k).load_state_dict(state)
    agent.generator.set_state(ckpt.groups["rng"]["generator"])
    agent.steps = ckpt.step
    return ckpt.step


def train_offline(
    agent: Agent,
    buffer: ReplayBuffer,
    steps: int,
    out_dir: str | os.PathLike,
    *,
    log_every: int = 50,
    checkpoint_every: int = 0,
    resume: bool = False,
    progress: bool = True,
    callback: Callable[[int, Agent], dict[str, float]] | None = None,
    callback_every: int = 0,
) -> list[dict[str, Any]]:
    """``steps`` updates on batches drawn uniformly from ``buffer``; returns the logged records.

    ``callback(step, agent)`` (e.g. an evaluation) runs every ``callback_every`` steps and its metrics are
    logged with the step's record. Batches come from a generator seeded by the agent's seed, so a run
    (and a resumed run) is reproducible.
    """
    info = setup("cpu")
    out = Path(out_dir)
    data_gen = torch.Generator().manual_seed(agent.config.seed + 1)
    start = 0
    if resume:
        ckpt = load_latest(out / "checkpoints")
        if ckpt is not None:
            start = _restore(agent, ckpt)
            data_gen.set_state(ckpt.groups["rng"]["data"])
    logger = MetricsLogger(out, enabled=info.is_main, resume_step=start if resume else None)
    records: list[dict[str, Any]] = []
    bar = tqdm(range(start, steps), disable=not progress or not info.is_main, desc=f"train {agent.name}")
    t0 = time.perf_counter()
    for step in bar:
        metrics = agent.update(buffer.sample(agent.config.batch_size, data_gen))
        done = step + 1
        if callback is not None and callback_every and (done % callback_every == 0 or done == steps):
            metrics.update(callback(done, agent))
        if done % log_every == 0 or done == steps or (callback_every and done % callback_every == 0):
            rec = {"step": done, **metrics, "updates_per_s": (done - start) / (time.perf_counter() - t0)}
            logger.log(rec)
            records.append(rec)
            bar.set_postfix({k: f"{v:.3g}" for k, v in list(metrics.items())[:3]})
        if checkpoint_every and done % checkpoint_every == 0 and info.is_main:
            groups = _groups(agent)
            groups["rng"]["data"] = data_gen.get_state()
            save_checkpoint(out / "checkpoints", done, groups, extra={"agent": agent.name})
    logger.close()
    return records


def train_online(
    agent: Agent,
    env_id: str,
    buffer: ReplayBuffer,
    steps: int,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    start_random: int = 0,
    log_every: int = 500,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Offline-to-online (or from-scratch) learning: act in ``env_id``, store, update once per env step.

    The first ``start_random`` steps take uniform random actions (for learning from scratch). Episode returns
    are logged as ``episode_return``. Terminal vs truncated ends follow the dataset conventions: only a
    true termination stops bootstrapping.
    """
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(seed)
    out = Path(out_dir)
    logger = MetricsLogger(out, enabled=True, resume_step=None) if out_dir else None
    data_gen = torch.Generator().manual_seed(agent.config.seed + 2)
    obs, _ = env.reset(seed=seed)
    ep_return, returns, records = 0.0, [], []
    metrics: dict[str, float] = {}
    for step in tqdm(range(steps), disable=not progress, desc=f"online {agent.name}"):
        if step < start_random:
            action = env.action_space.sample()
        else:
            action = agent.act(np.asarray(obs, np.float32).ravel(), deterministic=False)
        nxt, reward, terminated, truncated, _ = env.step(action)
        buffer.add(np.ravel(obs), action, reward, terminated, np.ravel(nxt))
        ep_return += float(reward)
        obs = nxt
        if terminated or truncated:
            returns.append(ep_return)
            ep_return = 0.0
            obs, _ = env.reset()
        if buffer.size >= agent.config.batch_size and step >= start_random // 2:
            metrics = agent.update(buffer.sample(agent.config.batch_size, data_gen))
        if (step + 1) % log_every == 0 or step + 1 == steps:
            rec = {"step": step + 1, "online": 1, **metrics}
            if returns:
                rec["episode_return"] = float(np.mean(returns[-10:]))
            records.append(rec)
            if logger is not None:
                logger.log(rec)
    env.close()
    if logger is not None:
        logger.close()
    return records
