"""Flow behaviour cloning: a flow-matching policy ``pi(a | s)`` trained on the data's actions.

Linear path from ``a_0 ~ N(0, I)`` (t = 0) to a data action ``a_1`` (t = 1); the velocity
``v(a_t, t | s)`` regresses ``a_1 - a_0`` (Lipman et al., "Flow Matching for Generative Modeling",
ICLR 2023; as the BC teacher of Park, Li & Levine, "Flow Q-Learning", ICML 2025). Actions are drawn
with ``flow_steps`` Euler steps of :func:`gencore.solvers.solve_ode` and clipped to [-1, 1];
``deterministic=True`` starts from ``a_0 = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gencore.solvers import solve_ode
from gencore.train.metrics_log import metrics_to_floats
from genrl.agents.base import Agent, AgentConfig, EnvSpec, require_positive_ints
from genrl.networks import ActionVelocity


@dataclass(frozen=True, kw_only=True)
class FlowBCConfig(AgentConfig):
    flow_steps: int = 10  # Euler steps of the action flow

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_ints(self, "flow_steps")


class FlowActorMixin:
    """The BC flow: its loss and its sampler (shared by Flow BC, FQL, the distributional baselines and Value Flows)."""

    actor_flow: ActionVelocity
    config: FlowBCConfig
    generator: torch.Generator

    def bc_flow_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        a0 = torch.randn(actions.shape, generator=self.generator, dtype=actions.dtype, device=actions.device)
        t = torch.rand(actions.shape[0], 1, generator=self.generator, dtype=actions.dtype, device=actions.device)
        a_t = (1 - t) * a0 + t * actions
        return ((self.actor_flow(a_t, t.squeeze(-1), obs) - (actions - a0)) ** 2).mean()

    def flow_actions(self, obs: torch.Tensor, a0: torch.Tensor) -> torch.Tensor:
        sol = solve_ode(lambda a, t: self.actor_flow(a, t, obs), a0, steps=self.config.flow_steps, method="euler")
        return sol.x.clamp(-1.0, 1.0)


class FlowBCAgent(FlowActorMixin, Agent):
    """Flow BC (no critic)."""

    name = "flow-bc"
    config_class = FlowBCConfig

    def __init__(self, spec: EnvSpec, config: FlowBCConfig) -> None:
        super().__init__(spec, config)
        self.actor_flow = ActionVelocity(spec.obs_dim, spec.action_dim, config.hidden, config.depth)
        self.actor_opt = torch.optim.Adam(self.actor_flow.parameters(), lr=config.lr)

    @property
    def nfe_per_decision(self) -> int:
        return self.config.flow_steps

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        b = self.prepare(batch)
        loss = self.bc_flow_loss(b["observations"], b["actions"])
        self.optimise(self.actor_opt, loss)
        self.steps += 1
        return metrics_to_floats({"bc_flow_loss": loss.detach()})

    def policy(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        a0 = self.noise(obs.shape[0], self.spec.action_dim)
        return self.flow_actions(obs, torch.zeros_like(a0) if deterministic else a0)
