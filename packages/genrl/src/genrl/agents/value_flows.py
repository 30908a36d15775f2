"""Value Flows agent: flow return-distribution critic + flow BC + one-step policy.

Dong, Zheng, Finn, Sadigh & Eysenbach, "Value Flows", ICLR 2026 (arXiv:2510.07650). The critic is
:class:`genrl.value_flow_critic.FlowReturnCritic` (BCFM + DCFM losses, confidence weights from the
flow-derivative ODE). Policy extraction:

* ``best-of-n`` (offline): draw ``n_candidates`` actions from the BC flow and keep the one with the largest
  ``Q(s, a) = E[eps + v(eps, 0 | s, a)]``; the critic's next actions ``a'`` are extracted the same way from
  ``target_candidates`` draws (4 by default, against the reference code's 16, to fit a CPU budget).
* ``one-step`` (online, after :meth:`ValueFlowsAgent.use_extraction`): FQL's one-step policy, distilled from
  the BC flow (teacher detached) while maximising the flow critic's Q (critic frozen); it is trained in
  both modes, so the switch needs no warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from gencore.checks import check_choice
from genrl.agents.base import EnvSpec
from genrl.agents.fql import FQLAgent, FQLConfig
from genrl.critics import CriticConfig
from genrl.value_flow_critic import FlowReturnCritic

EXTRACTIONS = ("best-of-n", "one-step")


@dataclass(frozen=True, kw_only=True)
class ValueFlowsConfig(FQLConfig):
    extraction: str = "best-of-n"  # best-of-n (offline) | one-step (online)
    n_candidates: int = 16  # actions drawn from the BC flow for best-of-n when acting
    target_candidates: int = 4  # candidates for the critic's next actions (the reference uses 16; CPU budget)
    critic_flow_steps: int = 10  # Euler steps of the return flow
    q_noises: int = 1  # noises averaged in the one-step Q estimate (the reference uses 1)
    confidence_temp: float = 0.3  # temperature of the confidence weights
    bcfm_weight: float = 1.0
    dcfm_weight: float = 1.0


class ValueFlowsAgent(FQLAgent):
    name = "value-flows"
    config_class = ValueFlowsConfig
    critic_class = FlowReturnCritic

    def __init__(self, spec: EnvSpec, config: ValueFlowsConfig) -> None:
        check_choice(config.extraction, EXTRACTIONS, "extraction")
        super().__init__(spec, config)

    def critic_config(self) -> CriticConfig:
        c = self.config
        return replace(
            super().critic_config(),
            flow_steps=c.critic_flow_steps,
            q_noises=c.q_noises,
            confidence_temp=c.confidence_temp,
            bcfm_weight=c.bcfm_weight,
            dcfm_weight=c.dcfm_weight,
        )

    def use_extraction(self, extraction: str) -> None:
        """Switch between ``best-of-n`` and ``one-step`` (the offline-to-online loop switches to one-step)."""
        self.config = replace(self.config, extraction=check_choice(extraction, EXTRACTIONS, "extraction"))

    def q_value(self, critic: FlowReturnCritic, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return critic.q(obs, act, self.generator)

    @torch.no_grad()
    def best_of_n(self, obs: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """Of ``n`` (default ``n_candidates``) BC-flow actions per observation, the one of largest Q."""
        b, a = obs.shape[0], self.spec.action_dim
        n = self.config.n_candidates if n is None else n
        obs_n = obs.repeat_interleave(n, 0)
        cand = self.flow_actions(obs_n, self.noise(b * n, a))
        q = self.critic.q(obs_n, cand, self.generator).reshape(b, n)
        return cand.reshape(b, n, a)[torch.arange(b), q.argmax(1)]

    def next_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        if self.config.extraction == "best-of-n":
            return self.best_of_n(next_obs, self.config.target_candidates)
        return super().next_actions(next_obs)

    @property
    def nfe_per_decision(self) -> int:
        # best-of-n: the action flow's Euler steps then one critic call, each batched over the candidates.
        return self.config.flow_steps + 1 if self.config.extraction == "best-of-n" else 1

    def policy(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if self.config.extraction == "best-of-n":
            return self.best_of_n(obs)
        return super().policy(obs, deterministic)
