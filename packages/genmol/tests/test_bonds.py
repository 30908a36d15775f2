"""Bonds from distances (genmol.generation.bonds) against RDKit on QM9-like molecules with MMFF geometries."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import embedded
from rdkit import Chem
from rdkit.Chem import rdDetermineBonds

from genmol.generation.bonds import BOND_LENGTHS, bond_order, molecule_from_geometry

# QM9-like: C, N, O, F with hydrogens, single to triple bonds, small rings (no aromatic rings: orders are exact)
KEKULE = ["CCO", "CC=O", "CC#N", "CC#C", "OC(=O)C", "CN(C)C", "FC(F)F", "C1CC1", "N#CC=O", "CC(=O)N", "OCC#N"]
AROMATIC = ["c1ccccc1", "c1ccoc1", "c1cc[nH]c1"]


def _geometry(smiles: str, seed: int):
    mol = embedded(smiles, seed)
    return mol, molecule_from_geometry(mol.atomic_numbers, mol.formal_charges, mol.coordinates)


def _rdkit_connectivity(mol) -> set[tuple[int, int]]:
    """RDKit's own distance-based connectivity (covalent radii, rdDetermineBonds) of the same coordinates."""
    rd = Chem.RWMol()
    conf = Chem.Conformer(mol.num_atoms)
    for k, (z, x) in enumerate(zip(mol.atomic_numbers, mol.coordinates, strict=True)):
        rd.AddAtom(Chem.Atom(int(z)))
        conf.SetAtomPosition(k, x.tolist())
    rd.AddConformer(conf)
    rdDetermineBonds.DetermineConnectivity(rd)
    return {tuple(sorted((b.GetBeginAtomIdx(), b.GetEndAtomIdx()))) for b in rd.GetBonds()}


def _bonds(mol) -> dict[tuple[int, int], float]:
    return {tuple(sorted(map(int, p))): float(o) for p, o in zip(mol.bonds, mol.bond_orders, strict=True)}


@pytest.mark.parametrize("smiles", KEKULE + AROMATIC)
def test_connectivity_is_rdkits_and_the_molecular_graph(smiles):
    truth, ours = _geometry(smiles, 0)
    assert set(_bonds(ours)) == set(_bonds(truth)) == _rdkit_connectivity(truth)
    assert ours.formal_charges.tolist() == truth.formal_charges.tolist()


@pytest.mark.parametrize("smiles", KEKULE)
def test_bond_orders_of_non_aromatic_molecules_are_the_graphs(smiles):
    truth, ours = _geometry(smiles, 1)
    assert _bonds(ours) == _bonds(truth)


@pytest.mark.parametrize("smiles", AROMATIC)
def test_aromatic_ring_bonds_come_out_single_or_double(smiles):
    truth, ours = _geometry(smiles, 2)
    mine = _bonds(ours)
    ring = [k for k, o in _bonds(truth).items() if o == 1.5]
    assert ring and all(mine[k] in (1.0, 2.0) for k in ring)


def test_bond_order_is_symmetric_and_never_rises_with_distance():
    distances = np.linspace(0.6, 3.0, 241)
    for za, zb in BOND_LENGTHS:
        forward = [bond_order(za, zb, float(d)) for d in distances]
        assert forward == [bond_order(zb, za, float(d)) for d in distances]
        assert all(a >= b for a, b in itertools.pairwise(forward)), (za, zb)
        assert forward[-1] == 0
    assert bond_order(6, 92, 1.0) == 0  # a pair without a typical length is never bonded
