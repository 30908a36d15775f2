"""The settings of one ``genimage train`` run: :class:`ImageTrainConfig` (YAML-loadable, flags override)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from gencore.checks import check_choice
from gencore.errors import ConfigError
from gencore.paths import TIME_SAMPLERS
from gencore.train.config import SCHEDULES
from genimage.data import DATA_SOURCES, VIDEO_SOURCES
from genimage.models import DIT_SIZES
from genimage.models.video_dit import ATTENTION as VIDEO_ATTENTION

OBJECTIVES = ("flow", "vp")
LWD_ENERGY = ("clean", "noisy")
BACKBONES = ("dit", "unet")


@dataclass(frozen=True, kw_only=True)
class ImageTrainConfig:
    """Everything a run needs; ``config.json`` in the run folder is this dict plus derived fields."""

    data: str = "digits"  # digits | mnist | photos | mel | folder | shards | moving-mnist | video-folder
    data_path: str | None = None  # folder / shards / WAV folder / video folder
    frames: int | None = None  # video data: frames per clip, the first of each video (None: 8)
    image_size: int | None = None  # None: the data set's default (digits 8, others 32)
    channels: int | None = None  # folders: 1 or 3 (None: detect)
    skip_bad: bool = False  # skip (and count) unreadable images instead of stopping
    model: str = "dit"  # dit | unet
    dit_size: str = "DiT-Mi"
    patch_size: int = 2
    temporal_patch: int | None = None  # video DiT: frames per tubelet (None: 1)
    video_attention: str | None = None  # video DiT: full | factorised (alternating space / time blocks; None: full)
    unet_base: int = 32
    unet_mults: tuple[int, ...] = (1, 2)
    objective: str = "flow"  # flow (rectified flow, velocity) | vp (VP diffusion, noise prediction)
    time_sampler: str = "uniform"  # uniform | logit_normal | beta
    class_conditional: bool = True  # when the data have labels
    label_dropout: float = 0.1  # probability of the null label (classifier-free guidance)
    steps: int = 2000
    batch_size: int = 128
    lr: float = 5e-4
    warmup_steps: int = 100
    lr_schedule: str = "cosine"  # the backbone's, after warm-up: cosine decay to 0 at `steps`, or constant
    ema_decay: float = 0.999
    seed: int = 0
    layersync: bool = False
    layersync_pairs: tuple[str, ...] = ()  # "weak:strong" module names; () with layersync: the default pair
    layersync_weight: float = 0.2
    lwd: bool = False  # Latent Wavelet Diffusion loss mask
    lwd_floor: float = 0.1
    lwd_energy: str = "noisy"  # noisy: energy map of x_t (reference code; measured better); clean: of x_1
    latent: bool = False  # train in the latent space of a KL-VAE trained first
    vae_steps: int = 1500
    vae_latent_channels: int = 4
    vae_width: int = 64
    vae_beta: float = 1e-3
    vae_scale_weight: float = 0.5  # LWD scale-consistency term (0: plain KL-VAE)
    sample_nfe: int = 32  # NFE of the periodic / final sample grids
    init_from: str | None = None  # a finished run whose EMA weights (and VAE) start this one: fine-tuning
    progress: bool = True

    def validate(self) -> ImageTrainConfig:
        check_choice(self.data, DATA_SOURCES, "data set")
        check_choice(self.model, BACKBONES, "model")
        check_choice(self.objective, OBJECTIVES, "objective")
        check_choice(self.time_sampler, tuple(TIME_SAMPLERS), "time sampler")  # else a latent run trains its VAE first
        check_choice(self.dit_size, tuple(DIT_SIZES), "DiT size")
        check_choice(self.lwd_energy, LWD_ENERGY, "LWD energy source")
        check_choice(self.lr_schedule, SCHEDULES, "learning-rate schedule")
        for name in (
            "steps",
            "batch_size",
            "patch_size",
            "unet_base",
            "vae_latent_channels",
            "vae_width",
            "sample_nfe",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.latent and self.vae_steps < 1:
            raise ConfigError(f"vae_steps must be a positive integer, got {self.vae_steps}.")
        if self.image_size is not None and self.image_size < 4:
            raise ConfigError(f"image_size must be at least 4, got {self.image_size}.")
        if not 0.0 <= self.label_dropout < 1.0:
            raise ConfigError(f"label_dropout must be in [0, 1), got {self.label_dropout}.")
        if self.channels is not None and self.data not in ("folder", "shards", "video-folder"):
            raise ConfigError(
                f"channels applies to folder, shards and video-folder data; {self.data!r} sets its own channels."
            )
        if self.channels not in (None, 1, 3):
            raise ConfigError(f"channels must be 1 (grayscale) or 3 (RGB), got {self.channels}.")
        if not 0.0 <= self.lwd_floor <= 1.0:
            raise ConfigError(f"lwd_floor must be in [0, 1], got {self.lwd_floor}.")
        for name in ("vae_scale_weight", "vae_beta", "layersync_weight"):
            value = getattr(self, name)
            if not (0 <= value < math.inf):  # NaN turned the scale-consistency term off or made the loss NaN
                raise ConfigError(f"{name} must be a non-negative finite number, got {value}.")
        if self.layersync_pairs and not self.layersync:  # a YAML file's pairs would otherwise be silently unused
            raise ConfigError(
                "layersync_pairs is set but layersync is false; set layersync: true (the --layersync-pairs flag "
                "does both) or drop the pairs."
            )
        for pair in self.layersync_pairs:
            if pair.count(":") != 1 or not all(pair.split(":")):
                raise ConfigError(f"layersync pairs are written weak:strong (e.g. blocks.1:blocks.3), got {pair!r}.")
        if self.data in ("folder", "shards", "video-folder") and not self.data_path:
            raise ConfigError(f"--data {self.data} needs --data-path.")
        if self.is_video:
            self._validate_video()
        else:
            for name in ("frames", "temporal_patch", "video_attention"):
                if getattr(self, name) is not None:
                    raise ConfigError(f"{name} applies to video data; {self.data!r} is an image set.")
        return self

    @property
    def clip_frames(self) -> int:
        """Frames per training clip of a video run."""
        return 8 if self.frames is None else self.frames

    @property
    def tubelet_frames(self) -> int:
        """Frames per tubelet of the video DiT."""
        return 1 if self.temporal_patch is None else self.temporal_patch

    @property
    def is_video(self) -> bool:
        """True for the video data sources (clips ``[C, T, H, W]``, trained with the video DiT)."""
        return self.data in VIDEO_SOURCES

    def _validate_video(self) -> None:
        if self.clip_frames < 2:
            raise ConfigError(f"frames must be at least 2 for video data, got {self.clip_frames}.")
        if self.tubelet_frames < 1 or self.clip_frames % self.tubelet_frames:
            raise ConfigError(
                f"temporal_patch must be a positive divisor of frames ({self.clip_frames}), got {self.tubelet_frames}."
            )
        if self.model != "dit":
            raise ConfigError(f"video data ({self.data}) trains the video DiT; --model {self.model} is for images.")
        if self.video_attention is not None:
            check_choice(self.video_attention, VIDEO_ATTENTION, "video attention")
        if self.lwd:
            raise ConfigError("the LWD wavelet mask is defined on 2-D images; drop --lwd for video data.")
        if self.latent:
            raise ConfigError("--latent (the image KL-VAE) is not available for video data; videos train in pixels.")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unet_mults"] = list(self.unet_mults)
        d["layersync_pairs"] = list(self.layersync_pairs)
        return d
