"""Writing the evaluation table (JSON, Markdown) and its figure."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from gencore.io import write_json, write_text
from gencore.tables import format_table
from genimage.watermark.evaluate import HEADLINE_COLUMNS

__all__ = ["headline", "write_figure", "write_markdown"]


def headline(record: dict[str, Any]) -> float:
    """Bit accuracy for multi-bit schemes, TPR at 1% FPR for zero-bit ones."""
    return record["bit_accuracy"] if record.get("bit_accuracy") is not None else record["tpr_at_1fpr"]


def write_markdown(path: str | os.PathLike, records: Sequence[dict[str, Any]]) -> None:
    cols = [c for c in HEADLINE_COLUMNS if any(r.get(c) is not None for r in records)]
    rows = [{c: ("-" if r.get(c) is None else r[c]) for c in cols} for r in records]
    write_text(path, format_table(rows, cols, markdown=True) + "\n")


def write_figure(path: str | os.PathLike, records: Sequence[dict[str, Any]]) -> None:
    """Grouped bars: headline metric per attack, one bar per scheme."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gencore.plots import save_figure

    schemes = list(dict.fromkeys(r["scheme"] for r in records))
    attacks = list(dict.fromkeys(r["attack"] for r in records))
    width = 0.8 / max(1, len(schemes))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(attacks) + 2), 3.4))
    for i, s in enumerate(schemes):
        vals = [next((headline(r) for r in records if r["scheme"] == s and r["attack"] == a), 0.0) for a in attacks]
        ax.bar([j + (i - (len(schemes) - 1) / 2) * width for j in range(len(attacks))], vals, width, label=s)
    ax.set_xticks(range(len(attacks)), attacks)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("bit accuracy / TPR@1%FPR")
    ax.axhline(0.5, color="grey", lw=0.6, ls=":")
    ax.legend(fontsize=8, ncol=min(4, len(schemes)), loc="lower left")
    ax.set_title("watermark robustness", fontsize=10)
    save_figure(fig, path)


def write_all(records: Sequence[dict[str, Any]], json_path, markdown_path=None, figure_path=None) -> None:
    write_json(json_path, {"records": list(records)})
    if markdown_path is not None:
        write_markdown(markdown_path, records)
    if figure_path is not None:
        write_figure(figure_path, records)
