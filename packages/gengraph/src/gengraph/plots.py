"""Pictures of graph sets: a grid of generated graphs next to real ones (spring layouts, seeded)."""

from __future__ import annotations

import os

import networkx as nx

from gencore.plots import save_figure
from gengraph.graph import Graph

__all__ = ["graph_grid"]


def graph_grid(
    rows: dict[str, list[Graph]], path: str | os.PathLike, *, per_row: int = 8, title: str = "", seed: int = 0
) -> None:
    """One row of up to ``per_row`` drawings per named set (e.g. ``{"real": ..., "GGBall": ...}``), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(rows), per_row, figsize=(1.6 * per_row, 1.7 * len(rows)), squeeze=False)
    for r, (name, graphs) in enumerate(rows.items()):
        for c in range(per_row):
            ax = axes[r][c]
            ax.set_axis_off()
            if c >= len(graphs):
                continue
            g = graphs[c].to_networkx()
            pos = nx.spring_layout(g, seed=seed)
            nx.draw_networkx(g, pos, ax=ax, node_size=12, width=0.5, with_labels=False, node_color="#3465a4")
            if c == 0:
                ax.set_title(name, loc="left", fontsize=9)
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
