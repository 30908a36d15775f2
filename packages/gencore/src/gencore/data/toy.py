"""Seeded 2-D toy distributions for flow-matching and diffusion experiments.

The five sets follow the toy benchmarks popularised by FFJORD (Grathwohl, Chen,
Bettencourt, Sutskever & Duvenaud, "FFJORD: Free-form continuous dynamics for
scalable reversible generative models", ICLR 2019) and reused by torchcfm (Tong et
al., "Improving and generalizing flow-based generative models with minibatch optimal
transport", TMLR 2024), at a comparable scale (coordinates within about +-4, per-axis
standard deviation between ~1 and ~2.3). Our parametrisations, written out below:

- ``8gaussians``: centres ``R (cos(k pi/4), sin(k pi/4))``, ``k = 0..7``, ``R = 2 sqrt(2)``;
  isotropic Gaussian noise, std ``sqrt(2)/4``; each point picks a centre uniformly.
- ``moons``: two interleaved half circles (upper ``(cos a, sin a)``, lower
  ``(1 - cos a, 0.5 - sin a)``, ``a ~ U[0, pi]``) with Gaussian noise 0.1, then
  ``2 (p - (0.5, 0.25))`` so the mixture is centred.
- ``checkerboard``: uniform on the 8 cells ``(i, j)`` of a 4 x 4 board of side-2
  squares covering ``[-4, 4]^2`` with ``i + j`` even, cell ``(i, j) = [2i - 4, 2i - 2) x [2j - 4, 2j - 2)``.
- ``spirals``: two arms ``r (cos a, sin a) / 3`` with ``a = r = 3 pi sqrt(u)``, ``u ~ U[0, 1]``,
  the second arm rotated by ``pi``; Gaussian noise 0.1.
- ``rings``: four concentric circles of radii 0.75, 1.5, 2.25, 3 (a ring chosen uniformly,
  angle uniform); radial Gaussian noise 0.08.

Each sampler draws i.i.d. points: ``sample_<name>(n, generator=None)`` returns float32
``[n, 2]`` on the CPU; ``generator`` is a ``torch.Generator``, an int seed, or None
(torch's global RNG).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gencore.checks import check_int
from gencore.errors import ConfigError, InputError

GeneratorLike = torch.Generator | int | None


def as_generator(generator: GeneratorLike = None, *, seed: int | None = None) -> torch.Generator | None:
    """Resolve ``generator`` / ``seed`` to a CPU ``torch.Generator`` (None means torch's global RNG).

    An int ``generator`` (Python or NumPy) is taken as a seed. Passing both a generator and
    ``seed`` is a :class:`ConfigError`.
    """
    if seed is not None and generator is not None:
        raise ConfigError("pass either seed or generator, not both.")
    if seed is not None:
        return torch.Generator().manual_seed(check_int(seed, "seed"))
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    try:
        value = check_int(generator, "generator")
    except ConfigError:
        raise ConfigError(
            f"generator must be a torch.Generator, an int seed or None, got {type(generator).__name__}."
        ) from None
    return torch.Generator().manual_seed(value)


def _check_n(n: int) -> int:
    return check_int(n, "n (the number of samples)", low=0, error=InputError)


def _randn(n: int, d: int, g: torch.Generator | None) -> torch.Tensor:
    return torch.randn(n, d, generator=g, dtype=torch.float64)


def _rand(n: int, g: torch.Generator | None) -> torch.Tensor:
    return torch.rand(n, generator=g, dtype=torch.float64)


def _randint(high: int, n: int, g: torch.Generator | None) -> torch.Tensor:
    return torch.randint(high, (n,), generator=g)


def _unit(angle: torch.Tensor) -> torch.Tensor:
    return torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)


def sample_8gaussians(n: int, generator: GeneratorLike = None) -> torch.Tensor:
    """Mixture of 8 Gaussians on a circle of radius ``2 sqrt(2)``, std ``sqrt(2)/4``: float32 ``[n, 2]``."""
    n = _check_n(n)
    g = as_generator(generator)
    k = _randint(8, n, g).to(torch.float64)
    centres = 2.0 * math.sqrt(2.0) * _unit(k * (math.pi / 4))
    return (centres + (math.sqrt(2.0) / 4) * _randn(n, 2, g)).float()


def sample_moons(n: int, generator: GeneratorLike = None) -> torch.Tensor:
    """Two interleaved half circles with noise 0.1, centred and scaled by 2: float32 ``[n, 2]``."""
    n = _check_n(n)
    g = as_generator(generator)
    lower = _randint(2, n, g).bool()
    a = math.pi * _rand(n, g)
    upper_pts = _unit(a)
    lower_pts = torch.stack([1.0 - torch.cos(a), 0.5 - torch.sin(a)], dim=1)
    p = torch.where(lower[:, None], lower_pts, upper_pts) + 0.1 * _randn(n, 2, g)
    return (2.0 * (p - torch.tensor([0.5, 0.25], dtype=torch.float64))).float()


def sample_checkerboard(n: int, generator: GeneratorLike = None) -> torch.Tensor:
    """Uniform on the 8 cells with ``i + j`` even of a 4 x 4 board on ``[-4, 4]^2``: float32 ``[n, 2]``."""
    n = _check_n(n)
    g = as_generator(generator)
    cell = _randint(8, n, g)
    i = cell // 2  # column 0..3
    j = 2 * (cell % 2) + (i % 2)  # row with i + j even
    corner = torch.stack([2.0 * i - 4.0, 2.0 * j - 4.0], dim=1).to(torch.float64)
    u = torch.stack([_rand(n, g), _rand(n, g)], dim=1)
    return (corner + 2.0 * u).float()


def sample_spirals(n: int, generator: GeneratorLike = None) -> torch.Tensor:
    """Two-armed spiral (arms rotated by pi), noise 0.1, radius up to ~pi: float32 ``[n, 2]``."""
    n = _check_n(n)
    g = as_generator(generator)
    arm = _randint(2, n, g).to(torch.float64)
    r = 3.0 * math.pi * torch.sqrt(_rand(n, g))
    pts = (r / 3.0)[:, None] * _unit(r + math.pi * arm)
    return (pts + 0.1 * _randn(n, 2, g)).float()


RING_RADII = (0.75, 1.5, 2.25, 3.0)


def sample_rings(n: int, generator: GeneratorLike = None) -> torch.Tensor:
    """Four concentric circles (radii 0.75, 1.5, 2.25, 3), radial noise 0.08: float32 ``[n, 2]``."""
    n = _check_n(n)
    g = as_generator(generator)
    radii = torch.tensor(RING_RADII, dtype=torch.float64)[_randint(len(RING_RADII), n, g)]
    a = 2.0 * math.pi * _rand(n, g)
    r = radii + 0.08 * _randn(n, 1, g)[:, 0]
    return (r[:, None] * _unit(a)).float()


_SAMPLERS: dict[str, Callable[[int, GeneratorLike], torch.Tensor]] = {
    "8gaussians": sample_8gaussians,
    "moons": sample_moons,
    "checkerboard": sample_checkerboard,
    "spirals": sample_spirals,
    "rings": sample_rings,
}
TOY_DATASETS: tuple[str, ...] = tuple(_SAMPLERS)


def toy_dataset(
    name: str, n: int, *, seed: int | None = None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Draw ``n`` points of the toy distribution ``name`` (one of :data:`TOY_DATASETS`): float32 ``[n, 2]``.

    Same ``seed`` gives the same points; with neither ``seed`` nor ``generator``, torch's
    global RNG is used. Unknown names raise :class:`ConfigError` listing the valid ones.
    """
    if name not in _SAMPLERS:
        raise ConfigError(f"unknown toy dataset {name!r}; expected one of: {', '.join(TOY_DATASETS)}.")
    return _SAMPLERS[name](n, as_generator(generator, seed=seed))
