"""Distributional critics against the analytic return law of the toy MDP (the Value Flows toy claim).

Each critic (C51, IQN, Value Flows' flow critic) is trained by policy evaluation on the same
:class:`genrl.toy_mdp.BimodalChain` dataset with the same network width, optimiser, batches and seed, with
target networks updated by Polyak averaging. It is then scored on a grid of states against the exact law:
W1, expected CRPS (and its floor, the true law's own CRPS), and the Pearson correlation between the
critic's return variance and the true variance (for Value Flows, the variance from the flow-derivative ODE,
``var_corr``; and from samples, ``var_corr_samples``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gencore.checks import check_choice
from genrl.agents.base import make_target, polyak
from genrl.critics import C51Critic, CriticConfig, IQNCritic
from genrl.toy_mdp import BimodalChain, cdf_errors
from genrl.value_flow_critic import FlowReturnCritic

CRITICS = {"c51": C51Critic, "iqn": IQNCritic, "value-flows": FlowReturnCritic}


@dataclass(frozen=True, kw_only=True)
class ToyCriticConfig:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    hidden: int = 128
    depth: int = 3
    tau: float = 0.01
    n_episodes: int = 2000
    n_eval_samples: int = 1000
    huber_kappa: float = 0.01  # IQN: returns here are O(1), so kappa = 1 would make the loss expectile-like
    seed: int = 0


def _batch(ds, idx: np.ndarray) -> dict[str, torch.Tensor]:
    return {
        "observations": torch.from_numpy(ds.observations[idx]),
        "actions": torch.from_numpy(ds.actions[idx]),
        "rewards": torch.from_numpy(ds.rewards[idx]),
        "masks": torch.from_numpy(1.0 - ds.terminals[idx].astype(np.float32)),
        "next_observations": torch.from_numpy(ds.next_observations[idx]),
    }


def eval_states(chain: BimodalChain) -> np.ndarray:
    k = np.repeat(np.arange(chain.length), 8)
    c = np.tile(np.linspace(0.0, 1.0, 8), chain.length)
    return chain.observation(k, c).astype(np.float32)


def critic_variance(critic: torch.nn.Module, obs: torch.Tensor, act: torch.Tensor, g: torch.Generator) -> np.ndarray:
    if isinstance(critic, C51Critic):
        p = critic.probs(obs, act)
        m = (p * critic.atoms).sum(-1, keepdim=True)
        return (p * (critic.atoms - m) ** 2).sum(-1).numpy()
    if isinstance(critic, FlowReturnCritic):
        return critic.return_variance(obs, act, n=64, generator=g).numpy()
    return critic.sample(obs, act, 1000, g).var(1).numpy()


def train_toy_critic(
    name: str, cfg: ToyCriticConfig, chain: BimodalChain | None = None, progress: bool = False
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train one critic on the toy MDP; return it and its scores (see the module docstring)."""
    check_choice(name, tuple(CRITICS), "critic")
    chain = chain or BimodalChain()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    ds = chain.dataset(cfg.n_episodes, seed=cfg.seed)
    span = 1.6  # |Z| <= m + 4 sigma = 1.5 + 0.4 covers the law with room
    ccfg = CriticConfig(
        hidden=cfg.hidden,
        depth=cfg.depth,
        ensemble=1,
        return_min=-span - 0.4,
        return_max=span + 0.4,
        huber_kappa=cfg.huber_kappa,
    )
    critic = CRITICS[name](2, 1, ccfg)
    target = make_target(critic)
    opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    rng = np.random.default_rng(cfg.seed)
    t0 = time.perf_counter()
    for _ in tqdm(range(cfg.steps), disable=not progress, desc=f"toy {name}"):
        b = _batch(ds, rng.integers(len(ds), size=cfg.batch_size))
        next_act = torch.rand(cfg.batch_size, 1, generator=g) * 2 - 1
        loss, _ = critic.loss(b, next_act, target, chain.discount, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        polyak(target, critic, cfg.tau)
    train_s = time.perf_counter() - t0
    return critic, {"critic": name, "steps": cfg.steps, "train_s": train_s, **score_critic(critic, chain, cfg, g)}


@torch.no_grad()
def score_critic(critic: torch.nn.Module, chain: BimodalChain, cfg: ToyCriticConfig, g: torch.Generator) -> dict:
    obs_np = eval_states(chain)
    obs = torch.from_numpy(obs_np)
    act = torch.zeros(len(obs), 1)
    samples = critic.sample(obs, act, cfg.n_eval_samples, g).numpy()
    grid = np.linspace(-2.5, 2.5, 2001)
    cdf = chain.return_cdf(obs_np, np.broadcast_to(grid, (len(obs_np), grid.size)))
    errors = cdf_errors(samples, cdf, grid)
    true_var = chain.return_variance(obs_np)
    est_var = critic_variance(critic, obs, act, g)
    out = {**errors, "var_corr": float(np.corrcoef(est_var, true_var)[0, 1])}
    if isinstance(critic, FlowReturnCritic):
        out["var_corr_samples"] = float(np.corrcoef(samples.var(1), true_var)[0, 1])
    return out


def compare_critics(
    names: tuple[str, ...] = tuple(CRITICS), cfg: ToyCriticConfig | None = None, progress: bool = False
) -> list[dict[str, Any]]:
    cfg = cfg or ToyCriticConfig()
    return [train_toy_critic(n, cfg, progress=progress)[1] for n in names]
