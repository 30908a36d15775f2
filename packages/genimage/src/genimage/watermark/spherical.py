"""Spherical Watermark: lossless, encryption-free multi-bit watermarking of the initial noise.

Hu, Jin, Li, Peng, Zhang & Qian, "Spherical Watermark: Encryption-Free, Lossless Watermarking
for Diffusion Models", ICLR 2026 (https://openreview.net/forum?id=2eAGrunxVz).

Embedding, for a message ``m`` of ``L`` bits and noise dimension ``D = C H W``:

1. **Binary embedding** (sparse invertible transform over GF(2)). A key-derived permutation
   splits ``r L (k + 1)`` of the ``D`` code positions into disjoint groups of ``k + 1``
   (``k = parity_weight``, ``r = D // ((k + 1) L)`` repeats). All code bits start as fresh
   uniformly random padding; in each group the first bit is replaced by the message bit XOR
   the group's ``k`` padding bits, so the XOR of a group equals its message bit. As a matrix
   this is ``c = T s (mod 2)`` with ``T = I + E``, ``E`` holding ``r L k`` ones; ``E^2 = 0``, so
   ``T`` is its own inverse and has ``D + r L k`` non-zeros (the reference builds a dense
   ``D x D`` matrix: 1 GiB at ``D = 16384``). Every parity check has weight ``k + 1``, so the
   code bits are ``k``-wise independent and uniform: all moments up to order ``k`` are those
   of uniform random signs, whatever the message.
2. **Spherical mapping**: signs ``sigma = 1 - 2c`` give ``u = sigma / sqrt(D)`` on the unit sphere
   (the hypercube vertices form a spherical 3-design), rotated by a key-derived orthogonal
   ``R`` (:class:`~genimage.watermark.rotation.KeyRotation`) and scaled by an independent
   radius ``rho ~ chi_D`` (the norm of a fresh standard normal): ``z = rho R u``. With
   ``k >= 3`` the first three moments of ``z`` are exactly those of ``N(0, I)``
   (``E z = 0``, ``E z z^T = I``, ``E z_i z_j z_l = 0``) and its norm is exactly chi-distributed.

Extraction: ``y = R^T z`` (``z`` from ODE inversion of the image), signs give the code bits,
and each message bit is decided from its ``r`` parity groups. Hard decoding multiplies the
signs of a group (XOR) and takes a majority vote; the default soft decoding is the
belief-propagation "tanh rule" ``atanh(prod_j tanh(beta y_j))`` summed over repeats, which
reduces to the majority vote of XORs when the ``y_j`` are large.

Detection (is this image marked with this key?): the number of the ``r L`` group parities
that agree with the key's message is ``Binomial(r L, 1/2)`` for any isotropic ``z``; the
randomised binomial p-value is exactly uniform without a mark.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from gencore.errors import ConfigError, InputError
from genimage.watermark.keys import WatermarkKey, derive_generator
from genimage.watermark.rotation import KeyRotation
from genimage.watermark.stats import binomial_pvalue

__all__ = ["Detection", "ParityEmbedding", "SphericalWatermark"]


@dataclass
class Detection:
    """Detector output for a batch of ``N`` images.

    Attributes:
        score: ``[N]`` larger means "more likely marked" (for ROC curves).
        pvalue: ``[N]`` p-value of "not marked with this key" (uniform without a mark).
        bits: ``[N, L]`` decoded message bits, or ``None`` for zero-bit schemes.
    """

    score: torch.Tensor
    pvalue: torch.Tensor
    bits: torch.Tensor | None = None


class ParityEmbedding:
    """The sparse binary embedding ``c = T s (mod 2)`` (see the module docstring).

    Attributes:
        groups: ``[r L, k + 1]`` code positions; column 0 holds the message slot.
        bit_index: ``[r L]`` which message bit each group carries (repeat-major).
    """

    def __init__(self, dim: int, message_bits: int, seed: int, *, parity_weight: int = 3) -> None:
        if parity_weight < 1:
            raise ConfigError(f"parity_weight must be >= 1, got {parity_weight}.")
        repeats = dim // ((parity_weight + 1) * message_bits)
        if repeats < 1:
            raise ConfigError(
                f"a {message_bits}-bit message with parity_weight {parity_weight} needs at least "
                f"{(parity_weight + 1) * message_bits} noise dimensions, the key's shape has {dim}."
            )
        self.dim, self.message_bits, self.parity_weight, self.repeats = dim, message_bits, parity_weight, repeats
        perm = torch.randperm(dim, generator=derive_generator(seed, "binary-embedding"))
        self.groups = perm[: repeats * message_bits * (parity_weight + 1)].reshape(-1, parity_weight + 1)
        self.bit_index = torch.arange(repeats * message_bits) % message_bits

    def encode(self, message: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Code bits ``[N, D]`` (int64 0/1) for messages ``[N, L]``, with fresh random padding."""
        n = message.shape[0]
        code = torch.randint(0, 2, (n, self.dim), generator=generator, dtype=torch.int64)
        pad = code[:, self.groups[:, 1:]].sum(-1) % 2
        code[:, self.groups[:, 0]] = (message[:, self.bit_index] + pad) % 2
        return code

    def group_parities(self, code: torch.Tensor) -> torch.Tensor:
        """XOR of each group ``[N, r L]`` (equals the carried message bit for a clean code)."""
        return code[:, self.groups].sum(-1) % 2

    def decode(self, code: torch.Tensor) -> torch.Tensor:
        """Hard decoding: majority vote of group parities per message bit, ``[N, L]`` (ties -> 0)."""
        votes = self.group_parities(code).reshape(code.shape[0], self.repeats, self.message_bits)
        return (2 * votes.sum(1) > self.repeats).to(torch.int64)

    def sparse_matrix(self) -> torch.Tensor:
        """``T = I + E`` as a sparse COO ``[D, D]`` int64 tensor with ``D + r L k`` non-zeros."""
        rows = torch.cat((torch.arange(self.dim), self.groups[:, :1].expand(-1, self.parity_weight).reshape(-1)))
        cols = torch.cat((torch.arange(self.dim), self.groups[:, 1:].reshape(-1)))
        vals = torch.ones(rows.numel(), dtype=torch.int64)
        shape = (self.dim, self.dim)
        return torch.sparse_coo_tensor(torch.stack((rows, cols)), vals, shape, check_invariants=True).coalesce()

    def source_vector(self, message: torch.Tensor, code: torch.Tensor) -> torch.Tensor:
        """``s = T^{-1} c = T c``: the code with the message bits back in their slots ``[N, D]``."""
        s = code.clone()
        s[:, self.groups[:, 0]] = message[:, self.bit_index]
        return s


class SphericalWatermark:
    """Spherical Watermark for noise of shape ``key.shape`` (see the module docstring).

    Key params: ``parity_weight`` (default 3), ``rotation_layers`` (default ``3 ceil(log2 D)``),
    ``soft_beta`` (default 1.5: slope of the tanh rule on unit-rms coordinates).

    Example:
        >>> from genimage.watermark.keys import new_key
        >>> wm = SphericalWatermark(new_key("spherical", (1, 32, 32), seed=1))
        >>> z = wm.embed(4, generator=torch.Generator().manual_seed(0))
        >>> bool((wm.extract(z) == wm.key.message_tensor()).all())
        True
    """

    PARAMS = ("parity_weight", "rotation_layers", "soft_beta")  # key parameters this scheme reads

    name = "spherical"
    multibit = True

    def __init__(self, key: WatermarkKey) -> None:
        if key.scheme != "spherical":
            raise ConfigError(f"SphericalWatermark needs a spherical key, got a {key.scheme!r} key.")
        if not key.message:
            raise ConfigError("a spherical key needs a message of at least one bit.")
        self.key = key
        self.shape = tuple(key.shape)
        self.dim = key.dim
        self.embedding = ParityEmbedding(
            self.dim, len(key.message), key.seed, parity_weight=int(key.params.get("parity_weight", 3))
        )
        layers = key.params.get("rotation_layers")
        self.rotation = KeyRotation(self.dim, key.seed, layers=None if layers is None else int(layers))
        self.soft_beta = float(key.params.get("soft_beta", 1.5))
        if not (math.isfinite(self.soft_beta) and self.soft_beta > 0):  # 0 would decode every bit as 0
            raise ConfigError(f"soft_beta must be a positive number, got {self.soft_beta}.")

    def _messages(self, n: int, message: torch.Tensor | None) -> torch.Tensor:
        return self.key.messages(n, self.embedding.message_bits, message)

    def embed(
        self, n: int, generator: torch.Generator | None = None, message: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Marked initial noise ``[n, C, H, W]`` (float32) carrying ``message`` (default: the key's)."""
        code = self.embedding.encode(self._messages(n, message), generator)
        u = (1 - 2 * code).to(torch.float64) / self.dim**0.5
        radius = torch.randn(n, self.dim, generator=generator, dtype=torch.float64).norm(dim=1, keepdim=True)
        return (radius * self.rotation.apply(u)).to(torch.float32).reshape(n, *self.shape)

    def _check(self, z: torch.Tensor) -> torch.Tensor:
        if z.dim() != 4 or tuple(z.shape[1:]) != self.shape:
            raise InputError(f"noise must have shape [N, {', '.join(map(str, self.shape))}], got {tuple(z.shape)}.")
        return z.detach().to(torch.float64).reshape(z.shape[0], -1)

    def unrotate(self, z: torch.Tensor) -> torch.Tensor:
        """``R^T z`` flattened, ``[N, D]``."""
        return self.rotation.inverse(self._check(z))

    def code_bits(self, z: torch.Tensor) -> torch.Tensor:
        """Recovered code bits ``[N, D]`` (sign of ``R^T z``; negative means 1)."""
        return (self.unrotate(z) < 0).to(torch.int64)

    def bit_scores(self, z: torch.Tensor, *, unrotated: torch.Tensor | None = None) -> torch.Tensor:
        """Soft message-bit scores ``[N, L]`` (tanh rule; positive means bit 0)."""
        y = self.unrotate(z) if unrotated is None else unrotated
        y = y / y.pow(2).mean(1, keepdim=True).sqrt().clamp_min(1e-12)
        t = torch.tanh(self.soft_beta * y)[:, self.embedding.groups].prod(-1)
        llr = torch.atanh(t.clamp(-1 + 1e-12, 1 - 1e-12))
        e = self.embedding
        return llr.reshape(z.shape[0], e.repeats, e.message_bits).sum(1)

    def extract(self, z: torch.Tensor, *, soft: bool = True) -> torch.Tensor:
        """Decoded message bits ``[N, L]`` (int64)."""
        if soft:
            return (self.bit_scores(z) < 0).to(torch.int64)
        return self.embedding.decode(self.code_bits(z))

    def detect(self, z: torch.Tensor, generator: torch.Generator | None = None) -> Detection:
        """Bits, a soft score and the exact randomised p-value against the key's message."""
        y = self.unrotate(z).cpu()  # beside the key's message (a CUDA y beside it was a device-mismatch error)
        parities = self.embedding.group_parities((y < 0).to(torch.int64))
        expected = self.key.message_tensor()[self.embedding.bit_index]
        matches = (parities == expected).sum(1)
        scores = self.bit_scores(z, unrotated=y)
        sign = 1.0 - 2.0 * self.key.message_tensor().to(torch.float64)
        return Detection(
            score=(scores * sign).sum(1),
            pvalue=binomial_pvalue(matches, parities.shape[1], generator),
            bits=(scores < 0).to(torch.int64),
        )
