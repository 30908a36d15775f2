"""Consistency Mid-Training (CMT): initialise a flow map from a teacher's ODE trajectories, then post-train
it as a flow map (Hu, Lai, Mitsufuji & Ermon, "CMT: Mid-Training for Efficient Learning of Consistency, Mean Flow, and
Flow Map Models", ICLR 2026, arXiv:2509.24526).

CMT inserts a cheap, stable stage between a trained flow (or diffusion) teacher and flow-map training:
solve the teacher's probability-flow ODE from noise on a fixed grid, keep every state of each trajectory
and its endpoint, and regress the map onto the endpoint,

    min_theta  E_i || X^theta_{t_i, 1}(x_{t_i}) - x_1^teacher ||^2,     X_{s,t}(x) = x + (t - s) u(x, s, t),

a simple supervised loss with fixed targets (no bootstrapped target, no JVP). The result starts
post-training (here: the MeanFlow loss of :mod:`gencore.flowmaps.meanflow`) close to the teacher's
trajectory-consistent solution, which is where the paper reports its large savings in post-training
iterations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.flowmaps.meanflow import FlowMapModel, flow_map
from gencore.solvers import FIXED_STEP_METHODS, VectorField, solve_ode


@dataclass(frozen=True)
class TrajectoryData:
    """Teacher trajectory states flattened into regression pairs.

    ``x: [N, D]`` states, ``s: [N]`` their times, ``target: [N, D]`` the endpoint ``x_1`` of each
    state's trajectory. ``noise`` and ``endpoints`` keep the per-trajectory pairs ``(x_0, x_1)``.
    """

    x: torch.Tensor
    s: torch.Tensor
    target: torch.Tensor
    noise: torch.Tensor
    endpoints: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, size: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """A random minibatch ``(x, s, target)`` drawn with replacement."""
        idx = torch.randint(len(self), (size,), generator=generator)
        return self.x[idx], self.s[idx], self.target[idx]


@torch.no_grad()
def teacher_trajectories(
    teacher: VectorField, noise: torch.Tensor, *, steps: int = 32, method: str = "midpoint"
) -> TrajectoryData:
    """Solve ``teacher`` from ``noise`` at 0 to 1 on a uniform grid; pair each state (t < 1) with the endpoint."""
    check_choice(method, FIXED_STEP_METHODS, "ODE method")
    if steps < 1:
        raise ConfigError(f"steps must be a positive integer, got {steps}.")
    if noise.dim() != 2:
        raise InputError(f"noise must have shape [B, D], got {tuple(noise.shape)}.")
    sol = solve_ode(teacher, noise, steps=steps, method=method, return_trajectory=True)
    traj = sol.trajectory  # [n + 1, B, D]
    n, b = traj.shape[0] - 1, traj.shape[1]
    end = traj[-1]
    x = traj[:-1].reshape(n * b, -1)
    s = sol.times[:-1].to(noise.dtype).repeat_interleave(b)
    target = end.repeat(n, 1)
    return TrajectoryData(x=x, s=s, target=target, noise=noise, endpoints=end)


def mid_training_loss(model: FlowMapModel, x: torch.Tensor, s: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``mean_i ||X_{s_i, 1}(x_i) - target_i||^2``: send each trajectory point to its trajectory's endpoint."""
    pred = flow_map(model, x, s, torch.ones_like(s))
    return (pred - target).square().reshape(x.shape[0], -1).sum(dim=1).mean()
