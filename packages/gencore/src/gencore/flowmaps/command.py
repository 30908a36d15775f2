"""``gencore flowmap compare``: few-step flow maps (MeanFlow, CMT, pi-Flow) against baselines on a 2-D toy.

    gencore flowmap compare --methods meanflow,cmt,piflow,regress,teacher --nfe 1,2 --steps 1200 \\
                            --json out/flowmap.json --out out/figures
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gencore.command import (
    add_commands,
    int_list,
    name_list,
    output_file,
    output_folder,
    refuse_overwriting_input,
    seed_int,
)
from gencore.config import config_from_flags
from gencore.data import TOY_DATASETS
from gencore.io import ensure_dir, write_json
from gencore.plots import metric_curves, save_figure
from gencore.tables import format_table, pivot
from gencore.toy_experiment import MMD_KEY


def _plot_samples(samples: dict, reference, path: Path, title: str, max_points: int = 2048) -> None:
    """One row per method, one column per NFE (blank where a method has no such NFE), then the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nfes = sorted({k for s in samples.values() for k in s})
    rows = list(samples)
    fig, axes = plt.subplots(len(rows), len(nfes) + 1, figsize=(2.2 * (len(nfes) + 1), 2.2 * len(rows)), squeeze=False)
    lim = float(reference.abs().max()) * 1.15
    for i, name in enumerate(rows):
        for j, k in enumerate([*nfes, None]):
            ax = axes[i][j]
            pts = reference if k is None else samples[name].get(k)
            if pts is not None:
                pts = pts[:max_points].cpu().numpy()
                ax.scatter(pts[:, 0], pts[:, 1], s=0.6, alpha=0.6, color="black" if k is None else "C0")
            else:
                ax.set_frame_on(False)  # keeps the row label of a method without this NFE
            ax.set_xlim(-lim, lim)
            ax.set_ylim(-lim, lim)
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("data" if k is None else f"NFE {k}", fontsize=9)
            if j == 0:
                ax.set_ylabel(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def cmd_compare(args: argparse.Namespace) -> int:
    from gencore.flowmaps.experiment import FlowMapConfig, check_methods, compare, config_dict

    methods = check_methods(args.methods)
    cfg = config_from_flags(FlowMapConfig, args).validate()
    refuse_overwriting_input(args.json, "--json", args.config)
    json_path = Path(args.json)
    figure_dir = Path(args.out) if args.out else json_path.parent
    ensure_dir(json_path.parent)
    ensure_dir(figure_dir)
    start = time.perf_counter()
    records, samples, reference = compare(cfg, methods)
    seconds = time.perf_counter() - start
    write_json(
        json_path, {"config": config_dict(cfg), "methods": list(methods), "seconds": seconds, "records": records}
    )
    stem = json_path.stem
    _plot_samples(samples, reference, figure_dir / f"{stem}_samples.png", f"{cfg.dataset}, {cfg.steps} steps")
    metric_curves(
        records, "w2", figure_dir / f"{stem}_w2.png", title=cfg.dataset, by="method", xlabel="NFE (network evaluations)"
    )
    columns = ["method", "nfe", "w2", MMD_KEY, "modes_covered", "in_support", "train_steps", "train_seconds"]
    print(format_table(records, [c for c in columns if any(c in r for r in records)]))
    print(format_table(pivot(records, "method", "nfe", "w2")))
    print(f"{len(records)} records in {json_path} ({seconds:.0f} s); figures in {figure_dir}/")
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``gencore flowmap compare``."""
    flowmap = commands.add_parser("flowmap", help="train and compare few-step flow maps (MeanFlow, CMT, pi-Flow)")
    sub = add_commands(flowmap)
    cp = sub.add_parser("compare", help="one model per method, shared teacher; W2/MMD per (method, nfe)")
    cp.add_argument(
        "--methods",
        required=True,
        type=name_list,
        help="comma-separated: meanflow, cmt, piflow, regress (1-step baseline), teacher (32-NFE Euler)",
    )
    cp.add_argument("--nfe", type=int_list, help="network evaluations per sample, e.g. 1,2 (default 1,2)")
    cp.add_argument("--steps", type=int, help="training steps per student (cmt: post-training steps; default 1200)")
    cp.add_argument("--teacher-steps", type=int, dest="teacher_steps", help="teacher training steps (default 2000)")
    cp.add_argument("--cmt-steps", type=int, dest="cmt_steps", help="CMT mid-training steps (default 2000)")
    cp.add_argument("--cmt-lr", type=float, dest="cmt_lr", help="CMT post-training learning rate (default 1e-4)")
    cp.add_argument("--derivative", choices=("jvp", "fd"), help="MeanFlow's d/ds u: exact JVP or finite difference")
    cp.add_argument("--dataset", help=f"one of {', '.join(TOY_DATASETS)} (default checkerboard)")
    cp.add_argument("--batch-size", type=int, dest="batch_size", help="training batch size (default 256)")
    cp.add_argument("--lr", type=float, help="learning rate of the teacher and of students from scratch (default 1e-3)")
    cp.add_argument("--n-eval", type=int, dest="n_eval", help="samples scored per (method, nfe) (default 1024)")
    cp.add_argument("--seed", type=seed_int, help="seed shared by every method (default 0)")
    cp.add_argument("--config", type=Path, help="YAML file of FlowMapConfig fields; flags override it")
    cp.add_argument("--json", required=True, type=output_file, help="where to write the records")
    cp.add_argument("--out", type=output_folder, help="figure folder (default: beside --json)")
    cp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    cp.set_defaults(func=cmd_compare)
    flowmap.set_defaults(func=lambda a: flowmap.print_help())
