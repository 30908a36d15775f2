"""One evaluation record of a generated graph set against a reference: kernel-named MMDs (with optional
bootstrap intervals), V.U.N. with the reference dataset's validity rule, and set sizes; and the scores of an
autoencoder's edge reconstruction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.nn import functional as F

from gengraph.graph import Graph
from gengraph.metrics import DEFAULT_METRICS, graph_mmd, vun

__all__ = ["edge_reconstruction", "evaluate_sets"]


def evaluate_sets(
    reference: list[Graph],
    generated: list[Graph],
    *,
    train: list[Graph] | None = None,
    dataset: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    n_boot: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """The record: ``n_reference``, ``n_generated``, the MMDs of ``metrics``, ``valid``/``unique`` (and, given
    ``train``, ``novel``/``vun``), and the generated graphs' ``mean_nodes`` and ``mean_edges`` (an undirected edge
    counted once, as :attr:`Graph.n_edges` does; a directed graph's arcs each once)."""
    record: dict[str, Any] = {"n_reference": len(reference), "n_generated": len(generated)}
    record.update(graph_mmd(reference, generated, metrics, n_boot=n_boot, seed=seed))
    record.update(vun(generated, train if train is not None else [], dataset))
    if train is None:
        record.pop("novel")
        record.pop("vun")
    record["mean_nodes"] = sum(g.n_nodes for g in generated) / len(generated)
    record["mean_edges"] = sum(g.n_edges for g in generated) / len(generated)
    return record


def edge_reconstruction(logits: torch.Tensor, edges: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Argmax edge reconstruction of ``edges [B, N, N]`` from edge-class ``logits [B, N, N, C]`` (class 0 = no
    edge) over the real node pairs ``i < j``: accuracy, edge precision and recall, cross-entropy, and the
    fraction of graphs reconstructed exactly."""
    pair = (mask[:, :, None] & mask[:, None, :]).triu(1)
    pred = logits.argmax(-1)
    tp = ((pred > 0) & (edges > 0) & pair).sum()
    exact = ((pred == edges) | ~pair).flatten(1).all(-1)
    return {
        "edge_acc": float((pred[pair] == edges[pair]).float().mean()),
        "edge_precision": float(tp / ((pred > 0) & pair).sum().clamp_min(1)),
        "edge_recall": float(tp / ((edges > 0) & pair).sum().clamp_min(1)),
        "edge_ce": float(F.cross_entropy(logits[pair], edges[pair])),
        "exact_graphs": float(exact.float().mean()),
    }
