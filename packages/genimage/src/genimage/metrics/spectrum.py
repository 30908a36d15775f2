"""Radially averaged power spectra and the high-frequency spectral error of generated images.

For images ``[N, C, H, W]`` the power ``|FFT2(x)|^2 / (H W)`` of every channel is averaged over images
and channels and then over rings of integer radius ``r = round(sqrt(kx^2 + ky^2))`` (frequencies in
cycles per image, ``r = 0 .. min(H, W) // 2``; corners beyond are dropped), giving ``P(r)``. The
spectral error of a generated set against a reference set is the mean absolute difference of
``log10 P(r)`` over the rings ``r >= 1``; the **high-frequency** error averages only the rings
``r > r_max / 2`` (the upper half of the band), where detail and blur show (Durall et al. 2020,
"Watch your up-convolution"; Dzanic et al. 2020, "Fourier spectrum discrepancies").
"""

from __future__ import annotations

import torch

from gencore.errors import InputError
from genimage.imageio import check_images


def radial_power_spectrum(images: torch.Tensor) -> torch.Tensor:
    """Mean radially averaged power ``P(r)``, ``r = 0 .. min(H, W) // 2``, as float64 ``[R + 1]``.

    Needs at least one image, of at least 2 x 2 pixels (a ring ``r >= 1``).
    """
    check_images(images)
    if images.shape[0] < 1 or min(images.shape[-2:]) < 2:
        raise InputError(
            f"the power spectrum needs at least one image of at least 2x2 pixels, got {tuple(images.shape)}."
        )
    x = images.detach().double().cpu()
    h, w = x.shape[-2:]
    power = torch.fft.fft2(x).abs().square().mean(dim=(0, 1)) / (h * w)
    ky = torch.fft.fftfreq(h, d=1.0 / h).double()
    kx = torch.fft.fftfreq(w, d=1.0 / w).double()
    radius = torch.sqrt(ky[:, None] ** 2 + kx[None, :] ** 2).round().long()
    r_max = min(h, w) // 2
    keep = radius <= r_max
    sums = torch.zeros(r_max + 1, dtype=torch.float64).index_add_(0, radius[keep], power[keep])
    counts = torch.zeros(r_max + 1, dtype=torch.float64).index_add_(0, radius[keep], torch.ones_like(power[keep]))
    return sums / counts


def spectral_errors(generated: torch.Tensor, reference: torch.Tensor, eps: float = 1e-12) -> dict[str, float]:
    """``{"spectral_error": ..., "hf_spectral_error": ...}`` (mean |log10 P_gen - log10 P_ref|; module docstring).

    Both sets must have one image size ``H x W`` (the rings are frequencies in cycles per image).
    """
    if torch.is_tensor(generated) and torch.is_tensor(reference) and generated.shape[-2:] != reference.shape[-2:]:
        raise InputError(
            f"generated and reference images must have one size H x W, got {tuple(generated.shape)} "
            f"and {tuple(reference.shape)}."
        )
    pg, pr = radial_power_spectrum(generated), radial_power_spectrum(reference)
    diff = (torch.log10(pg + eps) - torch.log10(pr + eps)).abs()
    r_max = diff.shape[0] - 1
    return {
        "spectral_error": float(diff[1:].mean()),
        "hf_spectral_error": float(diff[r_max // 2 + 1 :].mean()),
    }
