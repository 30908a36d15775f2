"""Critics over ``(s, a)``: a scalar ensemble and three return-distribution models.

Every critic answers the same calls, so agents and the toy-MDP experiment can swap them:

* ``loss(batch, next_actions, target, discount, generator) -> (loss, metrics)``: one Bellman step towards
  ``r + discount * mask * Z(s', a')`` with ``target`` (a frozen copy of the critic) at the given next actions,
  where ``mask = 1 - terminal`` (a truncated episode still bootstraps).
* ``q(obs, act) -> [B]``: the expected return (mean over the ensemble).
* ``sample(obs, act, n, generator) -> [B, n]``: return samples (distributional critics only).

Models:

* :class:`ScalarCritic` — an ensemble of ``Q(s, a)`` regressors (TD(0) with MSE), FQL's critic.
* :class:`C51Critic` — categorical distribution on fixed atoms with the projected distributional Bellman target
  (Bellemare, Dabney & Munos, "A Distributional Perspective on Reinforcement Learning", ICML 2017).
* :class:`IQNCritic` — implicit quantile network with the quantile Huber loss
  (Dabney, Ostrovski, Silver & Munos, "Implicit Quantile Networks for Distributional RL", ICML 2018).
* :class:`FlowReturnCritic` — Value Flows' return vector field (see :mod:`genrl.value_flow_critic`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError
from genrl.networks import MLP, Ensemble

Batch = dict[str, torch.Tensor]
POSITIVE_INTS = ("hidden", "depth", "ensemble", "n_quantiles", "quantile_embed", "flow_steps", "q_noises")


def bellman_mask(batch: Batch) -> torch.Tensor:
    """``1 - terminal`` as a float ``[B]``: the factor that multiplies ``discount * Z(s', a')``."""
    return batch["masks"].to(batch["rewards"].dtype)


@dataclass(frozen=True, kw_only=True)
class CriticConfig:
    """Network and distribution settings shared by the critics (unused fields are ignored by a model)."""

    hidden: int = 256
    depth: int = 3
    ensemble: int = 2
    return_min: float = -100.0  # support / clipping range of returns (C51 atoms, flow returns)
    return_max: float = 100.0
    n_atoms: int = 51  # C51
    n_quantiles: int = 32  # IQN: quantile samples per side of the loss
    quantile_embed: int = 64  # IQN: cosine features of tau
    huber_kappa: float = 1.0  # IQN: set it on the return scale (|u| < kappa is quadratic, i.e. expectile-like)
    flow_steps: int = 10  # Value Flows: Euler steps of the return flow
    q_noises: int = 1  # Value Flows: noises averaged in the one-step Q estimate
    confidence_temp: float = 0.3  # Value Flows: temperature of the confidence weights
    bcfm_weight: float = 1.0  # Value Flows: bootstrapped conditional flow matching weight
    dcfm_weight: float = 1.0  # Value Flows: distributional conditional flow matching weight

    def __post_init__(self) -> None:
        """A setting that would train to garbage is one :class:`ConfigError` naming its field (a support with
        ``return_min >= return_max`` reversed or emptied C51's atoms; ``huber_kappa = 0`` made the IQN loss NaN)."""
        checks = {
            **{k: (getattr(self, k) >= 1, "a positive integer") for k in POSITIVE_INTS},
            "n_atoms": (self.n_atoms >= 2, "at least 2"),
            "return_min": (
                math.isfinite(self.return_min) and math.isfinite(self.return_max) and self.return_min < self.return_max,
                "finite and below return_max",
            ),
            "huber_kappa": (0 < self.huber_kappa < math.inf, "finite and positive"),
            "confidence_temp": (0 < self.confidence_temp < math.inf, "finite and positive"),
            "bcfm_weight": (0 <= self.bcfm_weight < math.inf, "finite and non-negative"),
            "dcfm_weight": (0 <= self.dcfm_weight < math.inf, "finite and non-negative"),
        }
        for name, (ok, expected) in checks.items():
            if not ok:
                raise ConfigError(f"critic config field {name!r} must be {expected}, got {getattr(self, name)!r}.")


class ScalarCritic(nn.Module):
    """``Q_k(s, a)`` for ``k < ensemble``; the TD target uses the mean of the target ensemble."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: CriticConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.nets = Ensemble(MLP(obs_dim + action_dim, 1, cfg.hidden, cfg.depth) for _ in range(cfg.ensemble))

    def all_q(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.nets(torch.cat([obs, act], -1)).squeeze(-1)  # [K, B]

    def q(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.all_q(obs, act).mean(0)

    def loss(
        self, batch: Batch, next_actions: torch.Tensor, target: ScalarCritic, discount: float, generator=None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            y = batch["rewards"] + discount * bellman_mask(batch) * target.q(batch["next_observations"], next_actions)
        q = self.all_q(batch["observations"], batch["actions"])
        loss = ((q - y[None]) ** 2).mean()
        return loss, {"critic_loss": loss.detach(), "q_mean": q.mean().detach()}


class C51Critic(nn.Module):
    """Categorical return distribution on ``n_atoms`` atoms spanning ``[return_min, return_max]``."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: CriticConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.nets = Ensemble(MLP(obs_dim + action_dim, cfg.n_atoms, cfg.hidden, cfg.depth) for _ in range(cfg.ensemble))
        self.register_buffer("atoms", torch.linspace(cfg.return_min, cfg.return_max, cfg.n_atoms))

    def logits(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.nets(torch.cat([obs, act], -1))  # [K, B, n_atoms]

    def probs(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.logits(obs, act).softmax(-1).mean(0)  # ensemble mixture [B, n_atoms]

    def q(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return (self.probs(obs, act) * self.atoms).sum(-1)

    def sample(self, obs: torch.Tensor, act: torch.Tensor, n: int, generator=None) -> torch.Tensor:
        idx = torch.multinomial(self.probs(obs, act), n, replacement=True, generator=generator)
        return self.atoms[idx]

    def project(self, rewards: torch.Tensor, factor: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Project the distribution of ``r + factor * Z`` (``Z`` on the atoms with ``probs [B, n]``) onto the atoms."""
        lo, hi, n = self.cfg.return_min, self.cfg.return_max, self.cfg.n_atoms
        dz = (hi - lo) / (n - 1)
        tz = (rewards[:, None] + factor[:, None] * self.atoms[None]).clamp(lo, hi)
        b = ((tz - lo) / dz).clamp(0, n - 1)  # rounding can put (hi - lo) / dz just above n - 1: no atom there
        lower, upper = b.floor().long(), b.ceil().long()
        w_upper = b - lower  # zero when b is an integer: then all mass goes to lower == upper
        out = torch.zeros_like(probs)
        out.scatter_add_(1, lower, probs * (1.0 - w_upper))
        out.scatter_add_(1, upper, probs * w_upper)
        return out

    def loss(
        self, batch: Batch, next_actions: torch.Tensor, target: C51Critic, discount: float, generator=None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            p_next = target.probs(batch["next_observations"], next_actions)
            m = self.project(batch["rewards"], discount * bellman_mask(batch), p_next)
        logp = self.logits(batch["observations"], batch["actions"]).log_softmax(-1)
        loss = -(m[None] * logp).sum(-1).mean()
        return loss, {"critic_loss": loss.detach(), "q_mean": (logp.exp() * self.atoms).sum(-1).mean().detach()}


class IQNCritic(nn.Module):
    """Quantile function ``Z_tau(s, a)`` with a cosine embedding of ``tau`` (IQN)."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: CriticConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.state = Ensemble(MLP(obs_dim + action_dim, h, h, max(cfg.depth - 1, 1)) for _ in range(cfg.ensemble))
        self.tau_embed = Ensemble(nn.Linear(cfg.quantile_embed, h) for _ in range(cfg.ensemble))
        self.head = Ensemble(MLP(h, 1, h, 1) for _ in range(cfg.ensemble))
        self.register_buffer("freqs", math.pi * torch.arange(cfg.quantile_embed, dtype=torch.float32))

    def quantiles(self, obs: torch.Tensor, act: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        """``tau: [B, N]`` -> quantiles ``[K, B, N]``."""
        phi = torch.cos(tau[..., None] * self.freqs)  # [B, N, E]
        outs = []
        for body, emb, head in zip(self.state, self.tau_embed, self.head):
            s = body(torch.cat([obs, act], -1))[:, None, :]  # [B, 1, H]
            outs.append(head(s * F.relu(emb(phi))).squeeze(-1))
        return torch.stack(outs, 0)

    def _midpoints(self, b: int, like: torch.Tensor) -> torch.Tensor:
        n = self.cfg.n_quantiles
        return ((torch.arange(n, dtype=like.dtype, device=like.device) + 0.5) / n).expand(b, n)

    def q(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.quantiles(obs, act, self._midpoints(obs.shape[0], obs)).mean((0, 2))

    def sample(self, obs: torch.Tensor, act: torch.Tensor, n: int, generator=None) -> torch.Tensor:
        tau = torch.rand(obs.shape[0], n, generator=generator, dtype=obs.dtype, device=obs.device)
        return self.quantiles(obs, act, tau).mean(0)

    def loss(
        self, batch: Batch, next_actions: torch.Tensor, target: IQNCritic, discount: float, generator=None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        b, n, kappa = batch["rewards"].shape[0], self.cfg.n_quantiles, self.cfg.huber_kappa
        obs = batch["observations"]
        with torch.no_grad():
            tau_next = torch.rand(b, n, generator=generator, dtype=obs.dtype, device=obs.device)
            z_next = target.quantiles(batch["next_observations"], next_actions, tau_next).mean(0)  # [B, N']
            y = batch["rewards"][:, None] + discount * bellman_mask(batch)[:, None] * z_next
        tau = torch.rand(b, n, generator=generator, dtype=obs.dtype, device=obs.device)
        z = self.quantiles(obs, batch["actions"], tau)  # [K, B, N]
        u = y[None, :, None, :] - z[..., None]  # [K, B, N, N']
        huber = torch.where(u.abs() <= kappa, 0.5 * u**2, kappa * (u.abs() - 0.5 * kappa))
        rho = (tau[None, :, :, None] - (u.detach() < 0).to(u.dtype)).abs() * huber / kappa
        loss = rho.sum(2).mean()
        return loss, {"critic_loss": loss.detach(), "q_mean": z.mean().detach()}
