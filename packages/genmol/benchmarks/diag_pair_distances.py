"""How sharp is the generated geometry? Interatomic distances of sample SDFs against the training data.

Stability and validity only see the bonds that EDM's distance rule perceives, so they cannot tell a
skeleton whose bonds are slightly too long from one that is wrong everywhere. This script reads the
coordinates directly:

* ``heavy_w1``: Wasserstein-1 distance (angstrom) between the heavy-atom pair distances below 3 angstrom
  of the samples and of the reference;
* ``gap_share``: share of the heavy-atom pairs below 2.4 angstrom that lie in the gap between bonded and
  non-bonded contacts, 1.65-1.95 angstrom, where QM9's DFT geometries have almost none (no bond is that
  long; 1-3 contacts start at about 2.1);
* ``h_w1``: Wasserstein-1 distance of each hydrogen's distance to its nearest heavy atom (nan for heavy-atom
  samples; ``null`` in the JSON);
* ``fragments``: mean number of connected components of the bonds written in the SDF (1 for the data).

Reference: the seeded QM9 subset the models trained on (``--subset``, needs ``genmol[qm9]``) or an SDF.

    python diag_pair_distances.py OUT.json SAMPLES.sdf [SAMPLES.sdf ...] [--subset 1500] [--reference REF.sdf]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.stats import wasserstein_distance

from gencore.io import write_json
from gencore.tables import format_table
from genmol.chem.io import read_sdf
from genmol.chem.molecule import Molecule
from genmol.experiment import load_dataset

GAP = (1.65, 1.95)


def distances(molecules: list[Molecule]) -> dict[str, np.ndarray]:
    """Heavy-atom pair distances below 3 angstrom, H-to-nearest-heavy distances, components per molecule."""
    heavy, hydrogen, parts = [], [], []
    for m in molecules:
        x, z = m.coordinates, m.atomic_numbers
        d = np.linalg.norm(x[:, None] - x[None], axis=-1)
        h, hv = np.flatnonzero(z == 1), np.flatnonzero(z > 1)
        dh = d[np.ix_(hv, hv)][np.triu_indices(len(hv), 1)]
        heavy.append(dh[dh < 3.0])
        if len(h) and len(hv):
            hydrogen.append(d[np.ix_(h, hv)].min(1))
        n, b = len(z), m.bonds
        graph = coo_matrix((np.ones(len(b)), (b[:, 0], b[:, 1])), shape=(n, n)) if len(b) else coo_matrix((n, n))
        parts.append(connected_components(graph, directed=False)[0])
    return {
        "heavy": np.concatenate(heavy) if heavy else np.zeros(0),
        "hydrogen": np.concatenate(hydrogen) if hydrogen else np.zeros(0),
        "fragments": np.asarray(parts, dtype=float),
    }


def compare(sample: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    close = sample["heavy"][sample["heavy"] < 2.4]
    return {
        "heavy_w1": float(wasserstein_distance(sample["heavy"], reference["heavy"])),
        "gap_share": float(((close >= GAP[0]) & (close < GAP[1])).mean()) if close.size else float("nan"),
        "h_w1": (
            float(wasserstein_distance(sample["hydrogen"], reference["hydrogen"]))
            if sample["hydrogen"].size and reference["hydrogen"].size
            else float("nan")  # heavy-atom samples (--hydrogens implicit)
        ),
        "fragments": float(sample["fragments"].mean()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("samples", nargs="+", help="SDF files of generated molecules (with coordinates)")
    p.add_argument("--subset", type=int, default=1500, help="reference: this seeded QM9 subset")
    p.add_argument("--reference", default=None, help="reference SDF instead of the QM9 subset")
    args = p.parse_args()
    ref_mols = read_sdf(args.reference)[0] if args.reference else load_dataset("qm9", subset=args.subset)[0]
    reference = distances(ref_mols)
    rows = [{"file": "reference", "molecules": len(ref_mols)} | compare(reference, reference)]
    for path in args.samples:
        mols = [m for m in read_sdf(path, sanitize=False)[0] if m.coordinates is not None]
        rows.append({"file": Path(path).name, "molecules": len(mols)} | compare(distances(mols), reference))
    print(format_table(rows, list(rows[0])))
    write_json(args.out, {"settings": vars(args), "gap_angstrom": list(GAP), "rows": rows})


if __name__ == "__main__":
    main()
