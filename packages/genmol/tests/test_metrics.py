from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import embedded
from rdkit import Chem
from rdkit.Chem import AllChem, rdMolAlign

from gencore.errors import ConfigError, InputError
from genmol.chem.molecule import Molecule
from genmol.generation.bonds import bond_order, molecule_from_geometry
from genmol.metrics.chemistry import mmff_strain, novelty, uniqueness
from genmol.metrics.conformers import coverage_recall
from genmol.metrics.geometry import bond_angles, bond_lengths, distribution_distance
from genmol.metrics.rmsd import kabsch_align, kabsch_rmsd, kabsch_rotation, symmetry_rmsd
from genmol.metrics.suite import evaluate_molecules
from genmol.se3 import random_rotations


def test_kabsch_recovers_a_rigid_motion_exactly():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 9, 3, generator=g, dtype=torch.float64)
    rot = random_rotations(4, generator=g, dtype=torch.float64)
    y = x @ rot.transpose(1, 2) + torch.randn(4, 1, 3, generator=g, dtype=torch.float64)
    torch.testing.assert_close(kabsch_align(x, y), y)
    # the closed-form RMSD is a square root of a cancelling difference: at RMSD 0 it keeps ~sqrt(eps) digits
    assert kabsch_rmsd(x, y).max() < 1e-6
    mirror = y * torch.tensor([1.0, 1.0, -1.0], dtype=torch.float64)
    assert kabsch_rmsd(x, mirror).min() > 0.1  # never reflects


def test_kabsch_rmsd_matches_rdkit_alignment():
    a, b = embedded("CC(C)CO", 1), embedded("CC(C)CO", 7)
    ours = float(kabsch_rmsd(torch.tensor(a.coordinates), torch.tensor(b.coordinates)))
    ref = rdMolAlign.AlignMol(a.to_rdkit(), b.to_rdkit())
    assert ours == pytest.approx(ref, abs=1e-6)


def test_kabsch_respects_padding():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 6, 3, generator=g), torch.randn(2, 6, 3, generator=g)
    mask = torch.ones(2, 6)
    mask[1, 4:] = 0
    y2 = y.clone()
    y2[1, 4:] = 1000.0
    torch.testing.assert_close(kabsch_rmsd(x, y, mask), kabsch_rmsd(x, y2, mask))
    torch.testing.assert_close(kabsch_rmsd(x[1, :4], y[1, :4]), kabsch_rmsd(x, y, mask)[1])


def test_symmetry_rmsd_sees_through_atom_permutations():
    a = embedded("OC(=O)c1ccccc1", 3)
    rd = a.to_rdkit()
    # swap the two carboxyl oxygens' coordinates: plain RMSD changes, symmetry-aware RMSD does not
    o = [at.GetIdx() for at in rd.GetAtoms() if at.GetSymbol() == "O"]
    xyz = a.coordinates.copy()
    xyz[[o[0], o[1]]] = xyz[[o[1], o[0]]]
    b = a.with_coordinates(xyz)
    plain = float(kabsch_rmsd(torch.tensor(a.coordinates), torch.tensor(b.coordinates)))
    assert plain > 0.05
    assert symmetry_rmsd(a, b, heavy_atoms_only=False) < plain


def test_coverage_and_amr():
    ref = [embedded("CCCCO", s) for s in (0, 1)]
    same = coverage_recall(ref, ref, threshold=0.5)
    assert same["cov_r"] == 1.0 and same["amr_r"] == pytest.approx(0.0, abs=1e-6)
    far = ref[0].with_coordinates(ref[0].coordinates * 1.8)
    res = coverage_recall([far], ref, threshold=0.1)
    assert res["cov_r"] == 0.0 and res["amr_r"] > 0.1
    # recall: over the reference conformers (one of two is covered); the precision side would read 1 and 0
    d = symmetry_rmsd(ref[0], far)
    one = coverage_recall([ref[0]], [ref[0], far], threshold=0.1)
    assert one["cov_r"] == 0.5 and one["amr_r"] == pytest.approx(d / 2, abs=1e-6) and d > 0.1


def test_bond_geometry_and_distribution_distance():
    mols = [embedded("CCO", s) for s in range(3)]
    lengths = bond_lengths(mols)
    assert set(lengths) == {"C-C:1", "C-O:1", "C-H:1", "H-O:1"}
    assert np.all(np.abs(lengths["C-C:1"] - 1.51) < 0.05)
    angles = bond_angles(mols)
    assert np.all(np.abs(angles["C-C-O"] - 109.0) < 6)
    shifted = {k: v + 0.1 for k, v in lengths.items()}
    d = distribution_distance(shifted, lengths)
    assert d["mean"] == pytest.approx(0.1, abs=1e-9)


def test_bonds_from_distances_follow_the_edm_rule():
    assert bond_order(6, 6, 1.53) == 1 and bond_order(6, 6, 1.35) == 2 and bond_order(6, 6, 1.21) == 3
    assert bond_order(6, 6, 1.70) == 0 and bond_order(1, 1, 0.75) == 1
    # EDM's C-N thresholds: triple below 1.19, double below 1.34 (C=N 1.29 + 0.05; pyridine's ring C-N is
    # about 1.34), single below 1.57
    assert [bond_order(7, 6, d) for d in (1.18, 1.20, 1.33, 1.35, 1.56, 1.58)] == [3, 2, 2, 1, 1, 0]
    m = embedded("CC#N", 0)
    perceived = molecule_from_geometry(m.atomic_numbers, m.formal_charges, m.coordinates)
    assert perceived.to_smiles() == "CC#N"


@pytest.mark.parametrize("smiles", ["ClCC(Br)CI", "CSSC", "CP(C)(C)=O", "C[SiH2]Cl", "OP(O)(O)=S", "S=C1NC=CN1"])
def test_bonds_from_distances_cover_edms_elements_beyond_qm9(smiles):
    """EDM's bond table also holds Si, P, S, Cl, Br, I; with QM9's elements only these bonds were all missing."""
    m = embedded(smiles, 0)
    perceived = molecule_from_geometry(m.atomic_numbers, m.formal_charges, m.coordinates)
    np.testing.assert_array_equal(perceived.adjacency_orders(), m.adjacency_orders())
    assert bond_order(6, 17, 1.80) == 1 and bond_order(8, 15, 1.50) == 2 and bond_order(6, 16, 1.95) == 0
    assert bond_order(6, 16, 1.64) == 2 and bond_order(6, 16, 1.81) == 1  # C=S was missing from the table


def test_strain_is_zero_at_a_minimum_and_positive_when_stretched():
    m = embedded("CCOC", 0)
    assert mmff_strain(m) == pytest.approx(0.0, abs=1e-2)
    assert mmff_strain(m.with_coordinates(m.coordinates * 1.05)) > 1.0


def test_set_metrics():
    assert uniqueness(["C", "C", "CC"]) == pytest.approx(2 / 3)
    assert novelty(["C", "CC", "CC"], {"C"}) == 0.5
    # mirror images and E/Z isomers are one molecule here (EDM's convention): stereo came from the coordinates
    assert uniqueness(["C[C@H](O)C#N", "C[C@@H](O)C#N", "F/C=C/F", "F/C=C\\F"]) == 0.5
    assert novelty(["C[C@@H](O)C#N", "CCO"], {"C[C@H](O)C#N"}) == 0.5
    mols = [embedded(s, 0) for s in ("CCO", "CCO", "c1cc[nH+]cc1")]
    broken = Molecule([6, 6], [0, 0], np.zeros((0, 2)), [], [0, 0], np.array([[0, 0, 0], [5.0, 0, 0]]))
    ev = evaluate_molecules([*mols, broken], strain=False, with_fcd=False)
    s = ev.summary
    assert s["n_records"] == 4 and s["uniqueness"] == 0.75  # [C].[C] is a valid (radical) molecule to RDKit
    assert ev.rows[3]["valid"] and not ev.rows[3]["mol_stable"]
    assert s["connectivity"] == 0.75
    assert s["molecule_stability"] == 0.75  # the disconnected radical pair is unstable
    assert ev.rows[3]["unstable_atoms"] == [
        "atom 0 C(+0): valence 0 not in (4,)",
        "atom 1 C(+0): valence 0 not in (4,)",
    ]


def test_fcd_is_small_for_a_set_against_itself_and_larger_for_different_sets():
    pytest.importorskip("fcd_torch")
    from genmol.data.smiles_sets import nci_5k
    from genmol.metrics.chemistry import fcd

    mols, _ = nci_5k()
    smiles = [Chem.MolToSmiles(m.to_rdkit()) for m in mols[:400]]
    same = fcd(smiles[:200], smiles[200:400])
    other = fcd(smiles[:200], ["C" * k for k in range(1, 40)] * 5)
    assert 0 <= same < other


def test_summary_says_why_fcd_is_missing_for_fewer_than_two_valid_molecules():
    """With one valid molecule the summary had no ``fcd`` key at all (a consumer could not tell "not asked for"
    from "not computable"); it now holds NaN with the reason, as for any other FCD failure."""
    from genmol.metrics.suite import Reference

    ev = evaluate_molecules([embedded("CCO", 0)], Reference(smiles=["CCO", "CCN"]), strain=False)
    assert math.isnan(ev.summary["fcd"])
    assert ev.summary["fcd_error"] == "FCD needs at least 2 valid molecules, got 1"
    assert "fcd" not in evaluate_molecules([embedded("CCO", 0)], Reference(smiles=["CCO"]), with_fcd=False).summary


def test_fcd_prints_nothing_for_smiles_with_a_lone_hydrogen(capfd):
    """fcd-torch parses the SMILES again; RDKit warned once per hydrogen without neighbours."""
    pytest.importorskip("fcd_torch")
    from genmol.metrics.chemistry import fcd

    capfd.readouterr()
    assert math.isfinite(fcd(["C.[H]", "CC.[H]", "CCO"] * 4, ["CCO", "CCN", "CCC"] * 4))
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_etkdg_reference_conformers_cover_themselves():
    mol = Chem.AddHs(Chem.MolFromSmiles("CCCO"))
    AllChem.EmbedMultipleConfs(mol, 3, randomSeed=0)
    confs = [Molecule.from_rdkit(mol, conf_id=c) for c in range(3)]
    assert coverage_recall(confs, confs)["cov_r"] == 1.0


def test_strain_of_a_heavy_atom_molecule_places_its_hydrogens_first():
    m = embedded("CCOC", 0)
    heavy = m.without_hydrogens()
    # the MMFF minimum's heavy atoms with relaxed hydrogens are (close to) the minimum again; without placing the
    # hydrogens MMFF would type and score a hydrogen-free molecule (2.6 kcal/mol here)
    assert mmff_strain(heavy) == pytest.approx(0.0, abs=0.1)
    assert mmff_strain(heavy.with_coordinates(heavy.coordinates * 1.05)) > 1.0


def test_a_non_finite_strain_is_an_error_not_a_nan_median():
    good = embedded("CCO", 0, "ethanol")
    collapsed = good.with_coordinates(np.zeros((good.num_atoms, 3)))  # every atom on one point: MMFF gives NaN
    result = evaluate_molecules([good, collapsed, embedded("CCN", 0)], with_fcd=False)
    row = result.rows[1]
    assert row["mmff_strain"] is None and "not finite" in row["error"]
    expected = np.median([result.rows[0]["mmff_strain"], result.rows[2]["mmff_strain"]])
    assert result.summary["mmff_strain_median"] == pytest.approx(expected)


@pytest.mark.parametrize(
    ("x", "y", "mask", "match"),
    [
        (torch.zeros(2, 5, 3), torch.zeros(2, 5, 3), torch.ones(2, 4), "mask must have shape"),
        (torch.zeros(3), torch.zeros(3), None, r"\[B, N, 3\] or \[N, 3\]"),
        (torch.zeros(5, 3), torch.zeros(4, 3), None, r"\[B, N, 3\] or \[N, 3\]"),
    ],
)
@pytest.mark.parametrize("fn", [kabsch_rmsd, kabsch_align, kabsch_rotation])
def test_kabsch_functions_refuse_bad_shapes_in_one_sentence(fn, x, y, mask, match):
    with pytest.raises(InputError, match=match):
        fn(x, y, mask)


def test_symmetry_rmsd_of_two_different_graphs_is_an_input_error():
    a, b = embedded("CCO", 1), embedded("CCN", 1)
    with pytest.raises(InputError, match="same molecular graph"):
        symmetry_rmsd(a, b)


@pytest.mark.parametrize("threshold", [0.0, -0.5, float("nan"), "0.5"])
def test_coverage_refuses_a_threshold_that_is_not_a_positive_rmsd(threshold):
    ref = [embedded("CCO", 1)]
    with pytest.raises(ConfigError, match="threshold"):
        coverage_recall(ref, ref, threshold=threshold)


def test_a_molecule_without_atoms_is_invalid():
    """RDKit sanitises an empty molecule, but it has no SMILES (MOSES counts it invalid); it used to raise validity
    while uniqueness, over the valid SMILES, left it out."""
    empty = Molecule([], [], np.zeros((0, 2)), [], [], np.zeros((0, 3)))
    ev = evaluate_molecules([empty, embedded("CCO", 0)], strain=False, with_fcd=False)
    assert not ev.rows[0]["valid"] and "no atoms" in ev.rows[0]["error"]
    assert ev.summary["validity"] == 0.5 and ev.summary["uniqueness"] == 1.0
