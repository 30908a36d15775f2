"""Interchangeable SE(3) strategies for coordinate flow matching on molecules.

All three train a velocity on the linear path ``x_t = t x1 + (1 - t) x0`` (gencore's
``AffineGaussianPath(LinearSchedule())``) from centred Gaussian noise ``x0`` to a centred,
randomly rotated molecule ``x1``, and differ in what the loss sees and how the sampler moves:

* ``com`` (baseline, EDM / E(3)-equivariant flow matching): centre-of-mass removal only; the loss
  is the full squared error ``|v - u|^2``.
* ``kabsch`` (the common heuristic, e.g. Klein et al. 2023 "Equivariant flow matching", ET-Flow's
  rotational alignment): the data are Kabsch-rotated onto their noise before the path is built,
  which shortens the paths; loss as ``com``. There is no sampler that accounts for the alignment,
  so the sampled law is not guaranteed to be the target's.
* ``quotient`` (Xu et al., "Quotient-Space Diffusion Models", ICLR 2026): the loss penalises only
  the horizontal component ``|P_h(x_t)(v - u)|^2``, so the network may output any motion along the
  SE(3) orbit; the ODE sampler follows ``P_h v`` and the SDE sampler injects horizontal noise plus the
  mean-curvature correction ``-(g^2/2) H(x)`` (see :mod:`genmol.se3`), which keeps it exact on the
  quotient.
* ``quotient-aligned`` (our variant, not in the paper): the ``quotient`` loss and samplers on the
  ``kabsch`` pairs. A Kabsch-aligned straight path is horizontal at every point (``sum_i x0_i x x1_i = 0``
  after alignment, so ``P_h(x_t)(x1 - x0) = x1 - x0``): it is the horizontal lift of the geodesic between
  the two classes in the quotient. The target is then horizontal and the projected loss frees the network
  from predicting zero vertical motion. The ODE stays exact (any coupling of noise and data gives a valid
  flow); the SDE's score-from-velocity identity assumes independent noise, so with this coupling the
  SDE sampler is approximate, as it is for ``kabsch``.
"""

from __future__ import annotations

import torch

from gencore.errors import ConfigError
from genmol.metrics.rmsd import kabsch_align
from genmol.se3 import center, horizontal_projection, mean_curvature

STRATEGIES = ("com", "kabsch", "quotient", "quotient-aligned")


def check_strategy(name: str) -> str:
    if name not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {', '.join(STRATEGIES)}, got {name!r}.")
    return name


def is_quotient(strategy: str) -> bool:
    """Whether the loss and the samplers work on the quotient (horizontal projections)."""
    return strategy in ("quotient", "quotient-aligned")


def pair(strategy: str, x0: torch.Tensor, x1: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The (noise, data) endpoints of the path: both centred; ``kabsch`` and ``quotient-aligned`` rotate
    the data onto the noise."""
    x0, x1 = center(x0, mask), center(x1, mask)
    if strategy in ("kabsch", "quotient-aligned"):
        x1 = kabsch_align(x1, x0, mask).detach()
    return x0, x1


def coordinate_error(
    strategy: str, velocity: torch.Tensor, target: torch.Tensor, x_t: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per-molecule squared error ``[B]``, summed over coordinates and averaged over atoms."""
    diff = (velocity - target) * mask[..., None]
    if is_quotient(strategy):
        diff = horizontal_projection(x_t, diff, mask)
    else:
        diff = center(diff, mask)  # the CoM component never moves a centred molecule
    return diff.pow(2).sum((1, 2)) / mask.sum(1).clamp_min(1.0)


def drift(strategy: str, velocity: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The ODE drift: the velocity without its CoM part (quotient strategies: its horizontal part)."""
    if is_quotient(strategy):
        return horizontal_projection(x, velocity, mask)
    return center(velocity, mask)


def sde_step(
    strategy: str,
    velocity: torch.Tensor,
    x: torch.Tensor,
    t: float,
    dt: float,
    mask: torch.Tensor,
    noise_scale: float,
    generator: torch.Generator | None,
    noise_transform: torch.Tensor | None = None,
) -> torch.Tensor:
    """One Euler-Maruyama step of ``dx = [v + (g^2/2) s] dt + g dW`` with ``g^2 = noise_scale (1 - t)``.

    The score of the linear path is ``s = (t v - x) / (1 - t)``, so ``(g^2/2) s = -(noise_scale/2)(x - t v)``.
    The quotient strategies inject horizontal noise ``g P_h(x) dW`` and add the correction ``-(g^2/2) H(x)``;
    the others inject centred Euclidean noise.

    With a harmonic prior (``noise_transform = A``, ``A A^T = Sigma`` over the atoms) the step is the
    preconditioned SDE ``dx = [v + (g^2/2) Sigma s] dt + g A dW``, which keeps the path's marginals because
    ``Sigma`` is constant; for the linear path ``Sigma s = (t v - x) / (1 - t)``, the same drift as above.
    Every strategy then injects centred ``A dW`` and no curvature term: the quotient strategies' drift
    differs from the Euclidean process's only by motion along the orbit, which does not change the law on
    the quotient when drift and noise are rotation-equivariant (``A`` acts on atoms, not on axes).
    """
    v = drift(strategy, velocity, x, mask)
    g2 = noise_scale * (1.0 - t)
    d = v - 0.5 * noise_scale * (x - t * v)
    eps = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)  # CPU stream: same draws on any device
    if noise_transform is not None:
        noise = center(noise_transform.to(x.dtype) @ eps, mask)
    elif is_quotient(strategy):
        d = d - 0.5 * g2 * mean_curvature(x, mask)
        noise = horizontal_projection(x, eps, mask)
    else:
        noise = center(eps, mask)
    return (x + d * dt + (g2 * dt) ** 0.5 * noise) * mask[..., None]
