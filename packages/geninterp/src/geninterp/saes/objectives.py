"""Training objectives, kept apart from the architectures (one objective per registered SAE).

All losses are computed in the SAE's scaled input space (``x * act_scale``, where
``E ||x||^2 = d_in``) and divided by ``d_in``, so ``mse`` reads as a per-feature error and
``fvu`` as the fraction of variance left unexplained in the batch. An objective is called as
``objective(sae, x, forward=None)``: ``forward`` (default ``sae``) runs the model, so a trainer can
pass a DDP-wrapped module while attributes are read from the plain one.

* :class:`L1Objective`: ``mse + l1_coeff * mean_tokens sum_j z_j`` (ReLU SAE).
* :class:`TopKObjective`: ``mse + aux_coeff * auxk`` where ``auxk`` is the normalised MSE of the
  residual ``e = x - x_hat`` reconstructed by the ``aux_k`` largest pre-activations among dead
  latents (Gao et al. 2024); also used for the Temporal SAE's novel codes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gencore.errors import ConfigError
from gencore.train.distributed import group_size
from geninterp.saes.base import SAEOutput, SparseAutoencoder, _is_count
from geninterp.saes.topk import topk_relu


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1])


def reconstruction_terms(model: SparseAutoencoder, x: torch.Tensor, out: SAEOutput) -> dict[str, torch.Tensor]:
    """``mse`` (per feature, scaled space) and batch ``fvu`` of ``out.recon`` against ``x``."""
    s = model.config.act_scale
    xs, rs = _flat(x) * s, _flat(out.recon) * s
    err = (xs - rs).pow(2).sum(-1)
    total = (xs - xs.mean(0)).pow(2).sum(-1)
    return {"mse": err.mean() / xs.shape[-1], "fvu": err.sum() / total.sum().clamp_min(1e-12)}


@dataclass(frozen=True, kw_only=True)
class L1Objective:
    l1_coeff: float = 5e-3

    def __post_init__(self) -> None:
        if not (self.l1_coeff >= 0 and math.isfinite(self.l1_coeff)):
            raise ConfigError(f"l1_coeff must be a non-negative finite number, got {self.l1_coeff}.")

    def __call__(
        self, model: SparseAutoencoder, x: torch.Tensor, forward: Callable[..., SAEOutput] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        out = (forward or model)(x)
        terms = reconstruction_terms(model, x, out)
        codes = _flat(out.codes)
        l1 = codes.sum(-1).mean()
        loss = terms["mse"] + self.l1_coeff * l1
        return loss, {
            "mse": terms["mse"].detach(),
            "fvu": terms["fvu"].detach(),
            "l1": l1.detach(),
            "l0": (codes > 0).float().sum(-1).mean().detach(),
        }


@dataclass(frozen=True, kw_only=True)
class TopKObjective:
    aux_k: int | None = None  # dead latents asked to explain the residual; None: d_in // 2
    aux_coeff: float = 1.0 / 32.0
    dead_after_tokens: int = 100_000  # a latent silent for this many training tokens counts as dead

    def __post_init__(self) -> None:
        if self.aux_k is not None and not _is_count(self.aux_k):
            raise ConfigError(f"aux_k must be a positive integer or None, got {self.aux_k}.")
        if not (self.aux_coeff >= 0 and math.isfinite(self.aux_coeff)) or not self.dead_after_tokens >= 1:
            raise ConfigError(
                f"aux_coeff must be a non-negative finite number and dead_after_tokens at least 1, "
                f"got {self.aux_coeff} and {self.dead_after_tokens}."
            )

    @torch.no_grad()
    def _update_dead(self, model: SparseAutoencoder, codes: torch.Tensor) -> torch.Tensor:
        """Count tokens since each latent last fired; in a multi-process run over all ranks' tokens (a latent
        that fired on any rank is alive), so every replica sees the same dead set."""
        fired = (codes > 0).any(0)
        tokens = codes.shape[0]
        if group_size() > 1:
            anywhere = fired.to(torch.int32)
            dist.all_reduce(anywhere, op=dist.ReduceOp.MAX)
            fired, tokens = anywhere.bool(), tokens * group_size()
        counter = model.tokens_since_fired
        counter.add_(tokens)
        counter[fired] = 0
        return counter >= self.dead_after_tokens

    def auxk_loss(self, model: SparseAutoencoder, x: torch.Tensor, out: SAEOutput, dead: torch.Tensor) -> torch.Tensor:
        """Normalised MSE of the residual explained by the top ``aux_k`` dead latents (0 when none is dead)."""
        n_dead = int(dead.sum())
        if n_dead == 0 or out.pre_codes is None:
            return torch.zeros((), device=x.device)
        s = model.config.act_scale
        residual = (_flat(x) - _flat(out.recon)).detach() * s
        pre = _flat(out.pre_codes).masked_fill(~dead, float("-inf"))
        k = min(self.aux_k or max(x.shape[-1] // 2, 1), n_dead)
        aux_codes = topk_relu(pre, k).nan_to_num(0.0)
        aux_recon = aux_codes @ model.atoms
        err = (aux_recon - residual).pow(2).sum(-1).mean()
        return err / (residual - residual.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)

    def __call__(
        self, model: SparseAutoencoder, x: torch.Tensor, forward: Callable[..., SAEOutput] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        out = (forward or model)(x)
        terms = reconstruction_terms(model, x, out)
        codes = _flat(out.codes)
        dead = self._update_dead(model, codes)
        aux = self.auxk_loss(model, x, out, dead)
        loss = terms["mse"] + self.aux_coeff * aux
        metrics = {
            "mse": terms["mse"].detach(),
            "fvu": terms["fvu"].detach(),
            "auxk": aux.detach(),
            "dead_frac": dead.float().mean(),
            "l0": (codes > 0).float().sum(-1).mean().detach(),
        }
        if out.pred_recon is not None:
            p = out.pred_recon.pow(2).sum(-1).mean()
            n = out.novel_recon.pow(2).sum(-1).mean()
            metrics["pred_share"] = (p / (p + n).clamp_min(1e-12)).detach()
        return loss, metrics
