"""genimage: image and audio-spectrogram generation on gencore's flow-matching math.

Data (:mod:`genimage.data`), backbones (:mod:`genimage.models`), training on the gencore engine
(:mod:`genimage.training`), the LWD wavelet mask (:mod:`genimage.wavelet`), sampling and inversion
(:mod:`genimage.sampling`), run folders (:mod:`genimage.runs`) and offline metrics
(:mod:`genimage.metrics`, :mod:`genimage.evaluate`).
"""

__version__ = "0.1.0"

from genimage.config import ImageTrainConfig
from genimage.imageio import from_uint8, save_images, to_uint8, write_grid
from genimage.runs import LoadedRun, load_run
from genimage.sampling import generate, invert, sample_noise
from genimage.wavelet import haar_dwt2, lwd_mask, wavelet_energy_map

__all__ = [
    "ImageTrainConfig",
    "LoadedRun",
    "__version__",
    "from_uint8",
    "generate",
    "haar_dwt2",
    "invert",
    "load_run",
    "lwd_mask",
    "sample_noise",
    "save_images",
    "to_uint8",
    "wavelet_energy_map",
    "write_grid",
]
