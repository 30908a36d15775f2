"""The coupling protocol shared by every pairing rule, plus the chunked
max-inner-product search that the entropic and semidiscrete couplings use.

A *coupling* decides which noise sample ``x0`` is trained against which data
sample ``x1`` in flow matching. Independent pairing is the classic choice
(Lipman et al. 2023, "Flow Matching for Generative Modeling"); minibatch OT
pairing straightens the learned paths (Tong et al. 2024, "Improving and
generalizing flow-based generative models with minibatch optimal transport";
Pooladian et al. 2023, "Multisample Flow Matching"); semidiscrete OT pairs
against the whole data set (Mousavi-Hosseini et al., "Flow Matching with
Semidiscrete Couplings", arXiv:2509.25519, ICLR 2026).

Every coupling answers the same call::

    x0_paired, x1_paired = coupling(x0, x1, generator=None)

with ``x0: [B, ...]`` noise and ``x1: [B, ...]`` data, and returns two tensors
with the same batch size ``B``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from gencore.checks import check_finite, check_same_dim
from gencore.errors import ConfigError, InputError
from gencore.rng import rand_with


@runtime_checkable
class Coupling(Protocol):
    """``coupling(x0, x1, *, generator=None) -> (x0_paired, x1_paired)``, both with batch size ``B``."""

    def __call__(
        self, x0: torch.Tensor, x1: torch.Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


def check_batch_pair(x0: torch.Tensor, x1: torch.Tensor) -> None:
    """Validate a noise/data pair: finite tensors ``[B, ...]`` with equal ``B >= 1`` and feature shape."""
    check_finite(x0, "x0")
    check_finite(x1, "x1")
    if x0.dim() < 2 or x1.dim() < 2:
        raise InputError(
            f"x0 and x1 must be batches [B, ...] with at least 2 dimensions, got shapes "
            f"{tuple(x0.shape)} and {tuple(x1.shape)}."
        )
    if x0.shape[0] != x1.shape[0]:
        raise InputError(f"x0 has batch size {x0.shape[0]} but x1 has {x1.shape[0]}; a coupling pairs equal batches.")
    if x0.shape[0] == 0:
        raise InputError("x0 and x1 are empty; expected at least one sample.")
    check_same_dim(x0, x1, "x0", "x1")


def check_positive(value: float, name: str, *, allow_zero: bool = False) -> float:
    """Raise :class:`ConfigError` unless ``value`` is finite and ``> 0`` (``>= 0`` with ``allow_zero``)."""
    v = float(value)
    ok = v >= 0 if allow_zero else v > 0
    if not (ok and v < float("inf")):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}.")
    return v


def sq_norms(x: torch.Tensor) -> torch.Tensor:
    """``|x_i|^2`` for ``x: [..., n, d]`` -> ``[..., n]``."""
    return (x * x).sum(-1)


def sq_euclidean_cost(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Squared-Euclidean cost ``C_ij = |x_i - y_j|^2`` for ``x: [..., n, d]``, ``y: [..., m, d]``.

    Computed as ``|x|^2 + |y|^2 - 2 x y^T`` with one matmul and clamped at 0
    (rounding can make the expansion slightly negative).
    """
    c = torch.matmul(x, y.transpose(-1, -2)).mul_(-2.0)
    c.add_(sq_norms(x).unsqueeze(-1)).add_(sq_norms(y).unsqueeze(-2))
    return c.clamp_min_(0.0)


def gumbel_like(shape: tuple[int, ...], like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Standard Gumbel noise ``-log(-log U)``, ``U ~ Uniform(0, 1)``, drawn with ``generator``."""
    u = rand_with(shape, generator, device=like.device, dtype=like.dtype)  # drawn where the generator lives
    tiny = torch.finfo(like.dtype).tiny
    return u.clamp_(min=tiny).log_().neg_().clamp_(min=tiny).log_().neg_()


def max_inner_product(
    queries: torch.Tensor,
    keys: torch.Tensor,
    bias: torch.Tensor,
    *,
    scale: float = 1.0,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    query_chunk: int = 1024,
    key_chunk: int = 16384,
) -> torch.Tensor:
    """Chunked (soft) arg-max of ``s_ij = scale * <q_i, k_j> + bias_j`` over ``j``.

    ``queries: [B, D]``, ``keys: [N, D]``, ``bias: [N]`` -> indices ``[B]`` (int64).

    - ``temperature == 0``: ``argmax_j s_ij`` (hard assignment).
    - ``temperature > 0``: a sample ``j ~ softmax_j(s_ij / temperature)`` by the Gumbel-max trick,
      ``argmax_j (s_ij / temperature + G_ij)`` with i.i.d. standard Gumbel ``G``; the draws depend on
      the chunk sizes, the distribution does not.

    Memory: at most ``query_chunk * key_chunk`` scores (twice that with Gumbel noise) plus
    ``O(B + N)``; no ``[B, N]`` matrix is ever held.
    """
    if query_chunk < 1 or key_chunk < 1:
        raise ConfigError(f"query_chunk and key_chunk must be >= 1, got {query_chunk} and {key_chunk}.")
    n_q, n_k = queries.shape[0], keys.shape[0]
    out = torch.empty(n_q, dtype=torch.long, device=queries.device)
    soft = temperature > 0
    inv_t = 1.0 / temperature if soft else 1.0
    for q0 in range(0, n_q, query_chunk):
        q = queries[q0 : q0 + query_chunk]
        best_val = torch.full((q.shape[0],), -float("inf"), dtype=queries.dtype, device=queries.device)
        best_idx = torch.zeros(q.shape[0], dtype=torch.long, device=queries.device)
        for k0 in range(0, n_k, key_chunk):
            k = keys[k0 : k0 + key_chunk]
            s = torch.addmm(bias[k0 : k0 + key_chunk].unsqueeze(0), q, k.t(), beta=1.0, alpha=scale)
            if soft:
                s.mul_(inv_t).add_(gumbel_like(tuple(s.shape), s, generator))
            val, idx = s.max(dim=1)
            better = val > best_val
            best_val = torch.where(better, val, best_val)
            best_idx = torch.where(better, idx + k0, best_idx)
        out[q0 : q0 + q.shape[0]] = best_idx
    return out
