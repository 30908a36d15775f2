"""Miniature reproduction of GGBall's central comparison: on community-small, ego-small and tree, degree /
clustering / orbit MMD of GGBall (hyperbolic latent) vs the Euclidean-latent ablation vs a DiGress-style
discrete diffusion baseline, all trained in the same harness with the same main-network step budget.

    python benchmarks/bench_reproduction.py OUT.json [--datasets community-small,ego-small,tree] [--steps 300]
                                                     [--no-digress-extra-features]
                                                     [--prior-steps K] [--work DIR] [--reuse] [--merge] [--seed S]
                                                     [--code-repulsion W --repulsion-radius R]
                                                     [--prior-coupling set-ot] [--prior-hidden 256 --prior-layers 4]
                                                     [--codebook-size 4096] [--prior-size-embedding]
                                                     [--prior masked-codes]

``--merge`` keeps the rows already in OUT.json for the (data set, model, training seed) triples not run now
and replaces the others, so one data set can be measured at a time (e.g. ``--datasets tree --merge``). The
model name ``data`` (not in the default list) scores fresh samples of the data set's own generator (seeds
1..FOLDS) in place of a trained model: the floor a perfect generator reaches with the biased MMD on sets of
this size. The model name ``er`` (not in the default list either) scores Erdos-Renyi graphs with the training
split's node counts and edge density (fold ``f``: seed ``f``): the graphs a denoiser that has learned no
structure samples (a DiGress run at its copy baseline, see ``diag_digress_structure.py``), the reference a
structured generator must beat.

Each model is trained once (seed ``--seed``, default 0) on the train split; ``FOLDS`` sampling folds (seeds
0..FOLDS-1) of as many graphs as the test split are scored against it; the table reports mean and standard
deviation over folds. ``--steps`` is the main-network budget (GGBall's autoencoder, DiGress's denoiser);
``--prior-steps`` the flow prior's (default ``5 x --steps``). ``--code-repulsion`` trains the GGBall autoencoders
with the within-graph latent repulsion (``GGBallConfig.code_repulsion``) and ``--prior-coupling set-ot`` trains the
flow priors on noise nodes assigned optimally to each graph's latent nodes; ``--prior-hidden`` / ``--prior-layers``
size the flow priors (default 64 x 2, as ``gengraph train``), ``--prior-size-embedding`` gives them each
graph's node count, ``--codebook-size`` the GGBall autoencoders'
codebooks (default 512, as ``gengraph train``), and ``--prior masked-codes`` replaces the GGBall models' flow
prior by masked discrete diffusion on the code indices (``gengraph train --prior``); such rows and run folders
are kept apart from the default ones. DiGress reads its cycle and spectral input features, as ``gengraph train`` does by
default; ``--no-digress-extra-features`` trains the plain denoiser (rows marked ``extra_features: false``, run
folders ``digress*-plain``).
MMDs use the GraphRNN/GDSS kernels that GGBall's tables use (``*_gaussian_emd`` for degree and clustering,
``orbit_mmd_gaussian``) and the GRAN/PolyGraph Gaussian-TV ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import networkx as nx
import numpy as np

from gencore.io import read_json, write_json
from gengraph.datasets import generate, load_dataset
from gengraph.experiment import PRIORS, RunConfig, sample_run, train_run
from gengraph.graph import Graph
from gengraph.metrics import graph_mmd
from gengraph.models.latent_flow import COUPLINGS

FOLDS = 3
MODELS = ("ggball", "ggball-euclidean", "digress")
REFERENCES = ("data", "er")  # scored without training
DEFAULT = RunConfig()  # gengraph train's defaults
KEYS = (
    "degree_mmd_gaussian_emd",
    "clustering_mmd_gaussian_emd",
    "orbit_mmd_gaussian",
    "degree_mmd_gaussian_tv",
    "clustering_mmd_gaussian_tv",
    "orbit_mmd_gaussian_tv",
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--datasets", default="community-small,ego-small,tree")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--steps", type=int, default=300, help="autoencoder / denoiser steps")
    p.add_argument("--prior-steps", type=int, default=None, help="flow-prior steps (default: 5 x --steps)")
    p.add_argument("--work", default="bench-reproduction-runs")
    p.add_argument("--reuse", action="store_true", help="score existing run folders instead of retraining them")
    p.add_argument("--merge", action="store_true", help="keep OUT's rows for the pairs not run now")
    p.add_argument("--seed", type=int, default=0, help="training seed (the sampling folds stay 0..FOLDS-1)")
    p.add_argument("--code-repulsion", type=float, default=0.0, help="GGBall autoencoders' latent repulsion")
    p.add_argument("--repulsion-radius", type=float, default=0.1)
    p.add_argument("--prior-coupling", default="independent", choices=COUPLINGS, help="GGBall priors' pairing")
    p.add_argument("--prior-hidden", type=int, default=DEFAULT.prior_hidden, help="GGBall priors' width")
    p.add_argument("--prior-layers", type=int, default=DEFAULT.prior_layers, help="GGBall priors' layers")
    p.add_argument("--codebook-size", type=int, default=DEFAULT.codebook_size, help="GGBall autoencoders' codes")
    p.add_argument("--prior-size-embedding", action="store_true", help="GGBall priors read each graph's node count")
    p.add_argument("--prior", default=DEFAULT.prior, choices=PRIORS, help="GGBall priors' kind")
    p.add_argument(
        "--digress-extra-features",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="DiGress: cycle and spectral input features (default on, as gengraph train)",
    )
    args = p.parse_args()
    out = Path(args.out)
    rows = read_json(out)["rows"] if args.merge and out.is_file() else []
    for dataset in args.datasets.split(","):
        train, test = load_dataset(dataset, "train"), load_dataset(dataset, "test")
        for model in args.models.split(","):
            repel = model.startswith("ggball") and args.code_repulsion > 0
            name = model + (f"-{args.seed}" if args.seed else "")
            name += f"-rep{args.code_repulsion:g}r{args.repulsion_radius:g}" if repel else ""
            coupled = model.startswith("ggball") and args.prior_coupling != "independent"
            name += f"-{args.prior_coupling}" if coupled else ""
            size = (args.prior_hidden, args.prior_layers)
            sized = model.startswith("ggball") and size != (DEFAULT.prior_hidden, DEFAULT.prior_layers)
            name += f"-prior{args.prior_hidden}x{args.prior_layers}" if sized else ""
            sizeemb = model.startswith("ggball") and args.prior_size_embedding
            name += "-sizeemb" if sizeemb else ""
            masked = model.startswith("ggball") and args.prior != DEFAULT.prior
            name += f"-{args.prior}" if masked else ""
            codes = model.startswith("ggball") and args.codebook_size != DEFAULT.codebook_size
            name += f"-codes{args.codebook_size}" if codes else ""
            extra = model == "digress" and args.digress_extra_features
            name += "-plain" if model == "digress" and not extra else ""
            run = Path(args.work) / dataset / name
            start = time.perf_counter()
            if model not in REFERENCES and not (args.reuse and (run / "run.json").is_file()):
                cfg = RunConfig(
                    model=model, dataset=dataset, steps=args.steps, prior_steps=args.prior_steps, seed=args.seed,
                    progress=False, code_repulsion=args.code_repulsion if repel else 0.0,
                    repulsion_radius=args.repulsion_radius,
                    prior_coupling=args.prior_coupling if coupled else "independent", digress_extra_features=extra,
                    prior_hidden=args.prior_hidden, prior_layers=args.prior_layers,
                    codebook_size=args.codebook_size if codes else DEFAULT.codebook_size,
                    prior_size_embedding=sizeemb, prior=args.prior if masked else DEFAULT.prior,
                )  # fmt: skip
                train_run(cfg, train, run)
            train_s = time.perf_counter() - start
            folds = [graph_mmd(test, _sample(model, dataset, train, run, len(test), f), KEYS) for f in range(FOLDS)]
            steps = 0 if model in REFERENCES else args.steps
            row = {"dataset": dataset, "model": model, "steps": steps, "train_seed": args.seed}
            if model.startswith("ggball"):
                row["prior_steps"] = args.prior_steps or 5 * args.steps
            if repel:
                row |= {"code_repulsion": args.code_repulsion, "repulsion_radius": args.repulsion_radius}
            if coupled:
                row["prior_coupling"] = args.prior_coupling
            if sized:
                row |= {"prior_hidden": args.prior_hidden, "prior_layers": args.prior_layers}
            if codes:
                row["codebook_size"] = args.codebook_size
            if sizeemb:
                row["prior_size_embedding"] = True
            if masked:
                row["prior"] = args.prior
            if model == "digress":
                row["extra_features"] = extra
            row["train_s"] = round(train_s, 1)
            for k in KEYS:
                vals = [f[k] for f in folds]
                row[k] = statistics.mean(vals)
                row[k + "_std"] = statistics.stdev(vals)
            print(json.dumps(row), flush=True)
            rows = _put(rows, row)
            write_json(out, {"folds": FOLDS, "rows": rows})


def _sample(model: str, dataset: str, train: list[Graph], run: Path, n: int, fold: int) -> list[Graph]:
    """Fold ``fold``'s ``n`` generated graphs: from the trained run, or a reference (``data``, ``er``)."""
    if model == "data":
        return generate(dataset, n, seed=1 + fold)
    if model == "er":
        return erdos_renyi_like(train, n, seed=fold)
    return sample_run(run, n, seed=fold)


def erdos_renyi_like(graphs: list[Graph], n: int, seed: int) -> list[Graph]:
    """``n`` G(n_i, p) graphs: sizes drawn from ``graphs``' sizes, ``p`` their pooled edge density over node pairs."""
    rng = np.random.default_rng(seed)
    pairs = sum(g.n_nodes * (g.n_nodes - 1) // 2 for g in graphs)
    p = sum(g.n_edges for g in graphs) / pairs
    sizes = rng.choice([g.n_nodes for g in graphs], size=n)
    return [Graph.from_networkx(nx.gnp_random_graph(int(k), p, seed=int(rng.integers(2**31)))) for k in sizes]


def _put(rows: list[dict], row: dict) -> list[dict]:
    """``rows`` with ``row`` in place of the row of the same data set, model and training seed (appended if there is
    none; rows written before the seed was recorded were trained with seed 0)."""
    key = _key(row)
    if any(_key(r) == key for r in rows):
        return [row if _key(r) == key else r for r in rows]
    return [*rows, row]


def _key(row: dict) -> tuple:
    return (
        row["dataset"],
        row["model"],
        row.get("train_seed", 0),
        row.get("code_repulsion", 0.0),
        row.get("repulsion_radius"),
        row.get("prior_coupling", "independent"),
        row.get("prior_hidden", DEFAULT.prior_hidden),
        row.get("prior_layers", DEFAULT.prior_layers),
        row.get("codebook_size", DEFAULT.codebook_size),
        row.get("prior_size_embedding", False),
        row.get("prior", DEFAULT.prior),
        row.get("extra_features", False),
    )


if __name__ == "__main__":
    main()
