"""Watermark metrics: bit accuracy, ROC AUC, TPR at fixed FPR, p-value calibration, Gaussianity, detectability.

Every function is pure and returns floats or a dict of floats.

- :func:`bit_accuracy`: mean fraction of correctly decoded bits.
- :func:`roc_auc`: Mann-Whitney estimate ``P(score_marked > score_clean) + P(=)/2`` (:func:`gencore.metrics.roc_auc`).
- :func:`tpr_at_fpr`: TPR when thresholding p-values at the nominal FPR ``alpha`` (valid where the
  p-values are uniform without a mark; the realised FPR is reported beside it).
- :func:`pvalue_calibration`: KS test of clean-image p-values against U(0, 1).
- :func:`gaussianity`: moments to third order and pooled KS against N(0, 1) of marked noise.
- :func:`detectability_auc`: held-out ROC AUC of a logistic-regression classifier trained to
  tell marked noise from ``N(0, I)`` on pixel, squared-pixel and Fourier features. 0.5 means
  undetectable by this classifier, not undetectable by every test.
"""

from __future__ import annotations

import math

import torch
from scipy import stats

from gencore.errors import ConfigError, InputError
from gencore.metrics import roc_auc

__all__ = [
    "bit_accuracy",
    "detectability_auc",
    "gaussianity",
    "psnr",
    "pvalue_calibration",
    "roc_auc",
    "tpr_at_fpr",
]


def bit_accuracy(bits: torch.Tensor, message: torch.Tensor) -> float:
    """Fraction of ``bits: [N, L]`` equal to ``message: [L]`` or ``[N, L]``."""
    if bits.shape[-1] != message.shape[-1]:
        raise InputError(f"decoded bits have {bits.shape[-1]} bits but the message has {message.shape[-1]}.")
    if bits.numel() == 0:
        raise InputError(f"bit_accuracy needs at least one decoded bit, got bits of shape {tuple(bits.shape)}.")
    if message.dim() == 2 and message.shape[0] != bits.shape[0]:
        raise InputError(f"{bits.shape[0]} decoded messages but {message.shape[0]} reference messages.")
    return float((bits.long() == message.long()).double().mean())


def tpr_at_fpr(pvalue_marked: torch.Tensor, pvalue_clean: torch.Tensor, alpha: float) -> dict[str, float]:
    """``tpr`` (p < alpha on marked) and the realised ``fpr`` (p < alpha on clean).

    ``alpha`` must lie in ``(0, 1)``; both sets must be non-empty.
    """
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"the nominal false-positive rate alpha must lie in (0, 1), got {alpha!r}.")
    for name, values in {"pvalue_marked": pvalue_marked, "pvalue_clean": pvalue_clean}.items():
        if values.numel() == 0:
            raise InputError(f"tpr_at_fpr needs a non-empty {name}.")
    return {
        "tpr": float((pvalue_marked < alpha).double().mean()),
        "fpr": float((pvalue_clean < alpha).double().mean()),
    }


def pvalue_calibration(pvalues: torch.Tensor) -> dict[str, float]:
    """KS statistic and p-value of ``pvalues`` against U(0, 1) (at least one p-value, none NaN)."""
    if pvalues.numel() == 0 or bool(torch.isnan(pvalues).any()):
        raise InputError(f"pvalue_calibration needs at least one p-value and no NaN, got {pvalues.numel()} values.")
    res = stats.kstest(pvalues.double().cpu().numpy(), "uniform")
    return {"ks_stat": float(res.statistic), "ks_pvalue": float(res.pvalue)}


def gaussianity(z: torch.Tensor) -> dict[str, float]:
    """Moments to third order of ``z: [N, ...]`` and a pooled KS test against N(0, 1).

    Returns ``mean`` (largest |per-coordinate mean| scaled by ``sqrt(N)``, ~N(0,1)-sized under the
    null), ``var`` (pooled), ``cov_offdiag`` (largest |E z_i z_j| over 64 random pairs, times
    ``sqrt(N)``), ``third`` (pooled ``E z^3``), ``kurtosis`` (pooled excess), ``ks_stat``, ``ks_pvalue``
    and ``norm_ks_pvalue`` (KS of ``|z|`` against chi with ``D`` degrees of freedom).
    """
    x = z.detach().double().flatten(1).cpu()
    n, d = x.shape
    if n == 0 or d == 0:
        raise InputError(f"gaussianity needs at least one draw [N, ...] with N >= 1, got shape {tuple(z.shape)}.")
    g = torch.Generator().manual_seed(0)
    i, j = torch.randint(0, d, (2, 64), generator=g)
    keep = i != j  # none when d = 1: cov_offdiag is then NaN
    pooled = x.flatten().numpy()
    ks = stats.kstest(pooled, "norm")
    norm_ks = stats.kstest(x.norm(dim=1).numpy(), stats.chi(d).cdf)
    return {
        "mean": float(x.mean(0).abs().max() * n**0.5),
        "var": float(x.pow(2).mean()),
        "cov_offdiag": float((x[:, i[keep]] * x[:, j[keep]]).mean(0).abs().max() * n**0.5) if keep.any() else math.nan,
        "third": float(x.pow(3).mean()),
        "kurtosis": float(x.pow(4).mean() / x.pow(2).mean() ** 2 - 3),
        "ks_stat": float(ks.statistic),
        "ks_pvalue": float(ks.pvalue),
        "norm_ks_pvalue": float(norm_ks.pvalue),
    }


def _features(z: torch.Tensor) -> torch.Tensor:
    x = z.detach().double().flatten(2) if z.dim() == 4 else z.detach().double()[:, None]
    spec = torch.fft.fft2(z.detach().double(), norm="ortho").flatten(2) if z.dim() == 4 else torch.fft.fft(x)
    return torch.cat([x, x.pow(2), spec.real, spec.imag, spec.real.pow(2), spec.imag.pow(2)], dim=-1).flatten(1)


def detectability_auc(marked: torch.Tensor, gaussian: torch.Tensor, *, seed: int = 0, steps: int = 300) -> float:
    """Held-out AUC of an L2-regularised logistic classifier (marked vs Gaussian), trained on half of each set."""
    if marked.shape != gaussian.shape:
        raise InputError(f"marked {tuple(marked.shape)} and gaussian {tuple(gaussian.shape)} must have one shape.")
    if marked.dim() < 1 or marked.shape[0] < 2:  # half of each set trains, the other half is held out
        raise InputError(
            f"detectability_auc needs at least 2 draws [N, ...] in each set, got shape {tuple(marked.shape)}."
        )
    fm, fg = _features(marked), _features(gaussian)
    g = torch.Generator().manual_seed(seed)
    n = marked.shape[0]
    perm = torch.randperm(n, generator=g)
    tr, te = perm[: n // 2], perm[n // 2 :]
    xtr = torch.cat([fm[tr], fg[tr]])
    mu, sd = xtr.mean(0), xtr.std(0).clamp_min(1e-6)
    xtr = (xtr - mu) / sd
    ytr = torch.cat([torch.ones(len(tr)), torch.zeros(len(tr))]).double()
    w = torch.zeros(xtr.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(xtr @ w + b, ytr) + 1e-3 * w.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        sm = ((fm[te] - mu) / sd) @ w + b
        sg = ((fg[te] - mu) / sd) @ w + b
    return roc_auc(sm, sg)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean PSNR in dB between image batches ``[N, ...]`` of one shape in ``[-1, 1]`` (peak-to-peak 2)."""
    if a.shape != b.shape or a.dim() < 2 or a.shape[0] < 1:
        raise InputError(f"psnr compares two batches [N, ...] of one shape, got {tuple(a.shape)} and {tuple(b.shape)}.")
    mse = (a.double() - b.double()).pow(2).flatten(1).mean(1).clamp_min(1e-12)
    return float((10 * torch.log10(4.0 / mse)).mean())
