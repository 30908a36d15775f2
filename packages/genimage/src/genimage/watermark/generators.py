"""Generators seen by the watermark suite: noise -> image (sampling) and image -> noise (ODE inversion).

Images are float ``[N, C, H, W]`` in ``[-1, 1]``; noise is ``[N, C, H, W]`` standard normal; time
runs from ``t = 0`` (noise) to ``t = 1`` (data) as everywhere in the suite. Inversion integrates
the same probability-flow ODE backwards with :func:`gencore.solvers.solve_ode`.

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

import torch

from gencore.errors import ConfigError
from gencore.solvers import solve_ode, uniform_grid

__all__ = ["FlowGenerator", "GaussianFlowGenerator", "RunGenerator"]

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class FlowGenerator:
    """Sampling and inversion of the ODE ``dx/dt = v(x, t)`` with a fixed-step solver.

    Attributes:
        image_shape: ``(C, H, W)``.
        nfe: network evaluations per generation (and per inversion).
    """

    def __init__(
        self, velocity: Velocity, image_shape: tuple[int, int, int], *, steps: int = 50, solver: str = "euler"
    ) -> None:
        self.velocity, self.image_shape, self.steps, self.solver = velocity, tuple(image_shape), int(steps), solver
        self.noise_shape = self.image_shape
        self.nfe = 0
        self.run = None

    def to_image(self, x: torch.Tensor) -> torch.Tensor:
        """ODE state at ``t = 1`` -> image, differentiable and unclipped (the identity in pixel space)."""
        return x

    def to_state(self, images: torch.Tensor) -> torch.Tensor:
        """Images -> ODE states at ``t = 1`` (the identity in pixel space)."""
        return images.to(torch.float32)

    def _solve(self, x: torch.Tensor, start: float, end: float, steps: int | None = None) -> torch.Tensor:
        grid = uniform_grid(steps or self.steps, dtype=torch.float64)
        grid = start + (end - start) * grid
        sol = solve_ode(self.velocity, x, grid, method=self.solver)
        self.nfe = sol.nfe
        return sol.x

    @torch.no_grad()
    def generate(self, noise: torch.Tensor) -> torch.Tensor:
        """Images ``[N, C, H, W]`` from noise, clipped to ``[-1, 1]``."""
        return self._solve(noise, 0.0, 1.0).clamp(-1, 1)

    @torch.no_grad()
    def invert(self, images: torch.Tensor) -> torch.Tensor:
        """Noise recovered by integrating the ODE from ``t = 1`` back to ``t = 0``."""
        return self._solve(images.to(torch.float32), 1.0, 0.0)

    @torch.no_grad()
    def regenerate(self, images: torch.Tensor, strength: float, generator: torch.Generator | None = None):
        """Regeneration attack: ``x_s = s x + (1 - s) eps`` with ``s = 1 - strength``, then solve to ``t = 1``."""
        s = 1.0 - float(strength)
        eps = torch.randn(images.shape, generator=generator, dtype=images.dtype)
        steps = max(1, round(self.steps * strength))
        return self._solve(s * images + (1 - s) * eps, s, 1.0, steps).clamp(-1, 1)


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
    """A ``genimage train`` run folder: generation and inversion with ``steps`` solver steps."""

    def __init__(self, run_dir: str | os.PathLike, *, steps: int = 50, solver: str = "euler") -> None:
        from genimage.runs import load_run
        from genimage.sampling import EVALS_PER_STEP

        run = load_run(run_dir)
        if len(run.image_shape) != 3:
            raise ConfigError(
                f"the run in {str(run_dir)!r} generates videos {list(run.image_shape)}; the watermark schemes mark "
                "images [C, H, W]: give an image run."
            )
        super().__init__(run.velocity, tuple(run.image_shape), steps=steps, solver=solver)
        self.run, self.noise_shape = run, tuple(run.sample_shape)
        self._nfe = int(steps) * EVALS_PER_STEP.get(solver, 1)

    @property
    def pixel_space(self) -> bool:
        return self.run.vae is None

    def to_image(self, x: torch.Tensor) -> torch.Tensor:
        """ODE state -> image through the run's VAE decoder (differentiable, unclipped) for latent runs."""
        return x if self.run.vae is None else self.run.vae.from_latent(x)

    def to_state(self, images: torch.Tensor) -> torch.Tensor:
        """Images -> ODE states at ``t = 1`` (the VAE encoder's mean for latent runs)."""
        return self.run.encode(images.to(torch.float32))

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

    @torch.no_grad()
    def regenerate(self, images: torch.Tensor, strength: float, generator: torch.Generator | None = None):
        z = self.run.encode(images.to(torch.float32))
        s = 1.0 - float(strength)
        eps = torch.randn(z.shape, generator=generator, dtype=z.dtype)
        x = self._solve(s * z + (1 - s) * eps, s, self.run.t_end, max(1, round(self.steps * strength)))
        return self.run.decode(x).to(images.dtype)
