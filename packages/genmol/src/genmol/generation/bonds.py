"""Bonds of a generated 3-D molecule from its interatomic distances (the EDM convention).

Hoogeboom et al. 2022 (EDM) assign each atom pair the highest bond order whose typical length plus a
margin exceeds the distance: triple if ``d < l3 + 0.03``, else double if ``d < l2 + 0.05``, else single
if ``d < l1 + 0.10`` angstrom, else no bond. The typical lengths are EDM's table (standard covalent bond
lengths; its margins were tuned on QM9's own geometries), so that stability numbers compare with published
ones: ``benchmarks/bench_data_stability.py`` scores QM9's DFT geometries with it. Aromatic rings come out
as alternating or uniform single/double assignments, exactly as in EDM's evaluation; the stability metric
then judges the result. Formal charges are those the model generated.
"""

from __future__ import annotations

import numpy as np

from genmol.chem.molecule import Molecule

# (Z_a, Z_b) with Z_a <= Z_b -> (single, double, triple) lengths in angstrom (None: no such bond)
BOND_LENGTHS: dict[tuple[int, int], tuple[float | None, float | None, float | None]] = {
    (1, 1): (0.74, None, None),
    (1, 6): (1.09, None, None),
    (1, 7): (1.01, None, None),
    (1, 8): (0.96, None, None),
    (1, 9): (0.92, None, None),
    (6, 6): (1.54, 1.34, 1.20),
    (6, 7): (1.47, 1.29, 1.16),
    (6, 8): (1.43, 1.20, 1.13),
    (6, 9): (1.35, None, None),
    (7, 7): (1.45, 1.25, 1.10),
    (7, 8): (1.40, 1.21, None),
    (7, 9): (1.36, None, None),
    (8, 8): (1.48, 1.21, None),
    (8, 9): (1.42, None, None),
    (9, 9): (1.42, None, None),
}
MARGINS = (0.10, 0.05, 0.03)


def bond_order(z_a: int, z_b: int, distance: float) -> int:
    lengths = BOND_LENGTHS.get((min(z_a, z_b), max(z_a, z_b)))
    if lengths is None:
        return 0
    for order in (3, 2, 1):
        ref = lengths[order - 1]
        if ref is not None and distance < ref + MARGINS[order - 1]:
            return order
    return 0


def molecule_from_geometry(
    atomic_numbers: np.ndarray, charges: np.ndarray, coordinates: np.ndarray, name: str = ""
) -> Molecule:
    """A :class:`Molecule` with bonds assigned from distances (hydrogens are atoms: ``num_hs = 0``)."""
    n = len(atomic_numbers)
    d = np.linalg.norm(coordinates[:, None, :] - coordinates[None, :, :], axis=-1)
    pairs, orders = [], []
    for i in range(n):
        for j in range(i + 1, n):
            o = bond_order(int(atomic_numbers[i]), int(atomic_numbers[j]), float(d[i, j]))
            if o:
                pairs.append((i, j))
                orders.append(float(o))
    return Molecule(
        atomic_numbers,
        charges,
        np.asarray(pairs, dtype=np.int64).reshape(-1, 2),
        orders,
        np.zeros(n),
        coordinates,
        name,
    )
