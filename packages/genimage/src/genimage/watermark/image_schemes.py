"""Image-domain schemes for the harness: watermark guidance and post-hoc HiDDeN.

Both use one HiDDeN encoder/decoder trained on unmarked images of the generator being
evaluated (:func:`train_hidden`, on the generator's device), and a Gaussian null of the decoder score fitted
on further held-out unmarked images. ``mark(generator, noise, clean)`` returns marked images on the CPU;
``detect(images)`` returns a :class:`~genimage.watermark.spherical.Detection`.
"""

from __future__ import annotations

import torch

from genimage.watermark.guidance import GaussianNull, decoder_detection, guided_generate
from genimage.watermark.hidden import HiddenConfig, HiddenModel, train_hidden
from genimage.watermark.keys import derive_seed, new_key

__all__ = ["HIDDEN_STEPS", "GuidanceScheme", "HiddenScheme", "train_for_generator"]


def generate_batched(gen, noise: torch.Tensor, batch: int = 64) -> torch.Tensor:
    """Unmarked images of ``noise``, ``batch`` at a time."""
    return torch.cat([gen.generate(noise[i : i + batch]) for i in range(0, noise.shape[0], batch)])


def _generate(gen, n: int, seed: int, batch: int = 64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return generate_batched(gen, torch.randn(n, *gen.noise_shape, generator=g), batch)


HIDDEN_STEPS = 600  # default HiDDeN training steps (evaluate and `watermark train`)


def train_for_generator(
    gen,
    *,
    message_bits: int,
    seed: int,
    n_train: int = 256,
    n_null: int = 128,
    steps: int = HIDDEN_STEPS,
    progress=True,
):
    """HiDDeN trained on ``n_train`` unmarked samples, plus ``n_null`` held-out unmarked samples."""
    images = _generate(gen, n_train + n_null, derive_seed(seed, "hidden-data"))
    cfg = HiddenConfig(channels=gen.image_shape[0], message_bits=message_bits, steps=steps, seed=seed)
    return train_hidden(images[:n_train], cfg, progress=progress, device=gen.device), images[n_train:]


class _DecoderScheme:
    multibit = True
    detect_nfe = 0

    def __init__(
        self, model: HiddenModel, message: torch.Tensor, null_images: torch.Tensor | None, *, null=None
    ) -> None:
        """``null_images``: held-out unmarked images the Gaussian null is fitted on, or None with a fitted
        ``null`` (a :class:`~genimage.watermark.guidance.GaussianNull`, as a saved scheme carries)."""
        self.model, self.message = model, message
        self.null = null or GaussianNull(
            decoder_detection(model.decoder, null_images, message, GaussianNull(torch.zeros(2))).score
        )

    def detect(self, images: torch.Tensor):
        return decoder_detection(self.model.decoder, images, self.message, self.null)


class GuidanceScheme(_DecoderScheme):
    """Watermark guidance with the in-suite HiDDeN decoder (``scale``: total guidance displacement)."""

    name = "guidance"

    def __init__(self, model, message, null_images, *, scale: float = 1.0, seed: int = 0, null=None) -> None:
        super().__init__(model, message, null_images, null=null)
        self.scale, self.seed = scale, seed

    @classmethod
    def build(
        cls,
        gen,
        *,
        message_bits: int = 32,
        seed: int = 0,
        scale: float = 1.0,
        progress: bool = True,
        trained=None,
        message=None,
    ):
        """Train HiDDeN on the generator's samples (or reuse ``trained = (model, null_images)``); the message is
        ``message`` (bits) or drawn from the seed."""
        model, null_images = trained or train_for_generator(
            gen, message_bits=message_bits, seed=seed, progress=progress
        )
        key = new_key(
            "guidance", gen.image_shape, seed=derive_seed(seed, "guidance"), message=message, message_bits=message_bits
        )
        return cls(model, key.message_tensor(), null_images, scale=scale, seed=seed)

    def mark(self, gen, noise: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
        for p in self.model.parameters():
            p.requires_grad_(False)
        return torch.cat(
            [
                guided_generate(
                    gen,
                    noise[i : i + 64].to(gen.device),
                    self.model.decoder,
                    self.message,
                    scale=self.scale,
                    seed=self.seed + i,
                )
                for i in range(0, noise.shape[0], 64)
            ]
        ).cpu()


class HiddenScheme(_DecoderScheme):
    """Post-hoc HiDDeN: the encoder marks finished images (the harness reports PSNR to the unmarked image)."""

    name = "hidden"

    @classmethod
    def build(cls, gen, *, message_bits: int = 32, seed: int = 0, progress: bool = True, trained=None, message=None):
        """Train HiDDeN on the generator's samples (or reuse ``trained = (model, null_images)``); the message is
        ``message`` (bits) or drawn from the seed."""
        model, null_images = trained or train_for_generator(
            gen, message_bits=message_bits, seed=seed, progress=progress
        )
        key = new_key(
            "guidance", gen.image_shape, seed=derive_seed(seed, "hidden"), message=message, message_bits=message_bits
        )
        return cls(model, key.message_tensor(), null_images)

    def mark(self, gen, noise: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
        device = next(self.model.parameters()).device
        with torch.no_grad():
            return self.model.encoder(clean.to(device), self.message.expand(clean.shape[0], -1).to(device)).cpu()
