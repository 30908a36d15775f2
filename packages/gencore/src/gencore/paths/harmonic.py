"""Harmonic prior: Gaussian noise for point sets whose covariance follows a graph.

The source distribution of EigenFold (Jing, Erives, Pao-Huang, Corso, Berger & Jaakkola 2023), Harmonic
Self-Conditioned Flow Matching / FlowSite (Stark, Jing, Barzilay & Jaakkola 2024) and ET-Flow (Hassan,
Shenoy, Lee, Stark, Thaler & Beaini 2024): the density of ``x: [N, d]`` is

    p(x)  proportional to  exp(-(alpha / 2) sum_{(i, j) in E} w_ij |x_i - x_j|^2)  =  exp(-(alpha / 2) tr(x^T L x)),

with ``L`` the weighted graph Laplacian, so bonded points start close and the noise already has the
graph's shape (for a chain, ``E|x_i - x_j|^2 = d |i - j| / alpha``; in general ``d R_ij / alpha`` with
``R_ij`` the effective resistance). ``L`` is singular: its null space holds each connected component's
mean, where the harmonic density is flat. Those directions get the variance ``free_std^2`` per
coordinate; callers that centre the cloud afterwards remove the global mean, so for a connected graph
the prior is exactly the harmonic density on the zero-mean subspace.

:func:`harmonic_noise_transform` returns the symmetric square root ``A = Sigma^{1/2}`` of the
covariance (``Sigma = U f(Lambda)^2 U^T``, independent of the eigenbasis chosen inside degenerate
eigenspaces); noise is ``A @ eps`` with ``eps`` standard normal, and the same ``A`` preconditions the
noise of an SDE sampler (``dx = [v + (g^2/2) Sigma s] dt + g A dW`` keeps the path's marginals).
Padded points (``mask == 0``) are isolated nodes and get zero rows and columns.
"""

from __future__ import annotations

import math

import torch

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError

__all__ = ["harmonic_noise", "harmonic_noise_transform"]


def harmonic_noise_transform(
    adjacency: torch.Tensor, mask: torch.Tensor, *, alpha: float = 1.0, free_std: float = 1.0
) -> torch.Tensor:
    """``A: [B, N, N]`` with ``A A^T`` the harmonic prior's covariance over the points of each graph.

    ``adjacency: [B, N, N]`` non-negative edge weights (symmetrised here; the diagonal is ignored),
    ``mask: [B, N]`` real points. ``alpha`` is the spring constant (inverse squared length), ``free_std``
    the standard deviation along each connected component's mean."""
    if not (0 < alpha < math.inf and 0 < free_std < math.inf):
        raise ConfigError(f"alpha and free_std must be finite and positive, got alpha={alpha}, free_std={free_std}.")
    if adjacency.dim() != 3 or adjacency.shape[1] != adjacency.shape[2]:
        raise InputError(f"adjacency must have shape [B, N, N], got {tuple(adjacency.shape)}.")
    if mask.shape != adjacency.shape[:2]:
        raise InputError(f"mask must have shape {tuple(adjacency.shape[:2])}, got {tuple(mask.shape)}.")
    if (adjacency < 0).any() or not torch.isfinite(adjacency).all():
        raise InputError("adjacency weights must be finite and non-negative.")
    dtype = adjacency.dtype if adjacency.is_floating_point() else torch.get_default_dtype()
    m = mask.to(dtype)
    w = adjacency.to(dtype)
    w = 0.5 * (w + w.transpose(1, 2)) * (m[:, :, None] * m[:, None, :])
    w = w - torch.diag_embed(w.diagonal(dim1=1, dim2=2))
    lap = alpha * (torch.diag_embed(w.sum(-1)) - w)
    # eigh in float64: small eigenvalues of long chains (~alpha pi^2 / N^2) must not be confused with zero
    lam, u = torch.linalg.eigh(lap.double())
    tol = 1e-9 * lam.abs().amax(-1, keepdim=True).clamp_min(alpha)
    scale = torch.where(lam > tol, lam.clamp_min(tol).rsqrt(), torch.full_like(lam, free_std))
    a = (u * scale[:, None, :]) @ u.transpose(1, 2)
    mm = m.double()
    return (a * mm[:, :, None] * mm[:, None, :]).to(dtype)


def harmonic_noise(
    adjacency: torch.Tensor,
    mask: torch.Tensor,
    dim: int = 3,
    *,
    alpha: float = 1.0,
    free_std: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One draw ``[B, N, dim]`` of the harmonic prior per graph (not centred; padded points are zero).

    ``eps`` is drawn on the generator's device (the CPU by default) and moved to ``adjacency``'s."""
    dim = check_int(dim, "dim (the coordinates per point)", low=1)
    a = harmonic_noise_transform(adjacency, mask, alpha=alpha, free_std=free_std)
    dev = generator.device if generator is not None else a.device
    eps = torch.randn(a.shape[0], a.shape[1], dim, generator=generator, dtype=a.dtype, device=dev)
    return a @ eps.to(a.device)
