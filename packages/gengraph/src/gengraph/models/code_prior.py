"""A masked discrete prior over the codes of a graph's nodes: an alternative to GGBall's flow prior.

GGBall (ICLR 2026) generates the quantised node latents with Riemannian flow matching (:mod:`.latent_flow`):
every node starts as independent noise and all of them must agree, along one ODE, on a set of codes that decode
to a graph. The decoder reads edges from pairwise distances, so what matters is which codes occur *together*, and
a flow learns that slowly: on a synthetic task where codes come in fixed pairs
(``benchmarks/bench_prior_cooccurrence.py``: 64 codes, sets of 16 pairs), a 64 x 2 set transformer trained
2,000 steps puts 0.43 of its nodes beside their partner code, hardly more than independent draws (0.38).

This prior treats a graph's code indices as an exchangeable set of tokens and learns them with masked
(absorbing-state) diffusion (:class:`gencore.discrete.MaskedDiffusion`; Sahoo et al. 2024, "Simple and
Effective Masked Diffusion Language Models"; the VQ-token prior of Chang et al. 2022, "MaskGIT"): nodes are
unmasked a few at a time, each drawn given the codes already fixed, so co-occurrence is learned as a
conditional. The same task, width, depth and steps: 0.77. It is not the paper's prior
(``gengraph train --prior masked-codes``; the default stays ``flow``); the README's reproduction compares them.

Tokens: ``0..K-1`` the codes, ``K`` the padding of graphs smaller than ``n_max`` (the network is told the mask:
padded nodes are forced to ``K``, real ones never drawn as ``K``, so padding costs no nats), ``K + 1`` the
process's mask token. The network is a transformer over the nodes without positions (permutation-equivariant)
reading the one-hot tokens and the node count (softmax attention cannot count, see :mod:`.latent_flow`). It does
not read the time: the share of masked nodes tells it, and masked diffusion's optimal denoiser does not depend
on it (Sahoo et al. 2024; Ou et al. 2025, "Your Absorbing Discrete Diffusion Secretly Models the Conditional
Distributions of Clean Data").

Repeats: the autoencoder seldom puts two nodes of one graph on one code (community-small's training sets: 0.9
node pairs per graph), yet a transformer that reads one-hot tokens predicts a masked node from the visible ones,
and its readout then favours those very codes: a 64 x 2 prior trained 15,000 steps on community-small's codes put
0.20 of a masked node's probability on codes already visible in its set (half of each training set visible;
the code usage alone puts 0.03 there), so its samples held 4.3 same-code pairs per graph, which the decoder turns
into cliques. Every logit therefore gets a learned bias indexed by how often its code is already visible in the
set (``1 .. REPEATS``, the last for that many or more; none for an unseen code): one scalar per count, which
learns the data's repeat rate directly (our addition, measured in the gengraph README).

Loss: the cross-entropy of the masked real nodes, unweighted (MaskGIT's), at a masking share ``1 - t`` with
stratified ``t``; its minimiser is the same conditional as the NELBO's, whose ``1 / (1 - t)`` weight learned the
pairing task more slowly (``benchmarks/bench_prior_cooccurrence.py`` at 2,000 steps, 64 x 2: 0.52 of the nodes
beside their partner with the NELBO and a time input, 0.75 as here, both before the repeat bias above).
Sampling is the process's ancestral unmasking on a uniform grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from gencore.checks import check_int
from gencore.discrete import MaskedDiffusion, model_device, stratified_times
from gencore.errors import ConfigError, InputError
from gencore.io import Pretrained
from gencore.rng import draw_device
from gengraph.models.latent_flow import node_count_embedding

__all__ = ["CodePriorConfig", "CodeTokenPrior", "code_prior_loss", "sample_code_sets"]

REPEATS = 4  # visible-count classes with their own learned bias: 1, 2, 3 and 4 or more
_FORBIDDEN = -1e4  # logit of a token the mask rules out (finite: a -inf row would make the softmax NaN)


@dataclass(frozen=True, kw_only=True)
class CodePriorConfig:
    n_codes: int = 512
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    size_dim: int = 32  # the node count's sinusoidal features


class CodeTokenPrior(Pretrained, nn.Module):
    """``p(code_i | partly masked code set, n)`` for every node: ``(features [B, N, K + 2], t [B], mask [B, N])
    -> logits [B, N, K + 1]`` (the last class is the padding; ``t`` is the sampler's and is not read)."""

    config_class = CodePriorConfig

    def __init__(self, config: CodePriorConfig) -> None:
        super().__init__()
        for name in ("n_codes", "hidden", "layers", "heads"):
            check_int(getattr(config, name), name, low=1)
        if config.hidden % config.heads:
            raise ConfigError(f"hidden ({config.hidden}) must be a multiple of heads ({config.heads}).")
        self.config = config
        self.process = MaskedDiffusion(config.n_codes + 1)  # codes + padding; the process adds the mask token
        self.size = node_count_embedding(config.size_dim)
        self.inp = nn.Linear(config.n_codes + 2 + config.size_dim, config.hidden)
        layer = nn.TransformerEncoderLayer(
            config.hidden, config.heads, 2 * config.hidden, dropout=0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.out = nn.Linear(config.hidden, config.n_codes + 1)
        self.repeat = nn.Parameter(torch.zeros(REPEATS))  # logit bias of a code visible 1, 2, 3, >= 4 times

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # priors saved before the repeat bias existed are this model with a zero bias
        state_dict.setdefault(prefix + "repeat", torch.zeros(REPEATS))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def pad(self) -> int:
        return self.config.n_codes

    def forward(self, features: torch.Tensor, t: torch.Tensor | float, *, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = features.shape
        size = self.size(mask.sum(1))[:, None].expand(b, n, -1).to(features.dtype)
        h = self.inp(torch.cat([features, size], -1))
        logits = self.out(self.body(h, src_key_padding_mask=~mask))
        k = self.config.n_codes
        visible = (features[..., :k] * mask[..., None]).sum(1).long().clamp(max=REPEATS)  # [B, K] per code
        bias = F.pad(self.repeat, (1, 0))[visible]  # count 0: no bias
        logits = logits + F.pad(bias, (0, 1))[:, None]  # the padding class gets none
        is_pad = torch.arange(logits.shape[-1], device=logits.device) == self.pad
        forced = torch.where(is_pad, 0.0, _FORBIDDEN).to(logits.dtype).expand_as(logits)
        return torch.where(mask[..., None], logits.masked_fill(is_pad, _FORBIDDEN), forced)


def code_prior_loss(
    model: nn.Module, codes: torch.Tensor, mask: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The mean cross-entropy (nats) of the masked real nodes of a batch of code sets ``codes: [B, N]`` (padding
    masked out), each set masked at a share ``1 - t`` of stratified times ``t``; ``model`` may be the DDP wrapper
    of a :class:`CodeTokenPrior`."""
    prior = getattr(model, "module", model)
    process = prior.process
    real = codes[mask]
    if real.numel() and (int(real.min()) < 0 or int(real.max()) >= prior.pad):  # the padding token K among them
        raise InputError(
            f"the codes of real nodes must lie in [0, {prior.pad}) (the prior's n_codes), got range "
            f"[{int(real.min())}, {int(real.max())}]."
        )
    tokens = codes.masked_fill(~mask, prior.pad)
    t = stratified_times(codes.shape[0], generator=generator, device=draw_device(generator, codes.device)).to(
        codes.device
    )
    x_t = process.corrupt(tokens, t, generator=generator)
    hidden = ((x_t == process.mask_index) & mask).float()
    logits = model(process.features(x_t), t, mask=mask)
    ce = F.cross_entropy(logits.transpose(1, 2), tokens, reduction="none")
    loss = (ce * hidden).sum() / hidden.sum().clamp_min(1.0)
    return loss, {"masked_ce": loss.detach()}


@torch.no_grad()
def sample_code_sets(
    model: CodeTokenPrior, mask: torch.Tensor, *, steps: int = 50, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Code indices ``[B, N]`` for graphs with the node counts of ``mask`` (padded nodes hold code 0), drawn by
    ancestral unmasking in ``steps`` steps on the model's device (a CPU ``generator`` draws on the CPU)."""
    mask = mask.to(model_device(model))
    tokens = model.process.sample(model, *mask.shape, steps=steps, generator=generator, mask=mask).tokens
    return tokens.masked_fill(~mask, 0)
