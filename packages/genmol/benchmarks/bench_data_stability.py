"""Calibration of the stability metric: QM9's own DFT geometries scored like generated molecules.

Bonds come from interatomic distances by EDM's rule (:func:`genmol.generation.bonds.molecule_from_geometry`)
and every formal charge is 0, as in EDM's evaluation, whose paper reports atom stability 99.0 % and molecule
stability 95.2 % for the QM9 data. A metric that scored the data far below that would make every generated
number meaningless; this script measures where ours puts it. Needs ``genmol[qm9]``.

    python bench_data_stability.py OUT.json [--n N] [--seed 0]      # default: all of QM9 (about 20 s)
"""

from __future__ import annotations

import argparse
import collections
import re
import time

import numpy as np

from gencore.io import write_json
from gencore.tables import format_table
from genmol.data.qm9 import load_raw
from genmol.generation.bonds import molecule_from_geometry
from genmol.metrics.stability import stability


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--n", type=int, default=None, help="molecules drawn at random from QM9 (default: all)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    raw, smiles = load_raw()
    offsets = np.concatenate([[0], np.cumsum(raw["counts"].numpy())])
    zs, xyz = raw["atomic_numbers"].numpy(), raw["coordinates"].numpy()
    n = len(smiles) if args.n is None else min(args.n, len(smiles))
    chosen = np.random.default_rng(args.seed).choice(len(smiles), n, replace=False)
    start = time.perf_counter()
    atoms = stable_atoms = stable_mols = 0
    reasons: collections.Counter[str] = collections.Counter()
    for i in chosen:
        a, b = offsets[i], offsets[i + 1]
        rec = stability(molecule_from_geometry(zs[a:b], np.zeros(b - a, dtype=np.int64), xyz[a:b]))
        atoms += rec.n_atoms
        stable_atoms += rec.n_stable_atoms
        stable_mols += rec.molecule_stable
        reasons.update(re.sub(r"^atom \d+ ", "", r) for r in rec.unstable)  # "C(+0): valence 5 ..." by element
    seconds = time.perf_counter() - start
    summary = {
        "molecules": len(chosen),
        "atom_stability": stable_atoms / atoms,
        "molecule_stability": stable_mols / len(chosen),
        "edm_paper_atom_stability": 0.990,
        "edm_paper_molecule_stability": 0.952,
        "seconds": seconds,
    }
    print(format_table([summary]))
    top = [{"unstable atom": k, "count": v} for k, v in reasons.most_common(8)]
    print(format_table(top))
    write_json(args.out, {"seed": args.seed, "summary": summary, "unstable_reasons": top})


if __name__ == "__main__":
    main()
