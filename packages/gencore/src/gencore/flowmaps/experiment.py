"""Train and compare few-step flow maps on 2-D toys: the experiment behind ``gencore flowmap compare``.

One flow-matching teacher (an :class:`~gencore.nn.MLPVelocity` trained with
:class:`~gencore.flow_matching.FlowMatcher`) is trained once and shared. From it:

* ``meanflow`` — a :class:`~gencore.flowmaps.network.TwoTimeMLP` trained from scratch on the data with the
  MeanFlow loss (:mod:`gencore.flowmaps.meanflow`; no teacher needed). The loss is the plain squared error
  here (``meanflow_weight_power = 0``): MeanFlow's adaptive weight ``(||delta||^2 + c)^-1`` is a weighted
  mean of the noisy conditional targets, biased towards those near the current prediction; on this toy
  it slowly pulled a good (CMT) initialisation away (1-step W2 0.58 -> 0.71 in 1000 iterations at
  ``lr = 1e-4``) and was no better from scratch (0.80 vs 0.77 after 2000 iterations).
* ``cmt`` — the same network, first mid-trained on pairs of states of the teacher's ODE trajectories
  (:mod:`gencore.flowmaps.cmt`: ``u(x_{t_i}, t_i, t_j)`` on the trajectory's average velocity, the
  diagonal on the teacher's velocity), then post-trained with the MeanFlow loss for the same number of
  steps at the lower learning rate ``cmt_lr`` (fine-tuning a good initialisation).
* ``piflow`` — a :class:`~gencore.flowmaps.piflow.PolicyNet` distilled from the teacher by imitation
  (:mod:`gencore.flowmaps.piflow`), trained on every NFE asked for; rollouts use ``piflow_train_substeps``
  Euler substeps in training (cheap: the states only locate where velocities are compared) and
  ``piflow_substeps`` when sampling.
* ``regress`` — baseline: the same two-time network used only at ``(s, t) = (0, 1)``, regressing the
  teacher's ODE endpoint ``x1`` from its noise ``x0`` (one step; evaluated at NFE 1 only).
* ``teacher`` — the teacher itself with Euler at ``teacher_nfe`` (32) evaluations.

Samples from the same evaluation noise are scored against fresh draws of the data set with exact W2,
the RBF MMD of :mod:`gencore.toy_experiment`, and on the checkerboard the mode coverage.
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from gencore.checks import check_choice, check_seed
from gencore.data import TOY_DATASETS, get_dataset
from gencore.errors import ConfigError, ConvergenceError
from gencore.flow_matching import FlowMatcher
from gencore.flowmaps.cmt import TrajectoryData, mid_training_loss, pair_mid_training_loss, teacher_trajectories
from gencore.flowmaps.meanflow import DERIVATIVES, MeanFlow, flow_map, sample_flow_map
from gencore.flowmaps.network import TwoTimeMLP
from gencore.flowmaps.piflow import PiFlow, PolicyNet, sample_policy
from gencore.metrics import DEFAULT_BANDWIDTH_MULTIPLIERS, median_pairwise_distance, mmd, wasserstein2
from gencore.nn import MLPVelocity
from gencore.solvers import solve_ode
from gencore.toy_experiment import MMD_KEY
from gencore.train.ema import EMA

METHODS = ("meanflow", "cmt", "piflow", "regress", "teacher")
ONE_STEP_METHODS = ("regress",)


@dataclass(frozen=True, kw_only=True)
class FlowMapConfig:
    """Settings of a flow-map comparison (every method shares data, teacher, evaluation noise and seed)."""

    dataset: str = "checkerboard"
    nfe: tuple[int, ...] = (1, 2)
    steps: int = 1200  # optimiser steps per student (post-training steps for cmt)
    cmt_steps: int = 2000  # mid-training steps of cmt (plain regression: ~5x cheaper than a MeanFlow step)
    teacher_steps: int = 2000
    batch_size: int = 256
    lr: float = 1e-3
    cmt_lr: float = 1e-4  # post-training learning rate from the CMT initialisation (lr destroys it)
    ema_decay: float = 0.995
    hidden: int = 128
    depth: int = 3
    teacher_hidden: int = 256
    teacher_depth: int = 3
    n_data: int = 4096
    n_eval: int = 1024
    n_trajectories: int = 2048  # teacher ODE solutions used by cmt and regress
    trajectory_steps: int = 16  # midpoint steps of those solutions (2 evaluations each)
    teacher_nfe: int = 32  # Euler evaluations of the teacher's own record
    meanflow_ratio: float = 0.5  # fraction of (s, t) pairs off the diagonal
    meanflow_weight_power: float = 0.0  # MeanFlow's adaptive weight (||delta||^2 + c)^-p; 0 = plain L2
    derivative: str = "jvp"  # jvp | fd
    fd_eps: float = 1e-3
    piflow_components: int = 8
    piflow_substeps: int = 32  # policy Euler substeps of a full [0, 1] rollout when sampling
    piflow_train_substeps: int = 8  # the same in training
    piflow_points: int = 2
    seed: int = 0
    progress: bool = True

    def validate(self) -> FlowMapConfig:
        check_seed(self.seed)
        check_choice(self.dataset, TOY_DATASETS, "dataset")
        check_choice(self.derivative, DERIVATIVES, "derivative")
        positive = (
            "steps",
            "teacher_steps",
            "batch_size",
            "hidden",
            "depth",
            "teacher_hidden",
            "teacher_depth",
            "n_data",
            "n_eval",
            "n_trajectories",
            "trajectory_steps",
            "teacher_nfe",
            "piflow_components",
            "piflow_substeps",
            "piflow_train_substeps",
            "piflow_points",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if not self.meanflow_weight_power >= 0:  # also refuses NaN (MeanFlow refused it after the teacher's training)
            raise ConfigError(f"meanflow_weight_power must be >= 0, got {self.meanflow_weight_power}.")
        if self.cmt_steps < 0:
            raise ConfigError(f"cmt_steps must be >= 0, got {self.cmt_steps}.")
        if self.n_eval < 2:
            raise ConfigError(f"n_eval must be at least 2, got {self.n_eval}.")
        if not self.nfe or any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 for k in self.nfe):
            raise ConfigError(f"nfe must be a non-empty list of positive integers, got {list(self.nfe)}.")
        for name in ("lr", "cmt_lr", "fd_eps"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):  # NaN, and inf after training
                raise ConfigError(f"{name} must be a positive finite number, got {getattr(self, name)}.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be in [0, 1), got {self.ema_decay}.")
        if not 0.0 <= self.meanflow_ratio <= 1.0:
            raise ConfigError(f"meanflow_ratio must be in [0, 1], got {self.meanflow_ratio}.")
        return self


def check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """Validate method names: one sentence naming the unknown ones and the valid choices."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ConfigError(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}; expected some of: {', '.join(METHODS)}."
        )
    return tuple(dict.fromkeys(methods))


@dataclass
class Teacher:
    """The shared flow teacher with its training set."""

    model: torch.nn.Module
    data: torch.Tensor
    train_seconds: float


def train_teacher(cfg: FlowMapConfig) -> Teacher:
    """Flow matching (linear path, independent coupling) of an :class:`MLPVelocity` on the finite data set.

    Trained with the same small loop as the students (:func:`fit`: Adam, EMA weights returned, frozen);
    the training engine's per-step bookkeeping would cost more than these tiny steps themselves.
    """
    data = get_dataset(cfg.dataset, cfg.n_data, seed=cfg.seed)
    torch.manual_seed(cfg.seed)
    model = MLPVelocity(data.shape[1], hidden=cfg.teacher_hidden, depth=cfg.teacher_depth)
    matcher = FlowMatcher()

    def loss(step: int, g: torch.Generator) -> torch.Tensor:
        return matcher.loss(model, _data_batch(data, cfg.batch_size, g), generator=g)

    ema, seconds = fit(model, loss, cfg.teacher_steps, cfg, desc="teacher")
    return Teacher(model=ema, data=data, train_seconds=seconds)


def fit(
    model: torch.nn.Module,
    loss_fn: Callable[[int, torch.Generator], torch.Tensor],
    steps: int,
    cfg: FlowMapConfig,
    *,
    desc: str,
    callback: Callable[[int, torch.nn.Module], None] | None = None,
    every: int = 0,
    lr: float | None = None,
) -> tuple[torch.nn.Module, float]:
    """Adam at a constant learning rate (``lr``, default ``cfg.lr``), gradient norm clipped at 1; returns
    ``(EMA copy, seconds)``.

    ``callback(step, ema_model)`` runs before the first step and every ``every`` steps (and at the end).
    """
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(cfg.seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr if lr is None else lr)
    ema = EMA(model, cfg.ema_decay)
    start = time.perf_counter()
    if callback is not None:
        callback(0, ema.module)
    for step in tqdm(range(1, steps + 1), desc=desc, disable=None if cfg.progress else True, leave=False):
        loss = loss_fn(step, generator)
        if not torch.isfinite(loss):
            raise ConvergenceError(f"{desc}: the loss became {float(loss)} at step {step}; lower lr or check the data.")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema.update(model)
        if callback is not None and every and (step % every == 0 or step == steps):
            callback(step, ema.module)
    return ema.module, time.perf_counter() - start


def _data_batch(data: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    return data[torch.randint(data.shape[0], (size,), generator=generator)]


def new_flow_map(cfg: FlowMapConfig, dim: int) -> TwoTimeMLP:
    torch.manual_seed(cfg.seed)
    return TwoTimeMLP(dim, hidden=cfg.hidden, depth=cfg.depth)


def meanflow_objective(cfg: FlowMapConfig) -> MeanFlow:
    return MeanFlow(
        ratio=cfg.meanflow_ratio, derivative=cfg.derivative, fd_eps=cfg.fd_eps, weight_power=cfg.meanflow_weight_power
    )


def train_meanflow(
    cfg: FlowMapConfig,
    data: torch.Tensor,
    model: torch.nn.Module,
    *,
    callback: Callable[[int, torch.nn.Module], None] | None = None,
    every: int = 0,
    desc: str = "meanflow",
    lr: float | None = None,
) -> tuple[torch.nn.Module, float]:
    """MeanFlow training of ``model`` (scratch, or a CMT initialisation with ``lr=cfg.cmt_lr``) on the data set."""
    objective = meanflow_objective(cfg)

    def loss(step: int, g: torch.Generator) -> torch.Tensor:
        return objective.loss(model, _data_batch(data, cfg.batch_size, g), generator=g)

    return fit(model, loss, cfg.steps, cfg, desc=desc, callback=callback, every=every, lr=lr)


def trajectories(cfg: FlowMapConfig, teacher: Teacher) -> TrajectoryData:
    """The teacher's midpoint ODE solutions from ``n_trajectories`` seeded noises (shared by cmt and regress)."""
    g = torch.Generator().manual_seed(cfg.seed + 2)
    noise = torch.randn(cfg.n_trajectories, teacher.data.shape[1], generator=g)
    return teacher_trajectories(teacher.model, noise, steps=cfg.trajectory_steps, method="midpoint")


def mid_train(
    cfg: FlowMapConfig, traj: TrajectoryData, model: torch.nn.Module, *, targets: str = "pairs"
) -> tuple[torch.nn.Module, float]:
    """CMT: returns the EMA weights after ``cmt_steps`` regression steps on the teacher's trajectories.

    ``targets="pairs"`` (the flow-map CMT): ``u(x_{t_i}, t_i, t_j)`` on same-trajectory pairs, with a share
    ``1 - meanflow_ratio`` of diagonal pairs (teacher velocity), as in MeanFlow. ``targets="endpoint"``
    (the consistency-model CMT, kept as an ablation): only ``X_{t_i, 1}(x_{t_i})`` on the endpoint.
    """
    check_choice(targets, ("pairs", "endpoint"), "CMT targets")

    def loss(step: int, g: torch.Generator) -> torch.Tensor:
        if targets == "endpoint":
            return mid_training_loss(model, *traj.batch(cfg.batch_size, g))
        batch = traj.pair_batch(cfg.batch_size, g, diagonal=1.0 - cfg.meanflow_ratio)
        return pair_mid_training_loss(model, *batch)

    ema, seconds = fit(model, loss, cfg.cmt_steps, cfg, desc="cmt mid-training")
    return ema, seconds


def train_regression(cfg: FlowMapConfig, traj: TrajectoryData, model: torch.nn.Module):
    """Baseline: ``x1_hat = X_{0,1}(x0)`` regressed on the teacher's ODE pairs ``(x0, x1)``."""

    def loss(step: int, g: torch.Generator) -> torch.Tensor:
        idx = torch.randint(traj.noise.shape[0], (cfg.batch_size,), generator=g)
        pred = flow_map(model, traj.noise[idx], 0.0, 1.0)
        return (pred - traj.endpoints[idx]).square().sum(dim=1).mean()

    return fit(model, loss, cfg.steps, cfg, desc="regress")


def train_piflow(cfg: FlowMapConfig, teacher: Teacher) -> tuple[PolicyNet, float]:
    """Imitation distillation of the teacher into a GMM policy network, cycling over the NFEs asked for."""
    dim = teacher.data.shape[1]
    torch.manual_seed(cfg.seed)
    student = PolicyNet(dim, components=cfg.piflow_components, hidden=cfg.hidden, depth=cfg.depth)
    objective = PiFlow(teacher.model, substeps=cfg.piflow_train_substeps, points=cfg.piflow_points)
    nfes = sorted(set(cfg.nfe))

    def loss(step: int, g: torch.Generator) -> torch.Tensor:
        x0 = torch.randn(cfg.batch_size, dim, generator=g)
        return objective.loss(student, x0, nfe=nfes[step % len(nfes)], generator=g)

    return fit(student, loss, cfg.steps, cfg, desc="piflow")


def reference_set(cfg: FlowMapConfig) -> torch.Tensor:
    return get_dataset(cfg.dataset, cfg.n_eval, seed=cfg.seed + 10_000)


def evaluation_noise(cfg: FlowMapConfig, dim: int) -> torch.Tensor:
    return torch.randn(cfg.n_eval, dim, generator=torch.Generator().manual_seed(cfg.seed + 20_000))


def checkerboard_coverage(x: torch.Tensor) -> tuple[int, float]:
    """``(modes, in_support)`` for :func:`~gencore.data.sample_checkerboard`'s 8 cells.

    ``modes``: cells receiving at least half of their expected share ``n / 8`` of the samples;
    ``in_support``: the fraction of samples inside any of the 8 cells.
    """
    cell = torch.floor((x.double() + 4.0) / 2.0).long()
    i, j = cell[:, 0], cell[:, 1]
    inside = (i >= 0) & (i < 4) & (j >= 0) & (j < 4) & ((i + j) % 2 == 0)
    counts = torch.bincount((i * 4 + j)[inside], minlength=16)
    modes = int((counts >= 0.5 * x.shape[0] / 8).sum())
    return modes, float(inside.double().mean())


class Scorer:
    """Scores samples against one reference set with fixed MMD bandwidths (comparable across methods)."""

    def __init__(self, cfg: FlowMapConfig, reference: torch.Tensor) -> None:
        self.cfg, self.reference = cfg, reference
        median = median_pairwise_distance(reference)
        self.bandwidths = [c * median for c in DEFAULT_BANDWIDTH_MULTIPLIERS]

    def w2(self, x: torch.Tensor) -> float:
        n = min(x.shape[0], self.reference.shape[0])
        return wasserstein2(x[:n], self.reference[:n])

    def __call__(self, x: torch.Tensor) -> dict[str, Any]:
        if not bool(torch.isfinite(x).all()):
            return {"w2": math.inf, MMD_KEY: math.inf}
        out: dict[str, Any] = {
            "w2": self.w2(x),
            MMD_KEY: mmd(x, self.reference, bandwidths=self.bandwidths, estimator="unbiased").value,
        }
        if self.cfg.dataset == "checkerboard":
            out["modes_covered"], out["in_support"] = checkerboard_coverage(x)
        return out


def compare(
    cfg: FlowMapConfig, methods: Sequence[str], teacher: Teacher | None = None
) -> tuple[list[dict[str, Any]], dict[str, dict[int, torch.Tensor]], torch.Tensor]:
    """Train the teacher once (unless given), then each method.

    Returns ``(records, samples[method][nfe], reference)``.
    """
    cfg.validate()
    methods = check_methods(methods)
    start = time.perf_counter()
    teacher = train_teacher(cfg) if teacher is None else teacher
    dim = teacher.data.shape[1]
    reference = reference_set(cfg)
    scorer = Scorer(cfg, reference)
    noise = evaluation_noise(cfg, dim)
    traj = trajectories(cfg, teacher) if {"cmt", "regress"} & set(methods) else None
    records: list[dict[str, Any]] = []
    samples: dict[str, dict[int, torch.Tensor]] = {}

    def record(method: str, k: int, x: torch.Tensor, **extra: Any) -> None:
        samples.setdefault(method, {})[k] = x
        records.append({"dataset": cfg.dataset, "method": method, "nfe": k, **scorer(x), **extra})

    for method in methods:
        if method == "teacher":
            x = solve_ode(teacher.model, noise, steps=cfg.teacher_nfe, method="euler").x
            record(method, cfg.teacher_nfe, x, train_steps=cfg.teacher_steps, train_seconds=teacher.train_seconds)
        elif method == "piflow":
            student, seconds = train_piflow(cfg, teacher)
            for k in cfg.nfe:
                x = sample_policy(student, noise, k, substeps=cfg.piflow_substeps)
                record(method, k, x, train_steps=cfg.steps, train_seconds=round(seconds, 3))
        elif method == "regress":
            model, seconds = train_regression(cfg, traj, new_flow_map(cfg, dim))
            record(method, 1, sample_flow_map(model, noise, 1), train_steps=cfg.steps, train_seconds=round(seconds, 3))
        else:
            model = new_flow_map(cfg, dim)
            mid_seconds, mid_steps = 0.0, 0
            if method == "cmt":
                init, mid_seconds = mid_train(cfg, traj, model)
                model, mid_steps = copy.deepcopy(init).requires_grad_(True).train(), cfg.cmt_steps
            lr = cfg.cmt_lr if method == "cmt" else cfg.lr
            model, seconds = train_meanflow(cfg, teacher.data, model, desc=method, lr=lr)
            for k in cfg.nfe:
                x = sample_flow_map(model, noise, k)
                record(
                    method,
                    k,
                    x,
                    train_steps=cfg.steps,
                    mid_steps=mid_steps,
                    train_seconds=round(seconds + mid_seconds, 3),
                )
    for r in records:
        r["total_seconds"] = round(time.perf_counter() - start, 3)
    return records, samples, reference


def config_dict(cfg: FlowMapConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["nfe"] = list(cfg.nfe)
    return d
