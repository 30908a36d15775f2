"""Miniature reproduction: quotient-space vs CoM-only vs Kabsch-aligned training at equal compute.

Xu et al., "Quotient-Space Diffusion Models" (ICLR 2026) report that the quotient-space treatment
beats both CoM removal and alignment heuristics for small-molecule structure generation. Here, on a
seeded QM9 subset (qm9pack files), each strategy trains the same backbone with the same seed, batch,
optimiser and number of steps:

* unconditional joint generation of atom types/charges and coordinates: 200 samples (Euler, 100
  steps), bonds from distances, atom / molecule stability, validity, validity & connectivity;
* conditional conformer generation on held-out QM9 graphs: 5 conformers each (Euler, 50 steps),
  COV-R at 0.5 angstrom and AMR-R against the DFT geometry (one reference conformer per molecule).

The quotient models are also sampled with the SDE sampler (horizontal noise plus the mean-curvature
correction), for both tasks; conformer models of every strategy are sampled with both samplers (CoM and
Kabsch with centred Euclidean noise), so that the sampler's share of a difference can be told apart.
Numbers on a shared 2-core CPU: a small-scale check, not the paper's table. ``--seeds 0,1,2`` repeats
every model with another training seed (and sampling seed) and reports mean and spread over seeds.
``--samples-dir DIR`` keeps every model's unconditional samples as SDF
(``joint_<strategy>_<sampler>_seed<seed>.sdf``), so that they can be scored again (``genmol evaluate``).
``--hydrogens implicit`` trains and scores heavy-atom models (QM9 without hydrogens; held-out graphs
stripped too). ``--prior harmonic`` trains and samples the conformer models from ET-Flow's harmonic prior
(noise shaped by the bond graph, ``--prior-alpha`` its spring constant) instead of isotropic Gaussian noise.

    python bench_quotient.py OUT.json [--steps 1500] [--subset 1500] [--backbone transformer] [--seeds 0]
        [--ema-decay 0.99] [--tasks joint,conformer] [--strategies com,kabsch,quotient] [--n-test 40]
        [--samples-dir DIR] [--hydrogens explicit|implicit] [--prior gaussian|harmonic] [--prior-alpha 1.0]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from gencore.io import ensure_dir, write_json
from gencore.tables import format_table, mean_sd, pivot
from genmol.chem.io import write_sdf
from genmol.experiment import load_dataset, load_run, train_run
from genmol.generation.flow import HYDROGENS, PRIORS, GenConfig, draw_sizes, model_view, sample_conformers, sample_joint
from genmol.generation.strategies import STRATEGIES, is_quotient
from genmol.metrics.conformers import coverage_recall
from genmol.metrics.suite import evaluate_molecules


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out", nargs="?", default="bench_quotient.json")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--subset", type=int, default=1500)
    p.add_argument("--backbone", default="transformer")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--ema-decay", type=float, default=0.99, help="EMA decay of the sampled weights")
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument("--tasks", default="joint,conformer", help="comma-separated: joint, conformer")
    p.add_argument("--strategies", default="com,kabsch,quotient", help="comma-separated: " + ", ".join(STRATEGIES))
    p.add_argument("--n-test", type=int, default=40, help="held-out graphs for conformer generation")
    p.add_argument("--samples-dir", default=None, help="keep the unconditional samples here as SDF files")
    p.add_argument("--hydrogens", choices=HYDROGENS, default="explicit", help="implicit: heavy-atom models")
    p.add_argument("--prior", choices=PRIORS, default="gaussian", help="conformer noise (harmonic: conformers only)")
    p.add_argument("--prior-alpha", type=float, default=1.0, help="the harmonic prior's spring constant")
    args = p.parse_args()
    if args.samples_dir:
        ensure_dir(args.samples_dir)
    seeds = [int(x) for x in args.seeds.split(",")]
    tasks = [x.strip() for x in args.tasks.split(",")]
    strategies = [x.strip() for x in args.strategies.split(",")]
    mols, report = load_dataset("qm9", subset=args.subset, seed=0, progress=False)
    mols = model_view(mols, args.hydrogens)
    # held-out graphs spread over the whole index range (QM9's order is not random: fluorinated molecules
    # cluster at the end), kept when all their (element, charge) atoms occur in training
    stride = len(mols) // args.n_test
    held = set(range(0, stride * args.n_test, stride))
    train = [m for k, m in enumerate(mols) if k not in held]
    known = {(int(z), int(q)) for m in train for z, q in zip(m.atomic_numbers, m.formal_charges, strict=True)}
    test = [
        mols[k]
        for k in sorted(held)
        if all((int(z), int(q)) in known for z, q in zip(mols[k].atomic_numbers, mols[k].formal_charges, strict=True))
    ]
    base = GenConfig(
        backbone=args.backbone,
        hidden=args.hidden,
        layers=args.layers,
        steps=args.steps,
        ema_decay=args.ema_decay,
        hydrogens=args.hydrogens,
        prior_alpha=args.prior_alpha,
        progress=False,
    )
    records = []
    for seed, strategy, task in ((s, st, t) for s in seeds for st in strategies for t in tasks):
        prior = args.prior if task == "conformer" else "gaussian"
        cfg = replace(base, strategy=strategy, task=task, seed=seed, prior=prior)
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            train_run(cfg, train, tmp, data_name="qm9")
            seconds = time.perf_counter() - start
            model, cfg, vocab, sizes = load_run(tmp)
        g = torch.Generator().manual_seed(1 + 1000 * seed)
        if task == "joint":
            samplers = ("ode", "sde") if is_quotient(strategy) else ("ode",)
            for sampler in samplers:
                g = torch.Generator().manual_seed(1 + 1000 * seed)
                sizes_ = draw_sizes(sizes, args.samples, g)
                out = sample_joint(
                    model,
                    vocab,
                    sizes_,
                    strategy=strategy,
                    steps=100,
                    sampler=sampler,
                    generator=g,
                    hydrogens=cfg.hydrogens,
                )
                if args.samples_dir:
                    write_sdf(Path(args.samples_dir) / f"joint_{strategy}_{sampler}_seed{seed}.sdf", out)
                s = evaluate_molecules(out, strain=False, with_fcd=False).summary
                records.append(
                    {
                        "task": "joint",
                        "seed": seed,
                        "strategy": strategy,
                        "sampler": sampler,
                        "atom_stability": s["atom_stability"],
                        "molecule_stability": s["molecule_stability"],
                        "validity": s["validity"],
                        "validity_connected": s["validity_connected"],
                        "uniqueness": s["uniqueness"],
                        "train_seconds": round(seconds, 1),
                    }
                )
                print(records[-1], flush=True)
        else:
            for sampler in ("ode", "sde"):
                g = torch.Generator().manual_seed(1 + 1000 * seed)
                ens = sample_conformers(
                    model,
                    vocab,
                    test,
                    5,
                    strategy=strategy,
                    steps=50,
                    sampler=sampler,
                    generator=g,
                    prior=cfg.prior,
                    prior_alpha=cfg.prior_alpha,
                )
                cov = [coverage_recall(e, [m], threshold=0.5) for e, m in zip(ens, test, strict=True)]
                records.append(
                    {
                        "task": "conformer",
                        "seed": seed,
                        "strategy": strategy,
                        "sampler": sampler,
                        "cov_r@0.5": float(np.nanmean([c["cov_r"] for c in cov])),
                        "amr_r": float(np.nanmean([c["amr_r"] for c in cov])),
                        "train_seconds": round(seconds, 1),
                    }
                )
                print(records[-1], flush=True)
    joint = [r for r in records if r["task"] == "joint"]
    conf = [r for r in records if r["task"] == "conformer"]
    cols = ["seed", "strategy", "sampler", "atom_stability", "molecule_stability", "validity", "validity_connected"]
    print(format_table(joint, cols))
    print(format_table(conf, ["seed", "strategy", "sampler", "cov_r@0.5", "amr_r"]))
    summary = summarise(records)
    for task in tasks:
        rows = [r for r in summary if r["task"] == task]
        print(format_table(rows, list(rows[0])))
    write_json(
        args.out,
        {
            "settings": vars(args) | {"n_train": len(train), "n_test": len(test), "skipped": report.n_skipped},
            "records": records,
            "joint_table": pivot(joint, "strategy", "sampler", "molecule_stability") if joint else {},
            "summary": summary,
        },
    )


def summarise(records: list[dict]) -> list[dict]:
    """Mean and sample standard deviation over seeds of every metric, per task, strategy and sampler."""
    out = []
    for key in dict.fromkeys((r["task"], r["strategy"], r["sampler"]) for r in records):
        rows = [r for r in records if (r["task"], r["strategy"], r["sampler"]) == key]
        row = {"task": key[0], "strategy": key[1], "sampler": key[2], "seeds": len(rows)}
        for name in rows[0]:
            if name in ("task", "seed", "strategy", "sampler", "train_seconds"):
                continue
            row[name] = mean_sd(r[name] for r in rows)
        out.append(row)
    return out


if __name__ == "__main__":
    main()
