"""Time of the 2-D metric suite (validity, uniqueness, novelty, FCD) on ~10k SMILES, beside MOSES' metrics.

Generated set: ~10k SMILES of RDKit's NCI sample with a few corruptions; reference: the same file's
first half. MOSES (``molsets``) pins old dependencies and is often not importable; when its
``get_all_metrics`` cannot be imported, the record says so instead of a time. Shared machine: noisy.

    python bench_metrics.py OUT.json
"""

from __future__ import annotations

import time

from gencore.command import benchmark_parser
from gencore.io import write_json
from gencore.tables import format_table
from genmol.data.smiles_sets import nci_path
from genmol.metrics.suite import evaluate_smiles


def main(out: str) -> None:
    smiles = [line.split()[0] for line in nci_path().read_text().splitlines() if line.strip()]
    generated = (smiles + [s + "(" for s in smiles[:200]]) * 2  # ~10k, with invalid entries
    reference = smiles[: len(smiles) // 2]
    records = []
    start = time.perf_counter()
    ours = evaluate_smiles(generated, reference, with_fcd=True)
    records.append({"suite": "genmol evaluate_smiles", "n": len(generated), "seconds": time.perf_counter() - start})
    try:
        from moses import get_all_metrics  # type: ignore[import-not-found]

        start = time.perf_counter()
        moses = get_all_metrics(generated, test=reference, n_jobs=1, device="cpu")
        records.append({"suite": "MOSES get_all_metrics", "n": len(generated), "seconds": time.perf_counter() - start})
    except Exception as exc:  # molsets is not importable beside current numpy/pandas/torch
        moses = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        records.append({"suite": "MOSES get_all_metrics", "n": len(generated), "seconds": "not importable"})
    print(format_table(records))
    print(ours)
    write_json(out, {"records": records, "genmol": ours, "moses": moses})


if __name__ == "__main__":
    parser = benchmark_parser(__doc__, "bench_metrics.json")
    args = parser.parse_args()
    main(args.out_json)
