"""The agent contract every genrl agent follows.

An agent is a ``torch.nn.Module`` built from ``(spec, config)`` where ``spec`` is an :class:`EnvSpec`
(dimensions, action bounds, observation normalisation, reward scale) and ``config`` a frozen dataclass:

* ``update(batch) -> dict[str, float]`` — one learner step on a batch in environment units
  (``observations``, ``actions``, ``rewards``, ``terminals``, ``next_observations`` as tensors);
* ``act(obs, deterministic) -> np.ndarray`` — actions in the environment's units for ``obs [B, *obs]``
  (or one observation);
* ``save(directory)`` / :func:`genrl.agents.load_agent` — ``model.safetensors`` + ``config.json``;
* ``nfe_per_decision`` — network evaluations on the critical path of one ``act`` call.

Internally agents see observations standardised with the dataset's mean/std, actions scaled to
``[-1, 1]`` from the Box bounds, and rewards multiplied by ``spec.reward_scale``; the mask
``1 - terminal`` multiplies the bootstrap (a truncated episode still bootstraps).

Devices: an agent runs where its weights are (``agent.to("cuda")``, or ``genrl train --device``); ``update``
moves each batch there and ``act`` takes NumPy observations from anywhere. The agent's random generator
lives on the same device: moving the agent to another device type replaces it with one seeded from
``config.seed`` (CUDA and CPU random streams differ, so a GPU run is reproducible run to run but does not
repeat the CPU run's numbers).
"""

from __future__ import annotations

import abc
import contextlib
import copy
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from gencore.checks import check_seed
from gencore.errors import ConfigError, InputError
from gencore.io import save_pretrained
from gencore.train import average_gradients
from genrl.dataset import card_action_bounds


@dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """What an agent must know about its environment and data."""

    obs_dim: int
    action_dim: int
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    obs_mean: tuple[float, ...] | None = None
    obs_std: tuple[float, ...] | None = None
    reward_scale: float = 1.0
    env_id: str | None = None

    def __post_init__(self) -> None:
        """A spec that cannot describe an environment is one :class:`InputError` naming its field (a bound or a
        statistic of the wrong length was broadcast silently over every dimension)."""
        for name in ("obs_dim", "action_dim"):
            if getattr(self, name) < 1:
                raise InputError(f"EnvSpec field {name!r} must be a positive integer, got {getattr(self, name)!r}.")
        sizes = {"action_low": "action_dim", "action_high": "action_dim", "obs_mean": "obs_dim", "obs_std": "obs_dim"}
        for name, size in sizes.items():
            value = getattr(self, name)
            if value is not None and len(value) != getattr(self, size):
                raise InputError(
                    f"EnvSpec field {name!r} must have {size} = {getattr(self, size)} entries, got {len(value)}."
                )
        if not all(-math.inf < lo < hi < math.inf for lo, hi in zip(self.action_low, self.action_high)):
            raise InputError(
                f"EnvSpec field 'action_low' must be finite and below 'action_high' in every action dimension, got "
                f"{list(self.action_low)} and {list(self.action_high)}."
            )
        if self.obs_mean is not None and not all(math.isfinite(m) for m in self.obs_mean):
            raise InputError(f"EnvSpec field 'obs_mean' must be finite, got {list(self.obs_mean)}.")
        if self.obs_std is not None and not all(0 < s < math.inf for s in self.obs_std):
            raise InputError(f"EnvSpec field 'obs_std' must be finite and positive, got {list(self.obs_std)}.")
        if not 0 < self.reward_scale < math.inf:
            raise InputError(f"EnvSpec field 'reward_scale' must be finite and positive, got {self.reward_scale!r}.")

    @classmethod
    def from_dataset(cls, ds: Any, card: dict[str, Any], normalise_obs: bool = True) -> EnvSpec:
        """Bounds from the card, observation statistics and ``reward_scale = 1 / max|r|`` from the data."""
        obs = ds.observations.reshape(len(ds), -1).astype(np.float64)
        low, high = card_action_bounds(card, ds.action_dim)
        rmax = float(np.abs(ds.rewards).max())
        return cls(
            obs_dim=ds.obs_dim,
            action_dim=ds.action_dim,
            action_low=tuple(low),
            action_high=tuple(high),
            obs_mean=tuple(obs.mean(0).tolist()) if normalise_obs else None,
            obs_std=tuple(np.maximum(obs.std(0), 1e-3).tolist()) if normalise_obs else None,
            reward_scale=1.0 / rmax if rmax > 0 else 1.0,
            env_id=card.get("env_id"),
        )


@contextlib.contextmanager
def frozen(*modules: nn.Module) -> Iterator[None]:
    """Stop gradients into ``modules``' parameters for the block (the critic in the actor step)."""
    params = [p for m in modules for p in m.parameters()]
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, f in zip(params, flags):
            p.requires_grad_(f)


def polyak(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- tau * source + (1 - tau) * target`` parameter-wise."""
    with torch.no_grad():
        for pt, ps in zip(target.parameters(), source.parameters()):
            pt.lerp_(ps, tau)


def make_target(module: nn.Module) -> nn.Module:
    """A frozen copy of ``module`` for bootstrapped targets."""
    target = copy.deepcopy(module)
    for p in target.parameters():
        p.requires_grad_(False)
    return target


def require(config: Any, name: str, ok: bool, expected: str) -> None:
    """One :class:`ConfigError` sentence naming an agent config field whose value is out of range."""
    if not ok:
        raise ConfigError(f"agent config field {name!r} must be {expected}, got {getattr(config, name)!r}.")


def require_positive_ints(config: Any, *names: str) -> None:
    for name in names:
        require(config, name, getattr(config, name) >= 1, "a positive integer")


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """Settings every agent shares (checked on construction: a bad value is one sentence naming its field)."""

    discount: float = 0.99
    lr: float = 3e-4
    batch_size: int = 256
    hidden: int = 256
    depth: int = 3
    tau: float = 0.005  # target-network update rate
    seed: int = 0

    def __post_init__(self) -> None:
        for f in fields(self):  # every agent's fields: a YAML .inf or .nan would train to NaN weights
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"agent config field {f.name!r} must be a finite number, got {value!r}.")
        require(self, "discount", 0.0 <= self.discount <= 1.0, "in [0, 1]")
        require(self, "lr", self.lr > 0, "positive")
        require(self, "tau", 0.0 < self.tau <= 1.0, "in (0, 1]")
        require_positive_ints(self, "batch_size", "hidden", "depth")
        check_seed(self.seed)


class Agent(nn.Module, abc.ABC):
    """Base class: normalisation buffers, the shared contract, save/load; subclasses add networks and losses."""

    name: ClassVar[str] = "agent"
    config_class: ClassVar[type[AgentConfig]] = AgentConfig

    def __init__(self, spec: EnvSpec, config: AgentConfig) -> None:
        super().__init__()
        self.spec, self.config = spec, config
        self.register_buffer("action_low", torch.tensor(spec.action_low, dtype=torch.float32))
        self.register_buffer("action_high", torch.tensor(spec.action_high, dtype=torch.float32))
        mean = spec.obs_mean if spec.obs_mean is not None else [0.0] * spec.obs_dim
        std = spec.obs_std if spec.obs_std is not None else [1.0] * spec.obs_dim
        self.register_buffer("obs_mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("obs_std", torch.tensor(std, dtype=torch.float32))
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps = 0

    @property
    def device(self) -> torch.device:
        return self.obs_mean.device

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's hook behind ``to()`` / ``cuda()`` / ``cpu()``: keep the generator and the optimisers' state
        (Adam's moments; its ``step`` counter stays on the CPU) on the weights' device."""
        out = super()._apply(fn, recurse)
        dev = self.obs_mean.device
        if self.generator.device.type != dev.type or (dev.index is not None and self.generator.device != dev):
            self.generator = torch.Generator(device=dev).manual_seed(self.config.seed)
        for opt in (v for v in vars(self).values() if isinstance(v, torch.optim.Optimizer)):
            for state in opt.state.values():
                for key, value in state.items():
                    if torch.is_tensor(value) and key != "step":
                        state[key] = value.to(dev)
        return out

    # ------------------------------------------------------------------ units
    def norm_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return (obs.reshape(obs.shape[0], -1).float() - self.obs_mean) / self.obs_std

    def norm_action(self, act: torch.Tensor) -> torch.Tensor:
        return (2.0 * (act.float() - self.action_low) / (self.action_high - self.action_low) - 1.0).clamp(-1.0, 1.0)

    def env_action(self, act: torch.Tensor) -> torch.Tensor:
        return self.action_low + (act.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.action_high - self.action_low)

    def prepare(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Environment-unit batch -> the agent's internal units (see the module docstring)."""
        missing = [
            k for k in ("observations", "actions", "rewards", "terminals", "next_observations") if k not in batch
        ]
        if missing:
            raise InputError(f"update() batch is missing {', '.join(missing)}.")
        self.check_batch(batch)
        batch = {k: v.to(self.device, non_blocking=True) for k, v in batch.items()}
        return {
            "observations": self.norm_obs(batch["observations"]),
            "actions": self.norm_action(batch["actions"]),
            "rewards": batch["rewards"].float() * self.spec.reward_scale,
            "masks": 1.0 - batch["terminals"].float(),
            "next_observations": self.norm_obs(batch["next_observations"]),
        }

    def check_batch(self, batch: dict[str, torch.Tensor]) -> None:
        """One :class:`InputError` naming a batch field of the wrong shape (a ``[B, 1]`` reward column, say, was
        broadcast against ``[B]`` values deep inside a critic's loss). Observations may be ``[B, *obs]``; actions
        must be ``[B, action_dim]`` (a ``[B, A, 1]`` column passed a flattened check, then failed inside a network)."""
        b = batch["observations"].shape[0] if batch["observations"].dim() else 0
        if batch["observations"].dim() and b == 0:  # it failed in a reshape with a traceback
            raise InputError("update() batch must hold at least one transition, got 0.")
        o, a = self.spec.obs_dim, self.spec.action_dim
        expected = {"observations": (b, o), "actions": (b, a), "rewards": (b,), "terminals": (b,)}
        for key, shape in {**expected, "next_observations": (b, o)}.items():
            got = tuple(batch[key].shape)
            flat = key in ("observations", "next_observations") and len(got) >= 2  # only these are flattened
            if ((got[0], math.prod(got[1:])) if flat else got) != shape:
                raise InputError(f"update() batch field {key!r} must have shape {list(shape)}, got {list(got)}.")

    def optimise(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """One optimiser step on ``loss``; in a multi-process run the gradients are first averaged over the
        processes (:func:`gencore.train.average_gradients`), so every replica takes the same step."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        average_gradients(p for group in optimizer.param_groups for p in group["params"])
        optimizer.step()

    def noise(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, device=self.device)

    # ------------------------------------------------------------------ contract
    @abc.abstractmethod
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One learner step on an environment-unit batch; returns scalar metrics as Python floats. Keep the
        step's metrics as tensors and convert them once at the end with
        :func:`gencore.train.metrics_log.metrics_to_floats`: a ``.item()`` per metric waits for the device each
        time, while the training loop reads the metrics every update anyway (to catch divergence)."""

    @abc.abstractmethod
    def policy(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Normalised observations ``[B, O]`` -> normalised actions ``[B, A]`` in [-1, 1]."""

    @property
    def nfe_per_decision(self) -> int:
        return 1

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        if not np.isfinite(obs).all():  # a NaN action would reach the environment, which fails far from the cause
            raise InputError("act() needs finite observations, got NaN or inf.")
        x = torch.as_tensor(obs, device=self.device)
        single = x.dim() == 1
        if single:
            x = x[None]
        if x.reshape(x.shape[0], -1).shape[1] != self.spec.obs_dim:
            raise InputError(f"act() expected observations of size {self.spec.obs_dim}, got shape {tuple(x.shape)}.")
        out = self.env_action(self.policy(self.norm_obs(x), deterministic)).cpu().numpy()
        return out[0] if single else out

    def save(self, directory: str | os.PathLike) -> None:
        cfg = asdict(self.config)
        save_pretrained(directory, self.state_dict(), {"agent": self.name, "spec": asdict(self.spec), "config": cfg})
