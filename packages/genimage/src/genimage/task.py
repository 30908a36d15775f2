"""The training task the gencore engine runs: flow matching or VP diffusion on images.

Objectives (both from :mod:`gencore.paths`, suite time ``t = 0`` noise, ``t = 1`` data):

- ``flow`` (default): rectified flow, ``x_t = t x1 + (1 - t) x0``, the network predicts the velocity
  ``u_t = x1 - x0`` (Lipman et al. 2023; Liu et al. 2023).
- ``vp``: the VP diffusion path (continuous DDPM, Song et al. 2021) in the same time, the network
  predicts the noise ``x0`` (Ho et al. 2020); ``t`` is kept below ``1 - VP_T_EPS`` where the noise is
  unidentifiable. Sampling converts the prediction to a velocity (:mod:`gencore.paths.conversions`).

The per-element squared error is averaged over all elements; with LWD it is first multiplied by the
wavelet mask of :mod:`genimage.wavelet` (from ``x_t``, or ``x1`` with ``lwd_energy="clean"``). Labels are
replaced by the null class with probability ``label_dropout`` (classifier-free guidance training).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from gencore.paths import AffineGaussianPath, LinearSchedule, VPSchedule, make_time_sampler
from gencore.train.distributed import is_main_process
from genimage.config import ImageTrainConfig
from genimage.models.vae import klvae_loss
from genimage.wavelet import lwd_mask, wavelet_energy_map

VP_T_EPS = 1e-3


def make_path(objective: str) -> tuple[AffineGaussianPath, str, float]:
    """``(path, prediction, t_end)`` of an objective; sampling integrates ``t`` over ``[0, t_end]``."""
    if objective == "vp":
        return AffineGaussianPath(VPSchedule()), "noise", 1.0 - VP_T_EPS
    return AffineGaussianPath(LinearSchedule()), "velocity", 1.0


class ImageTask:
    """``model``, ``loss(model, batch, generator)`` and the periodic ``sample`` grid for the engine."""

    def __init__(
        self, cfg: ImageTrainConfig, model: torch.nn.Module, num_classes: int | None, sampler: Any = None
    ) -> None:
        self.cfg = cfg
        self.model = model
        self.num_classes = num_classes if cfg.class_conditional else None
        self.path, self.prediction, self.t_end = make_path(cfg.objective)
        self.time_sampler = make_time_sampler(cfg.time_sampler)
        self.sampler = sampler  # callable(model_ema, step, out_dir) from the caller, or None

    def loss(self, model: torch.nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        x1 = batch[0]
        y = batch[1] if self.num_classes and len(batch) > 1 else None
        b = x1.shape[0]
        x0 = torch.randn(x1.shape, generator=generator, device=x1.device, dtype=x1.dtype)
        t = self.time_sampler(b, generator=generator, device=x1.device, dtype=x1.dtype)
        if self.t_end < 1.0:
            t = t * self.t_end
        s = self.path.sample(x0, x1, t)
        target = s.u_t if self.prediction == "velocity" else x0
        if y is not None and self.cfg.label_dropout > 0:
            drop = torch.rand(b, generator=generator, device=x1.device) < self.cfg.label_dropout
            y = torch.where(drop, torch.full_like(y, self.num_classes), y)
        err = (model(s.x_t, s.t, y=y) - target).square()
        metrics: dict[str, Any] = {}
        if self.cfg.lwd:
            source = x1 if self.cfg.lwd_energy == "clean" else s.x_t
            mask = lwd_mask(wavelet_energy_map(source), s.t, self.cfg.lwd_floor).to(err.dtype)
            err = err * mask
            metrics["lwd_mask_fraction"] = mask.mean().detach()
        return err.mean(), metrics

    def sample(self, model: torch.nn.Module, step: int, out_dir: Path) -> None:
        if self.sampler is not None and is_main_process():
            self.sampler(model, step, Path(out_dir))


class VAETask:
    """The engine task of the KL-VAE (latent path): reconstruction + KL + LWD scale consistency."""

    def __init__(self, cfg: ImageTrainConfig, vae: torch.nn.Module) -> None:
        self.cfg = cfg
        self.model = vae

    def loss(self, model: torch.nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        return klvae_loss(model, batch[0], generator, beta=self.cfg.vae_beta, scale_weight=self.cfg.vae_scale_weight)
