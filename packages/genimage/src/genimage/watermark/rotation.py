"""A key-derived orthogonal rotation of R^D that is never stored as a matrix.

``R = G_L P_L ... G_1 P_1``: each layer permutes the coordinates with a key-derived
permutation ``P_i`` and then rotates consecutive pairs ``(x_{2j}, x_{2j+1})`` by key-derived
Givens angles ``G_i`` (an odd last coordinate is left as is). Every factor is orthogonal, so
``R`` is exactly orthogonal and ``R^{-1} = R^T`` is applied by running the layers backwards
with negated angles. After ``L = 3 ceil(log2 D)`` layers every output coordinate depends on
every input coordinate. Cost ``O(L D)`` time and ``L D`` stored integers/angles; a dense Haar
matrix at ``D = 16384`` would be ``16384^2`` float32 = 1 GiB and ``O(D^2)`` per vector.
"""

from __future__ import annotations

import math

import torch

from genimage.watermark.keys import derive_generator

__all__ = ["KeyRotation"]


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
        self.inv_perms = [torch.argsort(p) for p in self.perms]
        half = self.dim // 2
        self.angles = [2 * math.pi * torch.rand(half, generator=g, dtype=torch.float64) for _ in range(self.layers)]

    def _givens(self, x: torch.Tensor, angle: torch.Tensor, sign: float) -> torch.Tensor:
        m = self.dim // 2
        pairs = x[:, : 2 * m].reshape(x.shape[0], m, 2)
        c = torch.cos(angle).to(x.dtype)
        s = sign * torch.sin(angle).to(x.dtype)
        a, b = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((c * a - s * b, s * a + c * b), dim=-1).reshape(x.shape[0], 2 * m)
        return torch.cat((rotated, x[:, 2 * m :]), dim=1) if self.dim % 2 else rotated

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """``R x`` for ``x: [N, D]``."""
        for perm, angle in zip(self.perms, self.angles):
            x = self._givens(x[:, perm.to(x.device)], angle.to(x.device), 1.0)
        return x

    def inverse(self, y: torch.Tensor) -> torch.Tensor:
        """``R^T y`` for ``y: [N, D]``."""
        for inv, angle in zip(reversed(self.inv_perms), reversed(self.angles)):
            y = self._givens(y, angle.to(y.device), -1.0)[:, inv.to(y.device)]
        return y

    def matrix(self, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """The dense ``[D, D]`` matrix (for tests and the dense benchmark only; ``O(D^2)`` memory)."""
        return self.apply(torch.eye(self.dim, dtype=dtype)).T
