"""Tests that pin metric lines a plausible wrong implementation would otherwise pass (found by mutation checks).

Each expected value comes from an independent computation: numpy's SVD, RDKit directly, or a hand count.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import embedded
from rdkit import Chem
from rdkit.Chem import rdMolAlign

from genmol.chem.molecule import Molecule
from genmol.metrics.conformers import coverage_recall
from genmol.metrics.rmsd import kabsch_align, kabsch_rmsd, kabsch_rotation
from genmol.metrics.stability import stability


def _numpy_kabsch(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Proper rotation taking centred x onto centred y and the RMSD after it (Kabsch 1976, numpy SVD)."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    u, _, vt = np.linalg.svd(xc.T @ yc)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rot = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    return rot, float(np.sqrt(((xc @ rot.T - yc) ** 2).sum(1).mean()))


def test_kabsch_rotation_and_alignment_never_reflect_a_mirror_image():
    """For a mirror image the best orthogonal map is the reflection: the rotation must stay proper (det +1)
    and the aligned copy must sit at the proper-rotation RMSD, as numpy's SVD gives it."""
    x = torch.randn(7, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    y = x * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64) + 0.5
    rot_ref, rmsd_ref = _numpy_kabsch(x.numpy(), y.numpy())
    rot = kabsch_rotation(x, y)
    assert float(torch.linalg.det(rot)) == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(rot.numpy(), rot_ref, atol=1e-9)
    aligned = kabsch_align(x, y)
    assert float(((aligned - y) ** 2).sum(1).mean().sqrt()) == pytest.approx(rmsd_ref, abs=1e-9)
    assert float(kabsch_rmsd(x, y)) == pytest.approx(rmsd_ref, abs=1e-9)
    assert rmsd_ref > 0.1


def test_amr_is_the_mean_over_reference_conformers_of_the_best_rmsd():
    """Three reference conformers, one generated: best RMSDs (0, d1, d2) by RDKit's GetBestRMS; AMR-R is their
    mean (a median of three would read d1), COV-R at a threshold between d1 and d2 is 2/3."""
    ref0 = embedded("CCCCO", 0)
    refs = [ref0, ref0.with_coordinates(ref0.coordinates * 1.2), ref0.with_coordinates(ref0.coordinates * 1.6)]
    heavy = [Chem.RemoveHs(r.to_rdkit()) for r in refs]
    d = [rdMolAlign.GetBestRMS(Chem.Mol(heavy[0]), Chem.Mol(h)) for h in heavy]
    assert d[0] == pytest.approx(0.0, abs=1e-6) and 0.05 < d[1] < d[2]
    res = coverage_recall([ref0], refs, threshold=(d[1] + d[2]) / 2)
    assert res["amr_r"] == pytest.approx(sum(d) / 3, abs=1e-6)
    assert res["cov_r"] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("atoms", "charges", "bonds", "charged"),
    [
        # methoxide's graph with an H on the O: O- at valence 2 (RDKit: "Explicit valence ... greater than permitted")
        ([6, 8, 1, 1, 1, 1], [0, -1, 0, 0, 0, 0], [[0, 1], [0, 2], [0, 3], [0, 4], [1, 5]], 1),
        # methanide with four H: C- at valence 4
        ([6, 1, 1, 1, 1], [-1, 0, 0, 0, 0], [[0, 1], [0, 2], [0, 3], [0, 4]], 0),
        # methylium with four H: C+ at valence 4
        ([6, 1, 1, 1, 1], [1, 0, 0, 0, 0], [[0, 1], [0, 2], [0, 3], [0, 4]], 0),
    ],
)
def test_a_charged_atom_at_its_neutral_valence_is_unstable(atoms, charges, bonds, charged):
    """RDKit rejects these graphs; stability must call exactly the charged atom unstable (a table that also allowed
    the neutral valence for the charged element would call them stable)."""
    mol = Molecule(atoms, charges, bonds, [1.0] * len(bonds), [0] * len(atoms))
    with pytest.raises(Exception, match="valence"):
        Chem.SanitizeMol(mol.to_rdkit(sanitize=False))
    rec = stability(mol)
    assert not rec.molecule_stable
    assert rec.n_stable_atoms == len(atoms) - 1
    assert len(rec.unstable) == 1 and rec.unstable[0].startswith(f"atom {charged} ")


def test_a_molecule_without_atoms_is_not_stable():
    empty = Molecule([], [], np.zeros((0, 2)), [], [])
    rec = stability(empty)
    assert rec.n_atoms == 0 and not rec.molecule_stable
    from genmol.metrics.suite import evaluate_molecules

    row = evaluate_molecules([empty], strain=False, with_fcd=False).rows[0]
    assert not row["connected"] and not row["mol_stable"]  # no atoms: no single fragment either


def test_suite_summary_denominators_by_hand(tmp_path):
    """Ethanol (9 atoms, all stable), a methyl radical with its 3 H as atoms (4 atoms, 3 stable; RDKit sanitises
    it) and one unparsable record. By the module docstring: atom stability over the parsed records' atoms
    (12/13, not the per-molecule mean 0.875), molecule stability and validity over all three records."""
    from genmol.chem.io import write_sdf
    from genmol.metrics.suite import evaluate_sdf

    ethanol = embedded("CCO", 0)
    methyl = Molecule([6, 1, 1, 1], [0] * 4, [[0, 1], [0, 2], [0, 3]], [1.0] * 3, [0] * 4, ethanol.coordinates[:4])
    path = write_sdf(tmp_path / "s.sdf", [ethanol, methyl])
    path.write_text(path.read_text() + "broken\n\n\nnot a counts line\nM  END\n$$$$\n")
    ev = evaluate_sdf(path, strain=False, with_fcd=False)
    s = ev.summary
    assert [r["parsed"] for r in ev.rows] == [True, True, False]
    assert s["atom_stability"] == pytest.approx(12 / 13)
    assert s["molecule_stability"] == pytest.approx(1 / 3)
    assert s["validity"] == pytest.approx(2 / 3)
    assert s["connectivity"] == pytest.approx(2 / 3)
    assert s["uniqueness"] == pytest.approx(1.0)


def test_summary_strain_is_the_median_of_the_rows():
    """Three strains far apart (relaxed, stretched 3 %, stretched 8 %): the summary is their median, not the mean."""
    from genmol.metrics.chemistry import mmff_strain
    from genmol.metrics.suite import evaluate_molecules

    m = embedded("CCOC", 0)
    mols = [m, m.with_coordinates(m.coordinates * 1.03), m.with_coordinates(m.coordinates * 1.08)]
    strains = [mmff_strain(x) for x in mols]
    assert strains[0] < 0.1 < strains[1] and np.mean(strains) > strains[1] * 1.2
    s = evaluate_molecules(mols, with_fcd=False).summary
    assert s["mmff_strain_median"] == pytest.approx(float(np.median(strains)), rel=1e-6)


def test_strain_of_a_molecule_with_some_hydrogen_atoms_keeps_them_as_given():
    """Methanol with its methyl H as atoms (one stretched 30 %) and the hydroxyl H as a count: only the added H is
    relaxed first, so the stretched C-H's strain stays; it matches RDKit's MMFF strain of the all-atom copy."""
    from rdkit.Chem import AllChem

    from genmol.metrics.chemistry import mmff_strain

    m = embedded("CO", 0)  # atoms C, O, H, H, H (methyl), H (hydroxyl, bonded to O)
    assert m.atomic_numbers.tolist() == [6, 8, 1, 1, 1, 1] and [0, 1] in m.bonds.tolist()
    xyz = m.coordinates.copy()
    xyz[2] = xyz[0] + (xyz[2] - xyz[0]) * 1.3
    full = m.with_coordinates(xyz)
    rd = full.to_rdkit()
    ff = AllChem.MMFFGetMoleculeForceField(rd, AllChem.MMFFGetMoleculeProperties(rd))
    e0 = ff.CalcEnergy()
    ff.Minimize(maxIts=2000)
    expected = e0 - ff.CalcEnergy()
    assert expected > 5.0
    mixed = Molecule([6, 8, 1, 1, 1], [0] * 5, [[0, 1], [0, 2], [0, 3], [0, 4]], [1.0] * 4, [0, 1, 0, 0, 0], xyz[:5])
    assert mmff_strain(mixed) == pytest.approx(expected, abs=0.5)


@pytest.mark.parametrize(("smiles", "mirror"), [("C[C@H](O)C#N", "C[C@@H](O)C#N"), ("F/C=C/Cl", "F/C=C/Cl")])
def test_smiles_of_a_3d_molecule_carry_the_stereo_of_its_coordinates(smiles, mirror):
    """A conformer embedded from a stereo SMILES gives that SMILES back; its mirror image gives the enantiomer (an
    E double bond stays E in the mirror)."""
    m = embedded(smiles, 0)
    assert m.to_smiles() == Chem.CanonSmiles(smiles)
    flipped = m.with_coordinates(m.coordinates * np.array([1.0, 1.0, -1.0]))
    assert flipped.to_smiles() == Chem.CanonSmiles(mirror)


def test_coverage_refuses_a_boolean_threshold():
    """``True`` is a ``numbers.Real`` equal to 1: it was taken as a 1 angstrom threshold without a word."""
    from gencore.errors import ConfigError

    ref = [embedded("CCO", 1)]
    with pytest.raises(ConfigError, match="threshold"):
        coverage_recall(ref, ref, threshold=True)


def test_kabsch_align_of_a_padded_batch_leaves_padding_at_zero_and_aligns_the_rest():
    g = torch.Generator().manual_seed(5)
    x, y = (
        torch.randn(2, 6, 3, generator=g, dtype=torch.float64),
        torch.randn(2, 6, 3, generator=g, dtype=torch.float64),
    )
    mask = torch.ones(2, 6, dtype=torch.float64)
    mask[1, 4:] = 0
    out = kabsch_align(x, y, mask)
    assert torch.equal(out[1, 4:], torch.zeros(2, 3, dtype=torch.float64))
    rot, _ = _numpy_kabsch(x[1, :4].numpy(), y[1, :4].numpy())
    expected = (x[1, :4].numpy() - x[1, :4].numpy().mean(0)) @ rot.T + y[1, :4].numpy().mean(0)
    np.testing.assert_allclose(out[1, :4].numpy(), expected, atol=1e-9)


def test_a_hydrogen_atom_without_a_bond_is_unstable():
    """A stray H (no bond, no charge) has valence 0, which neutral hydrogen does not allow (EDM: H allows 1)."""
    water_and_h = Molecule([8, 1, 1, 1], [0] * 4, [[0, 1], [0, 2]], [1.0, 1.0], [0] * 4)
    rec = stability(water_and_h)
    assert rec.n_stable_atoms == 3 and not rec.molecule_stable and rec.unstable[0].startswith("atom 3 H(+0)")
