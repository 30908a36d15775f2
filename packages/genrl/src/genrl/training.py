"""Offline and offline-to-online training loops around the agent contract.

The loops are ours (environments are stepped between updates), built from the gencore engine's pieces:
:func:`gencore.train.setup` picks the device (and joins a process group under ``torchrun``; the loop then
writes only on rank 0), :class:`gencore.train.metrics_log.MetricsLogger` writes ``metrics.jsonl`` (and
TensorBoard when installed), and :func:`gencore.train.save_checkpoint` / :func:`gencore.train.load_latest`
keep verified safetensors checkpoints of the agent, its optimisers and its random generator, so an
offline run resumes exactly.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gencore.checks import check_int
from gencore.errors import ConfigError, GenError, InputError
from gencore.train import DistInfo, broadcast_state, load_latest, save_checkpoint, setup, signal_received, stop_signals
from gencore.train.distributed import all_reduce_sum, gather_state
from gencore.train.metrics_log import MetricsLogger
from genrl.agents.base import Agent, EnvSpec
from genrl.dataset import OfflineDataset

RANK_SEED_STRIDE = 1_000_003  # rank r's streams are seeded seed + r * stride (rank 0: as in one process)
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
        """Append ``N`` transitions (``obs [N, obs_dim]``, ``actions [N, action_dim]``, ``rewards [N]``,
        ``terminals [N]``, ``next_obs [N, obs_dim]``) in order, as ``N`` calls of :meth:`add` would: when ``N``
        exceeds the capacity only the last ``capacity`` are kept."""
        rows = {
            "observations": np.asarray(obs),
            "actions": np.asarray(actions),
            "rewards": np.asarray(rewards),
            "terminals": np.asarray(terminals),
            "next_observations": np.asarray(next_obs),
        }
        n = len(rows["rewards"])
        for key, value in rows.items():
            self._check_shape(key, value.shape, (n, *self.data[key].shape[1:]))
        skip = max(0, n - self.capacity)  # rows that later rows of this batch would overwrite
        start = (self.pos + skip) % self.capacity
        idx = (start + np.arange(n - skip)) % self.capacity
        for key, value in rows.items():
            self.data[key][idx] = value[skip:]
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def add(self, obs, action, reward, terminal, next_obs) -> None:
        """Append one transition (``obs [obs_dim]``, ``action [action_dim]``, scalar reward and terminal)."""
        d = self.data
        self._check_shape("observations", np.shape(obs), d["observations"].shape[1:])
        self._check_shape("actions", np.shape(action), d["actions"].shape[1:])
        self._check_shape("rewards", np.shape(reward), ())
        self._check_shape("terminals", np.shape(terminal), ())
        self._check_shape("next_observations", np.shape(next_obs), d["next_observations"].shape[1:])
        i = self.pos
        d["observations"][i], d["actions"][i], d["rewards"][i] = obs, action, reward
        d["terminals"][i], d["next_observations"][i] = terminal, next_obs
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    @staticmethod
    def _check_shape(key: str, got: tuple[int, ...], expected: tuple[int, ...]) -> None:
        """Refuse a shape that numpy would broadcast into the buffer's rows (one :class:`InputError`)."""
        if tuple(got) != tuple(expected):
            raise InputError(
                f"replay buffer {key}: expected shape {tuple(expected)}, got {tuple(got)}; "
                "a wrongly shaped transition would be broadcast into the buffer silently."
            )

    def sample(self, batch_size: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement from the ``size`` stored ones."""
        if batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size}.")
        if self.size == 0:
            raise InputError("the replay buffer is empty; add transitions (or build it from a data set) first.")
        idx = torch.randint(self.size, (batch_size,), generator=generator).numpy()
        return {k: torch.from_numpy(v[idx]) for k, v in self.data.items()}


ACTION_BOUNDS_TOL = 1e-5  # slack, relative to high - low, for rounding of actions stored in float32


def check_action_bounds(actions: np.ndarray, spec: EnvSpec, where: str = "the replay buffer") -> None:
    """Refuse ``actions [N, A]`` that leave ``spec``'s Box bounds by more than rounding (one :class:`InputError`).

    Agents clip actions to ``[action_low, action_high]`` (:meth:`Agent.norm_action`), so such data would be
    learned as other actions than it holds, silently: usually a card without the environment's bounds
    (:meth:`EnvSpec.from_dataset` then assumes ``[-1, 1]``) or data from a policy that the environment clips.
    """
    if len(actions) == 0:
        return
    low, high = np.asarray(spec.action_low, np.float64), np.asarray(spec.action_high, np.float64)
    slack = ACTION_BOUNDS_TOL * (high - low)
    lo, hi = actions.min(0).astype(np.float64), actions.max(0).astype(np.float64)
    outside = np.flatnonzero((lo < low - slack) | (hi > high + slack))
    if outside.size:
        d = int(outside[0])
        raise InputError(
            f"{where}: the actions in dimension {d} span [{lo[d]:.6g}, {hi[d]:.6g}], outside the agent's action bounds "
            f"[{low[d]:.6g}, {high[d]:.6g}] ({outside.size} of {low.size} dimension(s) affected), and agents clip "
            "actions to their bounds; give the data set's card the environment's action_low and action_high "
            "(without them [-1, 1] is assumed) or clip the actions to the bounds if the environment clips them too."
        )


def _agent_groups(agent: Agent) -> dict[str, Any]:
    """The agent's weights and its optimisers' states, as checkpoint groups."""
    opts = {k: v.state_dict() for k, v in vars(agent).items() if isinstance(v, torch.optim.Optimizer)}
    return {"agent": agent.state_dict(), "optim": opts}


def _load_agent_groups(agent: Agent, ckpt: Any) -> None:
    agent.load_state_dict(ckpt.groups["agent"])
    for k, state in ckpt.groups["optim"].items():
        getattr(agent, k).load_state_dict(state)


def _rng_state(agent: Agent, data_gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {"generator": agent.generator.get_state(), "data": data_gen.get_state()}


def _groups(agent: Agent, data_gen: torch.Generator, info: DistInfo) -> dict[str, Any]:
    """Checkpoint groups; every rank's random streams (gathered: a collective, so all ranks call it) as
    ``rng`` (rank 0) and ``rng-rank{k}``."""
    groups = _agent_groups(agent)
    for rank, (state, _) in enumerate(gather_state(_rng_state(agent, data_gen), None, info)):
        groups["rng" if rank == 0 else f"rng-rank{rank}"] = state
    return groups


def _restore(agent: Agent, data_gen: torch.Generator, ckpt: Any, info: DistInfo) -> int:
    saved = int(ckpt.extra.get("world_size", 1))
    if saved != info.world_size:
        raise ConfigError(
            f"checkpoint {str(ckpt.path)!r} was written by {saved} process(es); resume it with --nproc {saved}."
        )
    _load_agent_groups(agent, ckpt)
    rng = ckpt.groups["rng" if info.rank == 0 else f"rng-rank{info.rank}"]
    agent.generator.set_state(rng["generator"])
    data_gen.set_state(rng["data"])
    agent.steps = ckpt.step
    return ckpt.step


def _divergence(metrics: dict[str, float], update: int) -> GenError | None:
    """The error to stop with when an update's metrics are not finite (its NaN gradients are already applied)."""
    bad = next((k for k, v in metrics.items() if not math.isfinite(v)), None)
    if bad is None:
        return None
    return GenError(
        f"training diverged at update {update}: {bad} = {metrics[bad]} is not finite; nothing was saved from this "
        "state (lower the agent's lr, e.g. through --config, or check the data set for extreme values)."
    )


def _votes(info: DistInfo, diverged: bool) -> tuple[bool, bool]:
    """``(stop, diverged)`` on every rank: a SIGTERM/SIGINT reached any rank, a non-finite metric showed on any
    rank (one all-reduce when distributed, so that every rank takes the same decision)."""
    flags = (signal_received() is not None, diverged)
    if not info.distributed:
        return flags
    total = all_reduce_sum(torch.tensor([float(f) for f in flags], device=info.device), info)
    return bool(total[0] > 0), bool(total[1] > 0)


def _mean_over_ranks(metrics: dict[str, float], info: DistInfo) -> dict[str, float]:
    if not info.distributed:
        return metrics
    total = all_reduce_sum(torch.tensor(list(metrics.values()), dtype=torch.float64), info)
    return {k: float(v) / info.world_size for k, v in zip(metrics, total)}


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
    device: str | torch.device | None = "cpu",
) -> list[dict[str, Any]]:
    """``steps`` updates on batches drawn uniformly from ``buffer``; returns the logged records.

    The agent is moved to ``device`` (``None``: ``cuda:LOCAL_RANK`` when CUDA is available, else the CPU; see
    :func:`gencore.train.setup`); batches are drawn on the CPU and moved there.

    ``callback(step, agent)`` (e.g. an evaluation) runs every ``callback_every`` steps (on rank 0) and its
    metrics are logged with the step's record. Batches come from a generator seeded by the agent's seed, so
    a run (and a resumed run) is reproducible.

    Multi-process (started by :func:`gencore.train.launch` or ``torchrun``): rank 0's weights are broadcast,
    each rank draws ``batch_size / world_size`` transitions from its own stream (and its own noise), the
    agents average their gradients before every optimiser step (:meth:`Agent.optimise`), so the replicas stay
    identical and a step sees ``batch_size`` transitions in all; logged metrics are means over the ranks and
    only rank 0 writes.

    SIGTERM/SIGINT during the updates stop the run after the current update with a checkpoint (every rank
    stops at the same update); :func:`gencore.train.signal_received` then names the signal.

    Actions in ``buffer`` outside the agent's bounds (beyond float32 rounding) are refused before any update
    (:func:`check_action_bounds`), since the agents would clip them.
    """
    check_int(log_every, "log_every", low=1)  # 0 was a ZeroDivisionError at the first update
    check_action_bounds(buffer.data["actions"][: buffer.size], agent.spec)
    info = setup(device)
    agent.to(info.device)
    if agent.config.batch_size % info.world_size:
        raise ConfigError(
            f"batch_size {agent.config.batch_size} must be divisible by the number of processes ({info.world_size})."
        )
    local_batch = agent.config.batch_size // info.world_size
    out = Path(out_dir)
    data_gen = torch.Generator().manual_seed(agent.config.seed + 1 + RANK_SEED_STRIDE * info.rank)
    if info.rank:
        agent.generator.manual_seed(agent.config.seed + RANK_SEED_STRIDE * info.rank)
    broadcast_state(agent)
    start = 0
    if resume:
        ckpt = load_latest(out / "checkpoints")
        if ckpt is not None:
            start = _restore(agent, data_gen, ckpt, info)
    logger = MetricsLogger(out, enabled=info.is_main, resume_step=start if resume else None)
    records: list[dict[str, Any]] = []
    bar = tqdm(range(start, steps), disable=not progress or not info.is_main, desc=f"train {agent.name}")
    t0 = time.perf_counter()
    with stop_signals():
        for step in bar:
            metrics = agent.update(buffer.sample(local_batch, data_gen))
            done = step + 1
            error = _divergence(metrics, done)
            stop, diverged = _votes(info, error is not None)
            if diverged:  # the update already applied NaN gradients: no checkpoint and no agent from this state
                raise error or _divergence({"a metric on another process": math.nan}, done)
            evaluate = callback is not None and callback_every and (done % callback_every == 0 or done == steps)
            if done % log_every == 0 or done == steps or evaluate:
                metrics = _mean_over_ranks(metrics, info)
                if evaluate and info.is_main:
                    metrics.update(callback(done, agent))
                rec = {"step": done, **metrics, "updates_per_s": (done - start) / (time.perf_counter() - t0)}
                logger.log(rec)
                records.append(rec)
                bar.set_postfix({k: f"{v:.3g}" for k, v in list(metrics.items())[:3]})
            if stop or (checkpoint_every and done % checkpoint_every == 0):
                groups = _groups(agent, data_gen, info)
                if info.is_main:
                    extra = {"agent": agent.name, "world_size": info.world_size}
                    save_checkpoint(out / "checkpoints", done, groups, extra=extra)
            if stop:  # the caller sees signal_received() and says how to resume
                break
    logger.close()
    return records


def _random_state(rng: np.random.Generator) -> str:
    return json.dumps(rng.bit_generator.state)


def _set_random_state(rng: np.random.Generator, state: str) -> None:
    rng.bit_generator.state = json.loads(state)


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
    checkpoint_every: int = 0,
    resume: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Offline-to-online (or from-scratch) learning: act in ``env_id``, store, update once per env step.

    The first ``start_random`` steps take uniform random actions (for learning from scratch); updates begin
    halfway through them (once the buffer holds a batch), so the agent has trained on the random data by the
    time it acts. Episode returns
    are logged as ``episode_return``. Terminal vs truncated ends follow the dataset conventions: only a
    true termination stops bootstrapping. ``on_step(n)`` is called after the ``n``-th step's update (to take
    snapshots of the agent along the way).

    Checkpoints (``out_dir/checkpoints``, every ``checkpoint_every`` environment steps and when SIGTERM/SIGINT
    stops the run after the current step; :func:`gencore.train.signal_received` then names the signal) hold
    the agent, its optimisers, the replay buffer, the episode returns so far and every random stream: the
    agent's, the batches', the environment's and its action space's. ``resume=True`` continues from the newest
    one. A checkpoint taken as an episode ends resumes exactly (the run continues as if never stopped); one
    taken mid-episode cuts that episode (its transitions stay in the buffer) and the resumed run starts a new
    one, since a simulator's state cannot be saved in general.
    """
    from genrl.evaluation import make_env

    if checkpoint_every and not out_dir:
        raise ConfigError("online checkpoints need an out_dir.")
    check_int(log_every, "log_every", low=1)  # 0 was a ZeroDivisionError at the first step
    check_int(seed, "seed", low=0)  # the environment's reset seed: gymnasium refuses a negative one with a traceback
    out = Path(out_dir or ".")
    env = make_env(env_id)  # registers OGBench ids first and says so clearly for an unknown one
    env.action_space.seed(seed)
    data_gen = torch.Generator().manual_seed(agent.config.seed + 2)
    obs, _ = env.reset(seed=seed)
    start, ep_return, returns, records = 0, 0.0, [], []
    ckpt = load_latest(out / "checkpoints") if resume and out_dir else None
    if ckpt is not None:
        start, returns = _restore_online(agent, data_gen, buffer, ckpt)
        _set_random_state(env.unwrapped.np_random, ckpt.extra["env_random"])
        _set_random_state(env.action_space.np_random, ckpt.extra["action_random"])
        obs, _ = env.reset()  # the episode the checkpoint's next step begins (or a new one after a cut)
    before_reset = _random_state(env.unwrapped.np_random)
    ep_steps = 0
    logger = MetricsLogger(out, enabled=True, resume_step=start if resume else None) if out_dir else None
    metrics: dict[str, float] = {}
    with stop_signals():
        for step in tqdm(range(start, steps), disable=not progress, desc=f"online {agent.name}"):
            if step < start_random:
                action = env.action_space.sample()
            else:
                action = agent.act(np.asarray(obs, np.float32).ravel(), deterministic=False)
            nxt, reward, terminated, truncated, _ = env.step(action)
            buffer.add(np.ravel(obs), action, reward, terminated, np.ravel(nxt))
            ep_return += float(reward)
            ep_steps += 1
            obs = nxt
            if terminated or truncated:
                returns.append(ep_return)
                ep_return, ep_steps = 0.0, 0
                before_reset = _random_state(env.unwrapped.np_random)
                obs, _ = env.reset()
            if buffer.size >= agent.config.batch_size and step >= start_random // 2:
                metrics = agent.update(buffer.sample(agent.config.batch_size, data_gen))
                error = _divergence(metrics, step + 1)
                if error is not None:
                    raise error
            if on_step is not None:
                on_step(step + 1)
            done = step + 1
            if done % log_every == 0 or done == steps:
                rec = {"step": done, "online": 1, **metrics}
                if returns:
                    rec["episode_return"] = float(np.mean(returns[-10:]))
                records.append(rec)
                if logger is not None:
                    logger.log(rec)
            stop = signal_received() is not None
            if out_dir and (stop or (checkpoint_every and done % checkpoint_every == 0)):
                # at an episode's start the environment's stream is taken from before its reset, so that the
                # resumed run draws the same first observation
                env_random = before_reset if ep_steps == 0 else _random_state(env.unwrapped.np_random)
                _save_online(agent, data_gen, buffer, out / "checkpoints", done, returns, env_random, env)
            if stop:  # the caller sees signal_received() and says how to resume
                break
    env.close()
    if logger is not None:
        logger.close()
    return records


def _save_online(agent, data_gen, buffer, root: Path, step: int, returns, env_random: str, env) -> None:
    groups = _agent_groups(agent) | {
        "rng": _rng_state(agent, data_gen),
        "buffer": {k: torch.from_numpy(v[: buffer.size].copy()) for k, v in buffer.data.items()},
    }
    extra = {
        "agent": agent.name,
        "agent_steps": agent.steps,
        "buffer": {"capacity": buffer.capacity, "size": buffer.size, "pos": buffer.pos},
        "returns": [float(r) for r in returns],
        "env_random": env_random,
        "action_random": _random_state(env.action_space.np_random),
    }
    save_checkpoint(root, step, groups, extra=extra)


def check_online_checkpoint(ckpt: Any, capacity: int) -> None:
    """Refuse an online checkpoint whose replay buffer cannot move into one of ``capacity`` transitions.

    A buffer that never wrapped (its rows oldest first: ``pos == size`` or, once exactly full, ``pos == 0``)
    moves into any buffer at least as large, so a finished or stopped run can go on with more ``--online-steps``;
    a wrapped one (whose oldest rows were overwritten) only into a buffer of its own capacity."""
    saved = ckpt.extra["buffer"]
    if saved["capacity"] == capacity:
        return
    if saved["pos"] != saved["size"] % saved["capacity"]:
        raise ConfigError(
            f"checkpoint {str(ckpt.path)!r} holds a wrapped replay buffer of capacity {saved['capacity']}, this run's "
            f"has {capacity}; resume with the same data set and --online-steps."
        )
    if saved["size"] > capacity:
        raise ConfigError(
            f"checkpoint {str(ckpt.path)!r} holds {saved['size']} transitions, more than this run's replay buffer "
            f"({capacity}); resume with at least as many --online-steps as the checkpoint has taken."
        )


def _restore_online(agent, data_gen, buffer: ReplayBuffer, ckpt: Any) -> tuple[int, list[float]]:
    saved = ckpt.extra["buffer"]
    check_online_checkpoint(ckpt, buffer.capacity)
    _load_agent_groups(agent, ckpt)
    agent.generator.set_state(ckpt.groups["rng"]["generator"])
    data_gen.set_state(ckpt.groups["rng"]["data"])
    agent.steps = int(ckpt.extra["agent_steps"])
    for k, v in ckpt.groups["buffer"].items():
        buffer.data[k][: saved["size"]] = v.numpy()
    buffer.size = saved["size"]
    buffer.pos = saved["pos"] if saved["capacity"] == buffer.capacity else saved["size"] % buffer.capacity
    return ckpt.step, list(ckpt.extra["returns"])
