"""Kabsch RMSD throughput: genmol's batched torch version vs RDKit's AlignMol, one pair at a time.

Pairs of 20-atom conformers (random rigid motions plus noise). Reports pairs per second; the RMSDs
of the two implementations are compared on the RDKit subset. Shared 2-core machine: noisy numbers.

    python bench_kabsch.py OUT.json
"""

from __future__ import annotations

import time

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem import rdMolAlign
from rdkit.Geometry import Point3D

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.tables import format_table
from genmol.metrics.rmsd import kabsch_rmsd
from genmol.se3 import random_rotations


def _mol(xyz: np.ndarray) -> Chem.Mol:
    rw = Chem.RWMol()
    for _ in range(len(xyz)):
        rw.AddAtom(Chem.Atom(6))
    mol = rw.GetMol()
    conf = Chem.Conformer(len(xyz))
    for k, p in enumerate(xyz):
        conf.SetAtomPosition(k, Point3D(*map(float, p)))
    mol.AddConformer(conf)
    return mol


def main(out: str) -> None:
    g = torch.Generator().manual_seed(0)
    b, n, n_rdkit = 100_000, 20, 2_000
    x = torch.randn(b, n, 3, generator=g, dtype=torch.float64)
    y = x @ random_rotations(b, generator=g, dtype=torch.float64).transpose(1, 2) + 0.1 * torch.randn(
        b, n, 3, generator=g, dtype=torch.float64
    )
    times = []
    for _ in range(3):
        start = time.perf_counter()
        ours = kabsch_rmsd(x, y)
        times.append(time.perf_counter() - start)
    xs, ys = x[:n_rdkit].numpy(), y[:n_rdkit].numpy()
    start = time.perf_counter()
    mols = [(_mol(xs[k]), _mol(ys[k])) for k in range(n_rdkit)]
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    ref = [rdMolAlign.AlignMol(a, b) for a, b in mols]
    align_s = time.perf_counter() - start
    err = float(np.abs(np.asarray(ref) - ours[:n_rdkit].numpy()).max())
    records = [
        {"method": "genmol kabsch_rmsd (torch, batched)", "pairs": b, "pairs_per_s": b / min(times)},
        {"method": "RDKit AlignMol (loop over Mol pairs)", "pairs": n_rdkit, "pairs_per_s": n_rdkit / align_s},
        {
            "method": "RDKit AlignMol incl. building the Mols",
            "pairs": n_rdkit,
            "pairs_per_s": n_rdkit / (align_s + build_s),
        },
    ]
    print(format_table(records))
    print(f"max |RMSD difference| vs RDKit on {n_rdkit} pairs: {err:.2e}")
    write_json(out, {"records": records, "max_abs_rmsd_difference": err, "atoms": n})


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_kabsch.json")
    args = parser.parse_args()
    main(args.out_json)
