"""IEM experiments behind ``geninterp iem``: the Gaussian identity, mixture checks, a learned digits denoiser.

* Gaussian prior: IEM with the analytic denoiser equals the Mahalanobis distance (to 1e-3).
* Gaussian mixture (1-D): the Monte-Carlo IEM over Brownian paths agrees with a deterministic
  reference (only the marginal ``W_g ~ N(0, g)`` enters the expectation, so Gauss-Hermite
  quadrature per SNR gives it to machine precision) within four standard errors; the metric
  axioms (symmetry, identity, triangle inequality on shared paths) hold exactly; and two pairs
  at the same Euclidean distance are far apart in IEM when they straddle the two modes.
* Digits: an EDM-preconditioned MLP denoiser (Karras et al. 2022) trained on sklearn's 8x8 digits
  through :mod:`gencore.train`; leave-one-out 1-nearest-neighbour accuracy of held-out digits
  under the learned IEM, under the Mahalanobis distance of a Gaussian fit (= IEM of the
  Gaussian denoiser) and under the Euclidean distance.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from gencore.data import get_dataset
from gencore.errors import ConfigError
from gencore.nn import MLPVelocity
from gencore.rng import rand_with, randn_like_with
from gencore.train import TrainConfig, Trainer
from geninterp.iem import (
    GaussianDenoiser,
    GaussianMixtureDenoiser,
    _log_trapezoid,
    gaussian_identity_check,
    information_estimation_metric,
    log_spaced_snr,
)


def gaussian_report(dim: int = 8, n_pairs: int = 32, n_levels: int = 512) -> dict[str, Any]:
    """The Mahalanobis identity (``passed`` when the max relative error is below 1e-3)."""
    return {"prior": "gaussian", **gaussian_identity_check(dim=dim, n_pairs=n_pairs, n_levels=n_levels)}


def _mixture_1d() -> GaussianMixtureDenoiser:
    return GaussianMixtureDenoiser(
        torch.tensor([0.5, 0.5]), torch.tensor([[-2.0], [2.0]]), torch.tensor([[[0.25]], [[0.25]]])
    )


def mixture_reference(
    den: GaussianMixtureDenoiser, x1: torch.Tensor, x2: torch.Tensor, gammas: torch.Tensor
) -> torch.Tensor:
    """Deterministic ``IEM^2`` for 1-D signals: Gauss-Hermite expectation over ``W_g ~ N(0, g)`` per SNR."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(96)
    z = torch.tensor(nodes, dtype=torch.float64)
    wq = torch.tensor(weights / weights.sum(), dtype=torch.float64)
    f = torch.zeros(x1.shape[0], len(gammas), dtype=torch.float64)
    for j, g in enumerate(gammas):
        noise = z / g.sqrt()  # W_g / g with W_g = sqrt(g) z
        sigma = torch.full((len(z),), float(g.rsqrt()), dtype=torch.float64)
        for i in range(x1.shape[0]):
            e1 = x1[i] - den((x1[i] + noise)[:, None], sigma)[:, 0]
            e2 = x2[i] - den((x2[i] + noise)[:, None], sigma)[:, 0]
            f[i, j] = ((e1 - e2) ** 2 * wq).sum()
    return _log_trapezoid(f, gammas)


def mixture_report(n_paths: int = 64, n_levels: int = 256, seed: int = 0) -> dict[str, Any]:
    """Monte-Carlo vs deterministic IEM on a 1-D two-mode mixture, metric axioms, and within/across-mode pairs."""
    if n_paths < 2:
        raise ConfigError(
            f"the mixture check needs n_paths >= 2 Brownian paths (its z-score needs a standard error), got {n_paths}."
        )
    den = _mixture_1d()
    x1 = torch.tensor([[-2.5], [-2.0], [-0.5], [1.0]], dtype=torch.float64)
    x2 = torch.tensor([[-1.5], [2.0], [0.5], [3.0]], dtype=torch.float64)
    kw = {"n_levels": n_levels, "gamma_min": 1e-4, "gamma_max": 1e4}
    res = information_estimation_metric(
        den, x1, x2, n_paths=n_paths, generator=torch.Generator().manual_seed(seed), **kw
    )
    ref = mixture_reference(den, x1, x2, log_spaced_snr(1e-4, 1e4, n_levels))
    z = ((res.distance.pow(2) - ref).abs() / res.stderr.clamp_min(1e-12)).max()
    # metric axioms on shared paths: same seed -> same Brownian paths for every pair of the triplet
    a, b, c = x1, x2, torch.tensor([[0.0], [0.1], [-3.0], [2.2]], dtype=torch.float64)

    def d(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return information_estimation_metric(
            den, u, v, n_paths=4, generator=torch.Generator().manual_seed(7), **kw
        ).distance

    ab, bc, ac, ba, aa = d(a, b), d(b, c), d(a, c), d(b, a), d(a, a)
    triangle = bool(torch.all(ac <= ab + bc + 1e-9))
    symmetric = bool(torch.allclose(ab, ba, rtol=1e-9))
    identity = float(aa.abs().max())
    within, across = float(res.distance[0]), float(res.distance[2])  # both pairs are 1.0 apart in Euclidean terms
    passed = bool(z < 4.0) and triangle and symmetric and identity < 1e-9 and across > within
    return {
        "prior": "gmm-1d (modes at -2 and 2, std 0.5)",
        "pairs": [[float(u), float(v)] for u, v in zip(x1[:, 0], x2[:, 0], strict=True)],
        "iem_monte_carlo": res.distance.tolist(),
        "iem_reference": ref.sqrt().tolist(),
        "max_z_score": float(z),
        "n_paths": n_paths,
        "triangle_inequality": triangle,
        "symmetric": symmetric,
        "iem_self": identity,
        "iem_within_mode_pair": within,
        "iem_across_modes_pair": across,
        "passed": passed,
    }


# ---------------------------------------------------------------------------------------------- digits
SIGMA_DATA = 0.5


class EDMDenoiser(torch.nn.Module):
    """``D(y, sigma) = c_skip y + c_out F(c_in y, t(sigma))`` with an MLP ``F`` (Karras et al. 2022, EDM)."""

    def __init__(self, dim: int, hidden: int = 256, depth: int = 3, sigma_min: float = 1e-2, sigma_max: float = 1e2):
        super().__init__()
        self.net = MLPVelocity(dim, hidden=hidden, depth=depth)
        self.log_min, self.log_max = math.log(sigma_min), math.log(sigma_max)

    def forward(self, y: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = sigma.to(y)[:, None]
        var = s**2 + SIGMA_DATA**2
        t = ((s.log() - self.log_min) / (self.log_max - self.log_min)).squeeze(-1)
        return (SIGMA_DATA**2 / var) * y + (s * SIGMA_DATA / var.sqrt()) * self.net(y / var.sqrt(), t)


class DenoiserTask:
    """EDM loss with ``log sigma`` uniform over the IEM's SNR range."""

    def __init__(self, model: EDMDenoiser) -> None:
        self.model = model

    def loss(self, model: torch.nn.Module, batch: Any, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
        (x,) = batch
        inner = getattr(model, "module", model)
        u = rand_with((x.shape[0],), generator, device=x.device, dtype=x.dtype)
        sigma = (inner.log_min + u * (inner.log_max - inner.log_min)).exp()
        noise = randn_like_with(x, generator)
        weight = (sigma**2 + SIGMA_DATA**2) / (sigma * SIGMA_DATA) ** 2
        err = (model(x + sigma[:, None] * noise, sigma) - x).pow(2).mean(-1)
        return (weight * err).mean(), {}


def train_digit_denoiser(
    data: torch.Tensor, steps: int = 3000, seed: int = 0, progress: bool = False, out_dir: str | None = None
) -> EDMDenoiser:
    import tempfile

    torch.manual_seed(seed)
    model = EDMDenoiser(data.shape[1])
    with tempfile.TemporaryDirectory() as tmp:
        cfg = TrainConfig(
            steps=steps, global_batch_size=256, optimizer="adam", lr=2e-3, schedule="cosine", ema_decay=0.999,
            seed=seed, progress=progress, out_dir=out_dir or tmp, warmup_steps=min(100, steps),
        )  # fmt: skip
        result = Trainer(cfg).fit(DenoiserTask(model), torch.utils.data.TensorDataset(data))
    return result.ema.cpu().eval()  # trained on CUDA when there is one; evaluated on the CPU


def _loo_accuracy(dist: torch.Tensor, labels: torch.Tensor) -> float:
    d = dist.clone()
    d.fill_diagonal_(float("inf"))
    return float((labels[d.argmin(1)] == labels).double().mean())


def digits_report(
    steps: int = 3000, n_test: int = 100, n_levels: int = 48, seed: int = 0, progress: bool = False
) -> dict[str, Any]:
    """Learned IEM on 8x8 digits (scaled to [-1, 1]) vs Mahalanobis and Euclidean: 1-NN accuracy on held-out digits."""
    from sklearn.datasets import load_digits

    x_all = get_dataset("digits").double()
    labels_all = torch.as_tensor(load_digits().target)
    perm = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(seed))
    test, train = perm[:n_test], perm[n_test:]
    lo, hi = float(x_all.min()), float(x_all.max())
    scaled = (x_all - lo) / (hi - lo) * 2 - 1
    start = time.perf_counter()
    den = train_digit_denoiser(scaled[train].float(), steps=steps, seed=seed, progress=progress)
    train_seconds = time.perf_counter() - start
    xt, yt = scaled[test], labels_all[test]
    i, j = torch.triu_indices(n_test, n_test, 1)
    start = time.perf_counter()
    with torch.no_grad():
        res = information_estimation_metric(
            lambda y, s: den(y.float(), s.float()).double(),
            xt[i], xt[j], n_levels=n_levels, gamma_min=1e-4, gamma_max=1e4,
            generator=torch.Generator().manual_seed(seed), batch_levels=8,
        )  # fmt: skip
    iem_seconds = time.perf_counter() - start
    learned = torch.zeros(n_test, n_test, dtype=torch.float64)
    learned[i, j] = learned[j, i] = res.distance
    train_x = scaled[train]
    cov = torch.cov(train_x.T) + 1e-3 * torch.eye(train_x.shape[1], dtype=torch.float64)
    gauss = GaussianDenoiser(train_x.mean(0), cov)
    maha = torch.zeros_like(learned)
    maha[i, j] = maha[j, i] = gauss.mahalanobis(xt[i], xt[j])
    eucl = torch.cdist(xt, xt)
    return {
        "prior": "digits (learned EDM-MLP denoiser)",
        "train_digits": len(train),
        "test_digits": n_test,
        "denoiser_steps": steps,
        "n_levels": n_levels,
        "nn_accuracy_iem_learned": _loo_accuracy(learned, yt),
        "nn_accuracy_mahalanobis": _loo_accuracy(maha, yt),
        "nn_accuracy_euclidean": _loo_accuracy(eucl, yt),
        "train_seconds": round(train_seconds, 2),
        "iem_seconds": round(iem_seconds, 2),
    }
