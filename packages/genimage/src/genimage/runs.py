"""A trained run folder, loaded for sampling, inversion, evaluation and watermarking.

``genimage train --out RUN`` writes::

    RUN/config.json     the resolved ImageTrainConfig plus derived fields (image_shape, sample_shape,
                        num_classes, class_names, prediction, objective, t_end, engine settings)
    RUN/model/          EMA weights of the backbone (model.safetensors + config.json)
    RUN/vae/            the KL-VAE of a latent run (absent for pixel runs)
    RUN/checkpoints/    the engine's resumable checkpoints; RUN/metrics.jsonl the training log
    RUN/samples/        periodic sample grids; RUN/samples.png and RUN/loss.png at the end

:func:`load_run` returns a :class:`LoadedRun` whose :meth:`LoadedRun.velocity` is the flow velocity in
gencore's convention (``dx/dt`` with ``t = 0`` noise, ``t = 1`` data), whatever the training objective,
so any gencore solver can integrate it forward (generate) or backward (invert).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from gencore.errors import StorageError
from gencore.guidance import ClassifierFreeGuidance
from gencore.io import read_json, require_fields
from gencore.paths import AffineGaussianPath
from genimage.data import VIDEO_SOURCES
from genimage.models import ImageBackbone
from genimage.models.vae import KLVAE
from genimage.task import make_path

__all__ = ["LoadedRun", "load_run"]


@dataclass
class LoadedRun:
    """A trained model ready to sample.

    Attributes:
        model: the backbone with EMA weights, eval mode, float32 (on the CPU unless loaded elsewhere); called as
            ``model(x_t, t, y=labels_or_None)`` (``y=None``: the null class of a conditional model).
        prediction: what ``model`` predicts: ``"velocity"`` (flow objective) or ``"noise"`` (VP).
        objective: ``"flow"`` or ``"vp"``.
        image_shape: ``(C, H, W)`` of the images the run generates (a video run: ``(C, T, H, W)``).
        sample_shape: shape of the ODE state: ``image_shape`` for pixel runs, the latent shape
            for latent runs (noise passed to :func:`genimage.sampling.generate` has this shape).
        num_classes: number of classes of a class-conditional model, else None.
        class_names: their names (or None).
        config: the resolved training configuration (the run's ``config.json``).
        t_end: the last time the ODE is integrated to (1.0 for flow, ``1 - 1e-3`` for VP).
        vae: the KL-VAE of a latent run, else None.
        run_dir: the folder it was loaded from (None when built in memory).
    """

    model: ImageBackbone
    prediction: str
    objective: str
    image_shape: tuple[int, ...]
    sample_shape: tuple[int, ...]
    num_classes: int | None
    class_names: list[str] | None
    config: dict[str, Any]
    t_end: float
    vae: KLVAE | None = None
    run_dir: Path | None = None
    path: AffineGaussianPath = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = make_path(self.objective)[0]

    @classmethod
    def from_parts(
        cls, model: ImageBackbone, config: dict[str, Any], vae: KLVAE | None = None, run_dir: Path | None = None
    ) -> LoadedRun:
        """Wrap an in-memory model and a run config dict (the fields :func:`load_run` reads)."""
        return cls(
            model=model,
            prediction=config["prediction"],
            objective=config["objective"],
            image_shape=tuple(config["image_shape"]),
            sample_shape=tuple(config["sample_shape"]),
            num_classes=config.get("num_classes"),
            class_names=config.get("class_names"),
            config=config,
            t_end=float(config["t_end"]),
            vae=vae,
            run_dir=run_dir,
        )

    def null_labels(self, n: int) -> torch.Tensor | None:
        """``[n]`` null-class labels of a conditional run (the unconditional branch), else None."""
        return None if not self.num_classes else torch.full((n,), self.num_classes, dtype=torch.long)

    def _velocity(self, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        out = self.model(x, t, y=y)
        if self.prediction == "velocity":
            return out
        return self.path.convert(out, x, t, self.prediction, "velocity")

    def velocity(
        self, x: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None, cfg_scale: float = 1.0
    ) -> torch.Tensor:
        """Flow velocity ``dx/dt`` at ``x: [B, *sample_shape]``, ``t`` (scalar or ``[B]``) in gencore's time.

        ``y``: labels ``[B]`` of a conditional run (None: unconditional). ``cfg_scale != 1`` applies
        classifier-free guidance ``v_null + w (v_y - v_null)`` (gencore's ``ClassifierFreeGuidance``).
        A VP run's noise prediction is converted to the probability-flow velocity of its path.
        """
        if cfg_scale == 1.0 or not self.num_classes or y is None:
            return self._velocity(x, t, y)
        null = torch.full_like(y, self.num_classes)
        return ClassifierFreeGuidance(self._velocity, cfg_scale, cond={"y": y}, null_cond={"y": null})(x, t)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """ODE states at ``t_end`` -> images in ``[-1, 1]`` (the VAE decoder for latent runs), clamped."""
        x = z if self.vae is None else self.vae.from_latent(z)
        return x.clamp(-1.0, 1.0)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[N, *image_shape]`` -> ODE states at ``t_end`` (identity for pixel runs)."""
        return images if self.vae is None else self.vae.to_latent(images)


def _check_run_fields(config: dict[str, Any], where: Path) -> None:
    """The derived fields sampling relies on, checked so a hand-edited config fails with one sentence."""
    if config["objective"] not in ("flow", "vp"):
        raise StorageError(f"{where}: field 'objective' must be 'flow' or 'vp', got {config['objective']!r}.")
    _, prediction, t_end = make_path(config["objective"])
    if config["prediction"] != prediction:
        raise StorageError(
            f"{where}: field 'prediction' must be {prediction!r} for the {config['objective']!r} objective, "
            f"got {config['prediction']!r}."
        )
    rank, count, layout = (
        (4, "four", "[C, T, H, W]") if config.get("data") in VIDEO_SOURCES else (3, "three", "[C, H, W]")
    )
    for name in ("image_shape", "sample_shape"):
        shape = config[name]
        if not (isinstance(shape, list) and len(shape) == rank and all(isinstance(v, int) and v > 0 for v in shape)):
            raise StorageError(f"{where}: field {name!r} must be {count} positive integers {layout}, got {shape!r}.")
    # derived from the objective: another end time samples half-noisy images (flow) or NaN (VP at t = 1)
    value = config["t_end"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value - t_end) > 1e-9:
        raise StorageError(
            f"{where}: field 't_end' must be a number, {t_end} for the {config['objective']!r} objective, "
            f"got {value!r}."
        )


def run_files(run_dir: str | os.PathLike) -> list[Path]:
    """The files :func:`load_run` reads (``config.json`` and everything in ``model/`` and ``vae/``): a command's
    output must never be one of them."""
    root = Path(run_dir)
    return [root / "config.json", *sorted(root.glob("model/*")), *sorted(root.glob("vae/*"))]


def load_run(run_dir: str | os.PathLike, device: str | torch.device = "cpu") -> LoadedRun:
    """Load ``run_dir`` written by ``genimage train`` (EMA weights, eval mode, float32, on ``device``).

    Raises :class:`~gencore.errors.StorageError` naming the missing or unreadable file.
    """
    root = Path(run_dir)
    if not (root / "config.json").is_file():
        raise StorageError(
            f"{str(root)!r} is not a genimage run folder (no config.json); train one with genimage train."
        )
    config = read_json(root / "config.json")
    fields = ("prediction", "objective", "image_shape", "sample_shape", "t_end")
    require_fields(config, fields, str(root / "config.json"), "; the run may not have finished")
    _check_run_fields(config, root / "config.json")
    if not (root / "model").is_dir():
        raise StorageError(
            f"{str(root)!r} has no model/ folder; the run did not finish (resume it with --resume auto)."
        )
    model = ImageBackbone.from_pretrained(root / "model").to(device).float().eval().requires_grad_(False)
    vae = None
    if config.get("latent"):
        vae = KLVAE.from_pretrained(root / "vae").to(device).float().eval().requires_grad_(False)
    return LoadedRun.from_parts(model, config, vae, root)
