"""Soft actor-critic, the online learner that produces medium and expert behaviour policies.

Haarnoja, Zhou, Abbeel & Levine, "Soft Actor-Critic", ICML 2018; with the learned temperature of
Haarnoja et al., "Soft Actor-Critic Algorithms and Applications", 2018 (target entropy ``-action_dim``).
Tanh-squashed Gaussian actor, twin Q ensemble with the minimum in the target, Polyak targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gencore.train.metrics_log import metrics_to_floats
from genrl.agents.base import Agent, AgentConfig, EnvSpec, frozen, make_target, polyak, require
from genrl.critics import CriticConfig, ScalarCritic, bellman_mask
from genrl.networks import MLP


@dataclass(frozen=True, kw_only=True)
class SACConfig(AgentConfig):
    init_temperature: float = 0.1
    log_std_min: float = -5.0
    log_std_max: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self, "init_temperature", self.init_temperature > 0, "positive")
        require(self, "log_std_max", self.log_std_max > self.log_std_min, "above log_std_min")


class SACAgent(Agent):
    name = "sac"
    config_class = SACConfig

    def __init__(self, spec: EnvSpec, config: SACConfig) -> None:
        super().__init__(spec, config)
        self.actor = MLP(spec.obs_dim, 2 * spec.action_dim, config.hidden, config.depth, layer_norm=False)
        self.critic = ScalarCritic(
            spec.obs_dim, spec.action_dim, CriticConfig(hidden=config.hidden, depth=config.depth)
        )
        self.target_critic = make_target(self.critic)
        self.log_alpha = torch.nn.Parameter(torch.tensor(math.log(config.init_temperature)))
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=config.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=config.lr)

    def sample(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed action ``[B, A]`` and its log-density ``[B]``."""
        mean, log_std = self.actor(obs).chunk(2, -1)
        log_std = log_std.clamp(self.config.log_std_min, self.config.log_std_max)
        if deterministic:
            return torch.tanh(mean), torch.zeros(obs.shape[0], device=obs.device)
        u = mean + log_std.exp() * self.noise(*mean.shape)
        logp = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)  # tanh change of variables
        return torch.tanh(u), logp

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        b = self.prepare(batch)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self.sample(b["next_observations"])
            q2 = self.target_critic.all_q(b["next_observations"], a2).min(0).values - alpha * logp2
            y = b["rewards"] + self.config.discount * bellman_mask(b) * q2
        q = self.critic.all_q(b["observations"], b["actions"])
        critic_loss = ((q - y[None]) ** 2).mean()
        self.optimise(self.critic_opt, critic_loss)

        a, logp = self.sample(b["observations"])
        with frozen(self.critic):
            qa = self.critic.all_q(b["observations"], a).min(0).values
        actor_loss = (alpha * logp - qa).mean()
        self.optimise(self.actor_opt, actor_loss)

        alpha_loss = -(self.log_alpha * (logp.detach() - self.spec.action_dim)).mean()
        self.optimise(self.alpha_opt, alpha_loss)
        polyak(self.target_critic, self.critic, self.config.tau)
        self.steps += 1
        metrics = {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha": alpha}
        return metrics_to_floats({k: v.detach() for k, v in metrics.items()})

    def policy(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        return self.sample(obs, deterministic)[0]
