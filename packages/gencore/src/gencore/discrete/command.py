"""The ``gencore discrete`` verb.

    gencore discrete compare --task dna --processes masked,uniform,wf-simplex --steps 2000 --json out.json

Trains one denoiser per process with equal settings, prints a table of the bound (nats per
position) and sample statistics, writes the records as JSON and two figures beside it (or in
``--out``): ``<stem>_bound.png`` (the bound per process) and ``<stem>_samples.png`` (3-mer
frequencies for dna, 2-D histograms for grid, digit mosaics for digits).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gencore.command import (
    add_commands,
    name_list,
    output_file,
    output_folder,
    refuse_overwriting_input,
    seed_int,
)
from gencore.config import config_from_flags
from gencore.discrete.experiment import DiscreteConfig, compare, config_dict
from gencore.discrete.registry import PROCESSES
from gencore.discrete.tasks import TASKS, TokenTask
from gencore.io import ensure_dir, write_json
from gencore.tables import format_table

__all__ = ["register"]

STAT_COLUMNS = ("kmer3_tv", "motif_rate", "hist_tv", "mean_pixel", "mmd2_rbf")


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``discrete compare`` to a package command's sub-command group."""
    discrete = commands.add_parser("discrete", help="masked, uniform, Wright-Fisher and learned-forward token models")
    verbs = add_commands(discrete)
    cp = verbs.add_parser("compare", help="one denoiser per process, equal steps; bound and sample statistics")
    cp.add_argument(
        "--config", type=Path, help="YAML file of DiscreteConfig fields (e.g. heads, label_drop); flags override it"
    )
    cp.add_argument("--task", help=f"one of {', '.join(TASKS)} (default dna)")
    cp.add_argument(
        "--processes", type=name_list, help=f"comma-separated, from: {', '.join(PROCESSES)} (default masked,uniform)"
    )
    cp.add_argument("--steps", type=int, help="training steps per process (default 2000)")
    cp.add_argument("--sample-steps", type=int, dest="sample_steps", help="sampler steps (default 32)")
    cp.add_argument("--batch-size", type=int, dest="batch_size", help="default 64")
    cp.add_argument("--lr", type=float, help="AdamW learning rate (default 2e-3)")
    cp.add_argument("--hidden", type=int, help="denoiser width (default 32)")
    cp.add_argument("--depth", type=int, help="transformer layers (default 2)")
    cp.add_argument("--n-eval", type=int, dest="n_eval", help="test sequences in the bound (default 256)")
    cp.add_argument("--n-time", type=int, dest="n_time", help="time strata per sequence in the bound (default 16)")
    cp.add_argument("--n-samples", type=int, dest="n_samples", help="samples scored per process (default 512)")
    cp.add_argument("--guidance-scale", type=float, dest="guidance_scale", help="1 (default): the conditional model")
    cp.add_argument("--seed", type=seed_int, help="default 0")
    cp.add_argument("--json", required=True, type=output_file, help="where to write the records")
    cp.add_argument("--out", type=output_folder, help="figure folder (default: beside --json)")
    cp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    cp.set_defaults(func=cmd_discrete_compare)
    discrete.set_defaults(func=lambda a: discrete.print_help())


def cmd_discrete_compare(args: argparse.Namespace) -> int:
    cfg = config_from_flags(DiscreteConfig, args).validate()
    refuse_overwriting_input(args.json, "--json", args.config)
    json_path = Path(args.json)
    figures = Path(args.out) if args.out else json_path.parent
    ensure_dir(json_path.parent)
    ensure_dir(figures)
    start = time.perf_counter()
    records, samples, reference, task = compare(cfg)
    seconds = time.perf_counter() - start
    write_json(json_path, {"config": config_dict(cfg), "records": records, "reference": reference, "seconds": seconds})
    stem = json_path.stem
    plot_bounds(records, figures / f"{stem}_bound.png", title=f"{task.name}: negative ELBO, {cfg.steps} steps")
    plot_samples(samples, task, figures / f"{stem}_samples.png")
    stats = [c for c in STAT_COLUMNS if any(c in r for r in records)]
    columns = ["process", "nll_nats_per_token", "nll_stderr", *stats, "nfe", "train_seconds"]
    print(format_table(records, columns))
    print(format_table([reference], ["process", "independent_nll_nats_per_token", *stats]))
    print(f"{len(records)} records in {json_path} ({seconds:.0f} s); figures in {figures}/")
    return 0


def plot_bounds(records: list[dict[str, Any]], path: Path, *, title: str) -> None:
    """Bar chart of the bound per process with its standard error."""
    from gencore.plots import plt, save_figure

    fig, ax = plt.subplots(figsize=(1.1 * len(records) + 2.0, 3.2))
    names = [r["process"] for r in records]
    ax.bar(names, [r["nll_nats_per_token"] for r in records], yerr=[r["nll_stderr"] for r in records], color="C0")
    ax.set_ylabel("NELBO (nats / position)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    save_figure(fig, path)


def plot_samples(samples: Mapping[str, torch.Tensor], task: TokenTask, path: Path) -> None:
    """One panel per process, then the test split: 3-mer bars (dna), 2-D histograms (grid), mosaics (digits)."""
    from gencore.plots import plt, save_figure

    panels = [*samples.items(), ("data (test)", task.test)]
    if task.name == "dna":
        from gencore.discrete.experiment import _kmer_frequencies

        reference = _kmer_frequencies(task.test, 4, 3).numpy()
        fig, axes = plt.subplots(len(samples), 1, figsize=(9.0, 1.6 * len(samples)), squeeze=False, sharex=True)
        for ax, (name, x) in zip(axes[:, 0], samples.items()):
            ax.bar(range(64), _kmer_frequencies(x.cpu(), 4, 3).numpy(), color="C0", label="samples")
            ax.step(range(64), reference, where="mid", color="black", lw=0.8, label="test")
            ax.set_ylabel(name, fontsize=8)
        axes[0, 0].legend(fontsize=7)
        axes[-1, 0].set_xlabel("3-mer (AAA ... TTT)")
    else:
        fig, axes = plt.subplots(1, len(panels), figsize=(2.2 * len(panels), 2.4), squeeze=False)
        for ax, (name, x) in zip(axes[0], panels):
            x = x.cpu()
            if task.name == "grid":
                k = task.vocab_size
                hist = torch.bincount(x[:, 0] * k + x[:, 1], minlength=k * k).reshape(k, k).T
                ax.imshow(hist.numpy(), origin="lower", cmap="viridis")
            else:
                tiles = torch.zeros(16, 64, dtype=x.dtype)  # blank tiles where fewer than 16 samples were drawn
                tiles[: min(16, x.shape[0])] = x[:16]
                imgs = tiles.reshape(4, 4, 8, 8).permute(0, 2, 1, 3).reshape(32, 32)
                ax.imshow(imgs.numpy(), cmap="gray_r", vmin=0, vmax=1)
            ax.set_title(name, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    save_figure(fig, path)
