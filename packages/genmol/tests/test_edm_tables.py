"""genmol's bond-length and valence tables against EDM's published ones, entry by entry, and EDM stability of
QM9's own DFT geometries.

Reference: Hoogeboom et al. 2022, repository ehoogeboom/e3_diffusion_for_molecules, ``qm9/bond_analyze.py``
(typical lengths in picometres, margins 10/5/3 pm, ``allowed_bonds``), and ``qm9/analyze.py`` (``check_stability``).
The values below are written out from that file, independently of genmol's tables.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from rdkit import Chem

from genmol.chem.molecule import Molecule
from genmol.generation.bonds import BOND_LENGTHS, MARGINS, bond_order, molecule_from_geometry
from genmol.metrics.stability import ALLOWED_VALENCES, stability

# EDM's typical lengths (pm) per unordered element pair, for single, double and triple bonds
EDM_SINGLE = {
    "H-H": 74, "H-C": 109, "H-N": 101, "H-O": 96, "H-F": 92, "H-B": 119, "H-Si": 148, "H-P": 144, "H-As": 152,
    "H-S": 134, "H-Cl": 127, "H-Br": 141, "H-I": 161,
    "C-C": 154, "C-N": 147, "C-O": 143, "C-F": 135, "C-Si": 185, "C-P": 184, "C-S": 182, "C-Cl": 177, "C-Br": 194,
    "C-I": 214,
    "N-N": 145, "N-O": 140, "N-F": 136, "N-Cl": 175, "N-Br": 214, "N-S": 168, "N-I": 222, "N-P": 177,
    "O-O": 148, "O-F": 142, "O-Br": 172, "O-S": 151, "O-P": 163, "O-Si": 163, "O-Cl": 164, "O-I": 194,
    "F-F": 142, "F-S": 158, "F-Si": 160, "F-Cl": 166, "F-Br": 178, "F-P": 156, "F-I": 187,
    "B-Cl": 175,
    "Si-Si": 233, "Si-S": 200, "Si-Cl": 202, "Si-Br": 215, "Si-I": 243,
    "Cl-Cl": 199, "Cl-P": 203, "Cl-S": 207, "Cl-Br": 214,
    "S-S": 204, "S-Br": 225, "S-P": 210, "S-I": 234,
    "Br-Br": 228, "Br-P": 222,
    "P-P": 221,
    "I-I": 266,
}  # fmt: skip
EDM_DOUBLE = {
    "C-C": 134,
    "C-N": 129,
    "C-O": 120,
    "C-S": 160,
    "N-N": 125,
    "N-O": 121,
    "O-O": 121,
    "O-P": 150,
    "P-S": 186,
}
EDM_TRIPLE = {"C-C": 120, "C-N": 116, "C-O": 113, "N-N": 110}
EDM_MARGINS_PM = (10, 5, 3)
EDM_VALENCES = {
    "H": (1,), "C": (4,), "N": (3,), "O": (2,), "F": (1,), "B": (3,), "Al": (3,), "Si": (4,), "P": (3, 5),
    "S": (4,), "Cl": (1,), "As": (3,), "Br": (1,), "I": (1,), "Hg": (1, 2), "Bi": (3, 5),
}  # fmt: skip
DELIBERATE_VALENCES = {"S": (2, 4, 6), "As": (3, 5)}  # stated in genmol.metrics.stability's docstring

_Z = Chem.GetPeriodicTable().GetAtomicNumber


def _key(pair: str) -> tuple[int, int]:
    a, b = pair.split("-")
    return tuple(sorted((_Z(a), _Z(b))))


def _reference() -> dict[tuple[int, int], list[int | None]]:
    ref: dict[tuple[int, int], list[int | None]] = {}
    for k, table in enumerate((EDM_SINGLE, EDM_DOUBLE, EDM_TRIPLE)):
        for pair, pm in table.items():
            ref.setdefault(_key(pair), [None, None, None])[k] = pm
    return ref


def _edm_order(ref: list[int | None], distance: float) -> int:
    """EDM's nested test in picometres: single first, then double inside it, then triple inside that."""
    d = 100 * distance
    if ref[0] is None or not d < ref[0] + EDM_MARGINS_PM[0]:
        return 0
    if ref[1] is None or not d < ref[1] + EDM_MARGINS_PM[1]:
        return 1
    if ref[2] is None or not d < ref[2] + EDM_MARGINS_PM[2]:
        return 2
    return 3


def test_every_bond_length_entry_is_edms():
    ref = _reference()
    assert len(ref) == len(EDM_SINGLE) == 64 and set(BOND_LENGTHS) == set(ref)
    for key, lengths in BOND_LENGTHS.items():
        assert [None if x is None else round(100 * x) for x in lengths] == ref[key], key
        assert all(x is None or abs(100 * x - round(100 * x)) < 1e-9 for x in lengths), key
    assert [round(100 * m) for m in MARGINS] == list(EDM_MARGINS_PM)


def test_bond_orders_are_edms_at_and_around_every_threshold():
    """Compared in picometres as EDM does, so distances on a threshold (1.16 for C-O, 1.64 for C-C) agree too."""
    for key, ref in _reference().items():
        thresholds = [pm + m for pm, m in zip(ref, EDM_MARGINS_PM, strict=True) if pm is not None]
        assert thresholds == sorted(thresholds, reverse=True), key  # triple-first testing is EDM's nested test
        for t in thresholds:
            for d in (t / 100, math.nextafter(t / 100, 0), math.nextafter(t / 100, 9), t / 100 - 0.005):
                assert bond_order(*key, d) == bond_order(key[1], key[0], d) == _edm_order(ref, d), (key, d)


def test_every_neutral_valence_entry_is_edms_or_a_stated_deviation():
    for symbol, allowed in EDM_VALENCES.items():
        assert ALLOWED_VALENCES[(_Z(symbol), 0)] == DELIBERATE_VALENCES.get(symbol, allowed), symbol
    neutral = {z for z, q in ALLOWED_VALENCES if q == 0}
    assert neutral == {_Z(s) for s in EDM_VALENCES}


# QM9 (gdb index, SMILES): atomic numbers, DFT coordinates (angstrom), EDM's bond count per atom from
# ``check_stability`` with ``get_bond_order``. Diacetylene's and cyanogen's central C-C (1.36-1.38) lies under
# C=C's threshold (1.39), so EDM counts it double and calls both molecules unstable.
QM9 = {
    "4 C#C": ([6, 6, 1, 1], [[0.5995395, 0, 1], [-0.5995395, 0, 1], [-1.6616386, 0, 1], [1.6616386, 0, 1]],
              [4, 4, 1, 1]),
    "5 C#N": ([6, 7, 1], [[-0.0133239, 1.1324657, 0.0082759], [0.0023107, -0.0191586, 0.0019287],
                          [-0.0278027, 2.1989493, 0.0141538]], [4, 3, 1]),
    "6 C=O": ([6, 8, 1, 1], [[-0.0139777, 1.1802114, 0.0077525], [0.002314, -0.0196637, 0.0021611],
                             [0.9149603, 1.7895112, 0.0039566], [-0.9591097, 1.7640179, 0.0171828]], [4, 2, 1, 1]),
    "23 C#CC#C": ([6, 6, 6, 6, 1, 1], [[0.6809802, 0, 0], [-0.6809802, 0, 0], [-1.887666, 0, 0],
                                       [1.887666, 0, 0], [-2.9496, 0, 0], [2.9496, 0, 0]], [5, 5, 4, 4, 1, 1]),
    "25 N#CC#N": ([7, 6, 6, 7], [[0.0174573, -1.1613421, -0.0041534], [0.0025321, -0.0034428, 0.0017994],
                                 [-0.0161142, 1.3722099, 0.0093487], [-0.032643, 2.5300827, 0.0160909]],
                  [3, 5, 5, 3]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(QM9))
def test_qm9_geometries_get_edms_bond_counts_and_stability(name):
    z, xyz, edm_counts = QM9[name]
    mol = molecule_from_geometry(np.array(z), np.zeros(len(z), dtype=np.int64), np.array(xyz, dtype=np.float64))
    counts = np.zeros(len(z))
    np.add.at(counts, mol.bonds[:, 0], mol.bond_orders)
    np.add.at(counts, mol.bonds[:, 1], mol.bond_orders)
    assert counts.tolist() == edm_counts
    edm_stable = [k in EDM_VALENCES[Chem.GetPeriodicTable().GetElementSymbol(a)] for a, k in zip(z, edm_counts)]
    rec = stability(mol)
    assert rec.n_stable_atoms == sum(edm_stable) and rec.molecule_stable == all(edm_stable)


@pytest.mark.parametrize("smiles", ["Cl[Al](Cl)Cl", "C[Hg]Cl", "C[Hg]C", "C[Bi](C)C", "C[Bi](C)(C)(Cl)Cl"])
def test_geom_metals_of_edms_valence_table_are_stable_with_their_valences(smiles):
    """EDM's table allows Al 3, Hg 1/2, Bi 3/5 (GEOM elements); without entries every such atom was unstable."""
    rec = stability(Molecule.from_smiles(smiles, explicit_hydrogens=True))
    assert rec.molecule_stable, rec.unstable
