"""Consistency Mid-Training (CMT): initialise a flow map from a teacher's ODE trajectories, then post-train
it as a flow map (Hu, Lai, Mitsufuji & Ermon, "CMT: Mid-Training for Efficient Learning of Consistency, Mean Flow, and
Flow Map Models", ICLR 2026, arXiv:2509.24526).

CMT inserts a cheap, stable stage between a trained flow (or diffusion) teacher and flow-map training:
solve the teacher's probability-flow ODE from noise on a fixed grid ``t_0 = 0 < t_1 < ... < t_n = 1``,
keep every state ``x_{t_i}`` of each trajectory, and regress the student on fixed targets read off that
same trajectory (no bootstrapped target, no JVP).

* Consistency-model students (the paper's CMT-CM) learn the special map ``X_{t_i, 1}``: every state is
  sent to its trajectory's endpoint, :func:`mid_training_loss`.
* Flow-map / MeanFlow students (the paper's general ``Psi_{t -> s}`` case) learn the *two-time* map: for
  a pair ``t_i < t_j`` of grid times on one trajectory, ``X_{t_i, t_j}(x_{t_i}) ~ x_{t_j}``. With
  ``X_{s,t}(x) = x + (t - s) u(x, s, t)`` this is a regression of the average velocity,

      u(x_{t_i}, t_i, t_j)  ~  (x_{t_j} - x_{t_i}) / (t_j - t_i),

  :func:`pair_mid_training_loss`. The MeanFlow loss also constrains the diagonal ``u(x, t, t) = v(x, t)``
  (the instantaneous velocity its target is built from), so pairs with ``j = i`` are regressed on the
  teacher's velocity ``v_teacher(x_{t_i}, t_i)``, the ``t_j -> t_i`` limit of the same target. Training
  only the jump to ``t = 1`` would leave every other ``(s, t)`` untrained and post-training would start
  far from its own fixed point (the first version of this module did that; MeanFlow post-training then
  undid the initialisation within a few hundred iterations).

The average-velocity form weights short and long jumps alike; the flow-map form ``||X - x_{t_j}||^2``
would equal it times ``(t_j - t_i)^2`` and leave the diagonal with zero weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError, InputError
from gencore.flowmaps.meanflow import FlowMapModel, flow_map
from gencore.solvers import FIXED_STEP_METHODS, VectorField, solve_ode


@dataclass(frozen=True)
class TrajectoryData:
    """Teacher trajectories, flattened into endpoint pairs and kept whole for pair targets.

    ``x: [n B, D]`` the states before the end, ``s: [n B]`` their times, ``target: [n B, D]`` the endpoint
    ``x_1`` of each state's trajectory. ``noise`` and ``endpoints`` keep the per-trajectory pairs
    ``(x_0, x_1)``; ``states: [n + 1, B, D]`` every state at the grid ``times: [n + 1]`` and
    ``velocities: [n, B, D]`` the teacher's velocity at the states before the end (never at ``t = 1``, where a
    teacher converted from a data prediction divides by ``1 - t``; the midpoint solver does not go there either).
    """

    x: torch.Tensor
    s: torch.Tensor
    target: torch.Tensor
    noise: torch.Tensor
    endpoints: torch.Tensor
    states: torch.Tensor
    times: torch.Tensor
    velocities: torch.Tensor

    def __len__(self) -> int:
        return self.x.shape[0]

    def batch(self, size: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """A random minibatch ``(x, s, target)`` of endpoint pairs drawn with replacement."""
        idx = torch.randint(len(self), (size,), generator=generator)
        return self.x[idx], self.s[idx], self.target[idx]

    def pair_batch(
        self, size: int, generator: torch.Generator | None = None, *, diagonal: float = 0.5
    ) -> tuple[torch.Tensor, ...]:
        """A random minibatch ``(x, s, t, u_target)`` of same-trajectory pairs ``t_i <= t_j``.

        The start index ``i`` is uniform over the states before the end; a fraction ``diagonal`` has
        ``j = i`` (target: the teacher's velocity), the rest ``j`` uniform over ``i + 1 .. n`` (target: the
        average velocity ``(x_{t_j} - x_{t_i}) / (t_j - t_i)`` of the trajectory between the two states).
        """
        if not 0.0 <= diagonal <= 1.0:
            raise ConfigError(f"diagonal must be in [0, 1], got {diagonal}.")
        n, b = self.states.shape[0] - 1, self.states.shape[1]
        traj = torch.randint(b, (size,), generator=generator)
        i = torch.randint(n, (size,), generator=generator)
        # j uniform over i + 1 .. n: i + 1 + floor(U (n - i))
        j = i + 1 + (torch.rand(size, generator=generator, dtype=torch.float64) * (n - i)).long().clamp(max=n - 1 - i)
        same = torch.rand(size, generator=generator) < diagonal
        j = torch.where(same, i, j)
        x, y = self.states[i, traj], self.states[j, traj]
        s, t = self.times[i], self.times[j]
        gap = (t - s).clamp_min(torch.finfo(s.dtype).tiny)[:, None]
        u_target = torch.where(same[:, None], self.velocities[i, traj], (y - x) / gap)
        return x, s, t, u_target


@torch.no_grad()
def teacher_trajectories(
    teacher: VectorField, noise: torch.Tensor, *, steps: int = 32, method: str = "midpoint"
) -> TrajectoryData:
    """Solve ``teacher`` from ``noise`` at 0 to 1 on a uniform grid; keep every state and the velocity before 1."""
    check_choice(method, FIXED_STEP_METHODS, "ODE method")
    steps = check_int(steps, "steps", low=1)
    if noise.dim() != 2:
        raise InputError(f"noise must have shape [B, D], got {tuple(noise.shape)}.")
    sol = solve_ode(teacher, noise, steps=steps, method=method, return_trajectory=True)
    traj = sol.trajectory  # [n + 1, B, D]
    times = sol.times.to(noise.dtype)
    n, b = traj.shape[0] - 1, traj.shape[1]
    end = traj[-1]
    velocities = torch.stack([teacher(traj[k], times[k]) for k in range(n)])
    return TrajectoryData(
        x=traj[:-1].reshape(n * b, -1),
        s=times[:-1].repeat_interleave(b),
        target=end.repeat(n, 1),
        noise=noise,
        endpoints=end,
        states=traj,
        times=times,
        velocities=velocities,
    )


def mid_training_loss(model: FlowMapModel, x: torch.Tensor, s: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """CMT for consistency models: ``mean_i ||X_{s_i, 1}(x_i) - target_i||^2`` (each state to its endpoint)."""
    pred = flow_map(model, x, s, torch.ones_like(s))
    return (pred - target).square().reshape(x.shape[0], -1).sum(dim=1).mean()


def pair_mid_training_loss(
    model: FlowMapModel, x: torch.Tensor, s: torch.Tensor, t: torch.Tensor, u_target: torch.Tensor
) -> torch.Tensor:
    """CMT for flow maps: ``mean ||u(x, s, t) - u_target||^2`` on pairs from :meth:`TrajectoryData.pair_batch`."""
    return (model(x, s, t) - u_target).square().reshape(x.shape[0], -1).sum(dim=1).mean()
