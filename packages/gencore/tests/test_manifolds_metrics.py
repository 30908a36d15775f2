"""Geodesic-kernel MMD: the unbiased estimator against a direct computation with arccos distances on the sphere,
bandwidth validation, and the median heuristic on a degenerate reference set."""

from __future__ import annotations

import math

import pytest
import torch

from gencore.errors import InputError
from gencore.manifolds import Sphere, Torus, geodesic_mmd


def _direct_unbiased_mmd(x: torch.Tensor, y: torch.Tensor, hs: list[float]) -> float:
    def k(a, b):
        d2 = torch.acos((a @ b.T).clamp(-1, 1)).square()
        return sum(torch.exp(-d2 / (2 * h**2)) for h in hs)

    n, m = x.shape[0], y.shape[0]
    kxx, kyy = k(x, x), k(y, y)
    kxx = (kxx.sum() - kxx.diagonal().sum()) / (n * (n - 1))
    kyy = (kyy.sum() - kyy.diagonal().sum()) / (m * (m - 1))
    return float(kxx + kyy - 2 * k(x, y).mean())


def test_unbiased_geodesic_mmd_on_the_sphere_matches_a_direct_computation():
    s2 = Sphere(2)
    g = torch.Generator().manual_seed(0)
    x = s2.random_base(40, generator=g, dtype=torch.float64)
    y = s2.projx(s2.random_base(30, generator=g, dtype=torch.float64) + torch.tensor([0.0, 0.0, 1.0]))
    hs = [0.3, 1.1]
    assert math.isclose(geodesic_mmd(s2, x, y, bandwidths=hs), _direct_unbiased_mmd(x, y, hs), rel_tol=1e-9)


@pytest.mark.parametrize("bandwidths", [[0.0], [-0.5], [float("nan")], [1.0, float("inf")]])
def test_bad_bandwidths_are_refused(bandwidths):
    # 0 raised a bare ZeroDivisionError, a negative one was silently used as its absolute value, NaN gave NaN
    s2 = Sphere(2)
    x = s2.random_base(8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with pytest.raises(InputError, match="bandwidths"):
        geodesic_mmd(s2, x, x.flip(0), bandwidths=bandwidths)


def test_a_reference_set_of_one_repeated_point_uses_unit_bandwidths():
    # its median geodesic distance is 0: the default bandwidths were -0.5 / 0^2, a ZeroDivisionError
    t2 = Torus(2)
    x = t2.random_base(8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y = x[:1].expand(6, -1)
    expected = geodesic_mmd(t2, x, y, bandwidths=[0.125, 0.25, 0.5, 1.0])
    assert geodesic_mmd(t2, x, y) == expected and expected > 0
