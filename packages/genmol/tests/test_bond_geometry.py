"""Bond-length and bond-angle distributions against RDKit's geometry, and their W1 summary against a CDF integral."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
from conftest import embedded
from rdkit import Chem
from rdkit.Chem import rdMolTransforms

from genmol.chem.molecule import Molecule
from genmol.metrics.chemistry import mmff_strain
from genmol.metrics.geometry import bond_angles, bond_lengths, distribution_distance


def _rdkit_geometry(molecules):
    """Every bond length and every angle (pairs of a centre atom's neighbours) measured by RDKit."""
    lengths, angles = defaultdict(list), defaultdict(list)
    for m in molecules:
        rd = m.to_rdkit()
        conf = rd.GetConformer()
        for b in rd.GetBonds():
            i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
            a, c = sorted((b.GetBeginAtom().GetSymbol(), b.GetEndAtom().GetSymbol()))
            order = "ar" if b.GetIsAromatic() else str(int(b.GetBondTypeAsDouble()))
            lengths[f"{a}-{c}:{order}"].append(rdMolTransforms.GetBondLength(conf, i, j))
        for atom in rd.GetAtoms():
            for p, q in itertools.combinations(atom.GetNeighbors(), 2):
                ends = sorted((p.GetSymbol(), q.GetSymbol()))
                key = f"{ends[0]}-{atom.GetSymbol()}-{ends[1]}"
                angles[key].append(rdMolTransforms.GetAngleDeg(conf, p.GetIdx(), atom.GetIdx(), q.GetIdx()))
    return lengths, angles


def test_bond_lengths_and_angles_are_rdkits_for_every_bond_and_neighbour_pair():
    """Water has two bonds (one angle), phenol aromatic bonds ('ar'), an amide and a nitrile the other orders."""
    mols = [embedded(s, k) for k, s in enumerate(["O", "c1ccccc1O", "CC(=O)N", "CC#N"])]
    want_lengths, want_angles = _rdkit_geometry(mols)
    for got, want in ((bond_lengths(mols), want_lengths), (bond_angles(mols), want_angles)):
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_allclose(np.sort(got[key]), np.sort(want[key]), atol=1e-9, err_msg=key)
    assert len(want_lengths["C-C:ar"]) == 6 and len(want_angles["H-O-H"]) == 1


def _w1(a: np.ndarray, b: np.ndarray) -> float:
    """1-Wasserstein distance of two empirical distributions: the integral of |F_a - F_b| over the merged support."""
    x = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), x[:-1], side="right") / len(a)
    fb = np.searchsorted(np.sort(b), x[:-1], side="right") / len(b)
    return float(np.sum(np.abs(fa - fb) * np.diff(x)))


def test_distribution_distance_is_the_reference_count_weighted_mean_over_shared_types():
    rng = np.random.default_rng(0)
    reference = {"C-C:1": rng.normal(1.53, 0.02, 30), "C-O:1": rng.normal(1.43, 0.02, 10)}
    reference["C-N:1"] = rng.normal(1.47, 0.02, 5)  # absent from the sample
    sample = {"C-C:1": rng.normal(1.50, 0.05, 7), "C-O:1": rng.normal(1.55, 0.01, 12)}
    sample["N-O:1"] = rng.normal(1.4, 0.02, 4)  # absent from the reference
    d = distribution_distance(sample, reference)
    assert set(d) == {"mean", "C-C:1", "C-O:1"}  # a type missing from either set is no term
    w1 = {k: _w1(sample[k], reference[k]) for k in ("C-C:1", "C-O:1")}
    for k, v in w1.items():
        assert d[k] == pytest.approx(v, rel=1e-12)
    assert d["mean"] == pytest.approx((30 * w1["C-C:1"] + 10 * w1["C-O:1"]) / 40, rel=1e-12)
    assert abs(d["mean"] - (w1["C-C:1"] + w1["C-O:1"]) / 2) > 0.01  # the weights matter for this draw
    assert np.isnan(distribution_distance({"C-C:1": np.ones(3)}, {"C-O:1": np.ones(3)})["mean"])


def test_strain_of_a_heavy_atom_geometry_relaxes_only_the_added_hydrogens_first():
    """Heavy-atom molecules (hydrogen counts) get hydrogens placed and relaxed with the heavy atoms fixed: the heavy
    atoms of a relaxed conformer have next to no strain, those of a stretched one keep theirs."""
    for smiles in ("CCOC", "c1ccccc1O"):
        m = embedded(smiles, 0)
        heavy = m.without_hydrogens()
        assert heavy.num_hs.any() and mmff_strain(heavy) == pytest.approx(0.0, abs=1e-2)
        stretched = heavy.with_coordinates(heavy.coordinates * 1.05)
        assert mmff_strain(stretched) > 1.0


@pytest.mark.parametrize("smiles", ["c1ccccc1", "Cc1ccncc1O", "c1cc[nH]c1C#N"])
def test_bond_types_do_not_depend_on_writing_a_ring_kekule_or_aromatic(smiles):
    """Bonds inferred from distances are Kekule, training molecules read from SDF are aromatic: the same geometry
    must give the same bond types, or the bond-length W1 of the data against itself is not zero (with Kekule
    'C-C:1'/'C-C:2' against aromatic 'C-C:ar' no ring type was shared and the ring bonds dropped out)."""
    aromatic = embedded(smiles, 0)
    rd = aromatic.to_rdkit()
    Chem.Kekulize(rd, clearAromaticFlags=True)
    kekule = Molecule.from_rdkit(rd)
    assert 1.5 in aromatic.bond_orders and 1.5 not in kekule.bond_orders
    a, k = bond_lengths([aromatic]), bond_lengths([kekule])
    assert set(a) == set(k) and "C-C:ar" in a
    for key in a:
        np.testing.assert_array_equal(np.sort(a[key]), np.sort(k[key]))
    d = distribution_distance(k, a)
    assert d["mean"] == 0.0 and d["C-C:ar"] == 0.0


def test_a_molecule_that_does_not_sanitise_keeps_its_bond_orders():
    """No aromaticity to perceive: the orders as given (a pentavalent carbon; an aromatic ring with no Kekule form)."""
    xyz = np.vstack([np.zeros(3), np.eye(3), -np.eye(3)[:2]])
    ch5 = Molecule([6, 1, 1, 1, 1, 1], [0] * 6, [[0, k] for k in range(1, 6)], [1.0] * 5, [0] * 6, xyz)
    assert set(bond_lengths([ch5])) == {"C-H:1"}
    angle = np.linspace(0, 2 * np.pi, 6)[:5]
    ring_xyz = np.stack([1.2 * np.cos(angle), 1.2 * np.sin(angle), np.zeros(5)], 1)
    ring = Molecule([6] * 5, [0] * 5, [[i, (i + 1) % 5] for i in range(5)], [1.5] * 5, [1] * 5, ring_xyz)
    assert set(bond_lengths([ring])) == {"C-C:ar"}
