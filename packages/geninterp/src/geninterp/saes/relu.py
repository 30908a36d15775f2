"""ReLU sparse autoencoder trained with an L1 penalty on the codes.

Bricken et al. 2023, "Towards Monosemanticity: Decomposing Language Models With Dictionary
Learning" (Anthropic); Cunningham et al. 2023, "Sparse Autoencoders Find Highly Interpretable
Features in Language Models". Codes ``z = ReLU((x - b_dec) W_enc + b_enc)``; with unit-norm
atoms the penalty ``lambda * sum_j z_j`` equals the usual ``sum_j z_j ||d_j||``.

Example::

    sae = ReLUSAE(ReLUSAEConfig(d_in=384, width=1024))
    out = sae(torch.randn(8, 384))  # out.recon [8, 384], out.codes [8, 1024]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from geninterp.saes.base import SAEConfig, SparseAutoencoder


@dataclass(frozen=True, kw_only=True)
class ReLUSAEConfig(SAEConfig):
    arch: ClassVar[str] = "relu"


class ReLUSAE(SparseAutoencoder):
    config_class = ReLUSAEConfig

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return torch.relu(pre)
