"""One registry of the watermark schemes the harness and the command line know by name."""

from __future__ import annotations

from gencore.errors import ConfigError
from genimage.watermark.gaussian_shading import GaussianShadingWatermark
from genimage.watermark.keys import WatermarkKey
from genimage.watermark.spherical import SphericalWatermark
from genimage.watermark.tree_ring import TreeRingWatermark

__all__ = ["NOISE_SCHEMES", "noise_scheme"]

NOISE_SCHEMES = {
    "spherical": SphericalWatermark,
    "tree-ring": TreeRingWatermark,
    "gaussian-shading": GaussianShadingWatermark,
}


def noise_scheme(key: WatermarkKey):
    """The initial-noise watermark object for ``key`` (spherical, tree-ring or gaussian-shading)."""
    if key.scheme not in NOISE_SCHEMES:
        raise ConfigError(
            f"scheme {key.scheme!r} does not mark the initial noise; expected one of: {', '.join(NOISE_SCHEMES)}."
        )
    cls = NOISE_SCHEMES[key.scheme]
    unknown = sorted(set(key.params) - set(cls.PARAMS))
    if unknown:
        raise ConfigError(
            f"{key.scheme} keys take the parameters {', '.join(cls.PARAMS)}; got unknown {', '.join(unknown)}."
        )
    return cls(key)
