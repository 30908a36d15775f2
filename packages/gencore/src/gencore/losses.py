"""Regression losses of flow matching and denoising score matching.

Flow matching (Lipman et al. 2023, "Flow Matching for Generative Modeling"; Liu et al. 2023; Tong et al.
2024). For a conditional path with ``x_t`` and conditional velocity ``u_t`` (see :mod:`gencore.paths`)::

    L_FM = E_{t, x0, x1} [ w(t) * mean_d (v_theta(x_t, t) - u_t)^2 ],

whose minimiser is the marginal velocity ``E[u_t | x_t]``. A network that predicts the clean data, the
noise or the score instead (declared with ``prediction=``) is converted to a velocity on an affine
Gaussian path before the comparison, so the loss is always the velocity-space loss; since the conversion
is affine in the prediction, this equals the prediction-space loss times ``c(t)^2`` (for data prediction
on the linear path ``c = 1 / (1 - t)``): pass ``weighting`` to rebalance.

Denoising score matching (Vincent 2011, "A Connection Between Score Matching and Denoising
Autoencoders"; Song et al. 2021)::

    L_DSM = E [ lambda(t) * mean_d (s_theta(x_t, t) - grad log p_t(x_t | x1))^2 ],
    grad log p_t(x_t | x1) = -noise / std      (= -x0 / sigma_t on affine paths),

with the usual ``lambda(t) = sigma_t^2`` available as ``weighting="sigma2"``, computed in the stable form
``mean_d (sigma_t s_theta + noise)^2`` (the noise-prediction loss of DDPM).

Both losses call ``model(x_t, t, **cond)`` with ``x_t: [B, ...]`` and ``t: [B]``, average the squared
error over the non-batch dimensions of each sample, multiply by ``w(t): [B]`` and average over the batch
(``reduction="mean"``) or return the ``[B]`` per-sample losses (``reduction="none"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gencore.checks import check_choice
from gencore.errors import ConfigError, InputError
from gencore.nn import expand_like
from gencore.paths.base import PREDICTIONS, PathSample, ProbabilityPath

Weighting = Callable[[torch.Tensor], torch.Tensor]
"""A time weighting ``w(t: [B]) -> [B]`` (or a scalar)."""

REDUCTIONS = ("mean", "none")


def _predict(model: Callable[..., torch.Tensor], sample: PathSample, cond: dict[str, Any]) -> torch.Tensor:
    out = model(sample.x_t, sample.t, **cond)
    if not torch.is_tensor(out) or out.shape != sample.x_t.shape:
        shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
        raise InputError(f"model output must have the shape of x_t {tuple(sample.x_t.shape)}, got {shape}.")
    return out


def _convert(path: ProbabilityPath, out: torch.Tensor, sample: PathSample, src: str, dst: str) -> torch.Tensor:
    if src == dst:
        return out
    convert = getattr(path, "convert", None)
    if convert is None:
        raise ConfigError(
            f"{type(path).__name__} cannot convert {src!r} predictions to {dst!r}; use prediction={dst!r} "
            f"or an AffineGaussianPath."
        )
    return convert(out, sample.x_t, sample.t, src, dst)


def _reduce(per_sample: torch.Tensor, t: torch.Tensor, weighting: Weighting | None, reduction: str) -> torch.Tensor:
    if weighting is not None:
        w = torch.as_tensor(weighting(t), dtype=per_sample.dtype, device=per_sample.device)
        if w.dim() == 0:
            w = w.expand_as(per_sample)
        if w.shape != per_sample.shape:
            raise InputError(
                f"weighting(t) must return a scalar or shape {tuple(per_sample.shape)}, got {tuple(w.shape)}."
            )
        per_sample = w * per_sample
    return per_sample.mean() if reduction == "mean" else per_sample


def _mse(a: torch.Tensor) -> torch.Tensor:
    return a.square().reshape(a.shape[0], -1).mean(dim=1)


def flow_matching_loss(
    model: Callable[..., torch.Tensor],
    path: ProbabilityPath,
    x0: torch.Tensor,
    x1: torch.Tensor,
    t: torch.Tensor | float,
    *,
    prediction: str = "velocity",
    weighting: Weighting | None = None,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
    **cond: Any,
) -> torch.Tensor:
    """Conditional flow-matching loss ``mean_b w(t_b) mean_d (v_theta - u_t)^2``.

    Args:
        model: ``model(x_t, t, **cond) -> [B, ...]`` predicting ``prediction``.
        path: a probability path (``AffineGaussianPath``, ``BrownianBridgePath``, ...).
        x0: ``[B, ...]`` noise / source; x1: ``[B, ...]`` data; t: ``[B]`` times (or a scalar).
        prediction: ``"velocity"`` (default), ``"data"``, ``"noise"`` or ``"score"``; anything but velocity
            needs a path with ``convert`` (affine Gaussian) and divides by ``sigma_t`` or ``alpha_t`` where
            that conversion does (see :mod:`gencore.paths.conversions`).
        weighting: ``w(t) -> [B]``; None means ``w = 1``.
        generator: randomness of stochastic paths (the Brownian bridge's noise).
        reduction: ``"mean"`` (scalar) or ``"none"`` (``[B]``).
    """
    check_choice(prediction, PREDICTIONS, "prediction")
    check_choice(reduction, REDUCTIONS, "reduction")
    sample = path.sample(x0, x1, t, generator=generator)
    v = _convert(path, _predict(model, sample, cond), sample, prediction, "velocity")
    return _reduce(_mse(v - sample.u_t), sample.t, weighting, reduction)


def denoising_score_matching_loss(
    model: Callable[..., torch.Tensor],
    path: ProbabilityPath,
    x0: torch.Tensor,
    x1: torch.Tensor,
    t: torch.Tensor | float,
    *,
    prediction: str = "score",
    weighting: Weighting | str | None = None,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
    **cond: Any,
) -> torch.Tensor:
    """Denoising score matching ``mean_b lambda(t_b) mean_d (s_theta + noise / std)^2`` (Vincent 2011).

    Args:
        model: ``model(x_t, t, **cond) -> [B, ...]`` predicting ``prediction`` (default the score).
        path: a path whose samples carry ``noise`` and ``std`` (affine Gaussian; Brownian bridge with
            ``sigma > 0``).
        x0, x1, t: as in :func:`flow_matching_loss`.
        weighting: None (``lambda = 1``), ``"sigma2"`` (``lambda = std_t^2``, the usual choice, equal to the
            noise-prediction MSE) or a callable ``lambda(t) -> [B]``.
        reduction: ``"mean"`` or ``"none"``.
    """
    check_choice(prediction, PREDICTIONS, "prediction")
    check_choice(reduction, REDUCTIONS, "reduction")
    if isinstance(weighting, str):
        check_choice(weighting, ("sigma2",), "score-matching weighting")
    sample = path.sample(x0, x1, t, generator=generator)
    if sample.noise is None or sample.std is None:
        raise ConfigError(f"{path!r} has no Gaussian noise, so denoising score matching is undefined.")
    score = _convert(path, _predict(model, sample, cond), sample, prediction, "score")
    std = expand_like(sample.std.to(score.dtype), score)
    if weighting == "sigma2":
        return _reduce(_mse(std * score + sample.noise), sample.t, None, reduction)
    return _reduce(_mse(score + sample.noise / std), sample.t, weighting, reduction)  # type: ignore[arg-type]
