"""What every genmol backbone shares: the call signature, the output and safetensors persistence.

A backbone is called ``model(x_t, t, *, tokens, mask, edges=None)`` with

* ``x_t: [B, N, 3]`` coordinates (angstrom, centred), ``t: [B]`` in [0, 1];
* ``tokens: [B, N, F]`` per-atom features (one-hot atom type/charge tokens, with a mask token while
  they are being generated);
* ``mask: [B, N]`` real atoms (1) and padding (0);
* ``edges: [B, N, N, E]`` optional pair features (bond orders for conformer generation),

and returns ``(velocity [B, N, 3], logits [B, N, K])``: the coordinate velocity and the clean-token
logits over ``K = num_classes`` (``K = 0`` gives an empty logits tensor).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from gencore.io import load_pretrained, save_pretrained


class Backbone(nn.Module):
    """Base class: keeps the constructor config for ``save_pretrained`` / ``from_pretrained``."""

    config: dict[str, Any]

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        save_pretrained(directory, self.state_dict(), {"class": type(self).__name__, **self.config})

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> Backbone:
        from genmol.models import BACKBONES

        state, config = load_pretrained(directory, device)
        name = config.pop("class", cls.__name__)
        klass = next((k for k in BACKBONES.values() if k.__name__ == name), cls)
        model = klass(**config)
        model.load_state_dict(state)
        return model.to(device)


def pair_mask(mask: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` real-atom pairs without the diagonal."""
    m = mask.float()
    eye = torch.eye(mask.shape[1], device=mask.device, dtype=m.dtype)
    return m[:, :, None] * m[:, None, :] * (1.0 - eye)
