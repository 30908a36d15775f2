"""The manifold comparison behind ``gencore manifold compare``: Riemannian flow matching sampled with geodesic
Euler vs Generalised Flow Maps (G-LSD, G-ESD, G-PSD) sampled in ``nfe`` jumps, on three small problems:

- ``sphere``: a mixture of four von Mises-Fisher distributions on ``S^2`` (uniform base);
- ``torus``: a 2 x 2 checkerboard on the flat 2-torus (uniform base). With 4 x 4 cells and a uniform base the
  marginal path of the independent geodesic coupling is exactly uniform at ``t = 0`` and ``t = 1/2`` (the box
  the conditional path averages over spans whole periods) and the learned field stays near zero within the
  default budget, for every method alike; 2 x 2 cells keep the comparison informative;
- ``ball``: a mixture of five wrapped normals on the 2-D Poincare ball (wrapped-normal base at the origin).

Every method gets the same network width, steps, batch, optimiser and seed, fresh target draws each step,
and is scored by the geodesic-kernel MMD (:func:`gencore.manifolds.metrics.geodesic_mmd`, bandwidths from the
reference data) of ``n_eval`` samples from one shared set of base points against ``n_eval`` fresh data points.
This is the miniature of Davis et al. 2025 (ICLR 2026), Table 1-3: MMD at 1, 2, 4 steps vs RFM with Euler.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from gencore.checks import check_seed
from gencore.errors import ConfigError
from gencore.manifolds.base import Manifold
from gencore.manifolds.distributions import VonMisesFisherMixture, WrappedNormalMixture, torus_checkerboard
from gencore.manifolds.flow_maps import GeneralisedFlowMap, gfm_loss
from gencore.manifolds.loss import rfm_loss
from gencore.manifolds.metrics import BANDWIDTH_MULTIPLIERS, geodesic_mmd, median_geodesic_distance
from gencore.manifolds.nets import ManifoldMLP
from gencore.manifolds.solvers import solve_manifold_ode
from gencore.manifolds.spaces import PoincareBall, Torus

PROBLEMS = ("sphere", "torus", "ball")
#: Adam learning rates (linear decay to 10 %); the ball's wrapped-normal problem needs the larger one to fit in
#: the default budget (RFM with 32 Euler steps: MMD 0.197 at 2e-3 and 800 steps, 0.009 at 5e-3 and 1500 steps)
DEFAULT_LR = {"sphere": 2e-3, "torus": 2e-3, "ball": 5e-3}
METHODS = ("rfm", "gfm-lsd", "gfm-esd", "gfm-psd")

Sampler = Callable[[int, torch.Generator], torch.Tensor]


@dataclass
class ManifoldCompareConfig:
    """Settings of one comparison (every method trained alike)."""

    manifold: str = "sphere"
    methods: tuple[str, ...] = ("rfm", "gfm-lsd", "gfm-psd")
    nfe: tuple[int, ...] = (1, 2, 4)
    steps: int = 1500
    batch_size: int = 256
    lr: float | None = None  # None: the problem's default (DEFAULT_LR)
    hidden: int = 128
    depth: int = 3
    n_eval: int = 2000
    seed: int = 0
    progress: bool = True

    def validate(self) -> ManifoldCompareConfig:
        check_seed(self.seed)
        if self.manifold not in PROBLEMS:
            raise ConfigError(f"unknown manifold {self.manifold!r}; expected one of: {', '.join(PROBLEMS)}.")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ConfigError(
                f"unknown method(s) {', '.join(bad) or '(none given)'}; expected some of: {', '.join(METHODS)}."
            )
        if not self.nfe or any(k < 1 for k in self.nfe):
            raise ConfigError(f"nfe must be positive integers, got {self.nfe}.")
        for name in ("steps", "batch_size", "hidden", "depth"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.n_eval < 2:
            raise ConfigError(f"n_eval must be >= 2, got {self.n_eval}.")
        if self.lr is None:
            self.lr = DEFAULT_LR[self.manifold]
        if not (math.isfinite(self.lr) and self.lr > 0):  # inf trained to NaN and was reported by the MMD
            raise ConfigError(f"lr must be a positive finite number, got {self.lr}.")
        return self


def make_problem(name: str) -> tuple[Manifold, Sampler]:
    """The manifold and a ``sample(n, generator)`` of its target distribution (float32)."""
    if name == "sphere":
        means = torch.tensor([[1.0, 0.0, 0.0], [-0.5, 0.8, 0.3], [0.0, -0.6, 0.8], [-0.3, -0.4, -0.85]])
        vmf = VonMisesFisherMixture(means, kappas=[25.0, 25.0, 40.0, 15.0])
        return vmf.manifold, lambda n, g: vmf.sample(n, generator=g)
    if name == "torus":
        return Torus(2), lambda n, g: torus_checkerboard(n, cells=2, generator=g)
    if name == "ball":
        ball = PoincareBall(2, c=1.0, base_std=1.0)
        ang = torch.arange(5, dtype=torch.float64) * 2 * math.pi / 5
        coords = 1.6 * torch.stack([torch.cos(ang), torch.sin(ang)], -1)
        means = ball.expmap(ball.origin(torch.float64).expand(5, -1), ball.origin_tangent(coords))
        mix = WrappedNormalMixture(ball, means, stds=[0.3] * 5)
        return ball, lambda n, g: mix.sample(n, generator=g)
    raise ConfigError(f"unknown manifold {name!r}; expected one of: {', '.join(PROBLEMS)}.")


def train_method(cfg: ManifoldCompareConfig, manifold: Manifold, sample_data: Sampler, method: str):
    """Train one model; returns ``(model, losses, seconds)`` (model: velocity net or GeneralisedFlowMap)."""
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    is_rfm = method == "rfm"
    net = ManifoldMLP(manifold, n_times=1 if is_rfm else 2, hidden=cfg.hidden, depth=cfg.depth)
    model = net if is_rfm else GeneralisedFlowMap(manifold, net)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0 - 0.9 * i / cfg.steps)
    losses: list[tuple[int, float]] = []
    start = time.perf_counter()
    for step in tqdm(range(cfg.steps), desc=method, disable=not cfg.progress, leave=False):
        x0 = manifold.random_base(cfg.batch_size, generator=gen)
        x1 = sample_data(cfg.batch_size, gen)
        if is_rfm:
            t = torch.rand(cfg.batch_size, generator=gen)
            loss = rfm_loss(manifold, net, x0, x1, t)
        else:
            loss, _ = gfm_loss(model, x0, x1, method.removeprefix("gfm-"), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        if step % 10 == 0:
            losses.append((step, float(loss.detach())))
    return model.eval(), losses, time.perf_counter() - start


@torch.no_grad()
def sample_method(manifold: Manifold, model: torch.nn.Module, method: str, x0: torch.Tensor, nfe: int) -> torch.Tensor:
    """RFM: ``nfe`` geodesic-Euler steps; GFM: ``nfe`` flow-map jumps."""
    if method == "rfm":
        return solve_manifold_ode(manifold, model, x0, steps=nfe, method="euler").x
    return model.sample(x0, nfe)


def compare(cfg: ManifoldCompareConfig):
    """Train every method and score it at every NFE.

    Returns ``(records, samples, reference)``: one record per (method, nfe) with ``manifold``, ``method``,
    ``nfe``, ``mmd`` (squared, unbiased, geodesic kernel), ``train_s`` and ``sample_s``; ``samples[method][nfe]``.
    """
    cfg.validate()
    manifold, sample_data = make_problem(cfg.manifold)
    reference = sample_data(cfg.n_eval, torch.Generator().manual_seed(cfg.seed + 10_000))
    x0 = manifold.random_base(cfg.n_eval, generator=torch.Generator().manual_seed(cfg.seed + 20_000))
    bandwidths = [c * median_geodesic_distance(manifold, reference) for c in BANDWIDTH_MULTIPLIERS]
    records: list[dict[str, Any]] = []
    samples: dict[str, dict[int, torch.Tensor]] = {}
    for method in cfg.methods:
        model, _, train_s = train_method(cfg, manifold, sample_data, method)
        samples[method] = {}
        for k in cfg.nfe:
            t0 = time.perf_counter()
            xs = sample_method(manifold, model, method, x0, k)
            sample_s = time.perf_counter() - t0
            samples[method][k] = xs
            records.append(
                {
                    "manifold": cfg.manifold,
                    "method": method,
                    "nfe": k,
                    "mmd": geodesic_mmd(manifold, xs, reference, bandwidths=bandwidths),
                    "train_s": round(train_s, 2),
                    "sample_s": round(sample_s, 4),
                }
            )
    return records, samples, reference


def config_dict(cfg: ManifoldCompareConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["methods"], d["nfe"] = list(cfg.methods), list(cfg.nfe)
    return d
