"""Adaptive Dormand-Prince 5(4) solver with error control.

Dormand & Prince 1980, "A family of embedded Runge-Kutta formulae"; step control and
initial step selection as in Hairer, Norsett & Wanner, "Solving Ordinary Differential
Equations I" (1993), II.4 (the ``DOPRI5`` code).

One step of size ``h`` from ``(t, x)`` uses seven stages ``k_1..k_7``; the fifth-order
solution ``x' = x + h sum_i b_i k_i`` is propagated (local extrapolation) and the embedded
fourth-order solution gives the error estimate ``e = h sum_i (b_i - b*_i) k_i``. The last
stage is ``k_7 = f(x', t + h)``, which is the first stage of the next step (FSAL), so an
attempted step costs 6 evaluations.

Error norm (Hairer's RMS norm over every element of the batch):

    err = sqrt(mean((e / (atol + rtol * max(|x|, |x'|)))^2)).

A step is accepted when ``err <= 1``. The next step is
``h * clip(safety * err^(-1/5), min_factor, max_factor)`` (no growth right after a
rejection). The first step follows Hairer's heuristic (two evaluations: ``f(x0, t0)`` and
one explicit Euler probe), unless ``first_step`` is given. Hence
``nfe = 2 + 6 * (accepted + rejected)`` (``1 + 6 * ...`` with ``first_step``).

The whole batch shares one step size (like torchdiffeq). Integration may run backwards
(``t1 < t0``). Autograd is never disabled; gradients flow through the accepted steps
(step-size decisions are taken on detached values).
"""

from __future__ import annotations

import math

import torch

from gencore.errors import ConfigError, ConvergenceError, InputError
from gencore.solvers.fixed_step import ODESolution, VectorField, _grid_dtype, check_field_output

__all__ = ["dopri5"]

# Butcher tableau of Dormand-Prince 5(4).
_C = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_B = _A[6]  # fifth-order weights (= last row: FSAL)
_B_STAR = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)
_E = tuple(b - bs for b, bs in zip((*_B, 0.0), _B_STAR))  # b - b*, 7 entries


def _rms(z: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(z.detach().double() ** 2)))


def _scaled_rms(z: torch.Tensor, scale: torch.Tensor) -> float:
    """RMS of ``z / scale``; an exact zero counts as zero even where ``scale`` is zero (``atol = 0``, zero state)."""
    z = z.detach()
    return _rms(torch.where(z == 0, torch.zeros_like(z), z / scale))


def _weighted(h: float, coeffs: tuple[float, ...], ks: list[torch.Tensor]) -> torch.Tensor | None:
    """``h * sum_i coeffs_i k_i`` over the non-zero coefficients (``None`` when all are zero)."""
    acc = None
    for c, k in zip(coeffs, ks):
        if c != 0.0:
            acc = c * k if acc is None else acc + c * k
    return None if acc is None else h * acc


def _combine(x: torch.Tensor, h: float, coeffs: tuple[float, ...], ks: list[torch.Tensor]) -> torch.Tensor:
    inc = _weighted(h, coeffs, ks)
    return x if inc is None else x + inc


def dopri5(
    f: VectorField,
    x0: torch.Tensor,
    t0: float = 0.0,
    t1: float = 1.0,
    *,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    first_step: float | None = None,
    max_steps: int = 10_000,
    safety: float = 0.9,
    min_factor: float = 0.2,
    max_factor: float = 10.0,
    return_trajectory: bool = False,
) -> ODESolution:
    """Integrate ``dx/dt = f(x, t)`` from ``t0`` to ``t1`` with adaptive Dormand-Prince 5(4).

    Args:
        f: vector field ``f(x, t)`` with ``x: [B, ...]`` and ``t`` a 0-dim tensor.
        x0: state at ``t0``, ``[B, ...]``.
        t0, t1: start and end times (``t1 < t0`` integrates backwards).
        rtol, atol: relative and absolute tolerances of the local error (see module docstring).
        first_step: initial ``|h|``; chosen by Hairer's heuristic when ``None``.
        max_steps: maximum number of attempted steps; exceeding it raises
            :class:`~gencore.errors.ConvergenceError`.
        safety, min_factor, max_factor: step-size controller constants.
        return_trajectory: also return the states at the accepted times.

    Returns:
        :class:`ODESolution`; ``times`` are the accepted times (``t0`` first, ``t1`` last).

    Example:
        >>> sol = dopri5(lambda x, t: -x, torch.ones(4, 2), 0.0, 1.0, rtol=1e-8, atol=1e-8)
        >>> round(float(sol.x[0, 0]), 6)
        0.367879
    """
    if not torch.is_tensor(x0) or not x0.is_floating_point():
        raise InputError("x0 must be a floating-point torch.Tensor of shape [B, ...].")
    t0, t1 = float(t0), float(t1)
    if not (math.isfinite(t0) and math.isfinite(t1)):
        raise InputError(f"t0 and t1 must be finite, got t0={t0}, t1={t1}.")
    if not (rtol >= 0 and atol >= 0 and rtol + atol > 0):
        raise ConfigError(f"rtol and atol must be >= 0 and not both 0, got rtol={rtol}, atol={atol}.")
    if not (0 < safety <= 1 and 0 < min_factor <= 1 <= max_factor):
        raise ConfigError("need 0 < safety <= 1 and 0 < min_factor <= 1 <= max_factor.")
    if max_steps < 1:
        raise ConfigError(f"max_steps must be >= 1, got {max_steps}.")
    tdtype = _grid_dtype(x0)

    def tt(value: float) -> torch.Tensor:
        return torch.full((), value, dtype=tdtype, device=x0.device)

    times = [t0]
    traj = [x0] if return_trajectory else None
    if t0 == t1:
        return ODESolution(
            x0,
            0,
            torch.tensor(times, dtype=tdtype, device=x0.device),
            torch.stack(traj) if traj is not None else None,
            0,
            0,
        )
    direction = 1.0 if t1 > t0 else -1.0
    span = abs(t1 - t0)

    x = x0
    k1 = check_field_output(f(x, tt(t0)), x)
    nfe = 1
    if first_step is None:
        h_abs, nfe_init = _initial_step(f, x, k1, t0, direction, rtol, atol, tt)
        nfe += nfe_init
    else:
        if not first_step > 0:
            raise ConfigError(f"first_step must be > 0, got {first_step}.")
        h_abs = float(first_step)
    h_abs = min(h_abs, span)

    t = t0
    n_acc = n_rej = 0
    rejected_last = False
    while True:
        if n_acc + n_rej >= max_steps:
            raise ConvergenceError(
                f"dopri5 reached max_steps={max_steps} at t={t:.6g} before t1={t1:.6g} "
                f"(rtol={rtol}, atol={atol}); raise max_steps or loosen the tolerances."
            )
        remaining = abs(t1 - t)
        last = h_abs >= remaining * (1.0 - 1e-12)
        if last:
            h_abs = remaining
        h = direction * h_abs
        ks = [k1]
        for i in range(1, 6):
            xi = _combine(x, h, _A[i], ks)
            ks.append(f(xi, tt(t + _C[i] * h)))
        t_new = t1 if last else t + h
        x_new = _combine(x, h, _B, ks)
        k7 = f(x_new, tt(t_new))
        ks.append(k7)
        nfe += 6
        err_vec = _weighted(h, _E, ks)
        scale = atol + rtol * torch.maximum(x.detach().abs(), x_new.detach().abs())
        err = _scaled_rms(err_vec, scale)
        if not math.isfinite(err):
            err = math.inf
        if err <= 1.0:
            n_acc += 1
            t, x, k1 = t_new, x_new, k7
            times.append(t)
            if traj is not None:
                traj.append(x)
            if last:
                break
            factor = max_factor if err == 0 else min(max_factor, max(min_factor, safety * err**-0.2))
            if rejected_last:
                factor = min(factor, 1.0)
            h_abs *= factor
            rejected_last = False
        else:
            n_rej += 1
            factor = min_factor if not math.isfinite(err) else max(min_factor, safety * err**-0.2)
            h_abs *= min(factor, 1.0)
            rejected_last = True
            if h_abs <= 1e-14 * max(1.0, abs(t)):
                raise ConvergenceError(
                    f"dopri5 step size underflow at t={t:.6g} (error norm {err:.3g}); the vector field "
                    "may be stiff or produce non-finite values."
                )
    return ODESolution(
        x=x,
        nfe=nfe,
        times=torch.tensor(times, dtype=tdtype, device=x0.device),
        trajectory=torch.stack(traj) if traj is not None else None,
        n_accepted=n_acc,
        n_rejected=n_rej,
    )


def _initial_step(f, x0, f0, t0, direction, rtol, atol, tt) -> tuple[float, int]:
    """Hairer's starting step (Solving ODEs I, II.4): returns ``(|h|, evaluations used)``."""
    scale = atol + rtol * x0.detach().abs()
    d0 = _scaled_rms(x0, scale)
    d1 = _scaled_rms(f0, scale)
    # the ratios are inf where a zero component has zero tolerance (atol = 0): fall back to a small step
    usable = 1e-5 <= d0 < math.inf and 1e-5 <= d1 < math.inf
    h0 = 0.01 * d0 / d1 if usable else 1e-6
    x1 = x0.detach() + (direction * h0) * f0.detach()
    f1 = f(x1, tt(t0 + direction * h0))
    d2 = _scaled_rms(f1 - f0, scale) / h0
    if max(d1, d2) <= 1e-15:
        h1 = max(1e-6, h0 * 1e-3)
    else:
        h1 = (0.01 / max(d1, d2)) ** (1.0 / 5.0)
    h = min(100.0 * h0, h1)
    return (h if 0.0 < h < math.inf else 1e-6), 1
