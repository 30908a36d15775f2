"""Haar wavelets and the frequency-aware loss mask of Latent Wavelet Diffusion.

LWD (Sigillo et al., ICLR 2026, "Latent Wavelet Diffusion: Enabling 4K Image Synthesis for Free"):

1. One level of the orthonormal 2-D Haar DWT of the input ``x: [B, C, H, W]`` (latent or pixels).
   For every 2x2 block ``[[a, b], [c, d]]``::

       LL = (a + b + c + d) / 2      H = (a - b + c - d) / 2      (left minus right)
       V  = (a + b - c - d) / 2      D = (a - b - c + d) / 2      (top minus bottom; diagonal)

2. Wavelet energy map: the detail energy ``mean_c (H^2 + V^2 + D^2)`` at ``H/2 x W/2``, upsampled
   bilinearly to ``H x W`` and min-max normalised per sample to ``A in [0, 1]``.
3. Time-dependent mask: with the noise level ``tau = 1 - t`` (suite time: ``t = 0`` noise, ``t = 1``
   data) and a floor ``l``, ``M = [A + l >= tau]``. Every position is supervised at low noise
   (``tau <= l``); detail-rich positions are also supervised at higher noise. The training loss is
   ``mean(M * (prediction - target)^2)`` over all elements -- the model and the sampler are unchanged,
   so inference costs nothing extra.

The energy map's input: the reference code computes it from the *noisy* input ``x_t``, which at high noise
is the energy of the Gaussian noise rather than of the image; the paper's text describes detail-rich regions of
the clean latent ``x1``. Both exist (``lwd_energy="noisy"``, the default, and ``"clean"``; ``--lwd-energy``),
the map treated as a constant (no gradient). The difference matters: from ``x1``, smooth regions are never
supervised above the noise level ``l``; from ``x_t``, the map at high noise is a random subset of positions,
so every region is supervised there some of the time. Measured (genimage README): the clean map worsened FD
in every setting tried (pixels from scratch, fine-tuning to 64x64, latent space); the noisy map improved every
score in latent space (four seeds) and tied FD when fine-tuning in pixels, so it is the default.
"""

from __future__ import annotations

import math
from numbers import Real

import torch
import torch.nn.functional as F

from gencore.errors import ConfigError, InputError
from gencore.nn import broadcast_time

__all__ = ["haar_dwt2", "haar_idwt2", "lwd_mask", "wavelet_energy_map"]


def _check_even(x: torch.Tensor) -> None:
    if x.dim() != 4 or x.shape[-1] % 2 or x.shape[-2] % 2:
        raise InputError(f"the Haar DWT needs [B, C, H, W] with even H and W, got {tuple(x.shape)}.")


def haar_dwt2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One orthonormal Haar level: ``(LL, H, V, D)``, each ``[B, C, H/2, W/2]`` (see module docstring)."""
    _check_even(x)
    a, b = x[..., 0::2, 0::2], x[..., 0::2, 1::2]
    c, d = x[..., 1::2, 0::2], x[..., 1::2, 1::2]
    return (a + b + c + d) / 2, (a - b + c - d) / 2, (a + b - c - d) / 2, (a - b - c + d) / 2


def haar_idwt2(ll: torch.Tensor, h: torch.Tensor, v: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`haar_dwt2`: ``[B, C, H/2, W/2] x 4 -> [B, C, H, W]``."""
    shapes = [tuple(band.shape) for band in (ll, h, v, d)]
    if ll.dim() != 4 or len(set(shapes)) > 1:
        raise InputError(
            f"the inverse Haar DWT needs four [B, C, h, w] bands of one shape, got {', '.join(map(str, shapes))}."
        )
    out = ll.new_empty((*ll.shape[:-2], 2 * ll.shape[-2], 2 * ll.shape[-1]))
    out[..., 0::2, 0::2] = (ll + h + v + d) / 2
    out[..., 0::2, 1::2] = (ll - h + v - d) / 2
    out[..., 1::2, 0::2] = (ll + h - v - d) / 2
    out[..., 1::2, 1::2] = (ll - h - v + d) / 2
    return out


def wavelet_energy_map(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """LWD's normalised detail-energy map ``A: [B, H, W]`` in ``[0, 1]`` of ``x: [B, C, H, W]``.

    A constant image (no detail anywhere) gives ``A = 0``. Computed in float32, or in float64 for a
    float64 ``x`` (the dtype of ``A``).
    """
    _, h, v, d = haar_dwt2(x.detach().to(torch.promote_types(x.dtype, torch.float32)))
    energy = (h.square() + v.square() + d.square()).mean(dim=1, keepdim=True)
    up = F.interpolate(energy, size=x.shape[-2:], mode="bilinear", align_corners=False)[:, 0]
    lo = up.amin(dim=(1, 2), keepdim=True)
    hi = up.amax(dim=(1, 2), keepdim=True)
    return (up - lo) / (hi - lo + eps)


def lwd_mask(energy: torch.Tensor, t: torch.Tensor | float, floor: float = 0.1) -> torch.Tensor:
    """Binary mask ``[B, 1, H, W]``: 1 where ``energy + floor >= 1 - t`` (LWD's time-dependent mask).

    ``energy: [B, H, W]`` from :func:`wavelet_energy_map`; ``t`` in suite time (scalar or ``[B]``); ``floor``
    in ``[0, 1]``. A non-finite Python number ``t`` is refused (NaN would select no position at all); a tensor
    ``t`` is not checked, since the training loss calls this every step and reading a GPU tensor's values would
    synchronise the device.
    """
    if energy.dim() != 3:
        raise InputError(f"energy must be [B, H, W], got {tuple(energy.shape)}.")
    if isinstance(t, Real) and not math.isfinite(t):
        raise ConfigError(f"the LWD mask time t must be a finite number in suite time, got {t}.")
    if not (isinstance(floor, Real) and 0.0 <= floor <= 1.0):  # NaN selected no position: a zero loss
        raise ConfigError(f"the LWD mask floor l must be a number in [0, 1], got {floor}.")
    tau = 1.0 - broadcast_time(t, energy).to(energy.dtype)
    return (energy + floor >= tau[:, None, None]).to(energy.dtype).unsqueeze(1)
