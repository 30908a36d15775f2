"""A key-derived orthogonal rotation of R^D that is never stored as a matrix.

``R = G_L P_L ... G_1 P_1``: each layer permutes the coordinates with a key-derived
permutation ``P_i`` and then rotates consecutive pairs ``(x_{2j}, x_{2j+1})`` by key-derived
Givens angles ``G_i`` (an odd last coordinate is left as is). Every factor is orthogonal, so
``R`` is exactly orthogonal and ``R^{-1} = R^T`` is applied by running the layers backwards
with negated angles. After ``L = 3 ceil(log2 D)`` layers every output coordinate depends on
every input coordinate. Cost ``O(L D)`` time and ``L D`` stored integers/angles; a dense Haar
matrix at ``D = 16384`` would be ``16384^2`` float32 = 1 GiB and ``O(D^2)`` per vector.

Between layers the vector is kept in a *split layout* (the first members of all pairs, then
the second members, then the odd coordinate), and each permutation is composed with that
layout once, at construction: a layer is then one gather and two fused multiply-adds, with
no interleaving. The layout changes the arithmetic's order, not ``R``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from genimage.watermark.keys import derive_generator

__all__ = ["KeyRotation"]


@dataclass
class _Tables:
    gathers: list[torch.Tensor]
    scatters: list[torch.Tensor]
    trig: list[tuple[torch.Tensor, torch.Tensor]]
    to_natural: torch.Tensor
    from_natural: torch.Tensor


class KeyRotation:
    """Orthogonal ``R`` on vectors ``[N, D]`` derived from ``(seed, purpose)``.

    Example:
        >>> rot = KeyRotation(1024, seed=3)
        >>> x = torch.randn(2, 1024, dtype=torch.float64)
        >>> bool(torch.allclose(rot.inverse(rot.apply(x)), x))
        True
    """

    def __init__(self, dim: int, seed: int, *, layers: int | None = None, purpose: str = "rotation") -> None:
        self.dim = int(dim)
        self.layers = int(layers) if layers is not None else 3 * max(1, math.ceil(math.log2(max(self.dim, 2))))
        g = derive_generator(seed, purpose)
        self.perms = [torch.randperm(self.dim, generator=g) for _ in range(self.layers)]
        half = self.dim // 2
        self.angles = [2 * math.pi * torch.rand(half, generator=g, dtype=torch.float64) for _ in range(self.layers)]
        # natural index -> split-layout position: 2j -> j, 2j + 1 -> half + j, an odd last index stays last
        natural = torch.arange(self.dim)
        to_split = torch.where(natural % 2 == 0, natural // 2, half + natural // 2)
        if self.dim % 2:
            to_split[-1] = self.dim - 1
        split_order = torch.cat((natural[0 : 2 * half : 2], natural[1 : 2 * half : 2], natural[2 * half :]))
        # layer i gathers, from the previous layer's split layout, its permuted input in split layout
        previous = [natural] + [to_split] * (self.layers - 1)
        self._gathers = [prev[perm[split_order]] for prev, perm in zip(previous, self.perms)]
        self._scatters = [torch.argsort(idx) for idx in self._gathers]
        self._to_natural = to_split  # the last layer's split layout -> natural order
        self._from_natural = split_order
        self._cache: dict[tuple[torch.dtype, torch.device], _Tables] = {}

    def _tables(self, like: torch.Tensor) -> _Tables:
        """Index tables and ``[D/2, 1]`` cos/sin columns on ``like``'s device and dtype (built once each)."""
        key = (like.dtype, like.device)
        if key not in self._cache:
            dev = like.device
            trig = [
                (torch.cos(a).to(dev, like.dtype)[:, None], torch.sin(a).to(dev, like.dtype)[:, None])
                for a in self.angles
            ]
            self._cache[key] = _Tables(
                gathers=[g.to(dev) for g in self._gathers],
                scatters=[s.to(dev) for s in self._scatters],
                trig=trig,
                to_natural=self._to_natural.to(dev),
                from_natural=self._from_natural.to(dev),
            )
        return self._cache[key]

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``R x`` for ``x: [N, D]``."""
        t, m = self._tables(x), self.dim // 2
        v = x.T  # [D, N]: gathers move whole rows
        for gather, (c, s) in zip(t.gathers, t.trig):
            v = v.index_select(0, gather)
            a, b = v[:m], v[m : 2 * m]
            v = torch.cat((c * a - s * b, s * a + c * b, v[2 * m :]))
        return v.index_select(0, t.to_natural).T.contiguous()

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """``R^T y`` for ``y: [N, D]``."""
        t, m = self._tables(y), self.dim // 2
        v = y.T.index_select(0, t.from_natural)
        for scatter, (c, s) in zip(reversed(t.scatters), reversed(t.trig)):
            a, b = v[:m], v[m : 2 * m]
            v = torch.cat((c * a + s * b, c * b - s * a, v[2 * m :])).index_select(0, scatter)
        return v.T.contiguous()

    def matrix(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The dense ``[D, D]`` matrix (for tests and the dense benchmark only; ``O(D^2)`` memory)."""
        return self.apply(torch.eye(self.dim, dtype=dtype)).T
