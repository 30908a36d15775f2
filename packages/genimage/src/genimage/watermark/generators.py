"""Generators seen by the watermark suite: noise -> image (sampling) and image -> noise (ODE inversion).

Images are float ``[N, C, H, W]`` in ``[-1, 1]``; noise is ``[N, C, H, W]`` standard normal; time
runs from ``t = 0`` (noise) to ``t = 1`` (data) as everywhere in the suite. Inversion integrates
the same probability-flow ODE backwards with :func:`gencore.solvers.solve_ode`.

A generator is the suite's device boundary: the network runs on ``generator.device`` (a run loaded with
``device="cuda"``), ``generate``, ``invert`` and ``regenerate`` take tensors on any device and return them on
the CPU, where keys, attacks and metrics work; ``velocity``, ``to_image`` and ``to_state`` (the differentiable
pieces that guidance and MOLM use) work on ``generator.device``.

- :class:`FlowGenerator`: any velocity field ``v(x, t)`` on image space.
- :class:`RunGenerator`: a trained ``genimage train`` run through :func:`genimage.sampling.generate`
  and :func:`genimage.sampling.invert` (unconditional, as a detector does not know the class;
  latent runs carry the mark in the latent noise, ``noise_shape = run.sample_shape``).
- :class:`GaussianFlowGenerator`: the exact flow for data ``N(mu, diag(s^2))`` under the linear
  path, ``x_t = t mu + sqrt((1-t)^2 + t^2 s^2) z``; generation and inversion are closed-form
  (exact), so watermark round trips can be tested without a trained model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError
from gencore.rng import randn_like_with
from gencore.solvers import FIXED_STEP_METHODS, solve_ode, uniform_grid

if TYPE_CHECKING:
    from genimage.runs import LoadedRun

__all__ = ["FlowGenerator", "GaussianFlowGenerator", "RunGenerator"]

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FlowGenerator:
    """Sampling and inversion of the ODE ``dx/dt = v(x, t)`` with a fixed-step solver.

    Attributes:
        image_shape: ``(C, H, W)``.
        nfe: network evaluations per generation (and per inversion).
        device: where ``velocity`` runs (the CPU unless given).
        t_end: the time of the clean state (1; a VP run stops just short of it).
    """

    def __init__(
        self,
        velocity: Velocity,
        image_shape: tuple[int, int, int],
        *,
        steps: int = 50,
        solver: str = "euler",
        device: str | torch.device = "cpu",
    ) -> None:
        # checked here, as an exact generator never solves in generate/invert and its bad --steps or --solver
        # surfaced (or not) only in a regeneration attack or a trained marker, after the rest of the work
        steps = check_int(steps, "the number of ODE steps (--steps)", low=1)
        check_choice(solver, FIXED_STEP_METHODS, "solver")
        self.velocity, self.image_shape, self.steps, self.solver = velocity, tuple(image_shape), steps, solver
        self.noise_shape = self.image_shape
        self.device = torch.device(device)
        self.t_end = 1.0
        self.nfe = 0
        self.run = None

    def to_image(self, x: torch.Tensor) -> torch.Tensor:
        """ODE state at ``t = 1`` -> image, differentiable and unclipped (the identity in pixel space)."""
        return x

    def to_state(self, images: torch.Tensor) -> torch.Tensor:
        """Images -> float32 ODE states at ``t = 1`` on :attr:`device` (the identity in pixel space)."""
        return images.to(device=self.device, dtype=torch.float32)

    def _solve(self, x: torch.Tensor, start: float, end: float, steps: int | None = None) -> torch.Tensor:
        grid = uniform_grid(steps or self.steps, dtype=torch.float64)
        grid = start + (end - start) * grid
        sol = solve_ode(self.velocity, x.to(self.device), grid, method=self.solver)
        self.nfe = sol.nfe
        return sol.x

    @torch.no_grad()
    def generate(self, noise: torch.Tensor) -> torch.Tensor:
        """Images ``[N, C, H, W]`` from noise, clipped to ``[-1, 1]``, on the CPU."""
        return self.to_image(self._solve(noise, 0.0, 1.0)).clamp(-1, 1).cpu()

    @torch.no_grad()
    def invert(self, images: torch.Tensor) -> torch.Tensor:
        """Noise recovered by integrating the ODE from ``t = 1`` back to ``t = 0``, on the CPU."""
        return self._solve(self.to_state(images), 1.0, 0.0).cpu()

    def generate_with_grad(self, noise: torch.Tensor, last_steps: int = 1) -> torch.Tensor:
        """The images :meth:`generate` draws from ``noise`` (same grid and solver), unclipped and on
        :attr:`device`, with autograd through the last ``last_steps`` solver steps and the decoder only: the
        earlier steps run without it (truncated back-propagation through the sampler)."""
        if not 1 <= last_steps <= self.steps:
            raise ConfigError(f"last_steps must be in [1, {self.steps}] (the sampler's steps), got {last_steps}.")
        grid = self.sampling_grid()
        k = self.steps - last_steps
        x = noise.to(device=self.device, dtype=torch.float32)
        if k:
            with torch.no_grad():
                x = solve_ode(self.velocity, x, grid[: k + 1], method=self.solver).x
        x = solve_ode(self.velocity, x, grid[k:], method=self.solver).x
        return self.to_image(self.clean_state(x))

    def sampling_grid(self) -> torch.Tensor:
        """The sampler's times ``[steps + 1]`` (float64), uniform from 0 to :attr:`t_end`."""
        return self.t_end * uniform_grid(self.steps, dtype=torch.float64)

    def clean_state(self, x: torch.Tensor) -> torch.Tensor:
        """The clean state from the ODE's last state (itself, unless the path stops short of ``t = 1``)."""
        return x

    def predict_clean(self, x: torch.Tensor, t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The clean state that the velocity ``v`` at ``(x, t)`` points to, differentiably: ``x + (1 - t) v`` on
        the linear path."""
        return x + (1 - t) * v

    def noised(self, z: torch.Tensor, eps: torch.Tensor, s: float) -> torch.Tensor:
        """The state at time ``s`` of the path from noise ``eps`` to the clean state ``z``: ``s z + (1 - s) eps``
        on the linear path."""
        return s * z + (1 - s) * eps

    @torch.no_grad()
    def regenerate(self, images: torch.Tensor, strength: float, generator: torch.Generator | None = None):
        """Regeneration attack: the clean state ``z`` of ``images`` noised to time ``s = 1 - strength`` of the
        path (:meth:`noised`), then solved to the clean time and read as the clean state (:meth:`clean_state`);
        images on the CPU in ``images``' dtype. ``strength`` lies in ``(0, 1]``."""
        if not 0.0 < float(strength) <= 1.0:
            raise ConfigError(f"the regeneration strength must lie in (0, 1], got {strength}.")
        z = self.to_state(images)
        s = 1.0 - float(strength)
        eps = randn_like_with(z, generator)
        x = self._solve(self.noised(z, eps, s), s, self.t_end, max(1, round(self.steps * strength)))
        return self.to_image(self.clean_state(x)).clamp(-1, 1).to(device="cpu", dtype=images.dtype)


class GaussianFlowGenerator(FlowGenerator):
    """Exact flow for Gaussian data ``N(mean, diag(std^2))`` (closed-form sampling and inversion)."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, *, steps: int = 50, solver: str = "euler"):
        self.mean, self.std = mean.to(torch.float64), std.to(torch.float64)
        super().__init__(self._velocity, tuple(mean.shape), steps=steps, solver=solver)

    def _velocity(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        t = t.to(torch.float64)
        var = (1 - t) ** 2 + t**2 * self.std**2
        dsig = (-(1 - t) + t * self.std**2) / var.sqrt()
        return (self.mean + dsig / var.sqrt() * (x.to(torch.float64) - t * self.mean)).to(x.dtype)

    @torch.no_grad()
    def generate(self, noise: torch.Tensor) -> torch.Tensor:
        self.nfe = 0
        return (self.mean + self.std * noise.to(torch.float64)).to(noise.dtype)

    @torch.no_grad()
    def invert(self, images: torch.Tensor) -> torch.Tensor:
        self.nfe = 0
        return ((images.to(torch.float64) - self.mean) / self.std).to(torch.float32)


class RunGenerator(FlowGenerator):
    """A ``genimage train`` run (its folder, or a :class:`~genimage.runs.LoadedRun`): generation and inversion
    with ``steps`` solver steps on ``device`` (default: where a given ``LoadedRun`` is, else the CPU)."""

    def __init__(
        self,
        run: str | os.PathLike | LoadedRun,
        *,
        steps: int = 50,
        solver: str = "euler",
        device: str | torch.device | None = None,
    ) -> None:
        from genimage.runs import LoadedRun, load_run
        from genimage.sampling import EVALS_PER_STEP

        if isinstance(run, LoadedRun):
            where, on = "the given run", next(run.model.parameters()).device
            if device is not None and torch.device(device).type != on.type:
                raise ConfigError(f"the given run is on {on.type} but device={str(device)!r} was asked for; move it.")
            device = on
        else:
            where, device = f"the run in {str(run)!r}", device or "cpu"
            run = load_run(run, device=device)
        if len(run.image_shape) != 3:
            raise ConfigError(
                f"{where} generates videos {list(run.image_shape)}; the watermark schemes mark "
                "images [C, H, W]: give an image run."
            )
        super().__init__(run.velocity, tuple(run.image_shape), steps=steps, solver=solver, device=device)
        self.run, self.noise_shape, self.t_end = run, tuple(run.sample_shape), run.t_end
        self._nfe = int(steps) * EVALS_PER_STEP.get(solver, 1)

    @property
    def pixel_space(self) -> bool:
        return self.run.vae is None

    def to_image(self, x: torch.Tensor) -> torch.Tensor:
        """ODE state -> image through the run's VAE decoder (differentiable, unclipped) for latent runs."""
        return x if self.run.vae is None else self.run.vae.from_latent(x)

    def to_state(self, images: torch.Tensor) -> torch.Tensor:
        """Images -> ODE states at ``t = 1`` on :attr:`device` (the VAE encoder's mean for latent runs)."""
        return self.run.encode(images.to(device=self.device, dtype=torch.float32))

    def clean_state(self, x: torch.Tensor) -> torch.Tensor:
        """A VP run's last state is still slightly noisy: its clean estimate, as :func:`genimage.sampling.generate`."""
        if self.t_end >= 1.0:
            return x
        return self.predict_clean(x, self.t_end, self.run.velocity(x, self.t_end))

    def predict_clean(self, x: torch.Tensor, t: torch.Tensor | float, v: torch.Tensor) -> torch.Tensor:
        """The clean state that ``v`` at ``(x, t)`` points to on the run's path (linear or VP)."""
        return self.run.path.convert(v, x, t, "velocity", "data")

    def noised(self, z: torch.Tensor, eps: torch.Tensor, s: float) -> torch.Tensor:
        """The state at time ``s`` on the run's path, ``alpha_s z + sigma_s eps`` (a VP run's is not the linear
        ``s z + (1 - s) eps``: at ``s = 0.8`` it has ``sigma = 0.58``, not ``0.2``)."""
        return self.run.path.sample(eps, z, s).x_t

    @torch.no_grad()
    def generate(self, noise: torch.Tensor) -> torch.Tensor:
        from genimage.sampling import generate

        self.nfe = self._nfe
        return generate(self.run, noise, nfe=self._nfe, solver=self.solver)

    @torch.no_grad()
    def invert(self, images: torch.Tensor) -> torch.Tensor:
        from genimage.sampling import invert

        self.nfe = self._nfe
        return invert(self.run, images.to(torch.float32), nfe=self._nfe, solver=self.solver)
