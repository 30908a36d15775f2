"""The evaluation harness: every scheme under every attack, on shared unmarked images, as one table.

For each scheme the harness makes ``n`` marked images; ``n`` unmarked images from fresh
``N(0, I)`` noise are shared by all schemes. Each attack is applied with the same seed to the
marked and the unmarked images; initial-noise schemes invert the attacked images with the
generator's ODE (the unmarked inversions are computed once per attack and shared), image-domain
schemes (guidance, MOLM) run their decoder on the pixels. One record per (scheme, attack):

``scheme, attack, n, bit_accuracy`` (multi-bit schemes), ``tpr_at_1fpr`` and ``tpr_at_01fpr``
(p-value thresholds 0.01 and 0.001, valid because the p-values are exactly uniform without a
mark), ``fpr_at_1fpr`` (realised on the unmarked images), ``auc``, ``pvalue_ks`` (KS p-value of
the unmarked p-values against U(0, 1)), ``detect_nfe`` (network evaluations to check one image),
and per scheme ``noise_ks_pvalue`` / ``detectability_auc`` (marked initial noise against
``N(0, I)``, on ``noise_samples`` draws). Image schemes mark the unmarked image of the same noise, so
their records carry ``psnr`` to it. Each initial-noise scheme draws its marked noise from a stream of its own
(derived from the seed and the scheme's name), so its records do not depend on which other schemes are evaluated.

``quality(a, b) -> {name: value}`` (FD-EffLite0 on the command line) compares each marked set with a
*reference*: a third set of ``n`` unmarked images from independent noise. The unmarked set is compared with
the same reference (``<name>_unmarked``), which is the value the metric takes with no mark at all at this
``n``, its sampling floor. Against the shared unmarked set instead, schemes that mark the same noise
(guidance, MOLM, HiDDeN) would be compared pair by pair and the initial-noise schemes, which draw their own
noise, would carry the whole floor, so the numbers would not be comparable across schemes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm

from gencore.errors import ConfigError
from genimage.watermark.attacks import AttackContext, apply_attack, parse_attack
from genimage.watermark.keys import WatermarkKey, derive_generator, derive_seed, new_key
from genimage.watermark.metrics import (
    bit_accuracy,
    detectability_auc,
    gaussianity,
    psnr,
    pvalue_calibration,
    roc_auc,
    tpr_at_fpr,
)
from genimage.watermark.schemes import NOISE_SCHEMES, noise_scheme

IMAGE_SCHEMES = ("guidance", "hidden", "molm")
EXAMPLES = 8  # images per set kept for the examples figure

__all__ = ["EXAMPLES", "HEADLINE_COLUMNS", "IMAGE_SCHEMES", "EvaluationConfig", "ImageScheme", "evaluate_watermarks"]

HEADLINE_COLUMNS = (
    "scheme",
    "attack",
    "bit_accuracy",
    "tpr_at_1fpr",
    "tpr_at_01fpr",
    "fpr_at_1fpr",
    "auc",
    "pvalue_ks",
    "detect_nfe",
)


@dataclass(frozen=True, kw_only=True)
class EvaluationConfig:
    """Harness settings. ``seed`` fixes noise, keys (unless given), attacks and randomised p-values."""

    n: int = 64
    seed: int = 0
    message_bits: int = 32
    noise_samples: int = 1000
    batch_size: int = 64
    progress: bool = True
    key_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("n", "message_bits", "noise_samples", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"watermark evaluation needs {name} >= 1, got {getattr(self, name)}.")


class ImageScheme:
    """Interface of schemes that mark and decode in pixel space (guidance, MOLM, post-hoc HiDDeN).

    ``mark(generator, noise, unmarked_images) -> images`` and ``detect(images) -> Detection``;
    ``multibit``, ``message`` (``[L]`` tensor), ``name``. The marked image of a noise is compared with the
    unmarked image of the same noise (``psnr``).
    """

    name = "image"
    multibit = True
    detect_nfe = 0


def _batched(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch: int) -> torch.Tensor:
    return torch.cat([fn(x[i : i + batch]) for i in range(0, x.shape[0], batch)])


def evaluate_watermarks(
    generator,
    schemes: Sequence[str | ImageScheme],
    attacks: Sequence[str],
    config: EvaluationConfig = EvaluationConfig(),
    *,
    keys: dict[str, WatermarkKey] | None = None,
    quality: Callable[[torch.Tensor, torch.Tensor], dict[str, float]] | None = None,
    examples: dict[str, torch.Tensor] | None = None,
) -> list[dict[str, Any]]:
    """Run the harness (see the module docstring) and return the records.

    Args:
        generator: a :class:`~genimage.watermark.generators.FlowGenerator` (``noise_shape``,
            ``generate``, ``invert``, ``nfe``, ``regenerate``).
        schemes: names from :data:`~genimage.watermark.schemes.NOISE_SCHEMES` or :class:`ImageScheme`
            objects.
        attacks: attack names (:func:`~genimage.watermark.attacks.parse_attack`).
        keys: optional keys per scheme name (otherwise derived from ``config.seed``).
        quality: optional ``quality(images, reference_images) -> {name: value}``, applied to each marked
            set and to the unmarked set against an independent unmarked reference set (module docstring).
        examples: optional dict that receives the first :data:`EXAMPLES` images of the unmarked set (key
            ``"unmarked"``) and of each marked set (key: the scheme's name), unattacked, to be looked at.
    """
    for a in attacks:
        parse_attack(a)
    shape = tuple(generator.noise_shape)
    n, bs = config.n, config.batch_size
    g = torch.Generator().manual_seed(config.seed)
    bar = tqdm(total=len(schemes) * (1 + len(attacks)) + 1, disable=not config.progress, desc="watermark evaluate")
    clean_noise = torch.randn(n, *shape, generator=g)
    clean = _batched(generator.generate, clean_noise, bs)
    gen_nfe = generator.nfe
    if examples is not None:
        examples["unmarked"] = clean[:EXAMPLES].cpu()
    floor: dict[str, float] = {}
    if quality is not None:  # its own stream, so that asking for it changes no other number
        rg = torch.Generator().manual_seed(derive_seed(config.seed, "quality-reference"))
        reference = _batched(generator.generate, torch.randn(n, *shape, generator=rg), bs)
        floor = {f"{k}_unmarked": v for k, v in quality(clean, reference).items()}
    bar.update()
    clean_inverted: dict[str, torch.Tensor] = {}
    records: list[dict[str, Any]] = []
    for scheme in schemes:
        if isinstance(scheme, str):
            key = (keys or {}).get(scheme) or new_key(
                scheme,
                shape,
                seed=derive_seed(config.seed, scheme),
                message_bits=config.message_bits,
                **config.key_params.get(scheme, {}),
            )
            wm = noise_scheme(key)
            name, multibit, message = scheme, wm.multibit, key.message_tensor()
            mg = derive_generator(config.seed, f"marks:{scheme}")  # its own stream: a row is the same whatever
            noise = wm.embed(n, generator=mg)  # other schemes are evaluated with it
            t0 = time.perf_counter()
            marked = _batched(generator.generate, noise, bs)
            extra: dict[str, Any] = {"embed_seconds_per_image": (time.perf_counter() - t0) / n}
            big = wm.embed(config.noise_samples, generator=mg)
            ref = torch.randn(big.shape, generator=mg)
            extra["noise_ks_pvalue"] = gaussianity(big)["ks_pvalue"]
            extra["detectability_auc"] = detectability_auc(big, ref, seed=config.seed)
        else:
            wm, name, multibit, message = scheme, scheme.name, scheme.multibit, scheme.message
            marked = scheme.mark(generator, clean_noise, clean)
            extra = {"psnr": psnr(marked, clean)}
        if quality is not None:
            extra.update(quality(marked, reference), **floor)
        if examples is not None:
            examples[name] = marked[:EXAMPLES].cpu()
        bar.update()
        for attack in attacks:
            aseed = derive_seed(config.seed, f"attack:{attack}")
            ctx = AttackContext(generator=generator, reference=clean)
            att_m = apply_attack(marked, attack, seed=aseed, context=ctx)
            if isinstance(scheme, str):
                if attack not in clean_inverted:
                    att_c = apply_attack(clean, attack, seed=aseed, context=ctx)
                    clean_inverted[attack] = _batched(generator.invert, att_c, bs)
                t0 = time.perf_counter()
                pg = torch.Generator().manual_seed(derive_seed(config.seed, f"pvalue:{name}:{attack}"))
                det_m = wm.detect(_batched(generator.invert, att_m, bs), generator=pg)
                seconds = (time.perf_counter() - t0) / n
                detect_nfe = generator.nfe
                det_c = wm.detect(clean_inverted[attack], generator=pg)
            else:
                att_c = apply_attack(clean, attack, seed=aseed, context=ctx)
                t0 = time.perf_counter()
                det_m = scheme.detect(att_m)
                seconds = (time.perf_counter() - t0) / n
                detect_nfe = scheme.detect_nfe
                det_c = scheme.detect(att_c)
            at1 = tpr_at_fpr(det_m.pvalue, det_c.pvalue, 0.01)
            at01 = tpr_at_fpr(det_m.pvalue, det_c.pvalue, 0.001)
            rec: dict[str, Any] = {
                "scheme": name,
                "attack": attack,
                "n": n,
                "bit_accuracy": bit_accuracy(det_m.bits, message) if multibit else None,
                "tpr_at_1fpr": at1["tpr"],
                "tpr_at_01fpr": at01["tpr"],
                "fpr_at_1fpr": at1["fpr"],
                "auc": roc_auc(det_m.score, det_c.score),
                "pvalue_ks": pvalue_calibration(det_c.pvalue)["ks_pvalue"],
                "detect_nfe": detect_nfe,
                "generate_nfe": gen_nfe,
                "detect_seconds_per_image": seconds,
                **extra,
            }
            records.append(rec)
            bar.update()
    bar.close()
    return records


def known_schemes() -> tuple[str, ...]:
    return (*NOISE_SCHEMES, *IMAGE_SCHEMES)
