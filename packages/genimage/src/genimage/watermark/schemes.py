"""One registry of the watermark schemes the harness and the command line know by name."""

from __future__ import annotations

import math

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

REAL_PARAMS = ("soft_beta",)  # every other key parameter is an integer
POSITIVE_PARAMS = ("ch_factor", "hw_factor", "rotation_layers")  # divisors of the noise shape; layer count


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
    for name, value in key.params.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not number or (name not in REAL_PARAMS and not float(value).is_integer()):
            kind = "a number" if name in REAL_PARAMS else "an integer"
            raise ConfigError(f"{key.scheme} key parameter {name!r} must be {kind}, got {value!r}.")
        if name in POSITIVE_PARAMS and value < 1:
            raise ConfigError(f"{key.scheme} key parameter {name!r} must be a positive integer, got {value!r}.")
    return cls(key)
