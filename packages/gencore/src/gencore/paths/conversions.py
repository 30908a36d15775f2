"""Conversions between the four things a network on an affine Gaussian path can predict.

For ``x_t = alpha x1 + sigma eps`` (``eps = x0 ~ N(0, I)``) the four predictions are

    data      x1_hat
    noise     eps_hat
    velocity  v   = d_alpha x1_hat + d_sigma eps_hat
    score     s   = -eps_hat / sigma        (score of the marginal p_t(x_t), by Tweedie's formula)

All twelve directions go through the pair ``(x1_hat, eps_hat)``, which is recovered from any one prediction
and ``x_t`` by solving the 2x2 linear system ``[alpha sigma; d_alpha d_sigma] [x1; eps] = [x_t; v]``
(Lipman et al. 2024, "Flow Matching Guide and Code", sec. 4.8; Kingma et al. 2021). The system is
singular where the answer is undefined: from noise/score to data divides by ``alpha`` (``t = 0`` of the
linear path), from data to noise/score divides by ``sigma`` (``t = 1``), and from velocity divides by
``alpha d_sigma - sigma d_alpha`` (nonzero for every schedule in :mod:`gencore.paths.schedules`; where
``d_sigma`` is infinite, VP at ``t = 1``, the limits ``x1 = x_t / alpha`` and ``eps = 0`` are returned).
Because each conversion is affine in the prediction, it commutes with conditional expectations: the
Bayes-optimal prediction in one space converts to the Bayes-optimal prediction in another.
"""

from __future__ import annotations

import torch

from gencore.checks import check_choice
from gencore.paths.base import PREDICTIONS
from gencore.paths.schedules import ScheduleOutput


def to_data_and_noise(
    pred: torch.Tensor, x_t: torch.Tensor, coeffs: ScheduleOutput, src: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Recover ``(x1_hat, eps_hat)`` from a prediction of kind ``src``.

    ``coeffs`` must broadcast against ``x_t`` (use :meth:`ScheduleOutput.like`).
    """
    check_choice(src, PREDICTIONS, "prediction")
    a, s, da, ds = coeffs.alpha, coeffs.sigma, coeffs.d_alpha, coeffs.d_sigma
    if src == "data":
        return pred, (x_t - a * pred) / s
    if src == "noise":
        return (x_t - s * pred) / a, pred
    if src == "score":
        eps = -s * pred
        return (x_t - s * eps) / a, eps
    # src == "velocity". d_sigma is infinite where sigma = 0 on a variance-preserving schedule (VP at t = 1):
    # there x_t = alpha x1, and v = d_alpha x1 + d_sigma eps is finite only with eps = 0, the formula's limits.
    # Those rows take the limits; finite stand-ins (for d_sigma there, for alpha elsewhere) keep inf and NaN out
    # of the branch not taken, whose gradient torch.where would otherwise multiply by zero into NaN.
    inf = torch.isinf(ds)
    ds = torch.where(inf, -torch.ones_like(ds), ds)
    det = a * ds - s * da
    x1 = torch.where(inf, x_t / torch.where(inf, a, torch.ones_like(a)), (ds * x_t - s * pred) / det)
    return x1, torch.where(inf, torch.zeros_like(pred), (a * pred - da * x_t) / det)


def from_data_and_noise(x1: torch.Tensor, eps: torch.Tensor, coeffs: ScheduleOutput, dst: str) -> torch.Tensor:
    """Express ``(x1_hat, eps_hat)`` as a prediction of kind ``dst``."""
    check_choice(dst, PREDICTIONS, "prediction")
    if dst == "data":
        return x1
    if dst == "noise":
        return eps
    if dst == "score":
        return -eps / coeffs.sigma
    return coeffs.d_alpha * x1 + coeffs.d_sigma * eps


def convert_prediction(
    pred: torch.Tensor, x_t: torch.Tensor, coeffs: ScheduleOutput, src: str, dst: str
) -> torch.Tensor:
    """Convert ``pred: [B, ...]`` of kind ``src`` at ``x_t: [B, ...]`` into kind ``dst``.

    ``src`` and ``dst`` are among ``"velocity", "data", "noise", "score"``; ``src == dst`` returns ``pred``.
    """
    check_choice(src, PREDICTIONS, "prediction")
    check_choice(dst, PREDICTIONS, "prediction")
    if src == dst:
        return pred
    x1, eps = to_data_and_noise(pred, x_t, coeffs, src)
    return from_data_and_noise(x1, eps, coeffs, dst)
