"""Time grids for the fixed-step solvers, in the suite's convention ``t in [0, 1]``,
``t = 0`` noise (source) and ``t = 1`` data.

Every grid is a 1-D tensor ``[n_steps + 1]``, strictly increasing, that a
sampler walks from its first to its last entry (flip it to integrate backwards).

* :func:`uniform_grid` — ``t_i = i / n``.
* :func:`shifted_grid` — the resolution-dependent timestep shift of Stable Diffusion 3
  (Esser et al. 2024, "Scaling Rectified Flow Transformers for High-Resolution Image
  Synthesis", eq. 23). SD3 writes it for its own noise level ``s = 1 - t``:
  ``s' = shift * s / (1 + (shift - 1) s)``. In our convention this is
  ``t' = t / (1 + (shift - 1)(1 - t))``; ``shift > 1`` spends more steps near the noise.
* :func:`karras_grid` — the EDM noise levels of Karras et al. 2022 ("Elucidating the
  Design Space of Diffusion-Based Generative Models", eq. 5)
  ``sigma_i = (sigma_max^(1/rho) + i/(n-1) (sigma_min^(1/rho) - sigma_max^(1/rho)))^rho``,
  followed by ``sigma_n = 0`` as in the paper, mapped to our ``t`` by
  :func:`sigma_to_t`.

The sigma <-> t map. A variance-exploding / EDM state ``y = x1 + sigma * x0`` is the
linear (rectified-flow) path ``x_t = t x1 + (1 - t) x0`` divided by ``t``:
``x_t / t = x1 + ((1 - t) / t) x0``. Hence

    sigma(t) = (1 - t) / t,        t(sigma) = 1 / (1 + sigma),

a bijection from ``sigma in [0, inf]`` onto ``t in [0, 1]``, decreasing in sigma, so the
decreasing Karras sigmas become an increasing grid in ``t`` that ends at ``t = 1``
(``sigma = 0``, data). A model trained on the linear path can therefore be sampled on a
Karras grid directly; an EDM denoiser ``D(y, sigma)`` is reached through ``y = x_t / t``.

Note: a model trained with :class:`gencore.paths.EDMSchedule` lives in that schedule's own time, in which
``t = i / (N - 1)`` already *is* the rho ramp -- sample it on :func:`uniform_grid`, not on this grid.
"""

from __future__ import annotations

import math

import torch

from gencore.checks import check_int
from gencore.errors import ConfigError

__all__ = ["karras_grid", "shifted_grid", "sigma_to_t", "t_to_sigma", "uniform_grid"]


def _check_steps(n_steps: int) -> None:
    check_int(n_steps, "n_steps", low=1)


def uniform_grid(
    n_steps: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Uniform grid ``t_i = i / n_steps``, ``i = 0..n_steps``: ``[n_steps + 1]`` from 0 to 1."""
    _check_steps(n_steps)
    dtype = dtype or torch.get_default_dtype()
    return torch.linspace(0.0, 1.0, n_steps + 1, dtype=dtype, device=device)


def shifted_grid(
    n_steps: int,
    shift: float,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """SD3-shifted uniform grid ``t'_i = t_i / (1 + (shift - 1)(1 - t_i))``: ``[n_steps + 1]``.

    ``shift = 1`` gives :func:`uniform_grid`; endpoints 0 and 1 are fixed for every shift.
    """
    _check_steps(n_steps)
    if not 0 < shift < math.inf:  # shift = inf gave 0 everywhere and NaN at t = 1
        raise ConfigError(f"shift must be a finite number > 0, got {shift!r}.")
    t = uniform_grid(n_steps, dtype=torch.float64, device=device)
    out = t / (1.0 + (shift - 1.0) * (1.0 - t))
    return out.to(dtype or torch.get_default_dtype())


def sigma_to_t(sigma: torch.Tensor | float) -> torch.Tensor:
    """Map an EDM/VE noise level to our time: ``t = 1 / (1 + sigma)`` (``sigma = inf`` -> 0)."""
    sigma = torch.as_tensor(sigma)
    return 1.0 / (1.0 + sigma)


def t_to_sigma(t: torch.Tensor | float) -> torch.Tensor:
    """Inverse of :func:`sigma_to_t`: ``sigma = (1 - t) / t`` (``t = 0`` -> inf)."""
    t = torch.as_tensor(t)
    return (1.0 - t) / t


def karras_grid(
    n_steps: int,
    sigma_min: float = 0.002,
    sigma_max: float = 80.0,
    rho: float = 7.0,
    *,
    append_data: bool = True,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Karras/EDM grid in our time convention: ``[n_steps + 1]``, increasing.

    With ``append_data=True`` (the EDM sampler's layout) the first ``n_steps`` points are
    the rho-spaced sigmas from ``sigma_max`` down to ``sigma_min`` and the last point is
    ``sigma = 0``, i.e. ``t = 1``. With ``append_data=False`` all ``n_steps + 1`` points are
    rho-spaced and the grid ends at ``t(sigma_min)``. The first point is always
    ``t(sigma_max) = 1 / (1 + sigma_max)``. See the module docstring for the map.
    """
    _check_steps(n_steps)
    if not (0 < sigma_min < sigma_max < math.inf):  # sigma_max = inf made every noise level NaN
        raise ConfigError(f"need finite 0 < sigma_min < sigma_max, got sigma_min={sigma_min}, sigma_max={sigma_max}.")
    if not 0 < rho < math.inf:  # rho = inf collapsed every noise level to 1
        raise ConfigError(f"rho must be a finite number > 0, got {rho!r}.")
    n_ramp = n_steps if append_data else n_steps + 1
    ramp = torch.linspace(0.0, 1.0, n_ramp, dtype=torch.float64, device=device) if n_ramp > 1 else None
    lo, hi = sigma_min ** (1.0 / rho), sigma_max ** (1.0 / rho)
    if ramp is None:  # n_steps == 1 with append_data: a single noise level sigma_max
        sigmas = torch.tensor([sigma_max], dtype=torch.float64, device=device)
    else:
        sigmas = (hi + ramp * (lo - hi)) ** rho
    t = sigma_to_t(sigmas)
    if append_data:
        t = torch.cat([t, torch.ones(1, dtype=torch.float64, device=device)])
    return t.to(dtype or torch.get_default_dtype())
