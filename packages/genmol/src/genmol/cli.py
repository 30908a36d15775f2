"""The ``genmol`` command.

genmol prepare  --data qm9 --subset 2000 --out qm9_2000.sdf
genmol prepare  --data nci --subset 100 --conformers 5 --workers 2 --out nci_confs.sdf
genmol train    --data qm9 --subset 2000 --steps 300 --out runs/m
genmol sample   --run runs/m --n 100 --out s.sdf
genmol evaluate s.sdf --json e.json [--reference runs/m]
genmol demo     --out report/genmol
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gencore.command import (
    add_device_argument,
    add_engine_options,
    output_file,
    output_folder,
    package_parser,
    refuse_foreign_run,
    refuse_overwriting_input,
    report_finished,
    resolve_device,
    run,
    seed_int,
)
from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import ensure_dir, write_json
from gencore.tables import format_table
from genmol import __version__

DESCRIPTION = (
    "Molecular data tooling and metrics, protein structure I/O, and 3-D small-molecule and conformer "
    "generation on gencore's flow-matching math."
)
SUMMARY_KEYS = (
    "n_records",
    "n_parsed",
    "validity",
    "validity_connected",
    "atom_stability",
    "molecule_stability",
    "uniqueness",
    "novelty",
    "fcd",
    "bond_length_w1",
    "bond_angle_w1",
    "mmff_strain_median",
)


def _read_molecule_file(path: str | Path, on_error: str = "skip", what: str = "molecules"):
    """Read an SDF or SMILES file by its suffix; report skipped records on stderr; refuse a file with none."""
    from genmol.chem.io import check_text, molecule_file_kind, read_sdf, read_smiles

    p = Path(path)
    reader = read_sdf if molecule_file_kind(p) == "sdf" else read_smiles
    check_text(p)
    mols, report = reader(p, on_error=on_error)
    if report.bad:
        print(report.summary(), file=sys.stderr)
        for bad in report.bad[:5]:
            print(f"  skipped {bad}", file=sys.stderr)
    if not mols:
        raise InputError(f"{str(p)!r} holds no readable {what} ({report.n_skipped} bad records).")
    return mols


# prepare ----------------------------------------------------------------------------------------
def cmd_prepare(args: argparse.Namespace) -> int:
    from genmol.chem.io import (
        check_output_suffix,
        check_text,
        molecule_file_kind,
        read_sdf,
        read_smiles,
        write_molecules,
    )
    from genmol.data.conformers import generate_conformers

    if args.out:
        check_output_suffix(args.out)  # before the data are read
        refuse_overwriting_input(args.out, "--out", args.data)
    if args.subset is not None and args.subset < 1:
        raise ConfigError(f"--subset must be a positive number of molecules, got {args.subset}.")
    if args.workers < 1:  # before the data are read
        raise ConfigError(f"--workers must be a positive number of processes, got {args.workers}.")
    if args.data == "qm9":
        from genmol.data.qm9 import qm9_subset

        mols, report = qm9_subset(args.subset, seed=args.seed, cache=args.cache, progress=not args.no_progress)
    elif args.data == "nci":
        from genmol.data.smiles_sets import nci_5k

        mols, report = nci_5k()
    else:  # an SDF or SMILES file, by its suffix
        reader = read_sdf if molecule_file_kind(args.data) == "sdf" else read_smiles
        check_text(args.data)
        mols, report = reader(args.data, on_error=args.on_error)
    if args.data != "qm9" and args.subset is not None:
        mols = mols[: args.subset]
    print(report.summary())
    for bad in report.bad[:5]:
        print(f"  skipped {bad}")
    if not mols:
        raise InputError(f"{args.data!r} holds no readable molecules ({report.n_skipped} bad records); nothing to do.")
    if args.conformers:
        ensembles, conf_report = generate_conformers(
            mols, args.conformers, seed=args.seed, workers=args.workers, progress=not args.no_progress
        )
        print(conf_report.summary())
        for bad in conf_report.bad[:5]:
            print(f"  skipped {bad}")
        for note in conf_report.warnings[:5]:
            print(f"  warning {note}")
        out_mols = []
        for k, ens in enumerate(ensembles):
            for c, m in enumerate(ens):
                m.name = f"{mols[k].name or f'mol_{k}'}_conf{c}"
                out_mols.append(m)
        mols = out_mols
    if args.out:
        write_molecules(args.out, mols)
        print(f"wrote {len(mols)} records to {args.out}")
    return 0


# train ------------------------------------------------------------------------------------------
def _gen_config(args: argparse.Namespace):
    from gencore.config import config_from_flags
    from genmol.generation.flow import GenConfig

    return config_from_flags(GenConfig, args).validate()


def cmd_train(args: argparse.Namespace) -> int:
    from gencore.train import interruption
    from genmol.chem.io import check_text
    from genmol.experiment import load_dataset, train_run

    cfg = _gen_config(args)
    refuse_foreign_run(args.out, ("config", "vocabulary", "sizes"), "genmol train")  # fields genmol sample reads
    if args.data != "qm9" and Path(args.data).suffix.lower() == ".sdf":
        check_text(args.data)
    mols, report = load_dataset(args.data, subset=args.subset, seed=cfg.seed, progress=cfg.progress)
    print(f"{report.summary()}; training on {len(mols)} molecules")
    engine = {k: v for k, v in {"resume": args.resume, "checkpoint_every": args.checkpoint_every}.items() if v}
    start = time.perf_counter()
    info = train_run(cfg, mols, args.out, nproc=args.nproc, data_name=args.data, **engine)
    if info["interrupted"]:
        raise interruption(args.out)
    if info.get("already_finished"):
        return report_finished(args.out)
    print(
        f"trained {cfg.backbone}/{cfg.strategy} ({cfg.task}) for {cfg.steps} steps in "
        f"{time.perf_counter() - start:.0f} s, last loss {info['last_loss']:.4f}; run folder {args.out}/"
    )
    return 0


# sample -----------------------------------------------------------------------------------------
def cmd_sample(args: argparse.Namespace) -> int:
    import torch

    from genmol.chem.io import check_output_suffix, write_molecules
    from genmol.experiment import load_run
    from genmol.generation.flow import draw_sizes, model_view, sample_conformers, sample_joint

    check_output_suffix(args.out)  # before any sampling
    refuse_overwriting_input(args.out, "--out", args.graphs, Path(args.run) / "reference.sdf")  # the run's own set
    model, cfg, vocab, sizes = load_run(args.run, resolve_device(args.device))
    g = torch.Generator().manual_seed(args.seed)  # noise is drawn on the CPU: the same molecules on any device
    start = time.perf_counter()
    if cfg.task == "joint":
        if args.n < 1:
            raise ConfigError(f"--n must be positive, got {args.n}.")
        if args.graphs:
            raise ConfigError(
                f"the run in {str(args.run)!r} generates whole molecules; --graphs is for conformer runs."
            )
        mols = sample_joint(
            model,
            vocab,
            draw_sizes(sizes, args.n, g),
            strategy=cfg.strategy,
            steps=args.steps,
            sampler=args.sampler,
            noise_scale=args.noise,
            generator=g,
            hydrogens=cfg.hydrogens,
            progress=not args.no_progress,
        )
    else:
        if not args.graphs:
            raise ConfigError("this run generates conformers: give the molecular graphs with --graphs FILE.sdf|.smi.")
        graphs = _read_molecule_file(args.graphs, args.on_error, what="molecular graphs")
        from rdkit import Chem

        from genmol.chem.molecule import Molecule

        if cfg.hydrogens == "implicit":
            graphs = model_view(graphs, "implicit")
        else:
            graphs = [Molecule.from_rdkit(Chem.AddHs(m.to_rdkit()), name=m.name) for m in graphs]
            for m in graphs:
                m.num_hs[:] = 0
        from genmol.metrics.chemistry import canonical_smiles

        for k, m in enumerate(graphs):  # every graph's atoms are checked before any sampling
            try:
                for z, q in zip(m.atomic_numbers, m.formal_charges, strict=True):
                    vocab.token(z, q)
            except InputError as exc:
                what = m.name or canonical_smiles(m) or "unnamed"
                raise InputError(f"{args.graphs}: molecular graph {k + 1} ({what}): {exc}") from None
        ens = sample_conformers(
            model,
            vocab,
            graphs,
            args.n,
            strategy=cfg.strategy,
            steps=args.steps,
            sampler=args.sampler,
            noise_scale=args.noise,
            generator=g,
            prior=cfg.prior,
            prior_alpha=cfg.prior_alpha,
            progress=not args.no_progress,
        )
        mols = [m for e in ens for m in e]
    write_molecules(args.out, mols)
    print(f"wrote {len(mols)} molecules to {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0


# evaluate ---------------------------------------------------------------------------------------
def _reference(path: str | None):
    from genmol.chem.io import molecule_file_kind, read_sdf
    from genmol.experiment import train_smiles
    from genmol.metrics.chemistry import canonical_smiles
    from genmol.metrics.suite import Reference

    if path is None:
        return None
    p = Path(path)
    if not p.exists():
        raise StorageError(f"--reference {str(p)!r} does not exist; give a run folder, an SDF or a SMILES file.")
    if p.is_dir():
        if not (p / "train_smiles.txt").is_file() and not (p / "reference.sdf").is_file():
            raise InputError(
                f"--reference {str(p)!r} is a folder without train_smiles.txt or reference.sdf, not a genmol run "
                "folder; give a run folder, an SDF or a SMILES file."
            )
        mols = read_sdf(p / "reference.sdf")[0] if (p / "reference.sdf").is_file() else []
        return Reference(smiles=train_smiles(p), molecules=mols)
    mols = _read_molecule_file(p, what="reference molecules")
    smiles = [s for s in map(canonical_smiles, mols) if s]
    return Reference(smiles=smiles, molecules=mols if molecule_file_kind(p) == "sdf" else [])


def cmd_evaluate(args: argparse.Namespace) -> int:
    from genmol.chem.io import check_text, molecule_file_kind
    from genmol.metrics.suite import evaluate_file

    molecule_file_kind(args.file)  # an unknown file type is refused before the reference is read
    check_text(args.file)
    run_files = [Path(args.reference) / n for n in ("reference.sdf", "train_smiles.txt")] if args.reference else []
    refuse_overwriting_input(args.json, "--json", args.file, args.reference, *run_files)
    if args.rows is not None and args.rows < 0:
        raise ConfigError(f"--rows must be 0 or more, got {args.rows}.")
    reference = _reference(args.reference)
    result = evaluate_file(
        args.file, reference, strain=not args.no_strain, with_fcd=not args.no_fcd, progress=not args.no_progress
    )
    rows = result.rows
    if not rows:
        raise InputError(f"{str(args.file)!r} holds no records; expected at least one molecule to evaluate.")
    shown = rows if args.rows is None else rows[: args.rows]
    table_rows = [
        {
            "index": r["index"],
            "name": "".join(c if c.isprintable() else "?" for c in (r["name"] or "")[:16]),
            "valid": r["valid"],
            "stable": r["mol_stable"],
            "atom_stab": r["atom_stability"] if r["atom_stability"] is not None else "-",
            "connected": r["connected"],
            "smiles": (r["smiles"] or "-")[:40],
            "error": (r["error"] or "")[:60],
        }
        for r in shown
    ]
    print(format_table(table_rows))
    if len(shown) < len(rows):
        print(f"... {len(rows) - len(shown)} more rows in the JSON")
    summary = [{"metric": k, "value": result.summary[k]} for k in SUMMARY_KEYS if k in result.summary]
    print()
    print(format_table(summary))
    print(f"stability: {result.summary['stability_definition']}")
    if args.json:
        write_json(args.json, {"file": str(args.file), "summary": result.summary, "records": rows})
        print(f"wrote {args.json}")
    return 0


# demo -------------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from genmol.demo import run_demo

    out = ensure_dir(args.out)
    run_demo(out, steps=args.steps, subset=args.subset, progress=not args.no_progress)
    print(f"report: {out}/README.md")
    return 0


def _add_on_error(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--on-error", choices=("skip", "raise"), default="skip", dest="on_error", help=help)


def build_parser() -> argparse.ArgumentParser:
    parser, commands = package_parser("genmol", __version__, DESCRIPTION)

    pr = commands.add_parser("prepare", help="build a data set: QM9 subset with bonds, or ETKDG+MMFF conformers")
    pr.add_argument("--data", required=True, help="qm9 | nci (RDKit's NCI 5K) | an SDF or SMILES file")
    pr.add_argument("--subset", type=int, help="number of molecules (QM9: seeded random subset)")
    pr.add_argument("--conformers", type=int, default=0, help="ETKDG+MMFF conformers per molecule (0: none)")
    pr.add_argument("--workers", type=int, default=1, help="worker processes for conformer generation")
    _add_on_error(pr, "an unreadable record: skip it (counted in the summary) or stop")
    pr.add_argument("--seed", type=seed_int, default=0, help="seed of the QM9 subset and the conformers (default 0)")
    pr.add_argument("--cache", help="cache folder (default $GENMOL_CACHE or ~/.cache/genmol)")
    pr.add_argument("--out", type=output_file, help="write the prepared molecules as SDF (.sdf) or XYZ (.xyz)")
    pr.add_argument("--no-progress", action="store_true", help="hide progress bars")
    pr.set_defaults(func=cmd_prepare)

    tr = commands.add_parser("train", help="train a 3-D generative model (joint types+coordinates, or conformers)")
    tr.add_argument("--data", required=True, help="qm9 (needs genmol[qm9]) or an SDF with 3-D coordinates")
    tr.add_argument("--subset", type=int, help="train on this many molecules (seeded)")
    tr.add_argument("--out", required=True, type=output_folder, help="run folder")
    tr.add_argument("--task", choices=("joint", "conformer"), help="joint (default) or conformer")
    tr.add_argument("--backbone", choices=("egnn", "transformer", "e3nn"), help="egnn (default), transformer, e3nn")
    tr.add_argument(
        "--strategy",
        choices=("com", "kabsch", "quotient", "quotient-aligned"),  # genmol.generation.strategies.STRATEGIES
        help="SE(3) strategy (default quotient)",
    )
    tr.add_argument(
        "--hydrogens",
        choices=("explicit", "implicit"),  # genmol.generation.flow.HYDROGENS
        help="explicit (default): hydrogens are atoms of the model; implicit: heavy atoms only, hydrogen counts "
        "filled in on sampling",
    )
    tr.add_argument(
        "--prior",
        choices=("gaussian", "harmonic"),  # genmol.generation.flow.PRIORS
        help="noise: gaussian (default) or, for --task conformer, harmonic (ET-Flow's: shaped by the bond graph)",
    )
    tr.add_argument(
        "--prior-alpha", type=float, dest="prior_alpha", help="the harmonic prior's spring constant, 1/A^2 (default 1)"
    )
    tr.add_argument("--steps", type=int, help="optimiser steps (default 300)")
    tr.add_argument("--batch-size", type=int, dest="batch_size", help="molecules per step (default 32)")
    tr.add_argument("--hidden", type=int, help="backbone width (default 64)")
    tr.add_argument("--layers", type=int, help="backbone layers (default 3)")
    tr.add_argument("--lr", type=float, help="AdamW peak learning rate, cosine decay (default 2e-3)")
    tr.add_argument("--ema-decay", type=float, dest="ema_decay", help="EMA decay of the saved weights (default 0.99)")
    tr.add_argument("--seed", type=seed_int, help="seed of the subset, initialisation, batches and noise (default 0)")
    tr.add_argument("--config", type=Path, help="YAML file of GenConfig fields (e.g. token_weight); flags override it")
    tr.add_argument("--nproc", type=int, default=1, help="train in N processes (DDP over gloo on CPU)")
    tr.add_argument("--resume", help="'auto' or a checkpoint folder")
    add_engine_options(tr, "checkpoint-every")
    tr.add_argument("--no-progress", action="store_true", help="hide progress bars")
    tr.set_defaults(func=cmd_train)

    sa = commands.add_parser("sample", help="generate molecules (or conformers) from a run; writes SDF or XYZ")
    sa.add_argument("--run", required=True, type=Path, help="run folder written by genmol train")
    sa.add_argument("--n", type=int, default=100, help="molecules (joint) or conformers per graph (conformer)")
    sa.add_argument("--out", required=True, type=output_file, help="output file: .sdf, or .xyz (coordinates only)")
    sa.add_argument("--steps", type=int, default=100, help="integration steps")
    sa.add_argument(
        "--sampler", choices=("ode", "sde"), default="ode", help="probability-flow ODE (default) or the SDE"
    )
    sa.add_argument("--noise", type=float, default=0.5, help="SDE noise scale g^2 = noise * (1 - t)")
    sa.add_argument("--graphs", help="conformer runs: molecular graphs as SDF or SMILES")
    _add_on_error(sa, "an unreadable record in --graphs: skip it (reported on stderr) or stop")
    sa.add_argument(
        "--seed", type=seed_int, default=0, help="seed of the molecule sizes and the sampling noise (default 0)"
    )
    add_device_argument(sa)
    sa.add_argument("--no-progress", action="store_true", help="hide progress bars")
    sa.set_defaults(func=cmd_sample)

    ev = commands.add_parser("evaluate", help="per-molecule and set metrics of an SDF or SMILES file; prints a table")
    ev.add_argument("file", type=Path, help="SDF file, or SMILES file (.smi, .smiles, .txt, .csv: no 3-D metrics)")
    ev.add_argument("--json", type=output_file, help="write records and summary as JSON")
    ev.add_argument("--reference", help="run folder, SDF or SMILES file for novelty, FCD and bond geometry")
    ev.add_argument("--rows", type=int, default=30, help="rows printed (all rows go to the JSON)")
    ev.add_argument("--no-strain", action="store_true", help="skip the MMFF strain energy")
    ev.add_argument("--no-fcd", action="store_true", help="skip FCD")
    ev.add_argument("--no-progress", action="store_true", help="hide progress bars")
    ev.set_defaults(func=cmd_evaluate)

    de = commands.add_parser("demo", help="train a tiny model on a QM9 slice, sample, evaluate, write a report")
    de.add_argument("--out", type=output_folder, default="report/genmol", help="report folder (default report/genmol)")
    de.add_argument("--steps", type=int, default=150, help="training steps (default 150)")
    de.add_argument("--subset", type=int, default=600, help="QM9 molecules to train on (default 600)")
    de.add_argument("--no-progress", action="store_true", help="hide progress bars")
    de.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
