"""``gencore manifold compare``: RFM vs Generalised Flow Maps on the sphere, torus or Poincare ball.

gencore manifold compare --manifold sphere --methods rfm,gfm-lsd,gfm-psd --nfe 1,2,4 --json out/sphere.json
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch

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
from gencore.errors import ConfigError
from gencore.io import ensure_dir, write_json
from gencore.plots import metric_curves, save_figure
from gencore.tables import format_table, pivot


def _plane(manifold_name: str, x: torch.Tensor) -> torch.Tensor:
    """2-D coordinates to draw: longitude/latitude on the sphere, angles on the torus, the disk itself."""
    if manifold_name == "sphere":
        lon = torch.atan2(x[:, 1], x[:, 0])
        lat = torch.asin(x[:, 2].clamp(-1, 1))
        return torch.stack([lon, lat], -1)
    return x


def plot_samples(manifold_name: str, samples, reference: torch.Tensor, path: Path, title: str) -> None:
    """One row per method, one column per NFE, then the data (sphere: lon/lat; torus: angles; ball: disk)."""
    import matplotlib.pyplot as plt

    nfes = sorted({k for s in samples.values() for k in s})
    rows = list(samples)
    fig, axes = plt.subplots(len(rows), len(nfes) + 1, figsize=(2.3 * (len(nfes) + 1), 2.3 * len(rows)), squeeze=False)
    lim = {"sphere": (math.pi, math.pi / 2), "torus": (math.pi, math.pi), "ball": (1.0, 1.0)}[manifold_name]
    for i, name in enumerate(rows):
        for j, k in enumerate([*nfes, None]):
            ax = axes[i][j]
            pts = _plane(manifold_name, (reference if k is None else samples[name][k])[:2000]).cpu().numpy()
            ax.scatter(pts[:, 0], pts[:, 1], s=0.5, alpha=0.6, color="black" if k is None else "C0")
            ax.set_xlim(-lim[0], lim[0])
            ax.set_ylim(-lim[1], lim[1])
            if manifold_name == "ball":
                ax.add_patch(plt.Circle((0, 0), 1.0, fill=False, lw=0.6, color="gray"))
                ax.set_aspect("equal")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("data" if k is None else f"NFE {k}", fontsize=9)
            if j == 0:
                ax.set_ylabel(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    save_figure(fig, path)


def cmd_compare(args: argparse.Namespace) -> int:
    from gencore.manifolds.experiment import ManifoldCompareConfig, compare, config_dict

    cfg = config_from_flags(ManifoldCompareConfig, args).validate()
    refuse_overwriting_input(args.json, "--json", args.config)
    json_path = Path(args.json)
    figure_dir = Path(args.out) if args.out else json_path.parent
    if json_path.exists() and json_path.is_dir():
        raise ConfigError(f"--json {json_path} is a folder; give a file path.")
    ensure_dir(json_path.parent if str(json_path.parent) else Path("."))
    ensure_dir(figure_dir)
    start = time.perf_counter()
    records, samples, reference = compare(cfg)
    write_json(json_path, {"config": config_dict(cfg), "records": records})
    stem = json_path.stem
    plot_samples(
        cfg.manifold, samples, reference, figure_dir / f"{stem}_samples.png", f"{cfg.manifold}, {cfg.steps} steps"
    )
    metric_curves(
        records,
        "mmd",
        figure_dir / f"{stem}_mmd.png",
        title=cfg.manifold,
        by="method",
        xlabel="NFE (Euler steps / flow-map jumps)",
        log_y=True,
    )
    print(format_table(pivot(records, "method", "nfe", "mmd")))
    print(
        f"{len(records)} records in {json_path} ({time.perf_counter() - start:.0f} s); "
        f"figures {stem}_samples.png, {stem}_mmd.png in {figure_dir}/"
    )
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    """Add ``manifold compare`` to the ``gencore`` command."""
    from gencore.manifolds.experiment import METHODS, PROBLEMS

    man = commands.add_parser("manifold", help="Riemannian flow matching and Generalised Flow Maps on manifolds")
    verbs = add_commands(man)
    cp = verbs.add_parser("compare", help="RFM (Euler) vs flow maps (jumps): geodesic MMD per (method, nfe)")
    cp.add_argument("--config", type=Path, help="YAML file of ManifoldCompareConfig fields; flags override it")
    cp.add_argument(
        "--manifold",
        choices=PROBLEMS,
        help="the problem: vMF mixture on S^2 (sphere, the default), "
        "checkerboard on the flat torus, wrapped-normal mixture on the Poincare disk",
    )
    cp.add_argument(
        "--methods",
        type=name_list,
        default=None,
        help=f"comma-separated, some of {','.join(METHODS)} (default rfm,gfm-lsd,gfm-psd)",
    )
    cp.add_argument("--nfe", type=int_list, default=None, help="steps / jumps to evaluate (default 1,2,4)")
    cp.add_argument("--steps", type=int, help="training steps per method (default 1500)")
    cp.add_argument("--batch-size", type=int, dest="batch_size", help="default 256")
    cp.add_argument("--lr", type=float, help="Adam learning rate (default 2e-3, ball 5e-3; linear decay to 10%%)")
    cp.add_argument("--hidden", type=int, help="MLP width (default 128)")
    cp.add_argument("--depth", type=int, help="MLP hidden layers (default 3)")
    cp.add_argument("--n-eval", type=int, dest="n_eval", help="samples scored per NFE (default 2000)")
    cp.add_argument("--seed", type=seed_int, help="default 0")
    cp.add_argument("--json", required=True, type=output_file, help="where to write the records")
    cp.add_argument("--out", type=output_folder, help="figure folder (default: beside --json)")
    cp.add_argument("--no-progress", action="store_true", help="hide progress bars")
    cp.set_defaults(func=cmd_compare)
    man.set_defaults(func=lambda a: man.print_help())
