"""Golden cases that pin the stability definition (aromatic and charged molecules included)."""

from __future__ import annotations

import numpy as np
import pytest

from genmol.chem.molecule import Molecule
from genmol.metrics.stability import stability, valences


def h(smiles: str) -> Molecule:
    """All hydrogens as atoms, aromatic bonds kept aromatic (as a generated molecule or SDF would have)."""
    return Molecule.from_smiles(smiles, explicit_hydrogens=True)


@pytest.mark.parametrize(
    "smiles",
    [
        "C",
        "c1ccccc1",  # aromatic carbon: 1 + 2 + 1 (H) after kekulisation
        "c1cc[nH]c1",  # pyrrole N-H: 3, not 1.5 + 1.5 + 1 = 4
        "c1ccncc1",  # pyridine
        "c1cc[nH+]cc1",  # pyridinium: N+ with valence 4 (charged aromatic)
        "C[N+](=O)[O-]",  # nitro: N+ 4, O- 1
        "[NH4+]",
        "CC(=O)[O-]",
        "[O-]C(=O)C[NH3+]",  # zwitterion
        "C#N",
        "OC(F)(F)F",
        "c1ccc2[nH]ccc2c1",  # indole
        "Cn1cc[n+](C)c1",  # imidazolium
    ],
)
def test_chemically_sound_molecules_are_stable(smiles):
    rec = stability(h(smiles))
    assert rec.molecule_stable, rec.unstable
    assert rec.atom_stability == 1.0 and rec.kekulized


def test_pyrrole_nitrogen_counts_three_after_kekulisation():
    mol = h("c1cc[nH]c1")
    n = int(np.flatnonzero(mol.atomic_numbers == 7)[0])
    assert set(mol.bond_orders[(mol.bonds == n).any(1)]) == {1.5, 1.0}  # aromatic bonds as given
    v, ok = valences(mol)
    assert ok and v[n] == 3.0
    naive = mol.num_hs.astype(float).copy()  # EDM's count: aromatic = 1.5
    np.add.at(naive, mol.bonds[:, 0], mol.bond_orders)
    np.add.at(naive, mol.bonds[:, 1], mol.bond_orders)
    assert naive[n] == 4.0


def test_charge_is_part_of_the_valence_key():
    ammonium = h("[NH4+]")
    neutral_n4 = Molecule(ammonium.atomic_numbers, np.zeros(5), ammonium.bonds, ammonium.bond_orders, np.zeros(5))
    assert stability(ammonium).molecule_stable
    rec = stability(neutral_n4)
    assert not rec.molecule_stable and rec.n_stable_atoms == 4
    assert rec.unstable == ("atom 0 N(+0): valence 4 not in (3,)",)


def test_unstable_cases():
    methyl = Molecule([6, 1, 1, 1], [0] * 4, [[0, 1], [0, 2], [0, 3]], [1.0] * 3, [0] * 4)
    rec = stability(methyl)
    assert not rec.molecule_stable and rec.n_stable_atoms == 3 and rec.atom_stability == 0.75
    pentavalent = Molecule([6, 1, 1, 1, 1, 1], [0] * 6, [[0, k] for k in range(1, 6)], [1.0] * 5, [0] * 6)
    assert stability(pentavalent).n_stable_atoms == 5
    # pyridinium without its charge: N with valence 4 and charge 0
    pyr = h("c1cc[nH+]cc1")
    pyr_neutral = Molecule(pyr.atomic_numbers, np.zeros(pyr.num_atoms), pyr.bonds, pyr.bond_orders, pyr.num_hs)
    assert not stability(pyr_neutral).molecule_stable
    exotic = Molecule([6], [2], np.zeros((0, 2)), [], [2])
    assert stability(exotic).unstable == ("atom 0 C(+2): no valence table entry",)


def test_implicit_hydrogen_counts_count_as_bonds():
    assert stability(Molecule.from_smiles("c1cc[nH+]cc1")).molecule_stable
    assert stability(Molecule.from_smiles("CC(=O)[O-]")).molecule_stable


def test_aromatic_ring_without_kekule_structure_is_unstable():
    # a five-membered all-carbon "aromatic" ring cannot be kekulised
    ring = Molecule([6] * 5, [0] * 5, [[i, (i + 1) % 5] for i in range(5)], [1.5] * 5, [1] * 5)
    rec = stability(ring)
    assert not rec.kekulized and not rec.molecule_stable and rec.n_stable_atoms == 0
    assert "without a Kekule structure" in rec.unstable[0]
