"""One evaluation record of a generated graph set against a reference: kernel-named MMDs (with optional
bootstrap intervals), V.U.N. with the reference dataset's validity rule, and set sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gengraph.graph import Graph
from gengraph.metrics import DEFAULT_METRICS, graph_mmd, vun

__all__ = ["evaluate_sets"]


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
    record: dict[str, Any] = {"n_reference": len(reference), "n_generated": len(generated)}
    record.update(graph_mmd(reference, generated, metrics, n_boot=n_boot, seed=seed))
    record.update(vun(generated, train if train is not None else [], dataset))
    if train is None:
        record.pop("novel")
        record.pop("vun")
    record["mean_nodes"] = sum(g.n_nodes for g in generated) / len(generated)
    record["mean_edges"] = sum(g.n_edges for g in generated) / len(generated)
    return record
