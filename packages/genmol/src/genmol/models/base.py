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

from typing import Any

import torch
from torch import nn

from gencore.errors import InputError, StorageError
from gencore.io import Pretrained


class Backbone(Pretrained, nn.Module):
    """Base class: keeps the constructor config for ``save_pretrained`` / ``from_pretrained`` (gencore's
    :class:`~gencore.io.Pretrained`); ``Backbone.from_pretrained`` rebuilds the backbone class the folder names."""

    config: dict[str, Any]

    @classmethod
    def saved_class(cls, name: str, where: str) -> type:
        from genmol.models import BACKBONES

        fallback = cls if name == cls.__name__ and cls is not Backbone else None
        klass = next((k for k in BACKBONES.values() if k.__name__ == name), fallback)
        if klass is None:
            names = ", ".join(k.__name__ for k in BACKBONES.values())
            raise StorageError(f"{where!r} names the backbone {name!r}; expected one of {names}.")
        return klass

    def check_inputs(self, x_t, t, tokens, mask, edges) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
        """One :class:`InputError` sentence unless the inputs match the call signature (module docstring) and this
        backbone's ``in_features`` / ``edge_features``; returns ``(x_t, t, tokens, edges)`` with ``t`` as ``[B]`` (a
        scalar is broadcast) and zeros in the padded rows, so that no padding value (NaN, inf) reaches a real atom."""
        if x_t.dim() != 3 or x_t.shape[-1] != 3:
            raise InputError(f"x_t must have shape [B, N, 3], got {tuple(x_t.shape)}.")
        b, n, _ = x_t.shape
        t = torch.as_tensor(t, device=x_t.device)
        if t.numel() == 1:
            t = t.reshape(1).expand(b)
        elif tuple(t.shape) != (b,):
            raise InputError(f"t must be a scalar or have shape ({b},), one time per molecule, got {tuple(t.shape)}.")
        features, edge_features = self.config["in_features"], self.config["edge_features"]
        if tuple(tokens.shape) != (b, n, features):
            raise InputError(f"tokens must have shape {(b, n, features)}, got {tuple(tokens.shape)}.")
        if tuple(mask.shape) != (b, n):
            raise InputError(f"mask must have shape {(b, n)}, got {tuple(mask.shape)}.")
        if edge_features and edges is None:
            raise InputError(
                f"this backbone has edge_features={edge_features}: "
                f"edges of shape {(b, n, n, edge_features)} are required."
            )
        if not edge_features and edges is not None:
            raise InputError("this backbone has edge_features=0: edges must be None, they would be ignored.")
        if edges is not None and tuple(edges.shape) != (b, n, n, edge_features):
            raise InputError(f"edges must have shape {(b, n, n, edge_features)}, got {tuple(edges.shape)}.")
        real = mask.bool()
        x_t = torch.where(real[..., None], x_t, torch.zeros_like(x_t))
        tokens = torch.where(real[..., None], tokens, torch.zeros_like(tokens))
        if edges is not None:
            pairs = real[:, :, None, None] & real[:, None, :, None]
            edges = torch.where(pairs, edges, torch.zeros_like(edges))
        return x_t, t, tokens, edges


def pair_mask(mask: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` real-atom pairs without the diagonal."""
    m = mask.float()
    eye = torch.eye(mask.shape[1], device=mask.device, dtype=m.dtype)
    return m[:, :, None] * m[:, None, :] * (1.0 - eye)
