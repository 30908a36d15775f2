"""Featurisation of ~10k SMILES: genmol's vectorised tables vs torch_geometric.utils.from_smiles.

Both produce the same features (checked here, and in tests/test_data.py); from_smiles builds one Data
per molecule and the reference timing includes Batch.from_data_list. Best of 3 repeats; the machine is
shared, so wall-clock numbers are noisy.

    python bench_featurize.py OUT.json
"""

from __future__ import annotations

import time

import torch
from torch_geometric.data import Batch
from torch_geometric.utils import from_smiles

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.tables import format_table
from genmol.chem.featurize import featurize_smiles
from genmol.data.smiles_sets import nci_path


def main(out: str) -> None:
    smiles = [line.split()[0] for line in nci_path().read_text().splitlines() if line.strip()]
    smiles = [s for s in smiles if from_smiles(s).num_nodes > 0] * 2  # ~10k valid SMILES
    ours_t, ref_t = [], []
    for _ in range(3):
        start = time.perf_counter()
        ours, _ = featurize_smiles(smiles)
        ours_t.append(time.perf_counter() - start)
        start = time.perf_counter()
        ref = Batch.from_data_list([from_smiles(s) for s in smiles])
        ref_t.append(time.perf_counter() - start)
    same = torch.equal(ours.x, ref.x) and torch.equal(ours.edge_index, ref.edge_index)
    same = same and torch.equal(ours.edge_attr, ref.edge_attr)
    records = [
        {"method": "genmol featurize_smiles", "n_smiles": len(smiles), "seconds": min(ours_t)},
        {"method": "torch_geometric from_smiles + Batch", "n_smiles": len(smiles), "seconds": min(ref_t)},
    ]
    speedup = min(ref_t) / min(ours_t)
    print(format_table(records))
    print(f"speed-up {speedup:.2f}x, identical features: {same}")
    write_json(out, {"records": records, "speedup": speedup, "identical": same})


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_featurize.json")
    args = parser.parse_args()
    main(args.out_json)
