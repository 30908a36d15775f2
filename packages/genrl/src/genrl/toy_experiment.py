"""Distributional critics against the analytic return law of the toy MDP (the Value Flows toy claim).

Each critic (C51, IQN, Value Flows' flow critic) is trained by policy evaluation on the same
:class:`genrl.toy_mdp.BimodalChain` dataset with the same network width, optimiser, batches and seed, with
target networks updated by Polyak averaging. It is then scored on a grid of states against the exact law:
W1, expected CRPS (and its floor, the true law's own CRPS), W1 per number of steps to go, and the Pearson
correlation between the critic's return variance and the true variance (for Value Flows, the variance from
the flow-derivative ODE, ``var_corr``; and from samples, ``var_corr_samples``).

Scores come with their measurement floor: ``w1_floor`` is the W1 of as many samples drawn from the *true*
law (per state) as the critic is scored with, so a critic's W1 cannot be told apart from an exact one below
it (``crps_excess_floor``: the same for ``crps - crps_floor``). Evaluation draws its noise from its own
generator (seeded from ``seed``), so scoring a run along the way (``eval_at``, a learning curve) leaves its
training untouched. For Value Flows, ``flow_solvers`` also scores the same trained field integrated with other
solvers (``"euler:50"``, ``"midpoint:10"``) from the same noises, and :func:`score_exact_field` reads the
*exact* field of the law (:class:`genrl.toy_mdp.ExactReturnField`) the same ways: what the read-out alone costs.
``ToyCriticConfig.randomness`` picks the chain's variant (a random last reward, or the same draw made by the
last transition; see :mod:`genrl.toy_mdp`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gencore.checks import check_choice
from gencore.errors import ConfigError
from gencore.solvers import FIXED_STEP_METHODS
from gencore.train import TrainConfig
from genrl.agents.base import make_target, polyak
from genrl.critics import C51Critic, CriticConfig, IQNCritic
from genrl.networks import Ensemble
from genrl.toy_mdp import BimodalChain, ExactReturnField, cdf_errors
from genrl.value_flow_critic import FlowReturnCritic

CRITICS = {"c51": C51Critic, "iqn": IQNCritic, "value-flows": FlowReturnCritic}
EVAL_SEED_OFFSET = 10_007  # evaluation noise has its own stream, so scoring never perturbs training
NFE_PER_STEP = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}  # field evaluations per step of each solver
TOY_POSITIVE_INTS = ("batch_size", "hidden", "depth", "n_episodes", "n_eval_samples")


@dataclass(frozen=True, kw_only=True)
class ToyCriticConfig:
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    lr_schedule: str = "constant"  # or "cosine": decays lr to 0 over ``steps`` (gencore's TrainConfig.lr_factor)
    hidden: int = 128
    depth: int = 3
    tau: float = 0.01
    n_episodes: int = 2000
    n_eval_samples: int = 1000  # samples per evaluation state (the W1 floor falls like 1 / sqrt of it)
    eval_at: tuple[int, ...] = ()  # learning curve: also score the critic after these numbers of updates
    flow_solvers: tuple[str, ...] = ()  # Value Flows: also score with these "method:steps" solvers
    dcfm_weight: float = 1.0  # Value Flows: 0 trains with the BCFM term alone (an ablation)
    huber_kappa: float = 0.01  # IQN: returns here are O(1), so kappa = 1 would make the loss expectile-like
    return_bound: float = 2.0  # the critics' return range [-bound, bound] (C51's support); the law lies in +-1.9
    randomness: str = "reward"  # the toy chain's variant: a random last reward, or a random last transition
    seed: int = 0

    def __post_init__(self) -> None:
        """A setting that would train or score garbage is one :class:`ConfigError` naming its field (``tau = 0``
        froze the target at its initialisation, ``huber_kappa = 0`` made IQN's loss NaN, a ``return_bound <= 0``
        reversed or emptied C51's support)."""
        checks = {
            "steps": (self.steps >= 0, "a non-negative integer"),
            "seed": (self.seed >= 0, "a non-negative integer"),  # NumPy's generators refuse a negative seed
            **{k: (getattr(self, k) >= 1, "a positive integer") for k in TOY_POSITIVE_INTS},
            "lr": (0 < self.lr < math.inf, "finite and positive"),
            "tau": (0 < self.tau <= 1, "in (0, 1]"),
            "dcfm_weight": (0 <= self.dcfm_weight < math.inf, "finite and non-negative"),
            "huber_kappa": (0 < self.huber_kappa < math.inf, "finite and positive"),
            "return_bound": (0 < self.return_bound < math.inf, "finite and positive"),
            # a count outside the run was skipped without a word, leaving the learning curve short
            "eval_at": (
                all(k == int(k) and 0 <= k <= self.steps for k in self.eval_at),
                f"update counts in [0, {self.steps}]",
            ),
        }
        for name, (ok, expected) in checks.items():
            if not ok:
                raise ConfigError(f"toy critic config field {name!r} must be {expected}, got {getattr(self, name)!r}.")

    def chain(self) -> BimodalChain:
        return BimodalChain(randomness=self.randomness)


def _batch(ds, idx: np.ndarray) -> dict[str, torch.Tensor]:
    return {
        "observations": torch.from_numpy(ds.observations[idx]),
        "actions": torch.from_numpy(ds.actions[idx]),
        "rewards": torch.from_numpy(ds.rewards[idx]),
        "masks": torch.from_numpy(1.0 - ds.terminals[idx].astype(np.float32)),
        "next_observations": torch.from_numpy(ds.next_observations[idx]),
    }


def eval_states(chain: BimodalChain) -> np.ndarray:
    """Every position at 8 contexts; with random transitions the last position shows ``w = -m(c), +m(c), ...``."""
    k = np.repeat(np.arange(chain.length), 8)
    c = np.tile(np.linspace(0.0, 1.0, 8), chain.length)
    w = np.tile([-1.0, 1.0], 4 * chain.length) * chain.mode_offset(c)
    return chain.observation(k, c, w).astype(np.float32)


def parse_solver(spec: str) -> tuple[str, int]:
    """``"euler:20"`` -> ``("euler", 20)``; the method must be one of gencore's fixed-step solvers."""
    method, _, steps = spec.partition(":")
    check_choice(method, FIXED_STEP_METHODS, "flow solver method")
    if not steps.isdigit() or int(steps) < 1:
        raise ConfigError(f"flow solver {spec!r}: expected 'method:steps' with a positive number of steps")
    return method, int(steps)


def critic_variance(critic: torch.nn.Module, obs: torch.Tensor, act: torch.Tensor, g: torch.Generator) -> np.ndarray:
    if isinstance(critic, C51Critic):
        p = critic.probs(obs, act)
        m = (p * critic.atoms).sum(-1, keepdim=True)
        return (p * (critic.atoms - m) ** 2).sum(-1).numpy()
    if isinstance(critic, FlowReturnCritic):
        return critic.return_variance(obs, act, n=64, generator=g).numpy()
    return critic.sample(obs, act, 1000, g).var(1).numpy()


def _critic_config(cfg: ToyCriticConfig) -> CriticConfig:
    return CriticConfig(
        hidden=cfg.hidden,
        depth=cfg.depth,
        ensemble=1,
        return_min=-cfg.return_bound,
        return_max=cfg.return_bound,
        huber_kappa=cfg.huber_kappa,
        dcfm_weight=cfg.dcfm_weight,
    )


def train_toy_critic(name: str, cfg: ToyCriticConfig, progress: bool = False) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Train one critic on the toy MDP; return it and its scores (see the module docstring).

    With ``cfg.eval_at``, the record's ``curve`` holds ``{"step", "w1", "crps", "crps_floor"}`` after each of
    those numbers of updates (``0`` scores the untrained critic); ``train_s`` excludes the time spent scoring.
    """
    check_choice(name, tuple(CRITICS), "critic")
    for spec in cfg.flow_solvers:
        parse_solver(spec)
    chain = cfg.chain()
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    ds = chain.dataset(cfg.n_episodes, seed=cfg.seed)
    critic = CRITICS[name](chain.obs_dim, 1, _critic_config(cfg))
    target = make_target(critic)
    opt = torch.optim.Adam(critic.parameters(), lr=cfg.lr)
    schedule = TrainConfig(steps=max(cfg.steps, 1), lr=cfg.lr, schedule=cfg.lr_schedule, warmup_steps=0).validate()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule.lr_factor)
    rng = np.random.default_rng(cfg.seed)
    checkpoints = set(cfg.eval_at)
    curve: list[dict[str, Any]] = []
    eval_s = 0.0
    t0 = time.perf_counter()
    for step in tqdm(range(cfg.steps + 1), disable=not progress, desc=f"toy {name}"):
        if step in checkpoints:
            t_eval = time.perf_counter()
            curve.append({"step": step, **score_critic(critic, chain, cfg, full=False)})
            eval_s += time.perf_counter() - t_eval
        if step == cfg.steps:
            break
        b = _batch(ds, rng.integers(len(ds), size=cfg.batch_size))
        next_act = torch.rand(cfg.batch_size, 1, generator=g) * 2 - 1
        loss, _ = critic.loss(b, next_act, target, chain.discount, g)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        polyak(target, critic, cfg.tau)
    train_s = time.perf_counter() - t0 - eval_s
    rec: dict[str, Any] = {
        "critic": name,
        "steps": cfg.steps,
        "lr_schedule": cfg.lr_schedule,
        "randomness": cfg.randomness,
        "train_s": train_s,
    }
    if name == "value-flows":
        rec["dcfm_weight"] = cfg.dcfm_weight
    if name == "iqn":
        rec["huber_kappa"] = cfg.huber_kappa
    rec["return_bound"] = cfg.return_bound
    rec.update(score_critic(critic, chain, cfg))
    if curve:
        rec["curve"] = curve
    return critic, rec


def _eval_law(chain: BimodalChain) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Evaluation states ``[B, 2]``, the return grid ``[G]`` and the analytic CDF on it ``[B, G]``."""
    obs_np = eval_states(chain)
    grid = np.linspace(-2.5, 2.5, 2001)
    return obs_np, grid, chain.return_cdf(obs_np, np.broadcast_to(grid, (len(obs_np), grid.size)))


@torch.no_grad()
def score_critic(critic: torch.nn.Module, chain: BimodalChain, cfg: ToyCriticConfig, full: bool = True) -> dict:
    """Scores of ``critic`` against the analytic law (see the module docstring); ``full=False``: W1 and CRPS only."""
    obs_np, grid, cdf = _eval_law(chain)
    obs = torch.from_numpy(obs_np)
    act = torch.zeros(len(obs), 1)
    n = cfg.n_eval_samples

    def eval_gen() -> torch.Generator:
        return torch.Generator().manual_seed(cfg.seed + EVAL_SEED_OFFSET)

    samples = critic.sample(obs, act, n, eval_gen()).numpy()
    errors = cdf_errors(samples, cdf, grid)
    if not full:
        return errors
    exact = chain.sample_returns(obs_np, n, np.random.default_rng(cfg.seed + EVAL_SEED_OFFSET))
    togo = chain.steps_to_go(obs_np)
    exact_errors = cdf_errors(exact, cdf, grid)
    out: dict[str, Any] = {
        **errors,
        "w1_floor": exact_errors["w1"],
        "crps_excess_floor": exact_errors["crps"] - exact_errors["crps_floor"],
        "w1_by_steps_to_go": [
            float(cdf_errors(samples[togo == j], cdf[togo == j], grid)["w1"]) for j in range(chain.length)
        ],
    }
    true_var = chain.return_variance(obs_np)
    out["var_corr"] = float(np.corrcoef(critic_variance(critic, obs, act, eval_gen()), true_var)[0, 1])
    if isinstance(critic, FlowReturnCritic):
        out["var_corr_samples"] = float(np.corrcoef(samples.var(1), true_var)[0, 1])
        if cfg.flow_solvers:
            out["flow_solvers"] = _solver_scores(critic, chain, cfg, cfg.flow_solvers)
    return out


def _solver_scores(
    critic: FlowReturnCritic, chain: BimodalChain, cfg: ToyCriticConfig, specs: tuple[str, ...]
) -> dict[str, dict[str, float]]:
    """W1 and CRPS of ``critic`` read out with each ``"method:steps"`` in ``specs``, from the same noises."""
    obs_np, grid, cdf = _eval_law(chain)
    obs, act = torch.from_numpy(obs_np), torch.zeros(len(obs_np), 1)
    solvers = {}
    for spec in specs:
        method, steps = parse_solver(spec)
        g = torch.Generator().manual_seed(cfg.seed + EVAL_SEED_OFFSET)
        e = cdf_errors(critic.sample(obs, act, cfg.n_eval_samples, g, steps=steps, method=method).numpy(), cdf, grid)
        solvers[spec] = {"nfe": steps * NFE_PER_STEP[method], "w1": e["w1"], "crps": e["crps"]}
    return solvers


@torch.no_grad()
def score_exact_field(cfg: ToyCriticConfig) -> dict[str, dict[str, float]]:
    """Value Flows' ceiling: the *exact* field of the law (:class:`ExactReturnField`) read out like the critic.

    Returns ``{"euler:<flow_steps>" (the default read-out), *cfg.flow_solvers: {"nfe", "w1", "crps"}}``: what
    the read-out alone costs, whatever the training.
    """
    chain = cfg.chain()
    oracle = FlowReturnCritic(chain.obs_dim, 1, _critic_config(cfg))
    oracle.fields = Ensemble([ExactReturnField(chain)])
    return _solver_scores(oracle, chain, cfg, (f"euler:{oracle.cfg.flow_steps}", *cfg.flow_solvers))


def compare_critics(
    names: tuple[str, ...] = tuple(CRITICS), cfg: ToyCriticConfig | None = None, progress: bool = False
) -> list[dict[str, Any]]:
    cfg = cfg or ToyCriticConfig()
    return [train_toy_critic(n, cfg, progress=progress)[1] for n in names]
