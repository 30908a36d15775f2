"""Bond-length and bond-angle distributions against RDKit's geometry, and their W1 summary against a CDF integral."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest
from conftest import embedded
from rdkit.Chem import rdMolTransforms

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
