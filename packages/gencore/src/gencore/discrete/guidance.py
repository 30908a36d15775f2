"""Classifier-free guidance for discrete denoisers.

Classifier-free guidance (Ho & Salimans 2022) carried to discrete diffusion by tilting the
clean-token posterior log-linearly,

    p_w(x0_i | x_t, y) ∝ p(x0_i | x_t, y)^w p(x0_i | x_t)^(1 - w),

i.e. the guided logits are ``w * cond + (1 - w) * uncond`` (``= uncond + w (cond - uncond)``;
per-position constants of either set of logits cancel in the softmax). For masked diffusion this is
the classifier-free guidance of Schiff et al. 2024, "Simple Guidance Mechanisms for Discrete
Diffusion Models" (the reverse step is linear in the clean-token prediction). It is not the same
object as two related recipes: Nisonoff et al. 2024, "Unlocking Guidance for Discrete State-Space
Diffusion and Flow Models", tilt the reverse *rates*, ``R_w = R(.|y)^w R^(1 - w)``, unnormalised,
which for masked diffusion also scales the total unmasking rate by ``sum_c p(c|y)^w p(c)^(1 - w)``
(>= 1 for ``w > 1``); and for uniform noise Schiff et al. tilt the reverse transition
``q(x_s | x_t)`` rather than the clean-token prediction. Tilting the prediction keeps one wrapper
for every process and sampler here.

``w = 1`` returns the conditional logits exactly (``1.0 * a + 0.0 * b == a`` in floating point),
``w = 0`` the unconditional ones, ``w > 1`` sharpens towards the class. The unconditional branch uses the
null label (``TokenDenoiser``'s label ``num_classes``).

:class:`GuidedDenoiser` is itself a ``model(features, t, y=...)``, so every sampler of
:mod:`gencore.discrete` takes it unchanged; its two branches count as two evaluations
(``nfe_per_call = 2``), which the samplers add up. By default the branches are two separate calls
of the wrapped network, so that scale 1 reproduces the conditional model bit for bit;
``batched=True`` runs them as one call on the doubled batch (faster on accelerators, equal up to
floating-point rounding, since kernels may block a doubled batch differently).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gencore.errors import ConfigError, InputError

__all__ = ["GuidedDenoiser", "guided_logits"]


def guided_logits(cond: torch.Tensor, uncond: torch.Tensor, scale: float) -> torch.Tensor:
    """``scale * cond + (1 - scale) * uncond`` (log-linear classifier-free guidance)."""
    if cond.shape != uncond.shape:
        raise InputError(
            f"conditional and unconditional logits differ in shape: {tuple(cond.shape)} vs {tuple(uncond.shape)}."
        )
    return scale * cond + (1.0 - scale) * uncond


class GuidedDenoiser(nn.Module):
    """``model(features, t, y)`` with classifier-free guidance of weight ``scale`` (see module docstring).

    Args:
        model: a class-conditional denoiser ``model(features, t, y=labels) -> logits [B, L, K]``.
        scale: guidance weight ``w`` (1: the conditional model, 0: the unconditional one).
        null_label: the label of the unconditional branch (``TokenDenoiser``: ``num_classes``).
        batched: evaluate both branches in one call on the concatenated batch.
    """

    nfe_per_call = 2

    def __init__(self, model: nn.Module, scale: float, null_label: int, *, batched: bool = False) -> None:
        super().__init__()
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
            raise ConfigError(f"guidance scale must be a finite number, got {scale!r}.")
        self.model = model
        self.scale = float(scale)
        self.null_label = int(null_label)
        self.batched = bool(batched)

    def forward(self, features: torch.Tensor, t: torch.Tensor | float, y: torch.Tensor | None = None) -> torch.Tensor:
        if y is None:
            raise InputError("a guided denoiser needs class labels y of shape [batch].")
        b = features.shape[0]
        t = torch.as_tensor(t, dtype=features.dtype, device=features.device).expand(b)
        y = torch.as_tensor(y, device=features.device)
        if y.is_floating_point() or y.is_complex() or y.dim() > 1 or y.numel() not in (1, b):
            raise InputError(
                f"class labels y must be integers of shape [{b}] (or one label), got {y.dtype} {tuple(y.shape)}."
            )
        y = y.long().reshape(-1).expand(b)
        null = torch.full_like(y, self.null_label)
        if self.batched:
            logits = self.model(torch.cat([features, features]), torch.cat([t, t]), y=torch.cat([y, null]))
            return guided_logits(logits[:b], logits[b:], self.scale)
        return guided_logits(self.model(features, t, y=y), self.model(features, t, y=null), self.scale)
