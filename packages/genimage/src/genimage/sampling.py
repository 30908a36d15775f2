"""Generation and inversion by integrating a run's probability-flow ODE with gencore's solvers.

``generate`` integrates ``dx/dt = v(x, t)`` from noise at ``t = 0`` to ``t_end`` (data side) and
decodes; ``invert`` integrates the same ODE backwards, from the (encoded) images at ``t_end`` to
``t = 0``, giving the noise that generates them (exactly so in the limit of small steps; with a
fixed-step solver the round trip error is the solver's). Both use a uniform grid of ``nfe``
evaluations' worth of steps: ``steps = nfe // evals_per_step`` (Euler 1, midpoint/Heun 2, RK4 4).
"""

from __future__ import annotations

import math

import torch
from tqdm.auto import tqdm

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from gencore.solvers import FIXED_STEP_METHODS, solve_ode
from genimage.runs import LoadedRun

__all__ = ["EVALS_PER_STEP", "generate", "invert", "sample_images", "sample_noise", "time_grid"]

EVALS_PER_STEP = {"euler": 1, "midpoint": 2, "heun": 2, "rk4": 4}


def time_grid(run: LoadedRun, nfe: int, solver: str) -> torch.Tensor:
    """Uniform grid ``[steps + 1]`` on ``[0, t_end]`` with ``steps = nfe / evals_per_step(solver)``.

    ``nfe`` must be a multiple of the solver's evaluations per step, so that it is the number of network calls
    (one more on a VP run, for the final clean estimate; a guided call evaluates one doubled batch).
    """
    if solver not in FIXED_STEP_METHODS:
        raise ConfigError(f"unknown solver {solver!r}; expected one of: {', '.join(FIXED_STEP_METHODS)}.")
    nfe = check_int(nfe, "nfe", low=1)
    per = EVALS_PER_STEP[solver]
    if nfe % per:
        lower = f"{nfe - nfe % per} or " if nfe > per else ""
        raise ConfigError(
            f"nfe {nfe} is not a multiple of the {solver} solver's {per} evaluations per step; use "
            f"{lower}{nfe - nfe % per + per}."
        )
    return torch.linspace(0.0, run.t_end, nfe // per + 1, dtype=torch.float64)


def sample_noise(run: LoadedRun, n: int, seed: int = 0) -> torch.Tensor:
    """Standard normal noise ``[n, *run.sample_shape]`` from ``seed``."""
    n = check_int(n, "n (the number of noise samples)", low=0)
    return torch.randn((n, *run.sample_shape), generator=torch.Generator().manual_seed(seed))


def _labels(run: LoadedRun, labels: torch.Tensor | None, n: int, cfg_scale: float) -> torch.Tensor | None:
    """The class labels ``[n]`` (int64) of a conditional run, checked; guidance needs a conditional run."""
    if isinstance(cfg_scale, bool) or not isinstance(cfg_scale, (int, float)) or not math.isfinite(cfg_scale):
        raise ConfigError(f"cfg_scale must be a finite number, got {cfg_scale!r}.")
    if cfg_scale != 1.0 and not run.num_classes:
        raise ConfigError(f"cfg_scale {cfg_scale} needs a class-conditional run; this run is unconditional (use 1).")
    if cfg_scale != 1.0 and run.config.get("label_dropout") == 0 and not run.config.get("init_from"):
        # the null class guidance subtracts was never a training label, so its "unconditional" velocity is arbitrary
        raise ConfigError(
            f"cfg_scale {cfg_scale} needs a run trained with label dropout; this run has label_dropout 0, so its "
            "null class was never trained (use 1)."
        )
    if labels is None:
        return None
    if not run.num_classes:
        raise InputError("labels were given, but the run is unconditional; pass labels=None.")
    y = torch.as_tensor(labels)
    if y.dtype == torch.bool:  # a mask passed by mistake would silently sample classes 0 and 1
        raise InputError("labels must be integer class indices, got a bool tensor.")
    if y.is_floating_point() and not bool((y == y.round()).all()):
        raise InputError(f"labels must be integer class indices, got non-integer values of dtype {y.dtype}.")
    y = y.long()
    if y.shape != (n,) or bool(((y < 0) | (y >= run.num_classes)).any()):
        raise InputError(f"labels must be [{n}] integers in 0..{run.num_classes - 1}, got shape {tuple(y.shape)}.")
    return y


def _check_state(run: LoadedRun, x: torch.Tensor, name: str, shape: tuple[int, ...]) -> None:
    if not torch.is_tensor(x) or x.dim() != len(shape) + 1 or tuple(x.shape[1:]) != tuple(shape):
        got = tuple(x.shape) if torch.is_tensor(x) else type(x).__name__
        raise InputError(f"{name} must have shape [N, {', '.join(map(str, shape))}], got {got}.")
    if not bool(torch.isfinite(x).all()):
        raise InputError(f"{name} contains NaN or infinite values.")


@torch.no_grad()
def generate(
    run: LoadedRun,
    noise: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    nfe: int = 32,
    cfg_scale: float = 1.0,
    solver: str = "euler",
) -> torch.Tensor:
    """Images (or videos) ``[N, *run.image_shape]`` in ``[-1, 1]`` from ``noise: [N, *run.sample_shape]``.

    ``labels: [N]`` class indices of a conditional run (None: unconditional); ``cfg_scale`` the
    classifier-free guidance weight (1: none; other values need a conditional run trained with label dropout);
    ``solver`` one of euler, midpoint, heun, rk4. Labels given to an unconditional run are an :class:`InputError`.
    """
    _check_state(run, noise, "noise", run.sample_shape)
    device = next(run.model.parameters()).device
    y = _labels(run, labels, noise.shape[0], cfg_scale)
    y = None if y is None else y.to(device)
    grid = time_grid(run, nfe, solver)
    x = solve_ode(lambda z, t: run.velocity(z, t, y, cfg_scale), noise.float().to(device), grid, method=solver).x
    if run.t_end < 1.0:  # VP: the last state is still slightly noisy; take the model's clean estimate
        x = run.path.convert(run.velocity(x, run.t_end, y, cfg_scale), x, run.t_end, "velocity", "data")
    return run.decode(x).cpu()


@torch.no_grad()
def invert(
    run: LoadedRun,
    images: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    nfe: int = 32,
    cfg_scale: float = 1.0,
    solver: str = "euler",
) -> torch.Tensor:
    """Noise ``[N, *run.sample_shape]`` whose ODE solution is ``images: [N, *run.image_shape]``.

    The ODE of :func:`generate` run backwards, ``t`` from ``t_end`` (about 1) to 0, with the same
    labels, guidance and solver settings as the generation to be inverted.
    """
    _check_state(run, images, "images", run.image_shape)
    device = next(run.model.parameters()).device
    y = _labels(run, labels, images.shape[0], cfg_scale)
    y = None if y is None else y.to(device)
    grid = time_grid(run, nfe, solver).flip(0)
    z = run.encode(images.float().to(device))
    return solve_ode(lambda x, t: run.velocity(x, t, y, cfg_scale), z, grid, method=solver).x.cpu()


@torch.no_grad()
def sample_images(
    run: LoadedRun,
    n: int,
    labels: torch.Tensor | None,
    *,
    nfe: int,
    cfg_scale: float,
    solver: str,
    seed: int,
    batch_size: int = 256,
    progress: bool = True,
) -> torch.Tensor:
    """``n`` images (or videos) in ``[-1, 1]`` from :func:`sample_noise` ``(run, n, seed)``, generated
    ``batch_size`` at a time (so the model's memory does not grow with ``n``), with a progress bar on request;
    ``labels: [n]`` class indices, or None."""
    batch_size = check_int(batch_size, "batch_size", low=1)
    noise = sample_noise(run, n, seed)
    if labels is not None and torch.as_tensor(labels).shape != (n,):  # else a batch would meet a slice of them
        raise InputError(
            f"labels must be [{n}] class indices, one per image, got shape {tuple(torch.as_tensor(labels).shape)}."
        )
    starts = range(0, n, batch_size) if n else [0]  # n = 0: one empty batch, [0, *image_shape]
    out = []
    for start in tqdm(starts, desc="sample", disable=None if progress else True, leave=False):
        y = None if labels is None else labels[start : start + batch_size]
        out.append(generate(run, noise[start : start + batch_size], y, nfe=nfe, cfg_scale=cfg_scale, solver=solver))
    return torch.cat(out)
