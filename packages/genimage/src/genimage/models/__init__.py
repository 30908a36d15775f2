"""Backbones (DiT, video DiT, small UNet) and the KL-VAE of the optional latent path."""

from genimage.models.base import MODELS, ImageBackbone, build_model
from genimage.models.dit import DIT_SIZES, DiT, default_layersync_pair
from genimage.models.unet import UNet
from genimage.models.vae import KLVAE, klvae_loss
from genimage.models.video_dit import VideoDiT, sincos_3d

__all__ = [
    "DIT_SIZES",
    "KLVAE",
    "MODELS",
    "DiT",
    "ImageBackbone",
    "UNet",
    "VideoDiT",
    "build_model",
    "default_layersync_pair",
    "klvae_loss",
    "sincos_3d",
]
