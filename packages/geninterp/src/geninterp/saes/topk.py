"""TopK sparse autoencoder with the auxiliary loss against dead latents (AuxK).

Gao et al. 2024, "Scaling and evaluating sparse autoencoders" (OpenAI): keep the ``k`` largest
pre-activations per token (then ReLU), so L0 <= k by construction; a latent that has not fired
for ``dead_after_tokens`` training tokens is *dead*, and the auxiliary loss asks the top
``aux_k`` dead latents to reconstruct the main model's residual error.

The counter of tokens since each latent last fired is a buffer of the module, so it is saved
in checkpoints and an exactly resumed run sees the same dead set.

Example::

    sae = TopKSAE(TopKSAEConfig(d_in=384, width=1024, k=16))
    out = sae(torch.randn(8, 384))
    assert (out.codes != 0).sum(-1).max() <= 16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from gencore.errors import ConfigError
from geninterp.saes.base import SAEConfig, SparseAutoencoder, _is_count


@dataclass(frozen=True, kw_only=True)
class TopKSAEConfig(SAEConfig):
    arch: ClassVar[str] = "topk"
    k: int = 32

    def validate(self) -> TopKSAEConfig:
        super().validate()
        if not (_is_count(self.k) and self.k <= self.width):
            raise ConfigError(f"k must be in [1, width={self.width}], got {self.k!r}.")
        return self


def topk_relu(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the ``k`` largest entries of the last axis (ReLU-ed), zero the rest."""
    values, indices = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, torch.relu(values))


class TopKSAE(SparseAutoencoder):
    config_class = TopKSAEConfig

    def __init__(self, config: TopKSAEConfig) -> None:
        super().__init__(config)
        self.register_buffer("tokens_since_fired", torch.zeros(config.width, dtype=torch.long))

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return topk_relu(pre, self.config.k)
