"""Figures for reports: sample scatter grids, digit mosaics and metric-vs-NFE curves.

Matplotlib runs with the non-interactive Agg backend; every figure is written
atomically (temporary name, then rename) through :mod:`gencore.io`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from gencore.io import atomic_path


def save_figure(fig: Any, path: str | os.PathLike) -> None:
    """Write ``fig`` as a PNG atomically (temporary name, then rename) and close it."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def _panel_grid(
    samples: Mapping[str, Mapping[int, torch.Tensor]],
    reference: torch.Tensor,
    path: str | os.PathLike,
    draw: Callable[[Any, torch.Tensor, bool], None],
    *,
    cell: float,
    title: str,
) -> None:
    """Rows: couplings; columns: each NFE, then the reference. ``draw(ax, points, is_reference)``."""
    rows = list(samples)
    nfes = sorted({k for s in samples.values() for k in s})
    fig, axes = plt.subplots(
        len(rows), len(nfes) + 1, figsize=(cell * (len(nfes) + 1), cell * len(rows)), squeeze=False
    )
    for i, name in enumerate(rows):
        for j, k in enumerate([*nfes, None]):
            ax = axes[i][j]
            draw(ax, reference if k is None else samples[name][k], k is None)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("data" if k is None else f"NFE {k}", fontsize=9)
            if j == 0:
                ax.set_ylabel(name, fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def scatter_grid(
    samples: Mapping[str, Mapping[int, torch.Tensor]],
    reference: torch.Tensor,
    path: str | os.PathLike,
    *,
    title: str = "",
    max_points: int = 2048,
) -> None:
    """Scatter plots of 2-D samples, one row per coupling, one column per NFE, then the data."""
    lim = float(reference[:max_points].abs().max()) * 1.15

    def draw(ax: Any, pts: torch.Tensor, is_ref: bool) -> None:
        pts = pts[:max_points].cpu().numpy()
        ax.scatter(pts[:, 0], pts[:, 1], s=0.6, alpha=0.6, color="black" if is_ref else "C0")
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)

    _panel_grid(samples, reference, path, draw, cell=2.2, title=title)


def image_grid(
    samples: Mapping[str, Mapping[int, torch.Tensor]],
    reference: torch.Tensor,
    path: str | os.PathLike,
    *,
    shape: tuple[int, int] = (8, 8),
    per_cell: int = 16,
    title: str = "",
) -> None:
    """Mosaics of ``sqrt(per_cell)^2`` images ``[n, H*W]`` (pixels in [-1, 1]) per coupling and NFE, then data."""
    side = int(per_cell**0.5)
    h, w = shape

    def draw(ax: Any, x: torch.Tensor, is_ref: bool) -> None:
        imgs = x[: side * side].reshape(side, side, h, w).cpu()
        ax.imshow(imgs.permute(0, 2, 1, 3).reshape(side * h, side * w).numpy(), cmap="gray_r", vmin=-1, vmax=1)

    _panel_grid(samples, reference, path, draw, cell=2.0, title=title)


def metric_curves(
    records: Sequence[Mapping[str, Any]],
    metric: str,
    path: str | os.PathLike,
    *,
    title: str = "",
    by: str = "coupling",
    xlabel: str = "Euler NFE",
    log_y: bool = False,
) -> None:
    """``metric`` against NFE (log-2 axis), one line per value of ``records[i][by]``."""
    fig, ax = plt.subplots(figsize=(4.2, 3.2))
    for name in dict.fromkeys(r[by] for r in records):
        rs = sorted((r for r in records if r[by] == name), key=lambda r: r["nfe"])
        values = [r[metric] for r in rs]
        ax.plot([r["nfe"] for r in rs], [max(v, 1e-6) for v in values] if log_y else values, marker="o", label=name)
    ax.set_xscale("log", base=2)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    save_figure(fig, path)


def loss_curve(losses: Sequence[tuple[int, float]], path: str | os.PathLike, *, title: str = "training loss") -> None:
    """Logged ``(step, loss)`` pairs with a running mean over 20 records."""
    fig, ax = plt.subplots(figsize=(4.2, 3.0))
    steps = [s for s, _ in losses]
    x = torch.tensor([v for _, v in losses], dtype=torch.float64)
    ax.plot(steps, x.numpy(), alpha=0.3, lw=0.6)
    if x.numel() >= 20:
        smooth = torch.nn.functional.avg_pool1d(x[None, None], 20, stride=1)[0, 0]
        ax.plot(steps[19:], smooth.numpy(), lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    save_figure(fig, path)
