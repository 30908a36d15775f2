"""The ``gencore`` command.

    gencore toy train   --dataset checkerboard --coupling semidiscrete --steps 3000 --out runs/cb
    gencore toy compare --dataset checkerboard --couplings independent,sinkhorn,semidiscrete \\
                        --nfe 1,2,4 --steps 3000 --json out.json
    gencore demo        --out report/gencore
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gencore import __version__
from gencore.command import (
    add_commands,
    add_engine_options,
    int_list,
    name_list,
    output_file,
    output_folder,
    package_parser,
    refuse_overwriting_input,
    report_finished,
    run,
    seed_int,
)
from gencore.config import config_from_flags
from gencore.couplings import COUPLINGS
from gencore.data import DATASETS
from gencore.discrete.command import register as register_discrete
from gencore.errors import ConfigError
from gencore.flowmaps.command import register as register_flowmaps
from gencore.io import ensure_dir, read_json, write_json, write_text
from gencore.manifolds.command import register as register_manifolds
from gencore.tables import format_table, pivot
from gencore.toy_experiment import (
    MMD_KEY,
    ToyConfig,
    compare,
    config_dict,
    evaluate,
    reference_data,
    train,
)


def _add_run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", help=f"one of {', '.join(DATASETS)} (default checkerboard)")
    p.add_argument("--steps", type=int, help="training steps per model (default 3000)")
    p.add_argument("--nfe", type=int_list, help="Euler budgets to evaluate, e.g. 1,2,4,8")
    p.add_argument("--batch-size", type=int, dest="batch_size", help="training batch size (default 256)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default 1e-3)")
    p.add_argument("--n-data", type=int, dest="n_data", help="finite training set size (toys; default 4096)")
    p.add_argument("--n-eval", type=int, dest="n_eval", help="samples scored per NFE (default 2048)")
    p.add_argument(
        "--seed", type=seed_int, help="seed of data, initialisation, batches and evaluation noise (default 0)"
    )
    p.add_argument("--config", type=Path, help="YAML file of ToyConfig fields; flags override it")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _toy_config(args: argparse.Namespace):
    return config_from_flags(ToyConfig, args).validate()


def _plot_samples(cfg, samples, reference, path: Path, title: str) -> None:
    from gencore.plots import image_grid, scatter_grid

    if cfg.is_digits:  # pixels on the [-1, 1] scale the model was trained on
        image_grid(samples, reference, path, title=title)
    else:
        scatter_grid(samples, reference, path, title=title)


def cmd_toy_train(args: argparse.Namespace) -> int:
    from gencore.plots import loss_curve
    from gencore.train import holds_settings, interruption

    cfg = _toy_config(args)
    out = Path(args.out)
    finished = (out / "metrics.json").is_file() and (out / "config.json").is_file()
    if args.resume and finished and holds_settings(read_json(out / "config.json"), config_dict(cfg)):
        return report_finished(out)
    engine = {
        "resume": args.resume,
        "checkpoint_every": args.checkpoint_every,
        "keep_last": args.keep_last,
        "precision": args.precision,
        "nan_policy": args.nan_policy,
        "clip_grad_norm": args.clip_grad_norm,
        "sample_every": args.sample_every,
        "parallel": args.parallel,
    }
    run_ = train(cfg, out_dir=out, nproc=args.nproc, **{k: v for k, v in engine.items() if v is not None})
    # written after the engine accepted the folder, so a refused run leaves an existing run untouched
    write_json(out / "config.json", config_dict(cfg) | {"engine": engine, "nproc": args.nproc})
    if run_.interrupted:
        raise interruption(out)
    records, samples = evaluate(run_)
    write_json(out / "metrics.json", {"records": records, "coupling_diagnostics": run_.coupling_diagnostics})
    _plot_samples(
        cfg, {cfg.coupling: samples}, reference_data(cfg), out / "samples.png", f"{cfg.dataset}: {cfg.coupling}"
    )
    loss_curve(run_.losses, out / "loss.png")
    print(format_table(records, ["coupling", "nfe", "w2", MMD_KEY]))
    print(f"wrote {out}/: model/, checkpoints/, metrics.jsonl, config.json, metrics.json, samples.png, loss.png")
    return 0


def _compare(cfg, couplings: Sequence[str], json_path: Path, figure_dir: Path) -> list[dict[str, Any]]:
    from gencore.plots import metric_curves

    ensure_dir(json_path.parent)
    ensure_dir(figure_dir)
    start = time.perf_counter()
    records, samples = compare(cfg, couplings)
    stem = json_path.stem
    write_json(json_path, {"config": config_dict(cfg), "couplings": list(couplings), "records": records})
    metric = MMD_KEY if cfg.is_digits else "w2"
    _plot_samples(
        cfg,
        samples,
        reference_data(cfg),
        figure_dir / f"{stem}_samples.png",
        f"{cfg.dataset}, {cfg.steps} steps",
    )
    metric_curves(records, metric, figure_dir / f"{stem}_{metric}.png", title=cfg.dataset)
    for key in ("w2", MMD_KEY):
        print(f"{key} of Euler samples by number of function evaluations (lower is better):")
        print(format_table(pivot(records, "coupling", "nfe", key)))
    print(f"{len(records)} records in {json_path} ({time.perf_counter() - start:.0f} s); figures in {figure_dir}/")
    return records


def cmd_toy_compare(args: argparse.Namespace) -> int:
    couplings = args.couplings
    unknown = [c for c in couplings if c not in COUPLINGS]
    if unknown or not couplings:
        raise ConfigError(
            f"unknown coupling(s) {', '.join(unknown) or '(none given)'}; expected some of: {', '.join(COUPLINGS)}."
        )
    cfg = _toy_config(args)
    refuse_overwriting_input(args.json, "--json", args.config)
    json_path = Path(args.json)
    _compare(cfg, couplings, json_path, Path(args.out) if args.out else json_path.parent)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.steps < 1:  # before the report folder is made (a refused demo left an empty one)
        raise ConfigError(f"--steps must be a positive integer, got {args.steps}.")
    out = ensure_dir(args.out)
    couplings = ("independent", "sinkhorn", "semidiscrete")
    sections = []
    for dataset, steps in (("checkerboard", args.steps), ("digits", args.steps)):
        print(f"== {dataset}: {', '.join(couplings)}, {steps} steps each")
        cfg = ToyConfig(dataset=dataset, steps=steps, progress=not args.no_progress)
        records = _compare(cfg, couplings, out / f"{dataset}.json", out)
        metric = MMD_KEY if dataset == "digits" else "w2"
        sections.append(
            f"## {dataset}\n\n{metric} of Euler samples (lower is better), {steps} training steps per coupling:\n\n"
            f"{format_table(pivot(records, 'coupling', 'nfe', metric), markdown=True)}\n\n"
            f"![samples]({dataset}_samples.png)\n\n![{metric}]({dataset}_{metric}.png)\n"
        )
    text = (
        "# gencore demo\n\nFlow matching with independent, Sinkhorn minibatch-OT and semidiscrete-OT (SD-FM) "
        "couplings on bundled data, equal training steps, Euler sampling at several NFE.\n\n" + "\n".join(sections)
    )
    write_text(out / "README.md", text)
    print(f"report: {out}/README.md")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser, commands = package_parser("gencore", __version__, "Flow-matching and diffusion math of the gen* suite.")

    toy = commands.add_parser("toy", help="train and compare flow models on 2-D toys and 8x8 digits")
    toy_cmds = add_commands(toy)
    tr = toy_cmds.add_parser("train", help="train one flow model; write metrics, model and a sample plot")
    _add_run_options(tr)
    tr.add_argument("--coupling", help=f"one of {', '.join(COUPLINGS)} (default independent)")
    tr.add_argument("--out", required=True, type=output_folder, help="run folder of the training engine")
    eng = tr.add_argument_group("training engine (gencore.train)")
    eng.add_argument("--nproc", type=int, default=1, help="train in N local processes (DDP, gloo on CPU; default 1)")
    eng.add_argument(
        "--resume",
        help="'auto': continue from the newest valid checkpoint in OUT/checkpoints, or a checkpoint folder; "
        "without it, an OUT that already holds checkpoints is refused",
    )
    eng.add_argument("--ema-decay", type=float, dest="ema_decay", help="EMA decay of the weights used for sampling")
    eng.add_argument(
        "--sample-every", type=int, dest="sample_every", help="steps between sample pictures in OUT/samples (EMA model)"
    )
    add_engine_options(eng)
    tr.set_defaults(func=cmd_toy_train)
    cp = toy_cmds.add_parser("compare", help="one model per coupling, equal steps; W2/MMD per (coupling, nfe)")
    _add_run_options(cp)
    cp.add_argument("--couplings", required=True, type=name_list, help="comma-separated coupling names")
    cp.add_argument("--json", required=True, type=output_file, help="where to write the records")
    cp.add_argument("--out", type=output_folder, help="figure folder (default: beside --json)")
    cp.set_defaults(func=cmd_toy_compare)
    toy.set_defaults(func=lambda a: toy.print_help())

    demo = commands.add_parser("demo", help="the toy comparison on checkerboard and digits, with pictures")
    demo.add_argument("--out", type=output_folder, default="report/gencore", help="report folder")
    demo.add_argument("--steps", type=int, default=1000, help="training steps per model")
    demo.add_argument("--no-progress", action="store_true", help="hide progress bars")
    demo.set_defaults(func=cmd_demo)
    register_flowmaps(commands)
    register_discrete(commands)
    register_manifolds(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
