"""pi-Flow: policy-based few-step generation by imitation distillation (Chen, Zhang, Tan, Guibas, Wetzstein &
Bi, "pi-Flow: Policy-Based Few-Step Generation via Imitation Distillation", ICLR 2026, arXiv:2510.14974),
with the Gaussian-mixture (GMFlow) policy of Chen et al., "Gaussian Mixture Flow Matching Models" (2025).

The student network is called once per segment, at its start time ``t_s``, on ``x_{t_s}``; it outputs a
*network-free policy*: a Gaussian mixture over the clean sample,
``q(x1 | x_{t_s}) = sum_k pi_k N(x1; mu_k, sigma_k^2 I)``. The policy's velocity at any later ``(x_t, t)``
is closed form. Under the linear path ``x_t = (1 - t) x0 + t x1`` (``x0 ~ N(0, I)``, suite time: 0 noise,
1 data), ``p(x_t | x1) = N(x_t; t x1, (1 - t)^2 I)`` and Bayes' rule on the same data law gives

    q(x1 | x_t) ∝ [p(x_t | x1) / p(x_{t_s} | x1)] q(x1 | x_{t_s}).

As a function of ``x1`` the bracket is the Gaussian factor ``exp(-a/2 |x1|^2 + b . x1)`` with

    a = t^2 / (1 - t)^2 - t_s^2 / (1 - t_s)^2  (>= 0 for t >= t_s),
    b = t x_t / (1 - t)^2 - t_s x_{t_s} / (1 - t_s)^2,

so the posterior is again a mixture: component ``k`` has precision ``P_k = a + 1/sigma_k^2``, mean
``m_k = h_k / P_k`` with ``h_k = b + mu_k / sigma_k^2``, and log-weight
``log pi_k - D/2 log(sigma_k^2 P_k) + |h_k|^2 / (2 P_k) - |mu_k|^2 / (2 sigma_k^2)``, computed as
``m_k = (sigma_k^2 b + mu_k) / (sigma_k^2 P_k)`` and the last two terms as
``(sigma_k^2 |b|^2 + 2 b . mu_k - a |mu_k|^2) / (2 sigma_k^2 P_k)`` (the written form subtracts two terms of
size ``|mu_k|^2 / sigma_k^2``, which float32 cannot do for narrow components). The velocity is

    v(x_t, t) = (E[x1 | x_t] - x_t) / (1 - t),     E[x1 | x_t] = sum_k w_k m_k.

At ``t_s = 0`` the ratio's denominator does not depend on ``x1`` and this is the exact velocity field of
the flow from ``N(0, I)`` to the mixture itself. If the mixture is the true posterior ``p(x1 | x_{t_s})``
of a mixture data law, the policy's velocity equals the true velocity at every later ``(x_t, t)``
(tested in ``tests/test_flowmaps_piflow.py``).

The policy is rolled out from ``t_s`` to the segment's end with many cheap Euler substeps (no network
calls), so the NFE of a sample is the number of policy generations. Training (imitation distillation):
roll the current policy out with detached parameters, take states ``x_t`` along its *own* trajectory,
and regress the policy's velocity at those (detached) states on the teacher's velocity there with a
plain L2 flow-matching loss, ``|| v_policy(x_t, t) - v_teacher(x_t, t) ||^2``. Multi-segment training is
on-policy too: the next segment starts from the detached end of the previous policy's rollout.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError
from gencore.flowmaps.network import mlp, smooth_time_embedding
from gencore.io import Pretrained
from gencore.nn import broadcast_time, expand_like
from gencore.solvers import VectorField

LOG_VAR_RANGE = (-12.0, 4.0)  # clamp of the network's log-variances (std from 2.5e-3 to 7.4)


@dataclass(frozen=True)
class GaussianMixture:
    """Per-sample isotropic Gaussian mixtures over ``x1``.

    ``logits [B, K]`` (unnormalised log-weights), ``means [B, K, D]``, ``log_var [B, K]`` (log sigma_k^2).
    """

    logits: torch.Tensor
    means: torch.Tensor
    log_var: torch.Tensor

    def __post_init__(self) -> None:
        b, k = self.logits.shape[:2] if self.logits.dim() == 2 else (-1, -1)
        if self.means.dim() != 3 or self.means.shape[:2] != (b, k) or self.log_var.shape != (b, k):
            raise InputError(
                "a GaussianMixture needs logits [B, K], means [B, K, D] and log_var [B, K], got "
                f"{tuple(self.logits.shape)}, {tuple(self.means.shape)}, {tuple(self.log_var.shape)}."
            )

    def detach(self) -> GaussianMixture:
        return GaussianMixture(self.logits.detach(), self.means.detach(), self.log_var.detach())

    @classmethod
    def shared(cls, weights: torch.Tensor, means: torch.Tensor, std: torch.Tensor | float, batch: int):
        """The same mixture (``weights [K]``, ``means [K, D]``, ``std`` scalar or ``[K]``) for ``batch`` samples."""
        k = weights.shape[0]
        log_var = torch.log(torch.as_tensor(std, dtype=means.dtype).square().expand(k))
        return cls(
            torch.log(weights)[None].expand(batch, k),
            means[None].expand(batch, *means.shape),
            log_var[None].expand(batch, k),
        )


def policy_velocity(
    mix: GaussianMixture,
    x: torch.Tensor,
    t: torch.Tensor | float,
    x_src: torch.Tensor,
    t_src: torch.Tensor | float,
) -> torch.Tensor:
    """Velocity ``(E[x1 | x_t, policy] - x_t) / (1 - t)`` of the mixture policy issued at ``(x_src, t_src)``.

    ``x, x_src: [B, D]``; ``t, t_src``: scalars or ``[B]``, ``t_src <= t < 1``.
    """
    if x.dim() != 2 or x_src.shape != x.shape or mix.means.shape[0] != x.shape[0] or mix.means.shape[2] != x.shape[1]:
        raise InputError(
            f"x and x_src must be [B, D] matching the mixture's means {tuple(mix.means.shape)}, "
            f"got {tuple(x.shape)} and {tuple(x_src.shape)}."
        )
    t = expand_like(broadcast_time(t, x), x)  # [B, 1]
    t_src = expand_like(broadcast_time(t_src, x), x)
    if not bool(((t_src <= t) & (t < 1.0) & (t_src >= 0.0)).all()):  # also refuses NaN
        raise InputError("policy_velocity needs 0 <= t_src <= t < 1 for every sample.")
    return _policy_velocity(mix, x, t, x_src, t_src)


def _policy_velocity(
    mix: GaussianMixture, x: torch.Tensor, t: torch.Tensor, x_src: torch.Tensor, t_src: torch.Tensor
) -> torch.Tensor:
    """:func:`policy_velocity` for times ``[B, 1]`` already known valid (the rollout's and the loss's own grids):
    no host sync on the time check in the training loop."""
    dim = x.shape[1]
    a = (t / (1.0 - t)) ** 2 - (t_src / (1.0 - t_src)) ** 2  # [B, 1]
    b = t * x / (1.0 - t) ** 2 - t_src * x_src / (1.0 - t_src) ** 2  # [B, D]
    var = torch.exp(mix.log_var)  # [B, K]
    scale = 1.0 + a * var  # sigma_k^2 P_k, [B, K]
    # |h|^2 / P - |mu|^2 / sigma^2 without its two O(1 / sigma^4) terms, which cancel in float32 for narrow
    # components (std 2.5e-3, the clamp of PolicyNet: velocity errors of the order of the velocity itself)
    quad = (var * b.square().sum(-1, keepdim=True) + 2.0 * (mix.means @ b[:, :, None])[..., 0]) / scale
    quad = quad - a * mix.means.square().sum(-1) / scale
    log_w = torch.log_softmax(mix.logits, dim=1) - 0.5 * dim * torch.log1p(a * var) + 0.5 * quad
    w = torch.softmax(log_w, dim=1)
    posterior_means = (var[..., None] * b[:, None, :] + mix.means) / scale[..., None]  # h_k / P_k
    x1_mean = (w[..., None] * posterior_means).sum(dim=1)
    return (x1_mean - x) / (1.0 - t)


def policy_rollout(
    mix: GaussianMixture,
    x_src: torch.Tensor,
    t_src: float,
    t_end: float,
    substeps: int,
    *,
    return_trajectory: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """Euler with ``substeps`` uniform steps of the policy's velocity from ``t_src`` to ``t_end``.

    Returns ``(x_end, trajectory [substeps, B, D] or None, times [substeps])``: the trajectory holds the
    state at the start of each substep (where the velocity was evaluated), ``times`` those times.
    """
    substeps = check_int(substeps, "substeps", low=1)
    if not 0.0 <= t_src < t_end <= 1.0:
        raise ConfigError(f"need 0 <= t_src < t_end <= 1, got t_src={t_src} and t_end={t_end}.")
    grid = torch.linspace(t_src, t_end, substeps + 1, dtype=torch.float64)
    x = x_src
    src = expand_like(broadcast_time(t_src, x_src), x_src)
    states = []
    for i in range(substeps):
        if return_trajectory:
            states.append(x)
        t, h = float(grid[i]), float(grid[i + 1] - grid[i])
        x = x + h * _policy_velocity(mix, x, expand_like(broadcast_time(t, x), x), x_src, src)
    traj = torch.stack(states) if return_trajectory else None
    return x, traj, grid[:-1].to(x_src.dtype)


class PolicyNet(Pretrained, nn.Module):
    """Student ``net(x_{t_s}, t_s) -> GaussianMixture`` with ``components`` isotropic components per sample.

    Means are parameterised as ``x_{t_s} + offsets`` so that the initial policy stays near the input scale.
    Saved and loaded like every suite model: ``save_pretrained(dir)`` / ``PolicyNet.from_pretrained(dir)``.
    """

    def __init__(
        self,
        dim: int,
        components: int = 8,
        hidden: int = 128,
        depth: int = 3,
        time_dim: int = 16,
        time_scale: float = 30.0,
    ) -> None:
        super().__init__()
        if components < 1:
            raise ConfigError(f"components must be >= 1, got {components}.")
        self.config = {
            "dim": dim,
            "components": components,
            "hidden": hidden,
            "depth": depth,
            "time_dim": time_dim,
            "time_scale": time_scale,
        }
        self.dim, self.components = dim, components
        self.time_embed = smooth_time_embedding(time_dim, time_scale)
        self.net = mlp(dim + time_dim, components * (dim + 2), hidden, depth)

    def forward(self, x: torch.Tensor, t: torch.Tensor | float) -> GaussianMixture:
        t = broadcast_time(t, x)
        out = self.net(torch.cat([x, self.time_embed(t).to(x.dtype)], dim=-1))
        k, d = self.components, self.dim
        logits, log_var, offsets = out[:, :k], out[:, k : 2 * k], out[:, 2 * k :].reshape(-1, k, d)
        return GaussianMixture(logits, x[:, None, :] + offsets, log_var.clamp(*LOG_VAR_RANGE))


def _segments(nfe: int) -> list[tuple[float, float]]:
    grid = torch.linspace(0.0, 1.0, nfe + 1, dtype=torch.float64).tolist()
    return list(itertools.pairwise(grid))


@torch.no_grad()
def sample_policy(student: Callable[..., GaussianMixture], noise: torch.Tensor, nfe: int, substeps: int = 128):
    """``nfe`` policy generations on a uniform grid, each rolled out with ``substeps // nfe`` substeps (>= 1)."""
    nfe = check_int(nfe, "nfe", low=1)
    substeps = check_int(substeps, "substeps", low=1)
    x = noise
    per = max(1, substeps // nfe)
    for a, b in _segments(nfe):
        x, _, _ = policy_rollout(student(x, a), x, a, b, per)
    return x


class PiFlow:
    """Imitation distillation of a velocity teacher ``teacher(x, t)`` into a :class:`PolicyNet`.

    Args:
        teacher: the flow to imitate (frozen; called without gradients).
        substeps: Euler substeps of a full ``[0, 1]`` rollout (split evenly among segments).
        points: states per sample, drawn uniformly from the substeps of the policy's own rollout,
            at which the policy's and the teacher's velocities are compared.
    """

    def __init__(self, teacher: VectorField, *, substeps: int = 32, points: int = 4) -> None:
        self.teacher = teacher
        self.substeps = check_int(substeps, "substeps", low=1)  # a float was truncated silently
        self.points = check_int(points, "points", low=1)

    def loss(
        self, student: Callable[..., GaussianMixture], x0: torch.Tensor, *, nfe: int = 1, generator=None
    ) -> torch.Tensor:
        """Imitation loss of one ``nfe``-segment on-policy rollout from the noise ``x0: [B, D]``."""
        nfe = check_int(nfe, "nfe", low=1)
        total = x0.new_zeros(())
        x = x0
        per = max(1, self.substeps // nfe)
        for a, b in _segments(nfe):
            mix = student(x, a)
            with torch.no_grad():
                x_end, traj, times = policy_rollout(mix.detach(), x, a, b, per, return_trajectory=True)
            bsz = x.shape[0]
            idx = torch.randint(per, (self.points, bsz), generator=generator).to(x.device)
            states = traj[idx, torch.arange(bsz, device=x.device)[None]].reshape(-1, x.shape[1])  # [P*B, D]
            t = times.to(x.device)[idx].reshape(-1)
            with torch.no_grad():
                v_teacher = self.teacher(states, t)
            rep = GaussianMixture(
                mix.logits.repeat(self.points, 1),
                mix.means.repeat(self.points, 1, 1),
                mix.log_var.repeat(self.points, 1),
            )
            at = expand_like(broadcast_time(t, states), states)  # the rollout's grid: valid by construction
            v_policy = _policy_velocity(
                rep, states, at, x.repeat(self.points, 1), expand_like(broadcast_time(a, states), states)
            )
            total = total + (v_policy - v_teacher).square().sum(dim=1).mean()
            x = x_end
        return total / nfe


def gmm_velocity_reference(x: torch.Tensor, t: float, weights: torch.Tensor, means: torch.Tensor, std: float):
    """Velocity of the linear-path flow from ``N(0, I)`` to ``sum_k w_k N(mu_k, std^2 I)`` via the score.

    An independent route for tests: the marginal is ``sum_k w_k N(t mu_k, (t^2 std^2 + (1 - t)^2) I)``; with
    its score ``g`` (autograd), ``E[x1 | x_t] = (x_t + (1 - t)^2 g) / t`` and ``v = (E[x1 | x_t] - x_t)/(1 - t)``;
    at ``t = 0``, ``E[x1 | x_0] = sum_k w_k mu_k``.
    """
    if not 0.0 <= t < 1.0:
        raise ConfigError(f"the velocity needs 0 <= t < 1, got {t}.")
    if t == 0.0:  # E[x1] with the weights normalised, as the logsumexp below does implicitly
        return (weights / weights.sum() @ means).to(x.dtype) - x
    var = t**2 * std**2 + (1.0 - t) ** 2
    with torch.enable_grad():
        y = x.detach().requires_grad_(True)
        sq = (y[:, None, :] - t * means[None]).square().sum(-1)  # [B, K]
        logp = torch.logsumexp(torch.log(weights)[None] - 0.5 * sq / var, dim=1) - 0.5 * x.shape[1] * math.log(var)
        (score,) = torch.autograd.grad(logp.sum(), y)
    x1_mean = (x + (1.0 - t) ** 2 * score) / t
    return (x1_mean - x) / (1.0 - t)
