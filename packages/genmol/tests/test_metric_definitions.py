"""Metric definitions pinned against RDKit as the oracle: symmetry-aware RMSD of Kekule molecules, the charged
valence-table entries the golden cases elsewhere do not reach, and ``validity_connected``."""

from __future__ import annotations

import numpy as np
import pytest
from rdkit import Chem
from rdkit.Chem import AllChem, rdMolAlign

from genmol.chem.molecule import Molecule
from genmol.metrics.conformers import coverage_recall
from genmol.metrics.rmsd import symmetry_rmsd
from genmol.metrics.stability import stability
from genmol.metrics.suite import evaluate_molecules


def _toluene_ring_flip() -> tuple[Chem.Mol, Chem.Mol]:
    """Heavy-atom toluene (aromatic, sanitised) and a noisy copy whose ring atoms 2<->6 and 3<->5 swap places."""
    m = Chem.AddHs(Chem.MolFromSmiles("Cc1ccccc1"))
    AllChem.EmbedMolecule(m, randomSeed=1)
    ref = Chem.RemoveHs(m)
    x = ref.GetConformer().GetPositions()
    x = x[[0, 1, 6, 5, 4, 3, 2]] + np.random.default_rng(0).normal(0.0, 0.1, x.shape)
    probe = Chem.Mol(ref)
    conf = probe.GetConformer()
    for k, p in enumerate(x):
        conf.SetAtomPosition(k, p.tolist())
    return probe, ref


def _kekule(mol: Chem.Mol) -> Molecule:
    k = Chem.Mol(mol)
    Chem.Kekulize(k, clearAromaticFlags=True)
    return Molecule.from_rdkit(k)


def test_symmetry_rmsd_of_kekule_molecules_sees_the_ring_flip():
    probe, ref = _toluene_ring_flip()
    oracle = rdMolAlign.GetBestRMS(Chem.Mol(probe), Chem.Mol(ref))
    p, r = _kekule(probe), _kekule(ref)
    assert set(p.bond_orders.tolist()) == {1.0, 2.0}  # a ring as an SDF or bonds from distances give it
    # with Kekule bonds the flip maps single onto double bonds, so it is no automorphism unless aromaticity is perceived
    assert symmetry_rmsd(p, r) == pytest.approx(oracle, abs=1e-6)
    assert coverage_recall([p], [r], threshold=0.5)["amr_r"] == pytest.approx(oracle, abs=1e-6)


def test_symmetry_rmsd_matches_a_kekule_conformer_with_an_aromatic_one():
    probe, ref = _toluene_ring_flip()
    oracle = rdMolAlign.GetBestRMS(Chem.Mol(probe), Chem.Mol(ref))
    kekule_probe, aromatic_ref = _kekule(probe), Molecule.from_rdkit(ref)
    assert (aromatic_ref.bond_orders == 1.5).sum() == 6
    # the same molecule, one read from an SDF as written and one from sanitised data: not "different graphs"
    assert symmetry_rmsd(kekule_probe, aromatic_ref) == pytest.approx(oracle, abs=1e-6)
    assert coverage_recall([kekule_probe], [aromatic_ref], threshold=0.5)["cov_r"] == 1.0


@pytest.mark.parametrize(
    "smiles, charged_symbol",
    [
        ("CN=[N+]=[N-]", "N(-1)"),  # azide: N- has valence 2
        ("C[O+](C)C", "O(+1)"),  # trimethyloxonium: O+ has valence 3
        ("C[N+]#[C-]", "C(-1)"),  # methyl isocyanide: C- has valence 3, N+ 4
        ("C[S+](C)C", "S(+1)"),  # trimethylsulfonium: S+ has valence 3
        ("C[B-](C)(C)C", "B(-1)"),  # tetramethylborate: B- has valence 4
    ],
)
def test_charged_atoms_rdkit_accepts_are_stable(smiles, charged_symbol):
    mol = Molecule.from_smiles(smiles, explicit_hydrogens=True)
    assert stability(mol).molecule_stable
    # the same graph with the charges dropped is not (the charge is part of the key)
    neutral = Molecule(mol.atomic_numbers, np.zeros(mol.num_atoms), mol.bonds, mol.bond_orders, mol.num_hs)
    assert any(charged_symbol.replace("-1", "+0").replace("+1", "+0") in u for u in stability(neutral).unstable)


def test_validity_connected_needs_both_validity_and_one_fragment():
    ethanol = Molecule.from_smiles("CCO", explicit_hydrogens=True)
    salt = Molecule.from_smiles("C[NH3+].[Cl-]", explicit_hydrogens=True)  # valid, two fragments
    pentavalent = Molecule([6, 1, 1, 1, 1, 1], [0] * 6, [[0, k] for k in range(1, 6)], [1.0] * 5, [0] * 6)
    s = evaluate_molecules([ethanol, salt, pentavalent], strain=False, with_fcd=False).summary
    assert s["validity"] == pytest.approx(2 / 3)
    assert s["connectivity"] == pytest.approx(2 / 3)
    assert s["validity_connected"] == pytest.approx(1 / 3)


def test_symmetry_rmsd_refuses_a_probe_with_an_extra_bond():
    """GetBestRMS matches the reference as a substructure of the probe: a ring-closed copy of a chain (same heavy
    atoms, one bond more) matched and got an RMSD, so a generated conformer of another graph was scored."""
    from conftest import embedded

    from gencore.errors import InputError

    ring, chain = embedded("C1CCCCC1", 0), embedded("CCCCCC", 0)
    for probe, ref in ((ring, chain), (chain, ring)):
        with pytest.raises(InputError, match="same molecular graph"):
            symmetry_rmsd(probe, ref)
    res = coverage_recall([ring], [chain], threshold=5.0)
    assert res["cov_r"] == 0.0 and np.isnan(res["amr_r"])
    # the same holds for a charge only the probe carries (a charged probe matched a neutral reference at RMSD 0)
    acetate = embedded("CC(=O)[O-]", 0)
    neutral = Molecule(
        acetate.atomic_numbers,
        np.zeros(acetate.num_atoms),
        acetate.bonds,
        acetate.bond_orders,
        acetate.num_hs,
        acetate.coordinates,
    )
    with pytest.raises(InputError, match="same molecular graph"):
        symmetry_rmsd(acetate, neutral)
    res = coverage_recall([acetate], [neutral], threshold=5.0)
    assert res["cov_r"] == 0.0 and np.isnan(res["amr_r"])


def test_coverage_threshold_is_strict_as_documented():
    """COV-R counts a reference conformer when its best RMSD is below delta (``< delta``, not ``<=``)."""
    from conftest import embedded

    ref = embedded("CCCCO", 0)
    gen = ref.with_coordinates(ref.coordinates + np.random.default_rng(0).normal(0.0, 0.2, ref.coordinates.shape))
    d = symmetry_rmsd(gen, ref)
    assert d > 0.01
    at = coverage_recall([gen], [ref], threshold=d)
    assert at["cov_r"] == 0.0 and at["amr_r"] == d
    assert coverage_recall([gen], [ref], threshold=np.nextafter(d, np.inf))["cov_r"] == 1.0
