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


def test_conformers_not_relaxed_to_convergence_are_flagged_and_relaxation_continues(monkeypatch):
    """MMFF94 stopped after 500 iterations and a molecule without MMFF94 parameters was left unrelaxed, and
    neither was said: both are now warnings in the report. A conformer not converged in one round gets more
    rounds: at 20 iterations a round, eicosane's conformers are still strained after one round (the warning)
    and sit at a minimum after enough rounds (no warning)."""
    import genmol.data.conformers as conformers
    from genmol.metrics.chemistry import mmff_strain

    boronic = Molecule.from_smiles("OB(O)c1ccccc1")  # MMFF94 has no boron types
    ens, report = generate_conformers([boronic], 1, seed=0, progress=False)
    assert report.n_read == 1 and len(ens[0]) == 1 and not report.bad
    assert len(report.warnings) == 1 and "no MMFF94 parameters" in report.warnings[0].reason
    assert "1 kept with warnings" in report.summary() and report.as_dict()["warnings"][0]["index"] == 0

    chain = Molecule.from_smiles("C" * 20)
    monkeypatch.setattr(conformers, "MMFF_ITERS", 20)
    monkeypatch.setattr(conformers, "MMFF_ROUNDS", 1)
    ens, report = generate_conformers([chain], 2, seed=0, progress=False)
    assert [w.reason for w in report.warnings] == ["MMFF94 did not converge in 20 iterations for 2 of 2 conformers"]
    assert min(mmff_strain(c) for c in ens[0]) > 1.0
    monkeypatch.setattr(conformers, "MMFF_ROUNDS", 200)
    ens, report = generate_conformers([chain], 2, seed=0, progress=False)
    assert not report.warnings and all(mmff_strain(c) == pytest.approx(0.0, abs=0.05) for c in ens[0])


@pytest.mark.skipif(importlib.util.find_spec("qm9pack") is None, reason="needs genmol[qm9]")
def test_qm9_molecules_are_named_by_their_qm9_index_and_skips_by_file_and_line(tmp_path, monkeypatch):
    """qm9pack leaves out 3,054 of QM9's molecules, so the place of a molecule in its files is not its QM9 index (the
    first molecule of qm9_part2.csv is dsgdb9nsd_044747): molecules were named by place, qm9_043611 for it."""
    import csv

    import numpy as np

    from genmol.data import qm9

    files = []
    for path in qm9.qm9pack_files():  # the first records of each part, in qm9pack's own format
        with path.open() as fh:
            head = [next(fh) for _ in range(110)]
        files.append(tmp_path / path.name)
        files[-1].write_text("".join(head))
    monkeypatch.setattr(qm9, "qm9pack_files", lambda: files)
    rows = {}
    for f in files:
        with f.open(newline="") as fh:
            for line, row in enumerate(csv.DictReader(fh), start=2):
                rows[int(row["Index"])] = (f.name, line, row)
    assert 44747 in rows  # qm9_part2.csv starts at QM9 index 44747, after 43610 records in part 1

    mols, report = qm9.qm9_subset(None, cache=tmp_path / "cache", progress=False)
    assert report.n_read == len(mols) and report.n_read + report.n_skipped == len(rows)
    assert "qm9_044747" in [m.name for m in mols]
    for m in mols:
        _, _, row = rows[int(m.name.removeprefix("qm9_"))]
        assert row["XYZ_file"] == f"dsgdb9nsd_{m.name.removeprefix('qm9_')}.xyz"
        xyz = np.asarray([float(v) for v in row["XYZ_Ang"].replace("[", "").replace("]", "").split(",")])
        np.testing.assert_allclose(m.coordinates, xyz.reshape(-1, 3), atol=1e-4)
        assert Chem.MolToSmiles(Chem.MolFromSmiles(row["SMILES"]), isomericSmiles=False) == Chem.MolToSmiles(
            Chem.RemoveHs(m.to_rdkit()), isomericSmiles=False
        )
    assert report.bad  # bicyclo[1.1.1]pentane (QM9 index 105): bonds perceived across the cage
    for bad in report.bad:  # file and line of the record, its QM9 index in the reason
        index = int(bad.reason.split(":")[0].removeprefix("QM9 index "))
        assert (bad.source, bad.line, bad.index) == (rows[index][0], rows[index][1], rows[index][1] - 2)
    again, _ = qm9.qm9_subset(None, cache=tmp_path / "cache", progress=False)  # from the SDF cache
    assert [m.name for m in again] == [m.name for m in mols]
    for a, b in zip(mols, again, strict=True):  # the first call returned unrounded coordinates, the cache 4 decimals
        assert np.array_equal(a.coordinates, b.coordinates) and np.array_equal(a.formal_charges, b.formal_charges)


def test_conformers_of_a_3d_molecule_keep_its_stereoisomer():
    """The container holds no stereo flags, so the 3-D input's stereochemistry was dropped before embedding: all
    eight conformers of L-alanine came out as D-alanine and cis-1,4-dimethylcyclohexane as trans."""
    from conftest import embedded

    smiles = ["C[C@H](N)C(=O)O", "C[C@@H](N)C(=O)O", "C[C@H]1CC[C@@H](C)CC1", "F/C=C\\F", "F/C=C/F"]
    mols = [embedded(s, 0) for s in smiles]
    ens, report = generate_conformers(mols, 4, seed=0, progress=False)
    assert report.n_read == len(smiles)
    for smi, conformers in zip(smiles, ens, strict=True):
        assert [c.to_smiles() for c in conformers] == [Chem.CanonSmiles(smi)] * 4


@pytest.mark.parametrize(("smi", "what"), [("[C-6]", "formal charge -6"), ("[CH4+6]", "radical electron count 6")])
def test_atom_values_outside_from_smiles_lists_are_skipped_not_written_out_of_range(smi, what):
    """from_smiles raises for a value outside its lists; the vectorised path wrote -1 (charge -6) or 6 (radicals, a
    5-class column) into x, an index no embedding of the from_smiles sizes can take."""
    from torch_geometric.utils.smiles import x_map

    with pytest.raises(ValueError, match="not in list"):
        from_smiles(smi)
    batch, report = featurize_smiles(["CCO", smi])
    assert batch.num_graphs == 1 and report.n_skipped == 1 and what in report.bad[0].reason
    sizes = torch.tensor([len(v) for v in x_map.values()])
    assert bool((batch.x >= 0).all()) and bool((batch.x < sizes).all())
    with pytest.raises(InputError, match=f"molecule 0: {what}"):
        featurize_mols([Chem.MolFromSmiles(smi)])


def test_featurize_smiles_skips_what_the_smiles_readers_skip_with_the_same_reasons():
    """An empty string parsed to an empty molecule and became a 0-atom graph in the batch (read_smiles skips it), and
    a bad SMILES was reported by RDKit's last log line with its timestamp ('[15:51:49] ... Failed parsing SMILES')."""
    from genmol.chem.io import smiles_to_molecules

    smiles = ["CCO", "", "C((", "C1CC", "c1ccccc1"]
    batch, report = featurize_smiles(smiles)
    _, ref = smiles_to_molecules(smiles)
    assert batch.num_graphs == 2 and torch.equal(batch.ptr, torch.tensor([0, 3, 9]))
    assert [(b.index, b.reason) for b in report.bad] == [(b.index, b.reason) for b in ref.bad]
    assert [b.index for b in report.bad] == [1, 2, 3] and "position 3" in report.bad[1].reason
    assert not any(b.reason.startswith("[") for b in report.bad)


def test_conformers_count_molecules_that_cannot_be_prepared_or_embedded_instead_of_raising():
    """A molecule that fails sanitization (a pentavalent carbon, as an SDF read without sanitizing can hold) raised
    InputError and one with no atoms raised ValueError out of ETKDG, aborting the whole job for every molecule."""
    import numpy as np

    five = Molecule(
        atomic_numbers=[6, 1, 1, 1, 1, 1],
        formal_charges=[0] * 6,
        bonds=[[0, k] for k in range(1, 6)],
        bond_orders=[1.0] * 5,
        num_hs=[0] * 6,
    )
    empty = Molecule(atomic_numbers=[], formal_charges=[], bonds=np.zeros((0, 2)), bond_orders=[], num_hs=[])
    mols = [empty, Molecule.from_smiles("CCO"), five, Molecule.from_smiles("CCN")]
    for workers in (1, 2):
        out, report = generate_conformers(mols, 1, seed=0, workers=workers, progress=False)
        assert report.n_read == 2 and [b.index for b in report.bad] == [0, 2]
        assert "valence" in report.bad[1].reason and "no atoms" in report.bad[0].reason
        assert [len(o) for o in out] == [0, 1, 0, 1] and out[1][0].num_atoms == 9
