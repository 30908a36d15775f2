"""Temporal SAE: a predictable part from earlier tokens' codes plus a sparse novel part.

Lubana et al., "Priors in Time: Missing Inductive Biases for Language Model Interpretability"
(Temporal SAE, ICLR 2026). At token ``t`` of a sequence ``x: [B, L, d]`` (scaled, decoder bias
removed: ``u_t = x_t * act_scale - b_dec``):

1. dense context codes ``c_t = ReLU(u_t W_enc + b_enc)``;
2. causal attention whose *keys and values are the codes of earlier tokens only*
   (``c_0 .. c_{t-1}``, with an all-zero slot standing for "no context"), queried by ``c_t``,
   gives predicted codes ``p_t = ReLU(Attn(c_t; c_{<t}) W_o)``;
3. the predicted direction ``P_t = p_t D`` (``D`` the unit-norm atoms) is scaled to the
   projection of ``u_t`` on it, ``a_t = <P_t, u_t> / ||P_t||^2``: predicted part ``a_t P_t``;
4. the residual ``r_t = u_t - a_t P_t`` is coded sparsely, ``n_t = TopK(r_t W_enc + b_enc)``;
5. reconstruction ``x_hat_t = ((a_t p_t + n_t) D + b_dec) / act_scale``.

So nothing at positions ``> t`` can influence the output at ``t`` (tested), the predicted part
uses the current token only to select among (query) and scale (projection) what the past
predicts, and the novel part is what the past could not predict. The reference implementation
(``eslubana/temporalSAEs``) ties encoder and decoder; here the encoder is untied (initialised
as the decoder's transpose) as in the other architectures of this package.

Example::

    sae = TemporalSAE(TemporalSAEConfig(d_in=64, width=256, k=8))
    out = sae(torch.randn(2, 32, 64))  # out.pred_recon, out.novel_recon: [2, 32, 64]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from gencore.errors import ConfigError, InputError
from geninterp.saes.base import SAEConfig, SAEOutput, SparseAutoencoder, _is_count
from geninterp.saes.topk import topk_relu


@dataclass(frozen=True, kw_only=True)
class TemporalSAEConfig(SAEConfig):
    arch: ClassVar[str] = "temporal"
    k: int = 32  # TopK of the novel codes
    n_heads: int = 4
    attn_dim: int = 64  # total query/key width over all heads

    def validate(self) -> TemporalSAEConfig:
        super().validate()
        if not (_is_count(self.k) and self.k <= self.width):
            raise ConfigError(f"k must be in [1, width={self.width}], got {self.k!r}.")
        if not (_is_count(self.n_heads) and _is_count(self.attn_dim)):
            raise ConfigError(
                f"n_heads and attn_dim must be positive integers, got {self.n_heads} and {self.attn_dim}."
            )
        if self.attn_dim % self.n_heads or self.width % self.n_heads:
            raise ConfigError(
                f"attn_dim ({self.attn_dim}) and width ({self.width}) must be divisible by n_heads ({self.n_heads})."
            )
        return self


class TemporalSAE(SparseAutoencoder):
    config_class = TemporalSAEConfig
    is_sequence = True

    def __init__(self, config: TemporalSAEConfig) -> None:
        super().__init__(config)
        w, a = config.width, config.attn_dim
        self.q_proj = nn.Linear(w, a)
        self.k_proj = nn.Linear(w, a)
        self.v_proj = nn.Linear(w, w)
        self.o_proj = nn.Linear(w, w)
        with torch.no_grad():
            # unit-scale query/key rows so attention logits start O(1); value and output maps start as the
            # identity, i.e. "the past's codes predict the present's" (the slow-feature prior), which the
            # training then refines. (The reference starts them random; identity trains much faster here.)
            for lin, fan in ((self.q_proj, a // config.n_heads), (self.k_proj, a // config.n_heads)):
                lin.weight.mul_(1.0 / (lin.weight.norm(dim=1, keepdim=True) * math.sqrt(fan)))
            for lin in (self.v_proj, self.o_proj):
                lin.weight.copy_(torch.eye(w))
                lin.bias.zero_()
        self.register_buffer("tokens_since_fired", torch.zeros(w, dtype=torch.long))

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return topk_relu(pre, self.config.k)

    def predict_codes(self, context: torch.Tensor) -> torch.Tensor:
        """Predicted codes ``[B, L, width]`` from context codes ``c: [B, L, width]`` (uses only ``c_{<t}`` at ``t``)."""
        b, length, w = context.shape
        h = self.config.n_heads
        past = F.pad(context, (0, 0, 1, 0))[:, :length]  # slot t holds c_{t-1}; slot 0 is the empty context
        q = self.q_proj(context).view(b, length, h, -1).transpose(1, 2)
        k = self.k_proj(past).view(b, length, h, -1).transpose(1, 2)
        v = self.v_proj(past).view(b, length, h, -1).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.relu(self.o_proj(attn.transpose(1, 2).reshape(b, length, w)))

    def forward(self, x: torch.Tensor) -> SAEOutput:
        if x.ndim != 3 or x.shape[-1] != self.config.d_in:
            raise InputError(f"a Temporal SAE takes sequences [B, L, {self.config.d_in}], got {tuple(x.shape)}.")
        self.check_dtype(x)
        scale = self.config.act_scale
        atoms = self.atoms
        u = x * scale - self.b_dec
        context = torch.relu(u @ self.W_enc + self.b_enc)
        pred = self.predict_codes(context)
        direction = pred @ atoms
        coef = (direction * u).sum(-1, keepdim=True) / direction.pow(2).sum(-1, keepdim=True).clamp_min(1e-6)
        pred_codes = coef * pred
        pred_part = coef * direction
        pre = (u - pred_part) @ self.W_enc + self.b_enc
        novel = self.activate(pre)
        novel_part = novel @ atoms
        recon = (pred_part + novel_part + self.b_dec) / scale
        return SAEOutput(
            recon=recon,
            codes=novel,
            pre_codes=pre,
            pred_codes=pred_codes,
            pred_recon=pred_part / scale,
            novel_recon=novel_part / scale,
        )

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """Novel (sparse) codes ``[B, L, width]``; the predicted codes are in ``forward(x).pred_codes``."""
        return self.forward(x).codes

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Reconstruction from total codes (predicted + novel) ``[..., width]``."""
        return (codes @ self.atoms + self.b_dec) / self.config.act_scale
