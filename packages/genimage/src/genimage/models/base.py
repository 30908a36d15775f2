"""What every genimage backbone shares: the call ``model(x_t, t, y=None)``, a JSON-able ``config``,
``save_pretrained`` / ``from_pretrained`` (safetensors weights + ``config.json`` with the class name),
and a registry so that a saved folder rebuilds the right class.

Class conditioning: a conditional backbone has ``num_classes`` real classes and one extra learned
*null* class with index ``num_classes``; ``y=None`` means "no label" and uses the null class, which is
what classifier-free guidance evaluates as the unconditional branch (Ho & Salimans 2022).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch
from torch import nn

from gencore.errors import ConfigError, StorageError
from gencore.io import load_pretrained, rebuild_module, save_pretrained

MODELS: dict[str, type[ImageBackbone]] = {}


class ImageBackbone(nn.Module):
    """Base class: subclasses set ``self.config`` (constructor keyword arguments) and implement ``forward``."""

    kind: ClassVar[str] = ""
    # constructor settings added after models were saved without them: their value for such an older folder
    saved_config_defaults: ClassVar[dict[str, Any]] = {}
    config: dict[str, Any]
    num_classes: int | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            MODELS[cls.kind] = cls

    def null_labels(self, n: int, device: torch.device | str | None = None) -> torch.Tensor | None:
        """The null-class labels ``[n]`` of a conditional model (None for an unconditional one)."""
        if not self.num_classes:
            return None
        return torch.full((n,), self.num_classes, dtype=torch.long, device=device)

    def _labels(self, y: torch.Tensor | None, n: int, device: torch.device) -> torch.Tensor | None:
        if not self.num_classes:
            return None
        if y is None:
            return self.null_labels(n, device)
        y = torch.as_tensor(y, device=device)
        if y.is_floating_point() and not bool((y == y.round()).all()):
            raise ConfigError("labels must be whole class indices, got fractional values.")
        y = y.long()
        if y.dim() == 0:
            y = y.expand(n)
        if y.shape != (n,):
            raise ConfigError(f"labels must have shape [{n}], got {tuple(y.shape)}.")
        if bool(((y < 0) | (y > self.num_classes)).any()):
            raise ConfigError(f"labels must be in 0..{self.num_classes} ({self.num_classes} = null class).")
        return y

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write ``model.safetensors`` and ``config.json`` (with ``"class": kind``) into ``directory``."""
        save_pretrained(directory, self.state_dict(), {"class": self.kind, **self.config})

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> ImageBackbone:
        """Rebuild a saved backbone (any registered class when called on the base class)."""
        state, config = load_pretrained(directory, device)
        config = dict(config)
        kind = config.pop("class", None)
        target = MODELS.get(kind) if cls is ImageBackbone else cls
        if target is None or (cls is not ImageBackbone and kind != cls.kind):
            raise StorageError(f"{str(directory)!r} holds a {kind!r} model, expected {cls.kind or 'a genimage model'}.")
        model = rebuild_module(
            lambda: target(**{**target.saved_config_defaults, **config}), state, directory, target.__name__
        )
        return model.to(device)


def build_model(kind: str, **kwargs: Any) -> ImageBackbone:
    """Construct a registered backbone by name (``"dit"``, ``"unet"``, ``"video-dit"``)."""
    if kind not in MODELS:
        raise ConfigError(f"unknown model {kind!r}; expected one of: {', '.join(sorted(MODELS))}.")
    return MODELS[kind](**kwargs)
