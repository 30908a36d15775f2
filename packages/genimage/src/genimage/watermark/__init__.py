"""Watermarking for genimage generators: schemes, attacks, metrics and the evaluation harness.

- :class:`SphericalWatermark` (Hu et al., ICLR 2026): lossless multi-bit mark in the initial noise.
- :class:`TreeRingWatermark` (Wen et al., NeurIPS 2023) and :class:`GaussianShadingWatermark`
  (Yang et al., CVPR 2024): initial-noise baselines with their reference faults fixed.
- :mod:`genimage.watermark.hidden` and :mod:`genimage.watermark.guidance`: a HiDDeN-style
  encoder/decoder and decoder-gradient watermark guidance during sampling.
- :mod:`genimage.watermark.molm`: Mixture of LoRA Markers.
- :func:`apply_attack`, the metrics, and :func:`evaluate_watermarks` (one table over schemes x attacks).
"""

from genimage.watermark.attacks import AttackContext, apply_attack, parse_attack
from genimage.watermark.evaluate import EvaluationConfig, evaluate_watermarks
from genimage.watermark.gaussian_shading import GaussianShadingWatermark
from genimage.watermark.generators import FlowGenerator, GaussianFlowGenerator
from genimage.watermark.keys import WatermarkKey, new_key
from genimage.watermark.spherical import Detection, SphericalWatermark
from genimage.watermark.tree_ring import TreeRingWatermark

__all__ = [
    "AttackContext",
    "Detection",
    "EvaluationConfig",
    "FlowGenerator",
    "GaussianFlowGenerator",
    "GaussianShadingWatermark",
    "SphericalWatermark",
    "TreeRingWatermark",
    "WatermarkKey",
    "apply_attack",
    "evaluate_watermarks",
    "new_key",
    "parse_attack",
]
