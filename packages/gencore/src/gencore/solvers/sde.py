"""Euler-Maruyama for Ito SDEs ``dx = drift(x, t) dt + diffusion(t) dW`` over an explicit grid.

Maruyama 1955; Kloeden & Platen, "Numerical Solution of Stochastic Differential
Equations" (1992), 9.1 (strong order 1/2, weak order 1). With ``h_i = t_{i+1} - t_i``:

    x_{i+1} = x_i + drift(x_i, t_i) h_i + diffusion(t_i) sqrt(|h_i|) z_i,   z_i ~ N(0, I).

The grid may decrease (``h_i < 0``): the drift step is then taken backwards in time and the
noise increment still has variance ``|h_i|`` -- this is the convention of reverse-time
diffusion samplers whose drift already contains the score correction.

Randomness comes only from ``generator`` (``None``: torch's global RNG), drawn in grid order,
one ``[B, ...]`` normal draw per noisy step on the generator's device, so a fixed seed reproduces
the path exactly (a CPU generator gives the same path for a CUDA state).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gencore.errors import ConfigError, InputError
from gencore.rng import randn_like_with
from gencore.solvers.fixed_step import VectorField, resolve_grid

__all__ = ["SDESolution", "euler_maruyama"]

Diffusion = Callable[[torch.Tensor], "torch.Tensor | float"] | float


@dataclass
class SDESolution:
    """Result of an SDE solve: final state ``x: [B, ...]``, drift evaluations ``nfe``,
    ``times: [n + 1]`` and, when asked for, ``trajectory: [n + 1, B, ...]``."""

    x: torch.Tensor
    nfe: int
    times: torch.Tensor
    trajectory: torch.Tensor | None = None


def euler_maruyama(
    drift: VectorField,
    diffusion: Diffusion,
    x0: torch.Tensor,
    grid: torch.Tensor | Sequence[float] | None = None,
    *,
    steps: int | None = None,
    generator: torch.Generator | None = None,
    noise_last_step: bool = True,
    return_trajectory: bool = False,
) -> SDESolution:
    """Simulate ``dx = drift(x, t) dt + diffusion(t) dW`` with Euler-Maruyama.

    Args:
        drift: ``drift(x, t) -> [B, ...]`` with ``t`` a 0-dim tensor.
        diffusion: a constant, or ``diffusion(t)`` returning a float, a 0-dim tensor or a tensor
            broadcastable against ``x`` (e.g. ``[D]`` per coordinate; reshape per-sample values
            with :func:`gencore.nn.expand_like`). Diagonal noise only.
        x0: initial state ``[B, ...]`` at ``grid[0]``.
        grid: times ``[n + 1]``, strictly monotone; or ``None`` with ``steps`` uniform steps on [0, 1].
        generator: source of the Brownian increments.
        noise_last_step: if ``False`` the final step is a plain drift step (the usual "denoise
            at the end" of diffusion samplers).
        return_trajectory: also return the states at every grid time.

    Returns:
        :class:`SDESolution` with ``nfe = n`` (drift evaluations).
    """
    if not torch.is_tensor(x0) or not x0.is_floating_point():
        raise InputError("x0 must be a floating-point torch.Tensor of shape [B, ...].")
    if not callable(diffusion) and not bool(torch.isfinite(torch.as_tensor(diffusion, dtype=torch.float64)).all()):
        raise ConfigError(f"diffusion must be finite, got {diffusion!r}.")  # NaN/inf would turn every path into NaN
    grid = resolve_grid(grid, steps, x0)
    n = grid.shape[0] - 1
    ts = grid.unbind(0)
    hs = (grid[1:] - grid[:-1]).unbind(0)
    sqrt_h = (grid[1:] - grid[:-1]).abs().sqrt().unbind(0)
    x = x0
    traj = [x0] if return_trajectory else None
    for i in range(n):
        t = ts[i]
        f = drift(x, t)
        if not torch.is_tensor(f) or f.shape != x.shape:  # a [B] drift on a [B, 1] state would broadcast to [B, B]
            got = tuple(f.shape) if torch.is_tensor(f) else type(f).__name__
            raise InputError(f"drift must return a tensor of the state's shape {tuple(x.shape)}, got {got}.")
        x_next = x + hs[i] * f
        if noise_last_step or i < n - 1:
            g = diffusion(t) if callable(diffusion) else diffusion
            if torch.is_tensor(g):  # a float64 or CPU tensor must not change the state's dtype or device
                g = g.to(device=x.device, dtype=x.dtype)
            z = randn_like_with(x, generator)  # on the generator's device: a CPU seed gives the same path on CUDA
            noise = (g * sqrt_h[i]) * z
            if noise.shape != x.shape:  # e.g. a per-sample [B] diffusion on a [B, 1] state
                raise InputError(
                    f"diffusion(t) must broadcast to the state's shape {tuple(x.shape)}, got shape {tuple(g.shape)}; "
                    "reshape per-sample values with gencore.nn.expand_like."
                )
            x_next = x_next + noise
        x = x_next
        if traj is not None:
            traj.append(x)
    return SDESolution(x=x, nfe=n, times=grid, trajectory=torch.stack(traj) if traj is not None else None)
