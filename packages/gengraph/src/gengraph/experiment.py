"""Training and sampling of graph generators through gencore's engine, one run folder per model.

Models (``--model``): ``ggball`` (hyperbolic VQ autoencoder + Riemannian flow prior), ``ggball-euclidean`` (the
same with a flat latent: the ablation) and ``digress`` (discrete diffusion with marginal transitions). The GGBall
models' prior (``--prior``) is the paper's flow (``flow``, :mod:`gengraph.models.latent_flow`) or a masked
discrete prior over the code indices (``masked-codes``, :mod:`gengraph.models.code_prior`).

Run folder::

    run.json                  model kind, dataset, seeds, node-count histogram, marginals, settings
    autoencoder/model/        GGBall weights (safetensors + config.json), engine logs and checkpoints
    prior/model/              prior weights (flow or masked-codes)
    denoiser/model/           DiGress weights

Both GGBall stages run through :class:`gencore.train.Trainer` (Adam, cosine schedule, checkpoints, JSONL
metrics, progress bar). All learnable weights are Euclidean (tangent parametrisation of the hyperbolic layers),
so Riemannian Adam reduces to Adam on them; the manifold-valued state, the codebook, is updated by the
Frechet-mean EMA. The engine's weight EMA is switched off for the autoencoder stage (``ema_decay = 0``) so that
the codebook is never averaged linearly across steps.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import TensorDataset

from gencore.checks import check_choice, check_int, check_seed
from gencore.discrete.marginal import MarginalTransitionDiffusion
from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import load_pretrained, read_json, save_pretrained, tensor_fingerprint, write_json
from gencore.train import (
    TrainConfig,
    Trainer,
    find_checkpoints,
    holds_settings,
    interruption,
    launch,
    run_identity,
    setup,
    teardown,
)
from gengraph.batch import pack, unpack
from gengraph.graph import Graph
from gengraph.models.code_prior import CodePriorConfig, CodeTokenPrior, code_prior_loss, sample_code_sets
from gengraph.models.digress import DigressConfig, DigressDenoiser, digress_loss, digress_sample
from gengraph.models.ggball import GGBall, GGBallConfig
from gengraph.models.latent_flow import COUPLINGS, HEADS, SetVelocity, latent_flow_loss, sample_latent_sets

# settings a resumed run may change; every other field must match the checkpoint's (TrainConfig.identity)
RESUMABLE = ("steps", "prior_steps", "progress")

__all__ = ["MODELS", "PRIORS", "RunConfig", "load_latent_run", "read_run", "sample_prior", "sample_run", "train_run"]

MODELS = ("ggball", "ggball-euclidean", "digress")
PRIORS = ("flow", "masked-codes")  # the GGBall models' prior: the paper's flow, or masked diffusion on the codes
# RunConfig fields only the GGBall models read (DiGress ignores them) and the one only DiGress reads
GGBALL_ONLY = (
    "prior_steps", "prior", "prior_hidden", "prior_layers", "prior_distance_bias", "prior_size_embedding",
    "prior_coupling", "code_repulsion", "repulsion_radius", "latent_dim", "codebook_size", "curvature", "hidden",
    "vq_warmup",
)  # fmt: skip
DIGRESS_ONLY = ("digress_extra_features",)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    model: str = "ggball"
    dataset: str = "community-small"
    steps: int = 300  # autoencoder / denoiser steps
    prior_steps: int | None = None  # prior steps (default: 5 x steps; a prior step is ~4x cheaper)
    batch_size: int = 32
    lr: float = 2e-3
    seed: int = 0
    latent_dim: int = 32
    hidden: int = 32
    codebook_size: int = 512
    curvature: float = 1.0
    vq_warmup: int | None = None  # default: a third of steps
    prior: str = "flow"  # PRIORS
    prior_hidden: int = 64  # width of the prior's set transformer (SetVelocity or CodeTokenPrior)
    prior_layers: int = 2  # its transformer layers
    prior_distance_bias: bool = False  # distance-biased attention in the flow prior (SetVelocity)
    prior_size_embedding: bool = False  # the flow prior reads each graph's node count (SetVelocity)
    prior_coupling: str = "independent"  # latent_flow.COUPLINGS: noise-to-node pairing of the flow prior
    code_repulsion: float = 0.0  # GGBallConfig.code_repulsion: within-graph latent repulsion (0: off)
    repulsion_radius: float = 0.1  # GGBallConfig.repulsion_radius
    digress_extra_features: bool = True  # DigressConfig.extra_features: cycle and spectral input features
    progress: bool = True

    def validate(self) -> RunConfig:
        check_seed(self.seed)
        check_choice(self.model, MODELS, "model")
        check_choice(self.prior_coupling, COUPLINGS, "prior coupling")
        check_choice(self.prior, PRIORS, "prior")
        coupled = self.prior_coupling != "independent"
        flow_only = {"prior_distance_bias": self.prior_distance_bias, "prior_coupling": coupled}
        used = [name for name, on in flow_only.items() if on]
        if self.prior != "flow" and used:
            raise ConfigError(f"{used[0]} is a setting of the flow prior; the {self.prior} prior has no such option.")
        for name in ("steps", "batch_size", "latent_dim", "hidden", "codebook_size", "prior_hidden", "prior_layers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.prior_hidden % HEADS:
            raise ConfigError(
                f"prior_hidden must be a multiple of the prior's {HEADS} attention heads, got {self.prior_hidden}."
            )
        if self.prior_steps is not None and self.prior_steps < 1:
            raise ConfigError(f"prior_steps must be a positive integer (or unset: 5 x steps), got {self.prior_steps}.")
        if self.model != "digress" and self.vq_warmup is not None and not 0 <= self.vq_warmup < self.steps:
            # the codebook is k-means initialised on the first step after the warm-up: none, and it stays all zeros
            raise ConfigError(f"vq_warmup must lie in [0, steps) = [0, {self.steps}), got {self.vq_warmup}.")
        return self


class _AutoencoderTask:
    def __init__(self, model: GGBall) -> None:
        self.model = model

    def loss(self, model, batch, generator):
        edges, nodes, mask = batch
        return model(edges, nodes, mask, generator)


class _PriorTask:
    def __init__(self, model: SetVelocity, geometry, coupling: str) -> None:
        self.model, self.geometry, self.coupling = model, geometry, coupling

    def loss(self, model, batch, generator):
        x1, mask = batch
        return latent_flow_loss(model, self.geometry, x1, mask, generator, self.coupling), {}


class _CodePriorTask:
    def __init__(self, model: CodeTokenPrior) -> None:
        self.model = model

    def loss(self, model, batch, generator):
        codes, mask = batch
        return code_prior_loss(model, codes, mask, generator)


class _DigressTask:
    def __init__(self, model: DigressDenoiser, node_noise, edge_noise) -> None:
        self.model, self.node_noise, self.edge_noise = model, node_noise, edge_noise

    def loss(self, model, batch, generator):
        edges, nodes, mask = batch
        return digress_loss(
            model, self.node_noise, self.edge_noise, edges, nodes, mask, generator, self.model.config.edge_weight
        )


def _engine(cfg: RunConfig, out: Path, steps: int, data_sha256: str | None = None, **kw) -> TrainConfig:
    data = {"data_sha256": data_sha256} if data_sha256 else {}
    base = dict(
        steps=steps, global_batch_size=cfg.batch_size, optimizer="adam", lr=cfg.lr, schedule="cosine",
        seed=cfg.seed, progress=cfg.progress, out_dir=str(out), log_every=10, clip_grad_norm=1.0,
        identity=run_identity(cfg, RESUMABLE) | data,
    )  # fmt: skip
    return TrainConfig(**(base | kw)).validate()


def _marginals(graphs: list[Graph], n_types: int, n_edge_types: int) -> tuple[list[float], list[float]]:
    nodes = torch.zeros(n_types)
    edges = torch.zeros(n_edge_types + 1)
    for g in graphs:
        nodes += torch.bincount(g.node_types, minlength=n_types).float()
        edges[1:] += torch.bincount(g.edge_types, minlength=n_edge_types).float()
        edges[0] += g.n_nodes * (g.n_nodes - 1) / 2 - g.n_edges
    return (nodes / nodes.sum()).tolist(), (edges / edges.sum()).tolist()


def data_fingerprint(graphs: list[Graph]) -> str:
    """SHA-256 of the training graphs as packed for the model (types and node order included): a resumed or
    finished run is the same run only on the same graphs (a file may have changed, or a procedural set's
    generator)."""
    return tensor_fingerprint(*pack(graphs, max(g.n_nodes for g in graphs)))


def is_finished(cfg: RunConfig, out_dir: str | os.PathLike, graphs: list[Graph]) -> bool:
    """True when ``out_dir`` holds a finished run of exactly ``cfg`` (step counts included) on ``graphs``, so that
    resuming it trains nothing."""
    path = Path(out_dir) / "run.json"  # written once every stage has finished
    if not path.is_file():
        return False
    info = read_json(path)
    return (
        isinstance(info, dict)
        and info.get("data_sha256") == data_fingerprint(graphs)
        and holds_settings(info.get("config") or {}, cfg)
    )


def train_run(
    cfg: RunConfig, graphs: list[Graph], out_dir: str | os.PathLike, *, nproc: int = 1, **engine: Any
) -> Path:
    """Train ``cfg.model`` on ``graphs``; write the run folder and return its path.

    ``nproc`` processes train with DDP (gloo on CPU, NCCL on GPUs; the batch is split over them and the VQ
    codebook is updated from every rank's latents); ``engine`` overrides :class:`TrainConfig` fields
    (``resume="auto"``, ``checkpoint_every``, ``keep_last``, ``nan_policy``). Each stage (autoencoder,
    prior; or the DiGress denoiser) checkpoints in its own folder, so ``resume="auto"`` continues the stage
    that was interrupted.
    """
    cfg.validate()
    if len(graphs) < 2:
        raise InputError(f"training needs at least two graphs, got {len(graphs)}.")
    if any(g.directed for g in graphs):
        raise InputError("the graph generators model undirected graphs; the training set holds directed ones.")
    empty = [i for i, g in enumerate(graphs) if not g.n_nodes]
    if empty:  # its fully masked attention rows are NaN, and NaN * 0 makes the whole batch's loss NaN
        raise InputError(f"graph {empty[0]} of the training set has no nodes; the generators need at least one.")
    nproc = check_int(nproc, "nproc", low=1)
    if cfg.batch_size % nproc:
        raise ConfigError(f"batch size {cfg.batch_size} must be divisible by the number of processes ({nproc}).")
    out = Path(out_dir)
    taken = [name for name in ("run.json", "denoiser", "autoencoder", "prior") if (out / name).exists()]
    if taken and engine.get("resume") is None:
        raise InputError(
            f"{str(out)!r} already holds a gengraph run ({taken[0]}); pass --resume auto to continue an interrupted "
            "run or choose a new --out folder, so that the finished run is not overwritten."
        )
    own = ("denoiser",) if cfg.model == "digress" else ("autoencoder", "prior")
    other = [name for name in ("denoiser", "autoencoder", "prior") if name not in own and (out / name).exists()]
    if other:  # the stages of another model: resuming trained this one beside them and replaced its run.json
        raise ConfigError(
            f"{str(out)!r} holds the {other[0]} stage of another model, not of {cfg.model}; resume it with its own "
            "--model or choose a new --out folder."
        )
    if engine.get("resume") is not None and is_finished(cfg, out, graphs):
        return out  # nothing left to train: every stage reached its step count
    if cfg.model != "digress" and engine.get("resume") is not None and (out / "prior").exists():
        found = find_checkpoints(out / "autoencoder" / "checkpoints")  # names step-<n>, newest first
        done = int(found[0].name.split("-")[-1]) if found else 0
        if done < cfg.steps:  # the prior learnt this autoencoder's codes: training it on moves them under the prior
            raise ConfigError(
                f"{str(out)!r} holds a prior trained on the codes of its {done}-step autoencoder; training that "
                f"autoencoder on to {cfg.steps} steps would leave the prior on stale codes, so keep --steps {done} "
                "or choose a new --out folder."
            )
    n_max = max(g.n_nodes for g in graphs)
    if cfg.model == "digress" and n_max < 2:  # no node pair anywhere: the edge-class marginal was 0 / 0 (NaN)
        raise InputError("every training graph has a single node; DiGress's edge marginal needs node pairs.")
    n_types = max(int(g.node_types.max()) + 1 if g.n_nodes else 1 for g in graphs)
    n_edge_types = max((int(g.edge_types.max()) + 1 if g.n_edges else 1) for g in graphs)
    node_marg, edge_marg = _marginals(graphs, n_types, n_edge_types)
    sizes = Counter(g.n_nodes for g in graphs)
    info: dict[str, Any] = {
        "format": "gengraph.run", "format_version": RUN_FORMAT_VERSION, "config": asdict(cfg), "n_max": n_max,
        "n_node_types": n_types, "n_edge_types": n_edge_types,
        "node_counts": {str(k): v for k, v in sorted(sizes.items())}, "node_marginal": node_marg,
        "edge_marginal": edge_marg, "n_train_graphs": len(graphs), "data_sha256": data_fingerprint(graphs),
        "nproc": nproc,
    }  # fmt: skip
    done = launch(_train_worker, cfg, pack(graphs, n_max), info, out, dict(engine), nproc=nproc).get(0)
    if not done:
        raise interruption(out)
    write_json(out / "run.json", info)
    return out


def _train_worker(cfg: RunConfig, tensors: tuple, info: dict[str, Any], out: Path, engine: dict[str, Any]) -> bool:
    """Runs on every rank: the stages of one run; rank 0 saves the models. False when interrupted."""
    edges, nodes, mask = tensors
    data = TensorDataset(edges, nodes, mask)
    dist = setup()  # one process group for every stage of the run
    try:
        torch.manual_seed(cfg.seed)
        n_types, n_edge_types, n_max = info["n_node_types"], info["n_edge_types"], info["n_max"]
        if cfg.model == "digress":
            dcfg = DigressConfig(
                n_node_types=n_types, n_edge_types=n_edge_types, n_max=n_max, extra_features=cfg.digress_extra_features
            )
            model = DigressDenoiser(dcfg)
            noise = (
                MarginalTransitionDiffusion(info["node_marginal"]),
                MarginalTransitionDiffusion(info["edge_marginal"]),
            )
            result = Trainer(_engine(cfg, out / "denoiser", cfg.steps, info["data_sha256"], **engine)).fit(
                _DigressTask(model, *noise), data
            )
            if result.interrupted:
                return False
            if dist.rank == 0:
                result.ema.cpu().save_pretrained(out / "denoiser" / "model")
            return True
        gcfg = GGBallConfig(
            n_node_types=n_types, n_edge_types=n_edge_types, n_max=n_max,
            geometry="euclidean" if cfg.model == "ggball-euclidean" else "ball", curvature=cfg.curvature,
            latent_dim=cfg.latent_dim, hidden=cfg.hidden, codebook_size=cfg.codebook_size,
            vq_warmup=cfg.steps // 3 if cfg.vq_warmup is None else cfg.vq_warmup,
            code_repulsion=cfg.code_repulsion, repulsion_radius=cfg.repulsion_radius,
        )  # fmt: skip
        stage = _engine(cfg, out / "autoencoder", cfg.steps, info["data_sha256"], ema_decay=0.0, **engine)
        result = Trainer(stage).fit(_AutoencoderTask(GGBall(gcfg)), data)
        if result.interrupted:
            return False
        ae = result.model.cpu().eval()
        if dist.rank == 0:
            ae.save_pretrained(out / "autoencoder" / "model")
        with torch.no_grad():  # identical on every rank: the replicas hold the same weights and codebook
            zq, codes, _ = ae.quantise(ae.encode(edges, nodes, mask), mask)
        stage = _engine(cfg, out / "prior", cfg.prior_steps or 5 * cfg.steps, info["data_sha256"], lr=1e-3, **engine)
        if cfg.prior == "masked-codes":
            pcfg = CodePriorConfig(n_codes=cfg.codebook_size, hidden=cfg.prior_hidden, layers=cfg.prior_layers)
            result = Trainer(stage).fit(_CodePriorTask(CodeTokenPrior(pcfg)), TensorDataset(codes, mask))
            if result.interrupted:
                return False
            if dist.rank == 0:
                result.ema.cpu().save_pretrained(out / "prior" / "model")
            return True
        arch = {
            "hidden": cfg.prior_hidden, "layers": cfg.prior_layers, "distance_bias": cfg.prior_distance_bias,
            "size_embedding": cfg.prior_size_embedding,
        }  # fmt: skip
        prior = SetVelocity(ae.geometry, **arch)
        prior.fit_centre(zq, mask)
        result = Trainer(stage).fit(_PriorTask(prior, ae.geometry, cfg.prior_coupling), TensorDataset(zq, mask))
        if result.interrupted:
            return False
        if dist.rank == 0:
            save_pretrained(out / "prior" / "model", result.ema.cpu().state_dict(), {"class": "SetVelocity", **arch})
        return True
    finally:
        teardown(dist)


def _size_mask(info: dict[str, Any], n: int, generator: torch.Generator) -> torch.Tensor:
    counts = {int(k): v for k, v in info["node_counts"].items()}
    sizes = torch.tensor(list(counts))
    weights = torch.tensor(list(counts.values()), dtype=torch.float64)
    drawn = sizes[torch.multinomial(weights, n, replacement=True, generator=generator)]
    return torch.arange(int(info["n_max"]))[None, :] < drawn[:, None]


# 2: HypNorm normalises the hyperboloid space coordinates and the latent prior is centred (weights of version 1
# would load into the new layers but mean something else)
# 3: the GGBall encoder reads Laplacian eigenvectors and random node features and centres each graph's latents
# (version-2 weights have a narrower input layer and uncentred codes)
RUN_FORMAT_VERSION = 3


def read_run(run_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.is_file():
        raise InputError(f"{run_dir}: not a gengraph run folder (no run.json); train one with 'gengraph train'.")
    info = read_json(path)
    if not isinstance(info, dict) or info.get("format") != "gengraph.run":
        raise InputError(f"{path}: not a gengraph run description.")
    if info.get("format_version", 1) != RUN_FORMAT_VERSION:
        raise InputError(
            f"{path}: run format version {info.get('format_version', 1)}, this gengraph reads version "
            f"{RUN_FORMAT_VERSION} (the GGBall encoder, normalisation and latent prior changed); retrain the run."
        )
    _check_run_fields(info, path)
    return info


def _check_run_fields(info: dict[str, Any], path: Path) -> None:
    """The fields of ``run.json`` that sampling reads, each checked so that a damaged file is one sentence naming
    the field rather than a ``KeyError`` deep inside sampling."""
    config = info.get("config")
    model = config.get("model") if isinstance(config, dict) else None
    if model not in MODELS:
        raise InputError(f"{path}: field 'config.model' must be one of {', '.join(MODELS)}, got {model!r}.")
    n_max = info.get("n_max")
    if isinstance(n_max, bool) or not isinstance(n_max, int) or n_max < 1:
        raise InputError(f"{path}: field 'n_max' must be a positive integer, got {n_max!r}.")
    counts = info.get("node_counts")
    if not (
        isinstance(counts, dict)
        and counts
        and all(
            k.isdigit() and 1 <= int(k) <= n_max and _is_number(v) and v > 0 for k, v in counts.items()
        )  # a graph without nodes has no attention keys: its samples are NaN
    ):
        raise InputError(
            f"{path}: field 'node_counts' must map node counts up to n_max ({n_max}) to positive frequencies, "
            "with no count of 0."
        )
    if model == "digress":
        for key in ("node_marginal", "edge_marginal"):
            value = info.get(key)
            if not (
                isinstance(value, list) and value and all(_is_number(p) and p >= 0 for p in value) and sum(value) > 0
            ):
                raise InputError(f"{path}: field {key!r} must be a list of probabilities, got {value!r}.")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_marginals(info: dict[str, Any], run: Path, model: DigressDenoiser) -> None:
    """The marginals of ``run.json`` must have one entry per class of the denoiser (node types; no edge and the
    edge types): shorter or longer lists broadcast against its outputs or fail inside the sampler."""
    for key, classes in (("node_marginal", model.kx), ("edge_marginal", model.ke)):
        if len(info[key]) != classes:
            raise InputError(
                f"{run / 'run.json'}: field {key!r} must hold {classes} probabilities (the denoiser's classes), "
                f"got {len(info[key])}."
            )


def load_latent_run(run_dir: str | os.PathLike) -> tuple[GGBall, SetVelocity | CodeTokenPrior]:
    """The autoencoder and the latent prior (flow or masked-codes) of a GGBall (or Euclidean-ablation) run folder,
    in eval mode."""
    run = Path(run_dir)
    ae = GGBall.from_pretrained(run / "autoencoder" / "model").eval()
    where = run / "prior" / "model"
    state, meta = load_pretrained(where)
    if not isinstance(meta, dict):
        raise StorageError(f"{str(where / 'config.json')!r} must hold a JSON object describing the prior.")
    if meta.get("class") == CodeTokenPrior.__name__:
        return ae, CodeTokenPrior.from_pretrained(where).eval()
    # runs from before the prior's size was a setting hold no hidden / layers: they used 64 and 2
    arch = {"hidden": meta.get("hidden", 64), "layers": meta.get("layers", 2)}
    flags = {k: meta.get(k, False) for k in ("distance_bias", "size_embedding")}  # off in runs before them
    sizes = [v for v in arch.values() if isinstance(v, int) and not isinstance(v, bool) and v >= 1]
    if len(sizes) < 2 or arch["hidden"] % HEADS or not all(isinstance(v, bool) for v in flags.values()):
        raise StorageError(  # int("wide") was a ValueError traceback, bool("false") a prior with the option on
            f"{str(where / 'config.json')!r} must give the prior's hidden (a positive multiple of {HEADS}) and layers "
            f"as positive integers and distance_bias / size_embedding as true or false, got {arch | flags}."
        )
    prior = SetVelocity(ae.geometry, **arch, **flags)
    try:
        prior.load_state_dict(state)
    except RuntimeError:
        raise StorageError(f"the weights in {str(where)!r} do not fit the prior its config.json describes.") from None
    return ae, prior.eval()


@torch.no_grad()
def sample_prior(
    ae: GGBall,
    prior: SetVelocity | CodeTokenPrior,
    mask: torch.Tensor,
    *,
    steps: int = 50,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Latent sets ``[B, N, d]`` drawn by a run's prior for the node counts of ``mask``: the flow's points (which
    ``ae.quantise`` snaps to their nearest codes) or the masked prior's code points (which it leaves as they are)."""
    if isinstance(prior, CodeTokenPrior):
        return ae.codebook.codes[sample_code_sets(prior, mask, steps=steps, generator=generator)]
    return sample_latent_sets(prior, ae.geometry, mask, steps=steps, generator=generator)


@torch.no_grad()
def sample_run(
    run_dir: str | os.PathLike,
    n: int,
    *,
    seed: int = 0,
    steps: int = 50,
    batch_size: int = 256,
    progress: bool = False,
) -> list[Graph]:
    """``n`` graphs from a trained run (node counts drawn from the training sizes), generated ``batch_size`` at
    a time so that memory does not grow with ``n`` (the same ``seed`` and ``batch_size`` give the same graphs)."""
    from tqdm.auto import tqdm

    n = check_int(n, "the number of graphs", low=1)
    batch_size = check_int(batch_size, "the batch size", low=1)
    steps = check_int(steps, "the number of sampling steps", low=1)  # 0 steps would decode the noise
    info = read_run(run_dir)
    run = Path(run_dir)
    g = torch.Generator().manual_seed(check_seed(seed))
    masks = _size_mask(info, n, g).split(batch_size)
    if info["config"]["model"] == "digress":
        model = DigressDenoiser.from_pretrained(run / "denoiser" / "model").eval()
        _check_marginals(info, run, model)
        nodes = MarginalTransitionDiffusion(info["node_marginal"])
        edges = MarginalTransitionDiffusion(info["edge_marginal"])

        def draw(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return digress_sample(model, nodes, edges, mask, steps=steps, generator=g)

    else:
        ae, prior = load_latent_run(run)

        def draw(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            zq, _, _ = ae.quantise(sample_prior(ae, prior, mask, steps=steps, generator=g), mask)
            return ae.decode_graphs(zq, mask, generator=g)

    graphs: list[Graph] = []
    with tqdm(total=n, desc="sample", unit="graph", disable=None if progress else True) as bar:
        for mask in masks:
            graphs += unpack(*draw(mask), mask)
            bar.update(len(mask))
    return graphs
