"""``genimage train``: data -> (optional KL-VAE) -> backbone trained on the gencore engine -> run folder.

Every rank runs :func:`_worker` (``gencore.train.launch`` starts ``nproc`` processes; DDP over gloo on
CPU, NCCL on GPU): it seeds and builds the same backbone, trains the VAE first on a latent run, then
fits the backbone with :class:`gencore.train.Trainer` (EMA, checkpoints, exact resume, progress bar,
LayerSync through ``TrainConfig.layersync_pairs``, periodic sample grids). Rank 0 saves the EMA
backbone to ``RUN/model``; the parent process writes ``RUN/config.json`` and the pictures. The run
folder layout is documented in :mod:`genimage.runs`.

Fine-tuning (``init_from``): the backbone starts from a finished run's EMA weights (same architecture and
objective; the image size may change, as the DiT's positions are fixed sine-cosine tables and the UNet is
convolutional) and a latent run reuses that run's VAE instead of training one. Optimiser, schedule and
EMA start afresh.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from gencore.checks import check_int
from gencore.errors import ConfigError, GenError
from gencore.io import atomic_path, ensure_dir, read_json, write_json
from gencore.train import (
    LayerSync,
    TrainConfig,
    Trainer,
    check_resume_steps,
    find_checkpoints,
    holds_settings,
    launch,
    run_identity,
)
from gencore.train.metrics_log import read_metrics
from genimage.config import ImageTrainConfig
from genimage.data import DEFAULT_SIZES, ImageSet, ShardedImages, VideoSet, load_image_set, load_video_set
from genimage.data.video import write_video_grid
from genimage.imageio import write_grid
from genimage.models import DiT, ImageBackbone, UNet, VideoDiT, default_layersync_pair
from genimage.models.vae import KLVAE
from genimage.runs import LoadedRun, load_run
from genimage.task import ImageTask, VAETask, make_path

# settings a resumed run may change; every other field must match the checkpoint's (TrainConfig.identity)
RESUMABLE = ("steps", "progress", "sample_nfe")

GRID_SIZE = 64  # images in the periodic and final sample grids
VIDEO_GRID_SIZE = 16  # videos in them


def _unused_settings(cfg: ImageTrainConfig) -> tuple[str, ...]:
    """Settings that do not define this run: the LWD energy source of a run without LWD (its default changed
    from clean to noisy on 2026-12-04; runs without LWD started before then still resume)."""
    return () if cfg.lwd else ("lwd_energy",)


def image_run_identity(cfg: ImageTrainConfig, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """:func:`gencore.train.run_identity` of ``cfg`` without ``exclude`` and without the settings it does not use."""
    return run_identity(cfg, (*exclude, *_unused_settings(cfg)))


@dataclass
class TrainOutcome:
    """What :func:`train` returns."""

    run_dir: Path
    config: dict[str, Any]  # the config.json written
    interrupted: bool
    seconds: float
    already_finished: bool = False  # a resume of a finished run with its own settings: nothing was trained


TrainingData = ImageSet | ShardedImages | VideoSet


def load_training_data(cfg: ImageTrainConfig) -> TrainingData:
    """The data of a run: an in-memory :class:`ImageSet` or :class:`VideoSet`, or a :class:`ShardedImages` stream."""
    size = cfg.image_size or DEFAULT_SIZES[cfg.data]
    if cfg.is_video:
        return load_video_set(
            cfg.data,
            frames=cfg.clip_frames,
            image_size=size,
            path=cfg.data_path,
            channels=cfg.channels,
            skip_bad=cfg.skip_bad,
        )
    if cfg.data == "shards":
        return ShardedImages(
            cfg.data_path, image_size=size, channels=cfg.channels, skip_bad=cfg.skip_bad, seed=cfg.seed
        )
    return load_image_set(cfg.data, image_size=size, path=cfg.data_path, channels=cfg.channels, skip_bad=cfg.skip_bad)


def data_summary(data: TrainingData, size: int) -> dict[str, Any]:
    """Shape (``[C, H, W]``, videos ``[C, T, H, W]``), classes and size of the training data (``config.json``)."""
    if isinstance(data, ShardedImages):
        names = data.class_names
        return {"image_shape": [data.channels, size, size], "class_names": names, "data_size": None}
    return {"image_shape": list(data.shape), "class_names": data.class_names, "data_size": len(data)}


def run_record(cfg: ImageTrainConfig, summary: dict[str, Any]) -> dict[str, Any]:
    """The resolved run configuration (``config.json``) without the engine section."""
    shape = list(summary["image_shape"])
    names = summary["class_names"] if cfg.class_conditional else None
    path_objective = make_path(cfg.objective)
    if cfg.latent:
        factor = 2  # one VAE downsampling
        sample_shape = [cfg.vae_latent_channels, shape[1] // factor, shape[2] // factor]
    else:
        sample_shape = shape
    return cfg.to_dict() | {
        "image_shape": shape,
        "sample_shape": sample_shape,
        "num_classes": len(names) if names else None,
        "class_names": names,
        "prediction": path_objective[1],
        "t_end": path_objective[2],
        "data_size": summary["data_size"],
    }


def build_backbone(cfg: ImageTrainConfig, record: dict[str, Any]) -> ImageBackbone:
    """The backbone named in ``cfg`` for the run's ODE state shape (a video run: the video DiT)."""
    if cfg.is_video:
        c, frames, h, _ = record["sample_shape"]
        return VideoDiT(
            image_size=h,
            frames=frames,
            channels=c,
            patch_size=cfg.patch_size,
            temporal_patch=cfg.tubelet_frames,
            size=cfg.dit_size,
            num_classes=record["num_classes"],
            attention=cfg.video_attention or "full",
        )
    c, h, _ = record["sample_shape"]
    if cfg.model == "dit":
        return DiT(
            image_size=h, channels=c, patch_size=cfg.patch_size, size=cfg.dit_size, num_classes=record["num_classes"]
        )
    return UNet(
        image_size=h, channels=c, base=cfg.unet_base, channel_mults=cfg.unet_mults, num_classes=record["num_classes"]
    )


def _check_layersync_pair(model: ImageBackbone, weak: str, strong: str) -> None:
    """Refuse a ``weak:strong`` pair LayerSync would compute silently wrong: a UNet module other than its taps (a
    convolution returns ``[B, C, H, W]``, and LayerSync takes the last axis, the width, as the feature axis), or a
    strong layer that does not come after the weak one (the paper's shallow-to-deep direction; the reference code
    asserts it). DiT block names are ordered by their index, the UNet taps by depth (``taps.mid_in`` is the
    last ``taps.down{i}``'s tensor)."""
    if isinstance(model, UNet):
        levels = sum(1 for name in model.taps if name.startswith("down"))
        depth = {f"taps.down{i}": i for i in range(levels)} | {"taps.mid_in": levels - 1, "taps.mid_out": levels}
        for name in (weak, strong):
            if name not in depth:
                raise ConfigError(
                    f"UNet LayerSync pairs must name its channel-last taps ({', '.join(depth)}), got {name!r}."
                )
        if depth[weak] >= depth[strong]:
            raise ConfigError(
                f"LayerSync pair {weak}:{strong}: the strong tap must lie deeper than the weak one "
                f"(order: {', '.join(depth)})."
            )
        return
    index = [re.fullmatch(r"blocks\.(\d+)(\..*)?", name) for name in (weak, strong)]
    # a whole block's output comes after every module inside it: blocks.2:blocks.2.mlp is deep-to-shallow too
    if all(index) and (int(index[0].group(1)), index[0].group(2) is None) > (  # type: ignore[union-attr]
        int(index[1].group(1)),  # type: ignore[union-attr]
        index[1].group(2) is None,  # type: ignore[union-attr]
    ):
        raise ConfigError(
            f"LayerSync pair {weak}:{strong}: pairs are written weak:strong with the strong (later) block second."
        )


def layersync_pairs(cfg: ImageTrainConfig, model: ImageBackbone) -> tuple[tuple[str, str], ...]:
    """The LayerSync module pairs of a run: given ``weak:strong`` pairs, or the backbone's default."""
    if not cfg.layersync:
        return ()
    if cfg.layersync_pairs:
        pairs = tuple(tuple(p.split(":")) for p in cfg.layersync_pairs)
        for weak, strong in pairs:
            _check_layersync_pair(model, weak, strong)
        return pairs  # type: ignore[return-value]
    if isinstance(model, (DiT, VideoDiT)):
        return (default_layersync_pair(model.config["depth"]),)
    return (("taps.mid_in", "taps.mid_out"),)


def check_backbone(cfg: ImageTrainConfig, record: dict[str, Any]) -> None:
    """Build the backbone and hook its LayerSync modules once, so that what they refuse (a patch size that does not
    divide a latent run's latent size, a module name the backbone lacks, a pair :func:`layersync_pairs` refuses)
    stops the run in this process: before a latent run's VAE stage writes ``vae/``, which a corrected command
    would otherwise reuse whatever its VAE settings, and before any rank starts."""
    model = build_backbone(cfg, record)
    pairs = layersync_pairs(cfg, model)
    if pairs:
        LayerSync(model, pairs, cfg.layersync_weight)


def _engine(cfg: ImageTrainConfig, out: Path, steps: int, **overrides: Any) -> TrainConfig:
    base = {
        "steps": steps,
        "global_batch_size": cfg.batch_size,
        "optimizer": "adamw",
        "lr": cfg.lr,
        "warmup_steps": min(cfg.warmup_steps, steps),
        "schedule": cfg.lr_schedule,
        "ema_decay": cfg.ema_decay,
        "seed": cfg.seed,
        "progress": cfg.progress,
        "out_dir": str(out),
        "identity": image_run_identity(cfg, RESUMABLE),
    }
    return TrainConfig(**(base | overrides)).validate()


def check_init_run(cfg: ImageTrainConfig, record: dict[str, Any]) -> None:
    """Refuse an ``init_from`` run this run cannot fine-tune (one sentence naming what differs)."""
    source = cfg.init_from
    init = load_run(source)
    if init.objective != cfg.objective:
        raise ConfigError(
            f"--init-from {source}: that run was trained with the {init.objective!r} objective, this one uses "
            f"{cfg.objective!r}; fine-tuning needs the same objective."
        )
    if (init.vae is not None) != cfg.latent:
        where = "in a VAE latent space" if init.vae is not None else "in pixel space"
        raise ConfigError(
            f"--init-from {source}: that run diffuses {where}; pass --latent exactly when the initial run has a VAE."
        )
    backbone = build_backbone(cfg, record)
    theirs, mine = init.model.config, backbone.config
    diff = [k for k in sorted(set(theirs) | set(mine)) if k != "image_size" and theirs.get(k) != mine.get(k)]
    if init.model.kind != backbone.kind or diff:
        what = ", ".join(f"{k} ({theirs.get(k)!r} there, {mine.get(k)!r} here)" for k in diff) or "the model type"
        raise ConfigError(
            f"--init-from {source}: its {init.model.kind} backbone differs from this run's {backbone.kind} in {what}; "
            "fine-tuning needs the same architecture (only the image size may change)."
        )


def _init_weights(model: ImageBackbone, cfg: ImageTrainConfig) -> None:
    """Copy the EMA weights of the ``init_from`` run into ``model`` (shapes were checked by check_init_run)."""
    state = ImageBackbone.from_pretrained(Path(cfg.init_from) / "model").state_dict()
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigError(f"--init-from {cfg.init_from}: its weights do not fit this run's backbone ({err}).") from None


def _train_vae(
    cfg: ImageTrainConfig, images: torch.Tensor, out: Path, engine: dict[str, Any]
) -> tuple[KLVAE | None, Any]:
    """Train (or, on resume, load; or, when fine-tuning, reuse the initial run's) KL-VAE with its latent
    scale set to 1 / std of the latents: ``(vae, None)``, or ``(None, engine result)`` when a signal stopped
    its training (a checkpoint in ``vae_train/``, no ``vae/``; ``--resume auto`` continues it)."""
    rank0 = int(os.environ.get("RANK", "0") or 0) == 0
    if (out / "vae" / "model.safetensors").is_file():
        return KLVAE.from_pretrained(out / "vae").eval().requires_grad_(False), None
    if cfg.init_from:
        vae = KLVAE.from_pretrained(Path(cfg.init_from) / "vae").eval().requires_grad_(False)
        if rank0:
            vae.save_pretrained(out / "vae")
        return vae, None
    torch.manual_seed(cfg.seed + 7)
    vae = KLVAE(channels=images.shape[1], latent_channels=cfg.vae_latent_channels, width=cfg.vae_width)
    keep = {k: v for k, v in engine.items() if k in ("nan_policy", "keep_last", "parallel", "checkpoint_every")}
    if engine.get("resume") == "auto":  # a checkpoint folder given to --resume is the backbone's
        keep["resume"] = "auto"
    keep["identity"] = image_run_identity(cfg, (*RESUMABLE, "vae_steps"))  # the VAE's step count may change on resume
    keep["schedule"] = "cosine"  # --lr-schedule is the backbone's; the VAE always decays
    result = Trainer(_engine(cfg, out / "vae_train", cfg.vae_steps, **keep)).fit(
        VAETask(cfg, vae), TensorDataset(images)
    )
    if result.interrupted:
        return None, result
    vae = result.model.cpu().eval().requires_grad_(False)
    with torch.no_grad():
        means = torch.cat([vae.encode(b)[0] for b in images.split(256)])
        vae.latent_scale.fill_(1.0 / float(means.std().clamp_min(1e-6)))
    if rank0:
        vae.save_pretrained(out / "vae")
    return vae, None


Callback = Any  # callable(run: LoadedRun, step: int) -> None, called with the EMA model every sample_every steps


def fit_backbone(
    cfg: ImageTrainConfig,
    data: TrainingData,
    record: dict[str, Any],
    out: Path,
    engine: dict[str, Any],
    callback: Callback = None,
) -> tuple[Any, KLVAE | None, float]:
    """Train (the VAE and) the backbone in this process or rank: ``(engine result, vae, seconds)``.

    ``engine["sample_every"]`` steps apart, the EMA backbone is handed to ``callback(run, step)`` as a
    :class:`LoadedRun` (default: a 64-image grid, or a 16-video GIF, written to ``RUN/samples``).
    """
    engine = dict(engine)
    vae = None
    dataset: Dataset = data if isinstance(data, ShardedImages) else TensorDataset(*data.tensors())
    if cfg.latent:
        vae, stopped = _train_vae(cfg, data.images, out, engine)
        if stopped is not None:  # interrupted in the VAE stage: no backbone training, nothing saved
            return stopped, None, 0.0
        with torch.no_grad():
            latents = torch.cat([vae.to_latent(b) for b in data.images.split(256)])
        dataset = TensorDataset(latents, *data.tensors()[1:])
    torch.manual_seed(cfg.seed)
    model = build_backbone(cfg, record)
    if cfg.init_from:
        _init_weights(model, cfg)
    pairs = layersync_pairs(cfg, model)
    sample_every = int(engine.pop("sample_every", 0) or 0)
    train_cfg = _engine(
        cfg,
        out,
        cfg.steps,
        layersync_pairs=pairs,
        layersync_weight=cfg.layersync_weight,
        sample_every=sample_every,
        **engine,
    )
    sampler = None
    if sample_every:
        hook = callback or _grid_callback(cfg, out)
        placed: dict[torch.device, KLVAE] = {}  # the VAE (kept on the CPU) copied to the EMA backbone's device

        def sampler(ema: ImageBackbone, step: int, out_dir: Path) -> None:
            was_training = ema.training
            decoder = vae
            device = next(ema.parameters()).device
            if vae is not None and vae.latent_scale.device != device:
                if device not in placed:
                    placed[device] = copy.deepcopy(vae).to(device)
                decoder = placed[device]
            hook(LoadedRun.from_parts(ema, record, decoder), step)
            ema.train(was_training)

    task = ImageTask(cfg, model, record["num_classes"], sampler)
    start = time.perf_counter()
    result = Trainer(train_cfg).fit(task, dataset)
    return result, vae, time.perf_counter() - start


def _grid_callback(cfg: ImageTrainConfig, out: Path) -> Callback:
    from genimage.sampling import generate, sample_noise

    def grid(run: LoadedRun, step: int) -> None:
        n = VIDEO_GRID_SIZE if cfg.is_video else GRID_SIZE
        labels = None if not run.num_classes else torch.arange(n) % run.num_classes
        x = generate(run, sample_noise(run, n, cfg.seed + 1), labels, nfe=cfg.sample_nfe)
        write_samples(out / "samples" / f"step-{step:07d}.png", x, nrow=4 if cfg.is_video else 8)

    return grid


def write_samples(path: Path, x: torch.Tensor, nrow: int | None = None) -> list[Path]:
    """Images: one grid picture at ``path``. Videos ``[N, C, T, H, W]``: a PNG at ``path`` with one row of frames
    per video, and an animated GIF grid of the videos beside it (same name, ``.gif``)."""
    if x.dim() == 4:
        return [write_grid(path, x, nrow=nrow)]
    n, c, t, h, w = x.shape
    strip = write_grid(path, x.transpose(1, 2).reshape(n * t, c, h, w), nrow=t)
    return [strip, write_video_grid(Path(path).with_suffix(".gif"), x, nrow=nrow)]


def _worker(cfg: ImageTrainConfig, data: Any, record: dict[str, Any], out: Path, engine: dict[str, Any]) -> dict:
    """Runs on every rank (see the module docstring)."""
    result, _, seconds = fit_backbone(cfg, data, record, out, engine)
    if int(os.environ.get("RANK", "0") or 0) == 0 and not result.interrupted:
        result.ema.cpu().save_pretrained(out / "model")
    skipped = list(getattr(data, "skipped", []))
    return {"interrupted": result.interrupted, "seconds": seconds, "skipped": skipped}


def train(
    cfg: ImageTrainConfig,
    out_dir: str | os.PathLike,
    *,
    nproc: int = 1,
    data: TrainingData | None = None,
    **engine: Any,
) -> TrainOutcome:
    """Train one run into ``out_dir`` (see the module docstring); ``engine`` overrides TrainConfig fields.

    ``data`` replaces the data set named in ``cfg`` (for experiments on a prepared :class:`ImageSet` or
    :class:`VideoSet`).
    """
    cfg = cfg.validate()
    check_int(nproc, "nproc", low=1)
    _engine(cfg, Path(out_dir), cfg.steps, **engine)  # engine settings are checked before the run folder is made
    out = ensure_dir(out_dir)
    if engine.get("resume") is None and find_checkpoints(out / "checkpoints"):
        raise ConfigError(
            f"{str(out / 'checkpoints')!r} already holds checkpoints; pass --resume auto to continue that run "
            "or choose a new --out folder."
        )
    if engine.get("resume") is not None and (out / "model").is_dir() and (out / "config.json").is_file():
        saved = read_json(out / "config.json")
        if holds_settings(saved, cfg, ("progress", *_unused_settings(cfg))):
            return TrainOutcome(out, saved, False, 0.0, already_finished=True)
    if engine.get("resume") == "auto":
        check_resume_steps(out / "checkpoints", cfg.steps)
    data = load_training_data(cfg) if data is None else data
    if isinstance(data, VideoSet) != cfg.is_video:
        kind = "videos" if isinstance(data, VideoSet) else "images"
        raise ConfigError(f"the data given are {kind} but the configuration's data set {cfg.data!r} is not.")
    if cfg.latent and isinstance(data, ShardedImages):
        raise ConfigError("the latent path needs an in-memory data set, not streamed shards.")
    size = cfg.image_size or DEFAULT_SIZES[cfg.data]
    record = run_record(cfg, data_summary(data, size))
    if cfg.latent and (record["image_shape"][1] % 4 or record["image_shape"][2] % 4):
        raise ConfigError(f"latent training needs an image size divisible by 4, got {record['image_shape'][1:]}.")
    if cfg.init_from:
        check_init_run(cfg, record)
    if cfg.latent or cfg.layersync:  # refused pairs stop the run here, not in every rank's worker
        check_backbone(cfg, record)
    start = time.perf_counter()
    results = launch(_worker, cfg, data, record, out, dict(engine), nproc=nproc)
    info = results.get(0) or {"interrupted": True, "seconds": 0.0, "skipped": []}
    record |= {"engine": {k: (str(v) if isinstance(v, Path) else v) for k, v in engine.items()}, "nproc": nproc}
    record["skipped_files"] = info.get("skipped", [])
    if not info["interrupted"]:
        write_json(out / "config.json", record)
        _final_pictures(out, record, cfg)
    return TrainOutcome(out, record, bool(info["interrupted"]), time.perf_counter() - start)


def _final_pictures(out: Path, record: dict[str, Any], cfg: ImageTrainConfig) -> None:
    from gencore.plots import loss_curve
    from genimage.runs import load_run

    _grid_callback(cfg, out)(load_run(out), cfg.steps)
    for suffix in (".png", ".gif") if cfg.is_video else (".png",):
        with atomic_path(out / f"samples{suffix}") as tmp:
            shutil.copyfile(out / "samples" / f"step-{cfg.steps:07d}{suffix}", tmp)
    rows = read_metrics(out / "metrics.jsonl")
    losses = [(int(r["step"]), float(r["loss"])) for r in rows if "loss" in r and r["loss"] == r["loss"]]
    if losses:
        loss_curve(losses, out / "loss.png", title=f"{cfg.data}: training loss")


def check_interrupted(outcome: TrainOutcome) -> None:
    """Raise :class:`GenError` when a run was interrupted (used by experiments that need the model)."""
    if outcome.interrupted:
        raise GenError(f"training in {outcome.run_dir} was interrupted; continue it with --resume auto.")
