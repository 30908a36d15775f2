from __future__ import annotations

import importlib.util

import pytest
import torch
from rdkit import Chem
from torch_geometric.data import Batch
from torch_geometric.utils import from_smiles

from gencore.errors import InputError
from genmol.chem.featurize import featurize_mols, featurize_smiles
from genmol.chem.molecule import Molecule
from genmol.data.conformers import generate_conformers
from genmol.data.smiles_sets import nci_5k

SMILES = [
    "CCO",
    "c1ccccc1",
    "C[C@H](N)C(=O)O",
    "F/C=C/Cl",
    "c1cc[nH+]cc1",
    "[O-][N+](=O)c1ccccc1",
    "C#N",
    "[Na+].[Cl-]",
]


def test_vectorised_features_equal_torch_geometric_from_smiles():
    batch, report = featurize_smiles(SMILES)
    ref = Batch.from_data_list([from_smiles(s) for s in SMILES])
    assert report.n_skipped == 0
    assert torch.equal(batch.x, ref.x)
    assert torch.equal(batch.edge_index, ref.edge_index)
    assert torch.equal(batch.edge_attr, ref.edge_attr)
    assert torch.equal(batch.batch, ref.batch) and torch.equal(batch.ptr, ref.ptr)


def test_featurize_policy():
    batch, report = featurize_smiles(["CCO", "C((", "CC"])
    assert batch.num_graphs == 2 and report.bad[0].index == 1
    with pytest.raises(InputError, match="record 1"):
        featurize_smiles(["CCO", "C(("], on_error="raise")
    # a square-planar Pt is SP2D, which from_smiles has no feature for (it raises): skipped, never a -1 column
    platin = "Cl[Pt@SP1](Cl)([NH3])[NH3]"
    batch, report = featurize_smiles(["CC", platin])
    assert batch.num_graphs == 1 and bool((batch.x >= 0).all()) and "SP2D" in report.bad[0].reason
    with pytest.raises(InputError, match="molecule 0: hybridization SP2D"):
        featurize_mols([Chem.MolFromSmiles(platin)])


def test_nci_sample_reads_with_a_summary():
    mols, report = nci_5k()
    assert report.n_read + report.n_skipped == 4999  # the file has 4,999 lines despite its name
    assert report.n_skipped == 8 and all("valence" in b.reason for b in report.bad)
    assert all(m.num_atoms > 0 for m in mols[:50])


def test_conformers_do_not_depend_on_worker_count():
    mols = [Molecule.from_smiles(s) for s in ("CCCO", "c1ccccc1C", "OCC(N)=O")]
    one, rep1 = generate_conformers(mols, 2, seed=3, workers=1, progress=False)
    two, rep2 = generate_conformers(mols, 2, seed=3, workers=2, progress=False)
    assert rep1.n_read == rep2.n_read == 3
    for a, b in zip(one, two, strict=True):
        assert len(a) == len(b) == 2
        for ca, cb in zip(a, b, strict=True):
            assert (ca.coordinates == cb.coordinates).all()
            assert ca.to_smiles() == cb.to_smiles()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("qm9pack") is None, reason="needs genmol[qm9]")
def test_qm9_subset_is_cached_and_reproducible(tmp_path):
    from genmol.data.qm9 import qm9_subset

    mols, report = qm9_subset(50, seed=1, cache=tmp_path, progress=False)
    assert report.n_read == len(mols) and report.n_read + report.n_skipped == 50
    again, _ = qm9_subset(50, seed=1, cache=tmp_path, progress=False)
    assert [m.to_smiles() for m in mols] == [m.to_smiles() for m in again]
    assert all(m.coordinates is not None and (m.atomic_numbers == 1).any() for m in mols)


def test_conformers_print_nothing_for_a_charged_sulfur(capfd):
    """ETKDG's bounds matrix types atoms with UFF, which printed "UFFTYPER: Unrecognized charge state" for S+."""
    confs, report = generate_conformers([Molecule.from_smiles("C[S+](C)C")], 1, seed=0, workers=1, progress=False)
    assert report.n_read == 1 and len(confs[0]) == 1
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_conformer_seeds_wrap_into_etkdg_range_and_stay_reproducible():
    """ETKDG reads seed -1 as "seed from the clock", refuses other negative seeds and overflows past 2**31 - 1: a
    --seed of -1 gave molecule 0 different conformers on every run, -2 and 2**31 raised out of RDKit."""
    from gencore.errors import ConfigError

    mols = [Molecule.from_smiles(s) for s in ("CCCCO", "c1ccccc1CC")]
    runs = [generate_conformers(mols, 1, seed=s, progress=False) for s in (-1, -1, 2**31 - 1, -2, 2**31)]
    for _, report in runs:
        assert report.n_read == 2 and not report.bad
    for a, b in zip(runs[0][0], runs[1][0], strict=True):  # the same call twice
        assert (a[0].coordinates == b[0].coordinates).all()
    for a, b in zip(runs[0][0], runs[2][0], strict=True):  # -1 is 2**31 - 1 modulo 2**31
        assert (a[0].coordinates == b[0].coordinates).all()
    for workers in (0, -2):
        with pytest.raises(ConfigError, match="worker processes must be positive"):
            generate_conformers(mols, 1, workers=workers, progress=False)


def test_conformers_sit_at_mmff_minima_and_follow_the_documented_per_molecule_seed():
    """Each conformer is MMFF-relaxed (no strain left), and molecule k of a call with seed s gets the conformers it
    gets alone with seed s + k."""
    from genmol.metrics.chemistry import mmff_strain

    mols = [Molecule.from_smiles(s) for s in ("CCCO", "OCC(N)=O")]
    ens, _ = generate_conformers(mols, 2, seed=5, progress=False)
    assert all(mmff_strain(c) == pytest.approx(0.0, abs=0.05) for e in ens for c in e)
    raw, _ = generate_conformers(mols[:1], 1, seed=5, mmff=False, progress=False)
    assert mmff_strain(raw[0][0]) > 1.0
    alone, _ = generate_conformers(mols[1:], 2, seed=6, progress=False)
    for a, b in zip(ens[1], alone[0], strict=True):
        assert (a.coordinates == b.coordinates).all()
