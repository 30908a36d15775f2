"""Writing the evaluation table (JSON, Markdown) and its figure."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from gencore.io import write_text
from gencore.tables import format_table
from genimage.watermark.evaluate import HEADLINE_COLUMNS

__all__ = ["headline", "write_examples", "write_figure", "write_markdown"]


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


def write_examples(path: str | os.PathLike, examples: Mapping[str, torch.Tensor]) -> None:
    """One labelled row of images per set (``[k, C, H, W]`` in ``[-1, 1]``): the unmarked images, then each scheme's.

    Image schemes (guidance, HiDDeN, MOLM) mark the unmarked images of the same noise, column by column; the
    initial-noise schemes draw their own noise, so their columns are other samples.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gencore.plots import save_figure
    from genimage.imageio import image_grid_array

    if not examples:
        raise ValueError("write_examples needs at least one set of images.")
    rows = [(name, image_grid_array(images, nrow=images.shape[0])) for name, images in examples.items()]
    aspect = max(a.shape[0] / a.shape[1] for _, a in rows)  # height / width of a row of tiles
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.0, (5.5 * aspect + 0.3) * len(rows) + 0.4), squeeze=False)
    for ax, (name, arr) in zip(axes[:, 0], rows):
        ax.imshow(arr[..., 0] if arr.shape[-1] == 1 else arr, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=9)
    fig.suptitle("unmarked and marked samples (no attack)", fontsize=10)
    save_figure(fig, path)
