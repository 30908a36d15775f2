"""Exact null distributions for watermark detectors (p-values that are uniform when no mark is present).

- :func:`binomial_pvalue`: randomised upper-tail p-value of ``matches ~ Binomial(n, 1/2)``. A plain
  ``P(X >= x)`` is discrete and conservative, so a KS test against U(0, 1) would reject it even
  when the detector is correct; the randomised version ``P(X > x) + U P(X = x)``,
  ``U ~ U(0, 1)`` from an explicit generator, is exactly uniform under the null.
- :func:`correlation_pvalue`: for an isotropic ``z`` (any scale) and a fixed unit direction ``s``,
  ``(1 + <s, z/|z|>) / 2 ~ Beta((D-1)/2, (D-1)/2)``; the p-value is its upper tail. Scale-free,
  so a mis-estimated noise variance after inversion cannot break calibration.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

__all__ = ["binomial_pvalue", "correlation_pvalue"]


def binomial_pvalue(matches: torch.Tensor, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Randomised p-value of ``matches: [N]`` successes out of ``n`` fair coin flips (upper tail)."""
    m = matches.detach().cpu().numpy().astype(np.int64)
    u = torch.rand(m.shape, generator=generator, dtype=torch.float64).numpy()
    p = stats.binom.sf(m, n, 0.5) + u * stats.binom.pmf(m, n, 0.5)
    return torch.as_tensor(np.clip(p, 0.0, 1.0), dtype=torch.float64)


def correlation_pvalue(z: torch.Tensor, direction: torch.Tensor) -> torch.Tensor:
    """Upper-tail p-value of the cosine between each row of ``z: [N, D]`` and ``direction: [N, D]`` or ``[D]``."""
    z = z.detach().to(torch.float64).flatten(1)
    s = direction.detach().to(device=z.device, dtype=torch.float64)
    s = s.expand_as(z) if s.dim() == 1 else s.flatten(1)
    cos = (z * s).sum(1) / (z.norm(dim=1) * s.norm(dim=1)).clamp_min(1e-300)
    d = z.shape[1]
    if d == 1:  # Beta(0, 0) is the law of a fair sign: P(cos >= 1) = 1/2, P(cos >= -1) = 1 (scipy gives NaN)
        return torch.where(cos > 0, 0.5, 1.0).to(device="cpu", dtype=torch.float64)
    a = (d - 1) / 2.0
    p = stats.beta.sf(((1.0 + cos) / 2.0).clamp(0, 1).cpu().numpy(), a, a)
    return torch.as_tensor(p, dtype=torch.float64)
