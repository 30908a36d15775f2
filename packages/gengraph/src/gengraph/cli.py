"""The ``gengraph`` command::

    gengraph data     --dataset community-small --split train --out cs.json
    gengraph train    --data community-small --model ggball --steps 300 --out runs/g
    gengraph sample   --run runs/g --n 64 --out g.json
    gengraph evaluate --reference community-small --generated g.json --json m.json
    gengraph demo     --out report/gengraph

``--data``, ``--reference`` and ``--generated`` take a dataset name (see ``gengraph data --list``), a JSON
graph set (``gengraph.graph-set``, what ``sample`` writes), a GraphML file or an edge list.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from gencore.command import (
    add_engine_options,
    name_list,
    output_file,
    output_folder,
    package_parser,
    refuse_overwriting_input,
    report_finished,
    run,
    seed_int,
)
from gencore.errors import ConfigError
from gencore.io import write_json, write_text
from gencore.tables import format_table
from gengraph import __version__

DESCRIPTION = "Graph generation: data sets, metrics, hyperbolic layers and GGBall on gencore's flow-matching math."


def _graphs(source: str, which: str, seed: int):
    from gengraph.io import load_graphs

    return load_graphs(source, which, seed=seed)


def cmd_data(args: argparse.Namespace) -> int:
    from gengraph.connectomes import CONNECTOMES, SERIES
    from gengraph.datasets import DATASETS, DEFAULT_SIZES, REAL_GRAPHS, generate, split
    from gengraph.io import check_graphs_output, write_graphs

    if args.list or not args.dataset:
        rows = [{"dataset": d, "graphs": DEFAULT_SIZES[d], "kind": "procedural (seeded)"} for d in DATASETS]
        rows += [{"dataset": d, "graphs": 1, "kind": "real (networkx)"} for d in REAL_GRAPHS]
        rows += [{"dataset": d, "graphs": 1, "kind": f"real (cect): {src}"} for d, (_, src) in CONNECTOMES.items()]
        rows += [
            {"dataset": d, "graphs": len(m), "kind": "real (cect): developmental series"} for d, m in SERIES.items()
        ]
        print(format_table(rows))
        return 0
    if args.n is not None and args.dataset not in DATASETS:
        raise ConfigError(f"--n applies to the procedural data sets ({', '.join(DATASETS)}), not {args.dataset!r}.")
    graphs = _graphs(args.dataset, args.split, args.seed)
    if args.n is not None:
        graphs = split(generate(args.dataset, args.n, seed=args.seed), args.split)
        if not graphs:
            raise ConfigError(f"{args.n} {args.dataset} graphs leave the {args.split} split empty; raise --n.")
    if args.out:
        check_graphs_output(args.out, len(graphs))
    nodes = [g.n_nodes for g in graphs]
    print(
        format_table(
            [
                {
                    "dataset": args.dataset,
                    "split": args.split,
                    "graphs": len(graphs),
                    "nodes min": min(nodes),
                    "nodes mean": sum(nodes) / len(nodes),
                    "nodes max": max(nodes),
                    "edges mean": sum(g.n_edges for g in graphs) / len(graphs),
                }
            ]
        )
    )
    if args.out:
        write_graphs(args.out, graphs, dataset=args.dataset, split=args.split, seed=args.seed)
        print(f"wrote {args.out}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from gencore.config import config_from_flags
    from gengraph.experiment import DIGRESS_ONLY, GGBALL_ONLY, RunConfig, is_finished, train_run

    cfg = config_from_flags(RunConfig, args, dataset=args.data).validate()
    # an option the chosen model never reads is refused when given explicitly, not silently ignored
    owners = {name: "the GGBall models" for name in GGBALL_ONLY} | {name: "DiGress" for name in DIGRESS_ONLY}
    ignored = {"digress": GGBALL_ONLY, "ggball-euclidean": ("curvature", *DIGRESS_ONLY)}.get(cfg.model, DIGRESS_ONLY)
    for name in ignored:
        if getattr(args, name, None) is not None:
            flag = ("--no-" if getattr(args, name) is False else "--") + name.replace("_", "-")
            owner = "the Poincare-ball model (ggball)" if cfg.model == "ggball-euclidean" else owners[name]
            raise ConfigError(f"{flag} is an option of {owner}; --model {cfg.model} does not use it.")
    graphs = _graphs(args.data, "train", cfg.seed)
    if args.resume is not None and is_finished(cfg, args.out, graphs):
        return report_finished(args.out)
    start = time.perf_counter()
    engine = {k: getattr(args, k) for k in ("resume", "checkpoint_every", "keep_last") if getattr(args, k) is not None}
    out = train_run(cfg, graphs, args.out, nproc=args.nproc, **engine)
    print(f"trained {cfg.model} on {len(graphs)} graphs of {args.data} in {time.perf_counter() - start:.1f} s -> {out}")
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from gengraph.experiment import sample_run
    from gengraph.io import check_graphs_output, write_graphs

    check_graphs_output(args.out, args.n)  # before any sampling
    refuse_overwriting_input(args.out, "--out", Path(args.run) / "run.json")
    graphs = sample_run(
        args.run, args.n, seed=args.seed, steps=args.steps, batch_size=args.batch_size, progress=not args.no_progress
    )
    write_graphs(args.out, graphs, run=str(args.run), seed=args.seed)
    print(f"wrote {len(graphs)} graphs to {args.out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from gengraph.datasets import DATASETS, generate, split
    from gengraph.evaluation import evaluate_sets

    refuse_overwriting_input(args.json, "--json", args.reference, args.generated)
    reference = _graphs(args.reference, args.split, args.seed)
    if args.generated in DATASETS:  # a fresh sample of the set: another seed, the whole set
        generated = generate(args.generated, seed=args.seed + 1)
    else:
        generated = _graphs(args.generated, args.split, args.seed)
    dataset = args.reference if args.reference in DATASETS else None
    train = split(generate(dataset, seed=args.seed), "train") if dataset else None
    record = evaluate_sets(
        reference, generated, train=train, dataset=dataset, metrics=args.metrics, n_boot=args.bootstrap, seed=args.seed
    )
    record = {"reference": args.reference, "generated": args.generated, **record}
    rows = [{"metric": k, "value": v} for k, v in record.items()]
    print(format_table(rows))
    if args.json:
        write_json(args.json, record)
        print(f"wrote {args.json}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gengraph.datasets import load_dataset
    from gengraph.evaluation import evaluate_sets
    from gengraph.experiment import RunConfig, sample_run, train_run
    from gengraph.io import write_graph_set
    from gengraph.plots import graph_grid

    out = Path(args.out)
    start = time.perf_counter()
    train = load_dataset("community-small", "train")
    test = load_dataset("community-small", "test")
    cfg = RunConfig(model="ggball", steps=args.steps, progress=not args.no_progress)
    train_run(cfg, train, out / "run", resume="auto")  # a second demo into the same folder reuses the run
    generated = sample_run(out / "run", 40, seed=0, steps=20)
    write_graph_set(out / "generated.json", generated, run=str(out / "run"))
    record = evaluate_sets(test, generated, train=train, dataset="community-small", n_boot=100)
    write_json(out / "metrics.json", record)
    graph_grid({"real (test)": test, "GGBall": generated}, out / "graphs.png", title="community-small")
    keys = ["degree_mmd_gaussian_tv", "clustering_mmd_gaussian_tv", "orbit_mmd_gaussian_tv", "valid", "unique", "novel"]
    print(f"community-small: {len(generated)} GGBall samples against the {len(test)} test graphs")
    print(format_table([{"metric": k, "value": record[k]} for k in keys]))
    seconds = time.perf_counter() - start
    write_text(out / "README.md", _demo_report(record, args.steps, len(train), len(test), len(generated), seconds))
    print(f"demo finished in {seconds:.0f} s: {out}/README.md, {out}/graphs.png, {out}/metrics.json")
    return 0


def _demo_report(record: dict, steps: int, n_train: int, n_test: int, n_generated: int, seconds: float) -> str:
    """The demo's Markdown report: every kernel-named MMD with its 95 % interval, V.U.N., the picture."""
    keys = [key for key in record if "_mmd_" in key and not key.endswith(("_low", "_high"))]
    mmd_rows = [
        {"metric": k, "MMD^2": record[k], "95 % interval": f"{record[k + '_low']:.4f} - {record[k + '_high']:.4f}"}
        for k in keys
    ]
    vun_rows = [{"metric": k, "value": record[k]} for k in ("valid", "unique", "novel")]
    return "\n".join(
        [
            "# gengraph demo",
            "",
            f"A tiny GGBall (hyperbolic VQ autoencoder and Riemannian flow prior, {steps} training steps) trained on "
            f"the {n_train} training graphs of community-small; {n_generated} graphs sampled (20 prior steps) and "
            f"scored against the {n_test} test graphs. Whole demo: {seconds:.0f} s.",
            "",
            "A model this small and this briefly trained shows the pipeline, not the method's quality; the package "
            "README has the reproduction tables.",
            "",
            "## MMD (biased squared MMD; the kernel is part of each name)",
            "",
            format_table(mmd_rows, markdown=True),
            "",
            "## Validity, uniqueness, novelty",
            "",
            format_table(vun_rows, markdown=True),
            "",
            "## Test graphs and generated graphs",
            "",
            "![real and generated graphs](graphs.png)",
            "",
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    from gengraph.experiment import MODELS, PRIORS
    from gengraph.metrics import DEFAULT_METRICS

    parser, commands = package_parser("gengraph", __version__, DESCRIPTION)

    d = commands.add_parser("data", help="list data sets, or write one split as a JSON graph set")
    d.add_argument("--dataset", help="a dataset name or a graph file")
    d.add_argument("--split", default="train", choices=("train", "val", "test", "all"), help="default train")
    d.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the procedural generator and the split (default 0)"
    )
    d.add_argument("--n", type=int, default=None, help="graphs to generate before splitting (default: the set's size)")
    d.add_argument("--out", type=output_file, help="write the graphs here (.json graph set, or .graphml for one graph)")
    d.add_argument("--list", action="store_true", help="list the available data sets")
    d.set_defaults(func=cmd_data)

    t = commands.add_parser("train", help="train a graph generator; writes a run folder")
    t.add_argument("--data", required=True, help="dataset name (its train split) or graph file")
    t.add_argument("--config", help="YAML file of RunConfig fields (e.g. hidden, vq_warmup); flags override it")
    t.add_argument("--model", choices=MODELS, help="default ggball")
    t.add_argument("--steps", type=int, help="autoencoder / denoiser steps (default 300)")
    t.add_argument(
        "--prior-steps", type=int, default=None, dest="prior_steps", help="GGBall prior steps (default: 5 x --steps)"
    )
    t.add_argument(
        "--prior",
        choices=PRIORS,
        help="GGBall prior: the paper's Riemannian flow on the latents (flow, the default) or masked discrete "
        "diffusion on the code indices (masked-codes; see README)",
    )
    t.add_argument(
        "--prior-hidden", type=int, dest="prior_hidden", help="GGBall prior: set-transformer width (default 64)"
    )
    t.add_argument(
        "--prior-layers", type=int, dest="prior_layers", help="GGBall prior: set-transformer layers (default 2)"
    )
    t.add_argument(
        "--prior-distance-bias",
        action="store_true",
        default=None,
        dest="prior_distance_bias",
        help="GGBall flow prior: attention biased by the nodes' distances (lets nodes share codes; see README)",
    )
    t.add_argument(
        "--prior-size-embedding",
        action="store_true",
        default=None,
        dest="prior_size_embedding",
        help="GGBall flow prior: give the set transformer each graph's node count (masked-codes always reads it)",
    )
    t.add_argument(
        "--prior-coupling",
        choices=("independent", "set-ot"),  # gengraph.models.latent_flow.COUPLINGS
        dest="prior_coupling",
        help="GGBall flow prior: pair each graph's noise nodes with its latent nodes by index (independent, the "
        "default) or by optimal assignment",
    )
    t.add_argument(
        "--code-repulsion",
        type=float,
        dest="code_repulsion",
        help="GGBall autoencoder: weight of the within-graph latent repulsion (0: off; see README)",
    )
    t.add_argument(
        "--repulsion-radius",
        type=float,
        dest="repulsion_radius",
        help="GGBall autoencoder: nodes of one graph closer than this in T_0 are pushed apart (default 0.1)",
    )
    t.add_argument(
        "--digress-extra-features",
        action=argparse.BooleanOptionalAction,
        default=None,
        dest="digress_extra_features",
        help="DiGress: read the noisy graph's cycle counts and Laplacian spectrum (default on; see README)",
    )
    t.add_argument("--batch-size", type=int, dest="batch_size", help="default 32")
    t.add_argument("--lr", type=float, help="default 2e-3")
    t.add_argument("--latent-dim", type=int, dest="latent_dim", help="default 32")
    t.add_argument("--codebook-size", type=int, dest="codebook_size", help="default 512")
    t.add_argument("--curvature", type=float, help="c of the Poincare ball (curvature -c; default 1)")
    t.add_argument("--seed", type=seed_int, help="training seed, also the data set's split seed (default 0)")
    t.add_argument("--out", required=True, type=output_folder, help="run folder")
    t.add_argument("--no-progress", action="store_true", dest="no_progress", help="hide progress bars")
    e = t.add_argument_group("training engine (gencore.train)")
    e.add_argument("--nproc", type=int, default=1, help="processes (DDP: gloo on CPU, NCCL on GPUs; default 1)")
    e.add_argument(
        "--resume", choices=("auto",), help="continue an interrupted run from the newest checkpoint of its stage"
    )
    add_engine_options(e, "checkpoint-every")
    e.add_argument("--keep-last", type=int, dest="keep_last", help="checkpoints kept per stage (default 3)")
    t.set_defaults(func=cmd_train)

    s = commands.add_parser("sample", help="sample graphs from a run into a JSON graph set")
    s.add_argument("--run", required=True, help="run folder written by gengraph train")
    s.add_argument("--n", type=int, default=64, help="graphs to sample (default 64)")
    s.add_argument("--steps", type=int, default=50, help="ODE / diffusion steps")
    s.add_argument("--seed", type=seed_int, default=0, help="seed of the sizes and the sampling noise (default 0)")
    s.add_argument("--out", required=True, type=output_file, help="output .json graph set (.graphml for --n 1)")
    s.add_argument("--batch-size", type=int, default=256, dest="batch_size", help="graphs generated at a time")
    s.add_argument("--no-progress", action="store_true", dest="no_progress", help="hide progress bars")
    s.set_defaults(func=cmd_sample)

    e = commands.add_parser("evaluate", help="MMDs (kernel-named), V.U.N. and bootstrap intervals")
    e.add_argument("--reference", required=True, help="dataset name (its --split) or graph file")
    e.add_argument("--generated", required=True, help="graph file, or a dataset name (a fresh seeded sample)")
    e.add_argument(
        "--split",
        default="test",
        choices=("train", "val", "test", "all"),
        help="split of a named --reference (default test)",
    )
    e.add_argument(
        "--metrics",
        type=name_list,
        default=DEFAULT_METRICS,
        help="comma-separated metric keys (default: all eight, degree, clustering, orbit and spectral MMD with both "
        "kernels)",
    )
    e.add_argument("--bootstrap", type=int, default=0, help="subsampling draws for intervals (0: none)")
    e.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="split seed of named sets (a named --generated set is drawn with seed + 1) and of the bootstrap "
        "(default 0)",
    )
    e.add_argument("--json", type=output_file, help="write the record here")
    e.set_defaults(func=cmd_evaluate)

    m = commands.add_parser("demo", help="train a tiny GGBall on community-small, sample, evaluate, draw")
    m.add_argument("--out", type=output_folder, default="report/gengraph", help="report folder")
    m.add_argument("--steps", type=int, default=300, help="autoencoder steps (the prior takes 5x)")
    m.add_argument("--no-progress", action="store_true", dest="no_progress", help="hide progress bars")
    m.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
