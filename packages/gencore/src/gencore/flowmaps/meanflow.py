"""MeanFlow: one- and few-step generation with a learned average velocity (Geng, Deng, Bai, Kolter & He,
"Mean Flows for One-step Generative Modeling", 2025, arXiv:2505.13447).

Convention (the suite's: ``t = 0`` noise, ``t = 1`` data). A two-time network ``u(x, s, t)`` is the
*average velocity* of the probability-flow ODE ``dx/dtau = v(x, tau)`` over ``[s, t]`` from the point
``x`` at time ``s``; the flow map is

    X_{s,t}(x) = x + (t - s) u(x, s, t),       u(x_s, s, t) = 1/(t - s) int_s^t v(x_tau, tau) dtau,

so ``X_{s,t}`` sends the state at time ``s`` to the state at time ``t`` and ``u(x, s, s) = v(x, s)``.
Differentiating ``(t - s) u(x_s, s, t) = int_s^t v`` in the start time ``s`` along the trajectory gives the
MeanFlow identity in this convention,

    u(x_s, s, t) = v(x_s, s) + (t - s) d/ds u(x_s, s, t),    d/ds u = v . grad_x u + d_s u,

the total derivative along the flow, i.e. a Jacobian-vector product with tangent ``(v, 1, 0)`` in
``(x, s, t)``. (The paper writes ``u(z_t, r, t)`` with noise at ``t = 1``, target time ``r``, and the
tangent ``(v, 0, 1)`` in ``(z, r, t)``: its ``t`` is our ``s``, its ``r`` our ``t``, hence our plus sign.)
Training regresses ``u_theta(x_s, s, t)`` on the stop-gradient target
``u_tgt = v + (t - s) sg(d/ds u_theta)`` with the conditional velocity ``v = d x_s / ds`` of the path
(``x1 - x0`` for the linear path) in place of the marginal one, exactly as flow matching does; the
regression's minimiser is the marginal average velocity.

Adaptive loss weighting (the paper's Sec. 4.3): with ``delta = u_theta - u_tgt``, the loss is
``sg(w) ||delta||^2`` with ``w = 1 / (||delta||^2 + c)^p``, ``p = 1`` and ``c = 1e-3`` by default.

Two ways to get ``d/ds u``:

* ``derivative="jvp"``: exact forward-mode derivative with :func:`torch.func.jvp`.
* ``derivative="fd"``: a JVP-free central difference along the flow,
  ``[u(x + h v, s + h, t) - u(x - h v, s - h, t)] / (2 h)``, truncation error ``O(h^2)``, round-off about
  ``eps_machine |u| / h``; ``h = 1e-3`` by default (float32: round-off near ``1e-4 |u|``). JVP fails through
  fused attention kernels (no forward-mode rule), so large models need this variant.

Sampling: ``k`` jumps on a uniform grid, ``x <- X_{t_i, t_{i+1}}(x)`` from noise at 0 to data at 1.

:func:`gaussian_flow_map` is an analytic reference: for ``x0 ~ N(0, I)`` and ``x1 ~ N(m, sigma^2 I)``
under the linear path, the marginal at time ``tau`` is ``N(tau m, c(tau)^2 I)`` with
``c(tau)^2 = (1 - tau)^2 + tau^2 sigma^2``, and the flow map is affine:
``X_{s,t}(x) = t m + c(t) / c(s) (x - s m)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from gencore.checks import check_choice, check_int
from gencore.errors import ConfigError, InputError
from gencore.nn import broadcast_time, expand_like
from gencore.paths.affine import AffineGaussianPath
from gencore.paths.base import ProbabilityPath
from gencore.paths.schedules import LinearSchedule
from gencore.paths.time_samplers import UniformTime
from gencore.rng import rand_with, randn_like_with

FlowMapModel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""``model(x: [B, ...], s: [B], t: [B]) -> u: [B, ...]``, the average velocity over ``[s, t]``."""

DERIVATIVES = ("jvp", "fd")


def flow_map(model: FlowMapModel, x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float) -> torch.Tensor:
    """``X_{s,t}(x) = x + (t - s) u(x, s, t)``: the state at time ``t`` of the point ``x`` at time ``s``."""
    s = broadcast_time(s, x)
    t = broadcast_time(t, x)
    return x + expand_like(t - s, x) * model(x, s, t)


@torch.no_grad()
def sample_flow_map(model: FlowMapModel, noise: torch.Tensor, nfe: int) -> torch.Tensor:
    """``nfe`` uniform jumps of the flow map from noise at ``t = 0`` to data at ``t = 1``."""
    nfe = check_int(nfe, "nfe", low=1)
    grid = torch.linspace(0.0, 1.0, nfe + 1, dtype=torch.float64).tolist()
    x = noise
    for a, b in itertools.pairwise(grid):
        x = flow_map(model, x, a, b)
    return x


def _gaussian_scale(tau: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    return torch.sqrt((1.0 - tau) ** 2 + (tau * std) ** 2)


def gaussian_flow_map(
    x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float, mean: torch.Tensor, std: float | torch.Tensor
) -> torch.Tensor:
    """Exact flow map of the linear path from ``N(0, I)`` to ``N(mean, std^2 I)``: ``t m + c(t)/c(s) (x - s m)``."""
    s = expand_like(broadcast_time(s, x), x)
    t = expand_like(broadcast_time(t, x), x)
    std = torch.as_tensor(std, dtype=x.dtype, device=x.device)
    if not bool((std > 0).all()):
        raise InputError("std must be positive.")
    return t * mean + _gaussian_scale(t, std) / _gaussian_scale(s, std) * (x - s * mean)


def gaussian_velocity(x: torch.Tensor, t: torch.Tensor | float, mean: torch.Tensor, std: float | torch.Tensor):
    """Exact marginal velocity ``m + c'(t)/c(t) (x - t m)`` of the same Gaussian-to-Gaussian flow."""
    t = expand_like(broadcast_time(t, x), x)
    std = torch.as_tensor(std, dtype=x.dtype, device=x.device)
    c2 = (1.0 - t) ** 2 + (t * std) ** 2
    dc2 = -2.0 * (1.0 - t) + 2.0 * t * std**2
    return mean + 0.5 * dc2 / c2 * (x - t * mean)


def gaussian_average_velocity(
    x: torch.Tensor, s: torch.Tensor | float, t: torch.Tensor | float, mean: torch.Tensor, std: float | torch.Tensor
) -> torch.Tensor:
    """Exact average velocity ``(X_{s,t}(x) - x) / (t - s)``, and the velocity where ``s = t``."""
    s = broadcast_time(s, x)
    t = broadcast_time(t, x)
    gap = expand_like(t - s, x)
    same = gap == 0
    safe_gap = torch.where(same, torch.ones_like(gap), gap)
    avg = (gaussian_flow_map(x, s, t, mean, std) - x) / safe_gap
    return torch.where(same, gaussian_velocity(x, s, mean, std), avg)


def total_derivative(
    model: FlowMapModel,
    x: torch.Tensor,
    s: torch.Tensor,
    t: torch.Tensor,
    v: torch.Tensor,
    *,
    derivative: str = "jvp",
    fd_eps: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u(x, s, t), d/ds u)`` with ``d/ds u = v . grad_x u + d_s u`` (the flow moves ``x`` with velocity ``v``).

    ``"jvp"`` differentiates exactly (``u`` keeps its graph to the parameters; the derivative is
    detached); ``"fd"`` uses the central difference of width ``fd_eps`` along ``(v, 1, 0)``.
    """
    check_choice(derivative, DERIVATIVES, "derivative")
    if derivative == "jvp":
        u, du = torch.func.jvp(model, (x, s, t), (v, torch.ones_like(s), torch.zeros_like(t)))
        return u, du.detach()
    if not fd_eps > 0:
        raise ConfigError(f"fd_eps must be positive, got {fd_eps}.")
    u = model(x, s, t)
    with torch.no_grad():
        h = fd_eps
        du = (model(x + h * v, s + h, t) - model(x - h * v, s - h, t)) / (2.0 * h)
    return u, du


def meanflow_target(
    model: FlowMapModel,
    x: torch.Tensor,
    s: torch.Tensor,
    t: torch.Tensor,
    v: torch.Tensor,
    *,
    derivative: str = "jvp",
    fd_eps: float = 1e-3,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u_theta(x, s, t), u_tgt)`` with the stop-gradient target ``u_tgt = v + (t - s) d/ds u_theta``."""
    u, du = total_derivative(model, x, s, t, v, derivative=derivative, fd_eps=fd_eps)
    return u, (v + expand_like(t - s, x) * du).detach()


class MeanFlow:
    """The MeanFlow training objective for a two-time model ``model(x, s, t)``.

    Args:
        path: probability path supplying ``x_s`` and its conditional velocity (default: linear).
        time_sampler: draws the two times; the smaller is ``s``, the larger ``t`` (default ``U[0, 1)``). The
            paper's best setting, logit-normal ``(-0.4, 1.0)`` over its time (1 = noise), is
            ``LogitNormalTime(loc=0.4, scale=1.0)`` here (0 = noise); ``loc=-0.4`` would mirror it.
        ratio: fraction of pairs with ``s != t``; the rest sit on the diagonal (plain flow matching).
        derivative: ``"jvp"`` or ``"fd"`` (finite difference, width ``fd_eps``).
        weight_power, weight_eps: adaptive weighting ``w = 1 / (||delta||^2 + weight_eps)^weight_power``;
            ``weight_power = 0`` is the plain squared error.
    """

    def __init__(
        self,
        path: ProbabilityPath | None = None,
        time_sampler: Callable[..., torch.Tensor] | None = None,
        *,
        ratio: float = 0.5,
        derivative: str = "jvp",
        fd_eps: float = 1e-3,
        weight_power: float = 1.0,
        weight_eps: float = 1e-3,
    ) -> None:
        self.path = path if path is not None else AffineGaussianPath(LinearSchedule())
        self.time_sampler = time_sampler if time_sampler is not None else UniformTime()
        if not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"ratio must be in [0, 1], got {ratio}.")
        if not fd_eps > 0 or not weight_eps > 0 or not weight_power >= 0:  # also refuses NaN
            raise ConfigError("fd_eps and weight_eps must be positive and weight_power non-negative.")
        self.ratio = float(ratio)
        self.derivative = check_choice(derivative, DERIVATIVES, "derivative")
        self.fd_eps = float(fd_eps)
        self.weight_power = float(weight_power)
        self.weight_eps = float(weight_eps)

    def __repr__(self) -> str:
        return f"MeanFlow(ratio={self.ratio}, derivative={self.derivative!r}, weight_power={self.weight_power})"

    def times(self, n: int, like: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(s, t)`` with ``s <= t``; a fraction ``1 - ratio`` has ``s = t``."""
        kw = {"generator": generator, "device": like.device, "dtype": like.dtype}
        a, b = self.time_sampler(n, **kw), self.time_sampler(n, **kw)
        s, t = torch.minimum(a, b), torch.maximum(a, b)
        diagonal = rand_with((n,), generator, device=like.device) >= self.ratio
        return s, torch.where(diagonal, s, t)

    def adaptive_loss(self, delta: torch.Tensor) -> torch.Tensor:
        """``mean(sg(w) ||delta||^2)`` per sample, ``w = (||delta||^2 + c)^-p``."""
        sq = delta.reshape(delta.shape[0], -1).square().sum(dim=1)
        w = (sq.detach() + self.weight_eps).pow(-self.weight_power)
        return (w * sq).mean()

    def loss(
        self,
        model: FlowMapModel,
        x1: torch.Tensor,
        *,
        x0: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Scalar MeanFlow loss on data ``x1: [B, ...]`` (noise ``x0 ~ N(0, I)`` drawn with ``generator``)."""
        if x0 is None:
            x0 = randn_like_with(x1, generator)
        s, t = self.times(x1.shape[0], x1, generator)
        sample = self.path.sample(x0, x1, s, generator=generator)  # a stochastic path draws with it too
        u, u_tgt = meanflow_target(
            model, sample.x_t, sample.t, t, sample.u_t, derivative=self.derivative, fd_eps=self.fd_eps
        )
        return self.adaptive_loss(u - u_tgt)
