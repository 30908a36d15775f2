"""Agents registered by name; every one follows :mod:`genrl.agents.base`'s contract."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

from gencore.checks import check_choice
from gencore.config import build_config
from gencore.errors import InputError
from gencore.io import load_pretrained
from gencore.rng import seeded_init
from genrl.agents.base import Agent, AgentConfig, EnvSpec, frozen
from genrl.agents.flow_bc import FlowBCAgent, FlowBCConfig
from genrl.agents.fql import C51Agent, FQLAgent, FQLConfig, IQNAgent
from genrl.agents.sac import SACAgent, SACConfig
from genrl.agents.value_flows import ValueFlowsAgent, ValueFlowsConfig

AGENTS: dict[str, type[Agent]] = {
    a.name: a for a in (FlowBCAgent, FQLAgent, C51Agent, IQNAgent, ValueFlowsAgent, SACAgent)
}


def agent_config(name: str, values: dict[str, Any] | None = None, source: str = "config") -> AgentConfig:
    """The named agent's config dataclass built from ``values`` (unknown keys are a clear error)."""
    cls = AGENTS[check_choice(name, tuple(AGENTS), "agent")].config_class
    return build_config(cls, values or {}, source)


def make_agent(name: str, spec: EnvSpec, values: dict[str, Any] | None = None) -> Agent:
    """Build an agent; its initial weights depend only on ``config.seed`` (torch's global RNG is left as it was)."""
    cls = AGENTS[check_choice(name, tuple(AGENTS), "agent")]
    config = agent_config(name, values)
    with seeded_init(config.seed):
        return cls(spec, config)


def load_agent(directory: str | os.PathLike, device: str = "cpu") -> Agent:
    """Rebuild an agent saved with :meth:`Agent.save` (weights through safetensors, never pickle)."""
    state, cfg = load_pretrained(directory, device)
    where = repr(str(Path(directory) / "config.json"))
    if not isinstance(cfg, dict) or "agent" not in cfg or not isinstance(cfg.get("spec"), dict):
        raise InputError(f"{where} is not a genrl agent config.")
    if not isinstance(cfg.get("config", {}), dict):
        raise InputError(f"{where}: field 'config' must be an object of agent settings, got {cfg['config']!r}.")
    spec_fields = {f.name for f in fields(EnvSpec)}
    spec_values = {k: v for k, v in cfg["spec"].items() if k in spec_fields}
    try:
        spec = build_config(EnvSpec, spec_values, f"{where}, 'spec'")
    except (TypeError, InputError) as exc:  # a required field missing, a size or bound out of range
        raise InputError(f"{where}: field 'spec' does not describe an environment ({str(exc).rstrip('.')}).") from None
    agent = make_agent(cfg["agent"], spec, cfg.get("config", {}))
    try:
        agent.load_state_dict(state)
    except RuntimeError:
        raise InputError(
            f"the weights in {str(directory)!r} do not fit the {cfg['agent']} agent its config.json describes."
        ) from None
    return agent.to(device)


__all__ = [
    "AGENTS",
    "Agent",
    "AgentConfig",
    "C51Agent",
    "EnvSpec",
    "FQLAgent",
    "FQLConfig",
    "FlowBCAgent",
    "FlowBCConfig",
    "IQNAgent",
    "SACAgent",
    "SACConfig",
    "ValueFlowsAgent",
    "ValueFlowsConfig",
    "agent_config",
    "frozen",
    "load_agent",
    "make_agent",
]
