"""Train and compare small flow-matching models on vector data sets (2-D toys, 8x8 digits).

This is the experiment behind ``gencore toy train``, ``gencore toy compare`` and
``gencore demo``, and the miniature reproduction of semidiscrete flow matching's central
claim (SD-FM, "Semidiscrete flow matching", ICLR 2026): with equal training steps, pairing
noise to a finite data set through a fitted semidiscrete OT potential gives better samples
than independent or minibatch-OT pairing at every Euler budget (NFE).

Every coupling trains on the same finite data set of ``n_data`` points, with the same
network, optimiser, seed and number of steps; samples are drawn from the same noise with
Euler at each NFE and scored against a reference set (fresh draws of a toy distribution,
the full data set for digits) with exact W2 and MMD.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

from gencore.checks import check_choice, check_int, check_points, check_seed
from gencore.couplings import COUPLINGS, SemidiscreteCoupling, make_coupling
from gencore.data import DATASETS, get_dataset
from gencore.errors import ConfigError, GenError
from gencore.flow_matching import FlowMatcher
from gencore.metrics import DEFAULT_BANDWIDTH_MULTIPLIERS, median_pairwise_distance, mmd, wasserstein2
from gencore.metrics.transport import W2_MAX_POINTS
from gencore.nn import MLPVelocity
from gencore.solvers import solve_ode
from gencore.train import TrainConfig, Trainer, launch, run_identity
from gencore.train.distributed import is_main_process

# settings a resumed run may change; every other field must match the checkpoint's (TrainConfig.identity)
RESUMABLE = ("steps", "progress", "nfe", "n_eval")

DIGITS_SIZE = 1797
SAMPLE_PICTURE_POINTS = 1024  # points (or digits) drawn by the periodic sample callback
MMD_KEY = "mmd2_rbf_unbiased"  # squared MMD, sum of RBF kernels at 0.25..4 x the reference set's median distance


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    """Settings of one toy flow-matching run (all couplings of a comparison share them)."""

    dataset: str = "checkerboard"  # a toy name or "digits"
    coupling: str = "independent"  # independent | exact | sinkhorn | semidiscrete
    steps: int = 3000  # optimiser steps
    batch_size: int = 256
    lr: float = 1e-3
    ema_decay: float = 0.999  # evaluation uses the EMA weights (decay warmed up as (1+s)/(10+s))
    hidden: int = 256
    depth: int = 3
    n_data: int = 4096  # size of the finite training set (digits: all 1,797)
    n_eval: int = 2048  # samples scored per NFE (digits: 1,797)
    nfe: tuple[int, ...] = (1, 2, 4, 8)
    seed: int = 0
    sinkhorn_epsilon: float = 0.05  # relative to the mean pairwise cost of the batch
    semidiscrete_epsilon: float = 0.0  # 0: hard assignment
    semidiscrete_fit_steps: int = 3000
    semidiscrete_batch_size: int = 1024
    progress: bool = True

    def validate(self) -> ToyConfig:
        check_seed(self.seed)
        check_choice(self.dataset, DATASETS, "dataset")
        check_choice(self.coupling, COUPLINGS, "coupling")
        for name in ("steps", "batch_size", "hidden", "depth", "n_data", "n_eval", "semidiscrete_batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if not self.is_digits and not 2 <= self.n_eval <= W2_MAX_POINTS:  # digits score all 1,797 (n_eval unused)
            raise ConfigError(
                f"n_eval must be from 2 (the unbiased MMD) to {W2_MAX_POINTS} (exact W2's cost matrix), "
                f"got {self.n_eval}."
            )
        if not self.nfe or any(k < 1 for k in self.nfe):
            raise ConfigError(f"nfe must be a non-empty list of positive integers, got {list(self.nfe)}.")
        if not self.lr > 0:
            raise ConfigError(f"lr must be positive, got {self.lr}.")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be in [0, 1), got {self.ema_decay}.")
        return self

    @property
    def is_digits(self) -> bool:
        return self.dataset == "digits"


@dataclass
class ToyRun:
    """A trained toy model (EMA weights) with its data, coupling and timings."""

    config: ToyConfig
    model: MLPVelocity | None  # EMA weights; None when the run was interrupted
    data: torch.Tensor  # the finite training set [N, D]
    losses: list[tuple[int, float]]  # (step, loss) as logged by the engine
    train_seconds: float
    coupling_seconds: float
    coupling_diagnostics: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False  # stopped by SIGTERM/SIGINT; a checkpoint was written


def training_data(cfg: ToyConfig) -> torch.Tensor:
    """The finite training set: ``n_data`` seeded toy points, or all digits."""
    if cfg.is_digits:
        return get_dataset("digits")
    return get_dataset(cfg.dataset, cfg.n_data, seed=cfg.seed)


def reference_data(cfg: ToyConfig) -> torch.Tensor:
    """The set samples are scored against: fresh toy draws (another seed), or all digits."""
    if cfg.is_digits:
        return get_dataset("digits")
    return get_dataset(cfg.dataset, cfg.n_eval, seed=cfg.seed + 10_000)


def build_coupling(cfg: ToyConfig, data: torch.Tensor, generator: torch.Generator) -> tuple[Any, dict[str, Any]]:
    """Construct (and for semidiscrete, fit) the coupling named in ``cfg``."""
    if cfg.coupling == "semidiscrete":
        coupling = make_coupling("semidiscrete", data=data, epsilon=cfg.semidiscrete_epsilon)
        diag = coupling.fit(
            n_steps=cfg.semidiscrete_fit_steps,
            batch_size=cfg.semidiscrete_batch_size,
            generator=generator,
            progress=cfg.progress,
        )
        summary = {k: v for k, v in asdict(diag).items() if k not in ("chi2_history", "chi2_steps")}
        return coupling, summary
    if cfg.coupling == "sinkhorn":
        return make_coupling("sinkhorn", epsilon=cfg.sinkhorn_epsilon), {}
    return make_coupling(cfg.coupling), {}


class ToyFlowTask:
    """The engine task: an MLP velocity trained by flow matching with the configured coupling.

    Every rank builds (and, for semidiscrete, fits) the same coupling from the same seed.
    """

    def __init__(self, cfg: ToyConfig, data: torch.Tensor) -> None:
        start = time.perf_counter()
        self.coupling, self.coupling_diagnostics = build_coupling(
            cfg, data, torch.Generator().manual_seed(cfg.seed + 1)
        )
        self.coupling_seconds = time.perf_counter() - start
        torch.manual_seed(cfg.seed)
        self.model = MLPVelocity(data.shape[1], hidden=cfg.hidden, depth=cfg.depth)
        self.matcher = FlowMatcher(coupling=self.coupling)
        self.cfg = cfg
        self.reference = data[:SAMPLE_PICTURE_POINTS]

    def loss(self, model: torch.nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        (x1,) = batch
        return self.matcher.loss(model, x1, generator=generator), {}

    def sample(self, model: torch.nn.Module, step: int, out_dir: Path) -> None:
        """The engine's periodic callback: Euler samples of the EMA model at the largest NFE, as a picture."""
        from gencore.plots import image_grid, scatter_grid

        device = next(model.parameters()).device
        noise = torch.randn(self.reference.shape, generator=torch.Generator().manual_seed(self.cfg.seed + 30_000))
        nfe = max(self.cfg.nfe)
        x = generate(model, noise.to(device), nfe).cpu()
        if not is_main_process():
            return
        draw = image_grid if self.cfg.is_digits else scatter_grid
        draw({f"step {step}": {nfe: x}}, self.reference, Path(out_dir) / f"step-{step:07d}.png", title=self.cfg.dataset)


def engine_config(cfg: ToyConfig, out_dir: str | os.PathLike, **engine: Any) -> TrainConfig:
    """The engine settings of a toy run: ``cfg``'s optimisation fields plus ``engine`` overrides."""
    base = {
        "steps": cfg.steps,
        "global_batch_size": cfg.batch_size,
        "optimizer": "adam",
        "lr": cfg.lr,
        "schedule": "cosine",
        "ema_decay": cfg.ema_decay,
        "seed": cfg.seed,
        "progress": cfg.progress,
        "out_dir": str(out_dir),
        "identity": run_identity(cfg, RESUMABLE),
    }
    return TrainConfig(**(base | engine))


def _train_worker(cfg: ToyConfig, data: torch.Tensor, train_cfg: TrainConfig) -> dict[str, Any]:
    """Runs on every rank: train, then rank 0 saves the EMA model (and a fitted coupling)."""
    task = ToyFlowTask(cfg, data)
    start = time.perf_counter()
    result = Trainer(train_cfg).fit(task, TensorDataset(data))
    seconds = time.perf_counter() - start
    out = Path(train_cfg.out_dir)
    if int(os.environ.get("RANK", "0") or 0) == 0 and not result.interrupted:
        result.ema.save_pretrained(out / "model")
        if isinstance(task.coupling, SemidiscreteCoupling):
            task.coupling.save(out / "coupling")
    return {
        "interrupted": result.interrupted,
        "train_seconds": seconds,
        "coupling_seconds": task.coupling_seconds,
        "coupling_diagnostics": task.coupling_diagnostics,
    }


def _logged_losses(out_dir: Path) -> list[tuple[int, float]]:
    path = out_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(int(r["step"]), float(r["loss"])) for r in rows if "loss" in r]


def train(
    cfg: ToyConfig,
    data: torch.Tensor | None = None,
    *,
    out_dir: str | os.PathLike | None = None,
    nproc: int = 1,
    **engine: Any,
) -> ToyRun:
    """Train one flow model on the finite data set through :mod:`gencore.train`.

    ``out_dir`` receives the engine's ``metrics.jsonl`` and ``checkpoints/`` plus ``model/`` (EMA
    weights) and ``coupling/`` (a fitted semidiscrete potential); None uses a temporary folder.
    ``nproc > 1`` trains in that many processes (torch's elastic launcher, gloo on CPU); ``engine``
    overrides :class:`~gencore.train.TrainConfig` fields (``resume``, ``checkpoint_every``, ...).
    """
    cfg.validate()
    data = training_data(cfg) if data is None else check_points(data, "data")
    if cfg.batch_size > data.shape[0]:  # the engine's refusal came after a semidiscrete fit of minutes
        raise ConfigError(
            f"batch_size must be at most the {data.shape[0]} training points, got {cfg.batch_size}; "
            "lower --batch-size or raise --n-data."
        )
    with contextlib.ExitStack() as stack:
        out = Path(out_dir) if out_dir is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        train_cfg = engine_config(cfg, out, **engine).validate()
        nproc = check_int(nproc, "nproc", low=1)  # engine settings are checked before the run folder is made
        out.mkdir(parents=True, exist_ok=True)
        results = launch(_train_worker, cfg, data, train_cfg, nproc=nproc)
        info = results.get(0) or {"interrupted": True, "train_seconds": 0.0, "coupling_seconds": 0.0}
        interrupted = bool(info["interrupted"])
        model = None if interrupted else MLPVelocity.from_pretrained(out / "model")
        return ToyRun(
            config=cfg,
            model=model,
            data=data,
            losses=_logged_losses(out),
            train_seconds=info["train_seconds"],
            coupling_seconds=info["coupling_seconds"],
            coupling_diagnostics=info.get("coupling_diagnostics", {}),
            interrupted=interrupted,
        )


@torch.no_grad()
def generate(model: torch.nn.Module, noise: torch.Tensor, nfe: int) -> torch.Tensor:
    """Euler with ``nfe`` uniform steps from noise at t=0 to data at t=1."""
    return solve_ode(model, noise, steps=nfe, method="euler").x


def evaluation_noise(cfg: ToyConfig, dim: int) -> torch.Tensor:
    """The same noise for every coupling of a comparison, so differences are the models'."""
    n = DIGITS_SIZE if cfg.is_digits else cfg.n_eval
    return torch.randn(n, dim, generator=torch.Generator().manual_seed(cfg.seed + 20_000))


def evaluate(
    run: ToyRun, reference: torch.Tensor | None = None
) -> tuple[list[dict[str, Any]], dict[int, torch.Tensor]]:
    """Score Euler samples at each NFE: records with keys ``coupling, nfe, w2, mmd2_rbf_unbiased, ...``."""
    cfg = run.config
    reference = reference_data(cfg) if reference is None else reference
    noise = evaluation_noise(cfg, run.data.shape[1])
    # One kernel for every model: bandwidths from the reference set alone, not from the pooled sample
    # (a pooled median would change with each model's samples and make MMDs incomparable).
    median = median_pairwise_distance(reference)
    bandwidths = [c * median for c in DEFAULT_BANDWIDTH_MULTIPLIERS]
    records, samples = [], {}
    for k in cfg.nfe:
        x = generate(run.model, noise, k)
        samples[k] = x
        n = min(x.shape[0], reference.shape[0])
        records.append(
            {
                "dataset": cfg.dataset,
                "coupling": cfg.coupling,
                "nfe": k,
                "w2": wasserstein2(x[:n], reference[:n]),
                MMD_KEY: mmd(x, reference, bandwidths=bandwidths, estimator="unbiased").value,
                "steps": cfg.steps,
                "train_seconds": round(run.train_seconds, 3),
                "coupling_seconds": round(run.coupling_seconds, 3),
            }
        )
    return records, samples


def compare(
    cfg: ToyConfig, couplings: Sequence[str]
) -> tuple[list[dict[str, Any]], dict[str, dict[int, torch.Tensor]]]:
    """Train one model per coupling with equal settings and evaluate each at every NFE."""
    if not couplings:
        raise ConfigError("name at least one coupling to compare.")
    for name in couplings:
        check_choice(name, COUPLINGS, "coupling")
    data = training_data(cfg.validate())
    reference = reference_data(cfg)
    records: list[dict[str, Any]] = []
    samples: dict[str, dict[int, torch.Tensor]] = {}
    for name in couplings:
        run = train(replace(cfg, coupling=name), data)
        if run.interrupted:
            raise GenError(f"training with the {name!r} coupling was interrupted; no records were written.")
        recs, samples[name] = evaluate(run, reference)
        records += recs
    return records, samples


def config_dict(cfg: ToyConfig) -> dict[str, Any]:
    """JSON-ready resolved configuration."""
    d = asdict(cfg)
    d["nfe"] = list(cfg.nfe)
    return d
