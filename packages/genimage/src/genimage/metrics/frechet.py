"""Distances between two sets of features ``[N, D]``: Frechet distance and kernel inception distance.

Frechet distance between the Gaussians fitted to the two sets (Heusel et al. 2017 used it on
Inception features as "FID"; here it is applied to other networks and named after them)::

    FD = |mu_a - mu_b|^2 + Tr(S_a + S_b - 2 (S_a S_b)^{1/2}),

with ``Tr (S_a S_b)^{1/2} = sum_i sqrt(lambda_i)``, ``lambda_i`` the eigenvalues of the symmetric PSD
matrix ``S_a^{1/2} S_b S_a^{1/2}`` (same spectrum as ``S_a S_b``), i.e. the sum of the singular values of
``S_b^{1/2} S_a^{1/2}`` (its nuclear norm), computed in float64 from the symmetric square roots with
round-off eigenvalues set to 0 -- no complex ``sqrtm`` and no imaginary parts to discard. The singular
values are the square roots themselves, so a small true ``lambda_i`` is not lost among the round-off of the
squared spectrum.

KID (Binkowski et al. 2018, "Demystifying MMD GANs"): the unbiased squared MMD with the cubic
polynomial kernel ``k(x, y) = (x . y / D + 1)^3``, averaged over ``n_subsets`` random subsets of
``subset_size`` samples from each set (seeded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gencore.checks import check_int
from gencore.errors import InputError


def _check(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise InputError(f"feature sets must be [N, D] with equal D, got {tuple(a.shape)} and {tuple(b.shape)}.")
    if a.shape[0] < 2 or b.shape[0] < 2:
        raise InputError("each feature set needs at least 2 samples.")
    if not (bool(torch.isfinite(a).all()) and bool(torch.isfinite(b).all())):
        raise InputError("feature sets must be finite; got NaN or infinite features.")


def gaussian_stats(features: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(mean [D], covariance [D, D])`` in float64 (unbiased covariance)."""
    f = features.detach().cpu().double().numpy()
    return f.mean(axis=0), np.atleast_2d(np.cov(f, rowvar=False))  # np.cov gives a 0-d array for D = 1


def _rank_cut(w: np.ndarray) -> np.ndarray:
    """Eigenvalues with those below rounding (``len(w) eps max|w|``) set to 0: with fewer samples than
    features a covariance is singular, and the square roots of its null space's round-off eigenvalues summed to
    a negative FD of a set with itself (-9e-5 at 200 x 1280)."""
    return np.where(w > len(w) * np.finfo(w.dtype).eps * np.abs(w).max(initial=0.0), w, 0.0)


def _sym_root(cov: np.ndarray) -> np.ndarray:
    """The symmetric PSD square root of a covariance, round-off eigenvalues (:func:`_rank_cut`) set to 0."""
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    return (v * np.sqrt(_rank_cut(w))) @ v.T


def frechet_distance_from_stats(mu_a: np.ndarray, cov_a: np.ndarray, mu_b: np.ndarray, cov_b: np.ndarray) -> float:
    """FD between ``N(mu_a, cov_a)`` and ``N(mu_b, cov_b)`` (see the module docstring).

    ``mu_a``, ``mu_b``: finite ``[D]``; ``cov_a``, ``cov_b``: finite ``[D, D]`` covariances.
    """
    mu_a, cov_a, mu_b, cov_b = (np.asarray(x, dtype=np.float64) for x in (mu_a, cov_a, mu_b, cov_b))
    d = mu_a.shape[0] if mu_a.ndim == 1 else -1
    if mu_b.shape != (d,) or cov_a.shape != (d, d) or cov_b.shape != (d, d):  # numpy broadcast a [1] mean silently
        raise InputError(
            f"Gaussian stats must be means [D] and covariances [D, D] of one D, got {mu_a.shape}, {cov_a.shape}, "
            f"{mu_b.shape} and {cov_b.shape}."
        )
    if not all(np.isfinite(x).all() for x in (mu_a, cov_a, mu_b, cov_b)):
        raise InputError("Gaussian stats must be finite; got NaN or infinite means or covariances.")
    # sum of the singular values of S_b^{1/2} S_a^{1/2}: cutting the round-off of the eigenvalues of
    # S_a^{1/2} S_b S_a^{1/2} instead (a squared spectrum) dropped true ones, FD(a, a) = 2e-4 for covariance
    # eigenvalues 1e-4 .. 1e3
    tr_sqrt = np.linalg.svd(_sym_root(cov_b) @ _sym_root(cov_a), compute_uv=False).sum()
    diff = mu_a - mu_b
    return float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2 * tr_sqrt)


def frechet_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """FD between the Gaussian fits of feature sets ``a: [N, D]`` and ``b: [M, D]``."""
    _check(a, b)
    return frechet_distance_from_stats(*gaussian_stats(a), *gaussian_stats(b))


@dataclass(frozen=True)
class KIDResult:
    """KID mean and standard deviation over subsets, and the subset settings used."""

    mean: float
    std: float
    subset_size: int
    n_subsets: int


def kernel_inception_distance(
    a: torch.Tensor, b: torch.Tensor, *, subset_size: int = 100, n_subsets: int = 50, seed: int = 0
) -> KIDResult:
    """KID between feature sets ``a`` and ``b`` (see the module docstring).

    ``subset_size`` (at least 2; capped at the smaller set's size) and ``n_subsets`` (at least 1) are integers.
    """
    _check(a, b)
    subset_size = check_int(subset_size, "KID subset_size", low=2)
    n_subsets = check_int(n_subsets, "KID n_subsets", low=1)
    m = min(subset_size, a.shape[0], b.shape[0])
    d = a.shape[1]
    g = torch.Generator().manual_seed(seed)
    x_all, y_all = a.detach().double().cpu(), b.detach().double().cpu()
    values = []
    for _ in range(n_subsets):
        x = x_all[torch.randperm(x_all.shape[0], generator=g)[:m]]
        y = y_all[torch.randperm(y_all.shape[0], generator=g)[:m]]
        kxx = (x @ x.T / d + 1) ** 3
        kyy = (y @ y.T / d + 1) ** 3
        kxy = (x @ y.T / d + 1) ** 3
        off = (kxx.sum() - kxx.diagonal().sum() + kyy.sum() - kyy.diagonal().sum()) / (m * (m - 1))
        values.append(float(off - 2 * kxy.mean()))
    v = np.asarray(values)
    return KIDResult(float(v.mean()), float(v.std()), m, n_subsets)
