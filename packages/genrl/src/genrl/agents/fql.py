"""Flow Q-learning and its distributional-critic variants.

FQL: Park, Li & Levine, "Flow Q-Learning", ICML 2025 (arXiv:2502.02538). Three networks:

* a BC flow policy ``v(a_t, t | s)`` trained by flow matching on the data's actions (the teacher);
* a one-step policy ``mu(s, eps)`` trained with ``alpha * || mu(s, eps) - flow(s, eps) ||^2`` (distillation
  of the unclipped output towards the teacher's Euler-integrated action from the same noise, the teacher
  *detached*) minus ``lam * Q(s, clip(mu(s, eps)))`` with the critic *frozen* and ``lam = 1 / mean|Q|``
  (stop-gradient) so that ``alpha`` means the same on every reward scale;
* a critic trained towards ``r + discount * (1 - terminal) * Q_target(s', mu(s', eps'))``.

``act`` uses the one-step policy (one network evaluation) by default; ``extraction="best-of-n"`` instead acts
with the BC-flow action of largest Q among ``n_candidates`` draws (an act-time choice: FQL's critic still
learns the value of the one-step policy, whose actions it bootstraps from; Value Flows also bootstraps from
best-of-N actions). :meth:`FQLAgent.use_extraction` switches between the two.

The critic is pluggable: ``fql`` uses the scalar ensemble; ``c51`` and ``iqn`` are the same agent with the
C51 (Bellemare et al. 2017) or IQN (Dabney et al. 2018) return-distribution critic whose mean is maximised,
the distributional baselines of Value Flows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import torch
from torch import nn

from gencore.checks import check_choice
from gencore.train.metrics_log import metrics_to_floats
from genrl.agents.base import Agent, EnvSpec, frozen, make_target, polyak, require, require_positive_ints
from genrl.agents.flow_bc import FlowActorMixin, FlowBCConfig
from genrl.critics import C51Critic, CriticConfig, IQNCritic, ScalarCritic
from genrl.networks import ActionVelocity, OneStepPolicy


@dataclass(frozen=True, kw_only=True)
class FQLConfig(FlowBCConfig):
    alpha: float = 10.0  # distillation weight of the one-step policy
    normalize_q_loss: bool = True  # scale the Q term by 1 / mean|Q| (stop-gradient)
    ensemble: int = 2  # critic ensemble size (targets use the ensemble mean)
    n_atoms: int = 51  # C51 only
    n_quantiles: int = 32  # IQN only
    huber_kappa: float = 1.0  # IQN only: the quantile Huber loss's threshold, on the scaled return's scale
    extraction: str = "one-step"  # one-step | best-of-n (act with the best of n_candidates BC-flow actions)
    n_candidates: int = 16  # actions drawn from the BC flow for best-of-n when acting

    def __post_init__(self) -> None:
        super().__post_init__()
        # the critics' return range is +-1 / (1 - discount) (rewards scaled to [-1, 1]): 1 would divide by zero
        require(self, "discount", self.discount < 1.0, "below 1 for the FQL family")
        require(self, "alpha", self.alpha >= 0, "non-negative")
        require(self, "n_atoms", self.n_atoms >= 2, "at least 2")
        require(self, "huber_kappa", self.huber_kappa > 0, "positive")
        require_positive_ints(self, "ensemble", "n_quantiles", "n_candidates")


EXTRACTIONS = ("best-of-n", "one-step")


class FQLAgent(FlowActorMixin, Agent):
    """FQL with a scalar critic ensemble."""

    name = "fql"
    config_class = FQLConfig
    critic_class: ClassVar[type[nn.Module]] = ScalarCritic

    def __init__(self, spec: EnvSpec, config: FQLConfig) -> None:
        check_choice(config.extraction, EXTRACTIONS, "extraction")
        super().__init__(spec, config)
        self.actor_flow = ActionVelocity(spec.obs_dim, spec.action_dim, config.hidden, config.depth)
        self.actor_onestep = OneStepPolicy(spec.obs_dim, spec.action_dim, config.hidden, config.depth)
        self.critic = self.critic_class(spec.obs_dim, spec.action_dim, self.critic_config())
        self.target_critic = make_target(self.critic)
        actor_params = [*self.actor_flow.parameters(), *self.actor_onestep.parameters()]
        self.actor_opt = torch.optim.Adam(actor_params, lr=config.lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=config.lr)

    def critic_config(self) -> CriticConfig:
        c = self.config
        vmax = 1.0 / (1.0 - c.discount)  # rewards are scaled to [-1, 1]
        return CriticConfig(
            hidden=c.hidden,
            depth=c.depth,
            ensemble=c.ensemble,
            return_min=-vmax,
            return_max=vmax,
            n_atoms=c.n_atoms,
            n_quantiles=c.n_quantiles,
            huber_kappa=c.huber_kappa,
        )

    # ------------------------------------------------------------------ pieces
    def onestep_actions(self, obs: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
        return self.actor_onestep(obs, eps).clamp(-1.0, 1.0)

    def q_value(self, critic: nn.Module, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return critic.q(obs, act)

    def use_extraction(self, extraction: str) -> None:
        """Switch between ``best-of-n`` and ``one-step`` (the offline-to-online loop switches to one-step)."""
        self.config = replace(self.config, extraction=check_choice(extraction, EXTRACTIONS, "extraction"))

    @torch.no_grad()
    def best_of_n(self, obs: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """Of ``n`` (default ``n_candidates``) BC-flow actions per observation, the one of largest Q."""
        b, a = obs.shape[0], self.spec.action_dim
        n = self.config.n_candidates if n is None else n
        obs_n = obs.repeat_interleave(n, 0)
        cand = self.flow_actions(obs_n, self.noise(b * n, a))
        q = self.q_value(self.critic, obs_n, cand).reshape(b, n)
        return cand.reshape(b, n, a)[torch.arange(b, device=cand.device), q.argmax(1)]

    def next_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.onestep_actions(next_obs, self.noise(next_obs.shape[0], self.spec.action_dim))

    def critic_step(self, b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        loss, metrics = self.critic.loss(
            b, self.next_actions(b["next_observations"]), self.target_critic, self.config.discount, self.generator
        )
        self.optimise(self.critic_opt, loss)
        return metrics

    def actor_loss(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        obs = b["observations"]
        bc = self.bc_flow_loss(obs, b["actions"])
        eps = self.noise(obs.shape[0], self.spec.action_dim)
        with torch.no_grad():  # the teacher is detached: no distillation gradient reaches the BC flow
            teacher = self.flow_actions(obs, eps)
        raw = self.actor_onestep(obs, eps)  # distilled unclipped, as in FQL: a clamp would stop its gradient
        distill = ((raw - teacher) ** 2).mean()
        with frozen(self.critic):  # the critic is a fixed landscape for the actor
            q = self.q_value(self.critic, obs, raw.clamp(-1.0, 1.0))
        q_loss = -q.mean()
        if self.config.normalize_q_loss:
            q_loss = q_loss / q.abs().mean().detach().clamp_min(1e-6)
        loss = bc + self.config.alpha * distill + q_loss
        return loss, {"bc_flow_loss": bc.detach(), "distill_loss": distill.detach(), "q_loss": q_loss.detach()}

    # ------------------------------------------------------------------ contract
    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        b = self.prepare(batch)
        metrics = self.critic_step(b)
        loss, actor_metrics = self.actor_loss(b)
        self.optimise(self.actor_opt, loss)
        polyak(self.target_critic, self.critic, self.config.tau)
        self.steps += 1
        return metrics_to_floats({**metrics, **actor_metrics, "actor_loss": loss.detach()})

    @property
    def nfe_per_decision(self) -> int:
        # best-of-n: the action flow's Euler steps then one critic call, each batched over the candidates.
        return self.config.flow_steps + 1 if self.config.extraction == "best-of-n" else 1

    def policy(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if self.config.extraction == "best-of-n":
            return self.best_of_n(obs)
        eps = self.noise(obs.shape[0], self.spec.action_dim)
        return self.onestep_actions(obs, torch.zeros_like(eps) if deterministic else eps)


class C51Agent(FQLAgent):
    """FQL's actor on a C51 critic (mean of the categorical return distribution maximised)."""

    name = "c51"
    critic_class = C51Critic


class IQNAgent(FQLAgent):
    """FQL's actor on an IQN critic (mean of the quantile function maximised)."""

    name = "iqn"
    critic_class = IQNCritic
