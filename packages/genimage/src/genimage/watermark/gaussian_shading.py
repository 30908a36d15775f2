"""Gaussian Shading: message bits in the half-lines of a truncated Gaussian (multi-bit).

Yang, Zeng, Chen, Zhang, Luo & Wang, "Gaussian Shading: Provable Performance-Lossless Image
Watermarking for Diffusion Models", CVPR 2024.

The message is tiled over a block grid of ``(C / ch_factor) x (H / hw_factor) x (W / hw_factor)``
cells (cell ``g`` carries bit ``g mod L``) and each cell is repeated over its block, giving one
watermark bit per noise dimension. The bits are XORed with a key stream ``s`` and each dimension
is drawn from the standard normal truncated to the half-line of its bit, vectorised as
``z = Phi^{-1}((b + u) / 2)``, ``u ~ U(0, 1)``. Extraction: ``b = [z > 0] XOR s``, then a majority
vote over each bit's repeats.

Departures from the reference, stated: the stream comes from a key-seeded ``torch.Generator``
rather than ChaCha20 (no cryptographic claim); the key is fixed across images, so, as Thietke
et al. (2025) point out, every marked noise shares one sign pattern and the scheme is lossless
per image but not across images (the detectability metric shows it). Detection uses the exact
scale-free correlation test of :func:`~genimage.watermark.stats.correlation_pvalue` (the cosine
between the inverted noise and the expected sign pattern), uniform under any isotropic null,
instead of the reference's bit-count threshold.
"""

from __future__ import annotations

import torch

from gencore.errors import ConfigError, InputError
from genimage.watermark.keys import WatermarkKey, derive_generator
from genimage.watermark.spherical import Detection
from genimage.watermark.stats import correlation_pvalue

__all__ = ["GaussianShadingWatermark"]


class GaussianShadingWatermark:
    """Gaussian Shading with key params ``ch_factor`` (default 1) and ``hw_factor`` (default 4)."""

    PARAMS = ("ch_factor", "hw_factor")  # key parameters this scheme reads

    name = "gaussian-shading"
    multibit = True

    def __init__(self, key: WatermarkKey) -> None:
        if key.scheme != "gaussian-shading":
            raise ConfigError(f"GaussianShadingWatermark needs a gaussian-shading key, got a {key.scheme!r} key.")
        if not key.message:
            raise ConfigError("a gaussian-shading key needs a message of at least one bit.")
        c, h, w = key.shape
        fc, fhw = int(key.params.get("ch_factor", 1)), int(key.params.get("hw_factor", 4))
        if fc < 1 or fhw < 1:
            raise ConfigError(f"ch_factor and hw_factor must be positive integers, got {fc} and {fhw}.")
        if c % fc or h % fhw or w % fhw:
            raise ConfigError(f"ch_factor {fc} and hw_factor {fhw} must divide the noise shape {key.shape}.")
        self.key, self.shape = key, tuple(key.shape)
        self.message_bits = len(key.message)
        cells = torch.arange((c // fc) * (h // fhw) * (w // fhw)).reshape(c // fc, h // fhw, w // fhw)
        if cells.numel() < self.message_bits:
            raise ConfigError(
                f"{cells.numel()} blocks cannot carry a {self.message_bits}-bit message; lower hw_factor."
            )
        grid = cells.repeat_interleave(fc, 0).repeat_interleave(fhw, 1).repeat_interleave(fhw, 2)
        self.bit_index = (grid % self.message_bits).reshape(-1)
        self.stream = torch.randint(0, 2, (key.dim,), generator=derive_generator(key.seed, "gaussian-shading"))

    def _bits(self, message: torch.Tensor | None, n: int) -> torch.Tensor:
        m = self.key.messages(n, self.message_bits, message)
        return (m[:, self.bit_index] + self.stream) % 2

    def embed(
        self, n: int, generator: torch.Generator | None = None, message: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Marked initial noise ``[n, C, H, W]`` (float32)."""
        b = self._bits(message, n).to(torch.float64)
        u = torch.rand(b.shape, generator=generator, dtype=torch.float64).clamp(1e-12, 1 - 1e-12)
        return torch.special.ndtri((b + u) / 2).to(torch.float32).reshape(n, *self.shape)

    def _flat(self, z: torch.Tensor) -> torch.Tensor:
        if z.dim() != 4 or tuple(z.shape[1:]) != self.shape:
            raise InputError(f"noise must have shape [N, {', '.join(map(str, self.shape))}], got {tuple(z.shape)}.")
        return z.detach().to(device="cpu", dtype=torch.float64).reshape(z.shape[0], -1)  # where the key stream is

    def extract(self, z: torch.Tensor) -> torch.Tensor:
        """Majority-vote message bits ``[N, L]`` (ties -> 0)."""
        bits = ((self._flat(z) > 0).long() + self.stream) % 2
        ones = torch.zeros(z.shape[0], self.message_bits, dtype=torch.float64)
        ones.index_add_(1, self.bit_index, bits.to(torch.float64))
        count = torch.bincount(self.bit_index, minlength=self.message_bits).to(torch.float64)
        return (2 * ones > count).to(torch.int64)

    def detect(self, z: torch.Tensor, generator: torch.Generator | None = None) -> Detection:
        """Cosine score with the expected sign pattern, its exact p-value, and the decoded bits."""
        flat = self._flat(z)
        direction = 2.0 * self._bits(None, 1)[0].to(torch.float64) - 1.0
        cos = (flat @ direction) / (flat.norm(dim=1) * direction.norm()).clamp_min(1e-300)
        return Detection(score=cos, pvalue=correlation_pvalue(flat, direction), bits=self.extract(z))
