"""Watermark guidance: steer sampling with the gradient of a differentiable watermark decoder.

After "Watermark guidance" (ICLR 2026): any differentiable decoder ``D`` (here the in-suite
HiDDeN decoder, :mod:`genimage.watermark.hidden`) marks images *during* generation. At each
velocity evaluation ``v(x, t)`` the clean image is predicted (``x1 = x + (1 - t) v`` on the linear path;
the run's own path conversion on a VP run), the watermark loss ``BCE(D(a(x1)), m)`` is differentiated with
respect to ``x1`` for every augmentation ``a`` of an ensemble (identity, noise, blur, crop-and-resize, JPEG
with a straight-through gradient), conflicting gradients are reconciled by projecting each onto the
normal plane of those it conflicts with (PCGrad, Yu et al. 2020), and the mean reconciled
gradient, normalised to unit RMS per image, is subtracted: the sampler integrates ``v - scale * g`` with
the generator's own solver and grid (an Euler step is ``x <- x + h v - h * scale * g``).
Because the decoder is asked to succeed on augmented predictions, the mark survives attacks
it was not trained on. Simplification, stated: the gradient is taken with respect to the
predicted clean image; the velocity network's Jacobian is not back-propagated (one network
evaluation per velocity evaluation, as in plain sampling). In a latent run the state is a latent: the decoder reads
the VAE decoding of the predicted clean latent and the gradient flows back through the VAE decoder.

Detection: the decoder's logits give the bits; the score ``mean_i s_i logit_i`` (``s_i = +-1``
from the message) gets a p-value from a Gaussian null fitted on held-out unmarked images of
the same generator (calibrated, not exact: reported by the harness as ``pvalue_ks``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from scipy import stats

from gencore.errors import ConfigError, InputError
from gencore.rng import randn_like_with
from gencore.solvers import solve_ode
from genimage.watermark.attacks import crop_resize, gaussian_blur, jpeg
from genimage.watermark.generators import FlowGenerator
from genimage.watermark.spherical import Detection

__all__ = ["DEFAULT_AUGMENTATIONS", "GaussianNull", "guided_generate", "reconcile_gradients"]

DEFAULT_AUGMENTATIONS = ("identity", "noise", "blur", "crop", "jpeg")


def _augment(x: torch.Tensor, name: str, g: torch.Generator) -> torch.Tensor:
    if name == "noise":
        return x + 0.08 * randn_like_with(x, g)
    if name == "blur":
        return gaussian_blur(x, 1.0)
    if name == "crop":
        return crop_resize(x, 0.85, g)
    if name == "jpeg":
        return x + (jpeg(x.detach().clamp(-1, 1), 75) - x).detach()
    return x


def reconcile_gradients(grads: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """PCGrad over ``grads: [A, N, ...]`` per sample; returns the mean reconciled gradient ``[N, ...]``.

    For each gradient (in a random order of the others), a component along another gradient with
    which it has a negative inner product is removed.
    """
    a = grads.shape[0]
    flat = grads.flatten(2)  # [A, N, D]
    out = flat.clone()
    for i in range(a):
        order = torch.randperm(a, generator=generator).tolist()
        for j in order:
            if j == i:
                continue
            dot = (out[i] * flat[j]).sum(-1, keepdim=True)
            coef = torch.where(dot < 0, dot / flat[j].pow(2).sum(-1, keepdim=True).clamp_min(1e-20), 0.0)
            out[i] = out[i] - coef * flat[j]
    return out.mean(0).reshape(grads.shape[1:])


def guided_generate(
    gen: FlowGenerator,
    noise: torch.Tensor,
    decoder: torch.nn.Module,
    message: torch.Tensor,
    *,
    scale: float = 1.0,
    augmentations: Sequence[str] = DEFAULT_AUGMENTATIONS,
    reconcile: bool = True,
    seed: int = 0,
) -> torch.Tensor:
    """Sampling from ``noise`` with watermark guidance toward ``message: [L]`` (see module docstring).

    The guided velocity ``v - scale * g / rms(g)`` is integrated on ``gen``'s own grid and solver (``gen.steps``
    steps of ``gen.solver`` up to ``gen.t_end``), so a guided image and :meth:`gen.generate` of the same noise
    differ by the guidance alone; the clean prediction is ``gen.predict_clean`` (the run's path, VP included)
    and the decoder reads ``gen.to_image`` of it (a latent run's VAE decoder), through which the gradient flows
    back to the state. Runs on ``noise``'s device (where ``gen``'s network and ``decoder`` must live; the random
    draws are the same on every device) and returns the images there.
    """
    unknown = [a for a in augmentations if a not in DEFAULT_AUGMENTATIONS]
    if isinstance(augmentations, str) or not augmentations or unknown:
        raise ConfigError(
            f"guidance augmentations must be a non-empty list of {', '.join(DEFAULT_AUGMENTATIONS)}, "
            f"got {augmentations!r}."
        )
    if not math.isfinite(scale):
        raise ConfigError(f"the guidance scale must be a finite number, got {scale}.")
    if message.dim() != 1 or not bool(((message == 0) | (message == 1)).all()):
        values = sorted(set(message.flatten().tolist()))[:4]
        raise InputError(
            f"the guidance message must be a 1-D tensor of 0/1 bits, got shape {tuple(message.shape)} "
            f"with values {values}."
        )
    g = torch.Generator().manual_seed(seed)
    x = noise.to(torch.float32)
    target = message.to(device=x.device, dtype=torch.float32).expand(x.shape[0], -1)

    def guided_velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            v = gen.velocity(x, t)
        with torch.enable_grad():
            x1 = gen.predict_clean(x, t, v).detach().requires_grad_(True)
            image = gen.to_image(x1)
            grads = []
            for name in augmentations:
                loss = F.binary_cross_entropy_with_logits(decoder(_augment(image, name, g)), target, reduction="sum")
                grads.append(torch.autograd.grad(loss, x1, retain_graph=True)[0])
        stacked = torch.stack(grads)
        grad = reconcile_gradients(stacked, g) if reconcile else stacked.mean(0)
        rms = grad.flatten(1).pow(2).mean(1).sqrt().clamp_min(1e-12)[:, None, None, None]
        return (v - scale * grad / rms).detach()

    x = solve_ode(guided_velocity, x, gen.sampling_grid(), method=gen.solver).x
    with torch.no_grad():
        return gen.to_image(gen.clean_state(x)).clamp(-1, 1)


class GaussianNull:
    """A Gaussian fitted to unmarked scores; ``pvalue(score) = P(N(mu, sd^2) >= score)``."""

    def __init__(self, scores: torch.Tensor) -> None:
        if scores.numel() < 2 or not bool(torch.isfinite(scores).all()):
            raise InputError(
                f"a Gaussian null needs at least 2 finite unmarked scores, got {scores.numel()} "
                f"({int((~torch.isfinite(scores)).sum())} not finite)."
            )
        self.mu = float(scores.double().mean())
        self.sd = float(scores.double().std().clamp_min(1e-12))

    @classmethod
    def from_params(cls, mu: float, sd: float) -> GaussianNull:
        """The null with mean ``mu`` and standard deviation ``sd`` (as saved with a trained scheme)."""
        if not (math.isfinite(mu) and math.isfinite(sd) and sd > 0):
            raise InputError(f"a Gaussian null needs a finite mean and a finite sd > 0, got mu={mu}, sd={sd}.")
        null = cls.__new__(cls)
        null.mu, null.sd = float(mu), float(sd)
        return null

    def pvalue(self, scores: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(stats.norm.sf(scores.double().numpy(), self.mu, self.sd), dtype=torch.float64)


def decoder_detection(decoder: torch.nn.Module, images: torch.Tensor, message: torch.Tensor, null: GaussianNull):
    """Bits, score and calibrated p-value from a decoder's logits (computed on the decoder's device; the
    detection on the CPU)."""
    device = next(decoder.parameters()).device
    with torch.no_grad():
        logits = decoder(images.to(device=device, dtype=torch.float32)).cpu()
    sign = 2.0 * message.to(torch.float32) - 1.0
    score = (logits * sign).mean(1).double()
    return Detection(score=score, pvalue=null.pvalue(score), bits=(logits > 0).long())
