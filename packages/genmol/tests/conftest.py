from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import AllChem

from genmol.chem.molecule import Molecule


def embedded(smiles: str, seed: int = 0, name: str = "") -> Molecule:
    """A molecule with explicit hydrogens and an ETKDG+MMFF conformer, built in the test."""
    mol = Chem.AddHs(Chem.MolFromSmiles(smiles))
    assert AllChem.EmbedMolecule(mol, randomSeed=seed) == 0
    AllChem.MMFFOptimizeMolecule(mol)
    out = Molecule.from_rdkit(mol, name=name or smiles)
    return out


@pytest.fixture
def small_3d() -> list[Molecule]:
    return [embedded(s, k) for k, s in enumerate(["CCO", "c1ccccc1", "CC(=O)N", "C[NH3+]", "OCC#N", "c1cc[nH]c1"])]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
