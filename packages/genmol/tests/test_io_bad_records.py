"""Bad input named where it is: mmCIF columns, XYZ file lines, stale or damaged QM9 caches."""

from __future__ import annotations

import importlib.util

import pytest

from gencore.errors import InputError
from genmol.chem.io import read_xyz
from genmol.chem.protein import ProteinStructure

PDB = """\
ATOM      1  N   ALA A   1      11.104   6.134  -6.504  1.00  0.00           N
ATOM      2  CA  ALA A   1      11.639   6.071  -5.147  1.00  0.00           C
ATOM      3  C   ALA A   1      13.149   6.235  -5.213  1.00  0.00           C
ATOM      4  O   ALA A   1      13.707   6.700  -6.197  1.00  0.00           O
END
"""


def _drop_atom_site_column(text: str, column: str) -> str:
    lines = text.splitlines(keepends=True)
    start = next(k for k, line in enumerate(lines) if line.startswith("_atom_site."))
    stop = start
    while lines[stop].startswith("_atom_site."):
        stop += 1
    drop = [line.strip() for line in lines[start:stop]].index(f"_atom_site.{column}")
    rows = stop
    while rows < len(lines) and lines[rows].startswith(("ATOM", "HETATM")):
        rows += 1
    body = [" ".join(f for k, f in enumerate(line.split()) if k != drop) + "\n" for line in lines[stop:rows]]
    header = [line for k, line in enumerate(lines[start:stop]) if k != drop]
    return "".join(lines[:start] + header + body + lines[rows:])


@pytest.mark.parametrize("column", ["Cartn_x", "Cartn_z", "type_symbol", "label_asym_id", "id"])
def test_mmcif_without_a_required_atom_site_column_names_the_column(tmp_path, column):
    (tmp_path / "ok.pdb").write_text(PDB)
    ProteinStructure.read(tmp_path / "ok.pdb").to_mmcif(tmp_path / "ok.cif")
    bad = tmp_path / "bad.cif"
    bad.write_text(_drop_atom_site_column((tmp_path / "ok.cif").read_text(), column))
    with pytest.raises(InputError, match=rf"bad\.cif.*lacks the column\(s\) _atom_site\.{column};"):
        ProteinStructure.read(bad)
    assert ProteinStructure.read(tmp_path / "ok.cif").num_atoms == 4  # the intact file still reads


def test_xyz_errors_name_the_line_of_the_file_not_of_the_frame(tmp_path):
    frame = "3\nwater\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n"
    path = tmp_path / "w.xyz"
    path.write_text(frame + frame + frame.replace("H 0.96 0 0", "H 0.96 zero 0"))  # line 14 is bad
    with pytest.raises(InputError, match=r"w\.xyz \(frame at line 11\): line 14 is not 'symbol x y z'"):
        read_xyz(path)
    path.write_text(frame + frame.replace("3\n", "4\n", 1) + frame)  # frame 2 claims 4 atoms: line 11 is a count
    with pytest.raises(InputError, match=r"\(frame at line 6\): line 11 is not 'symbol x y z'"):
        read_xyz(path)


@pytest.fixture
def small_qm9(tmp_path, monkeypatch):
    from genmol.data import qm9

    if importlib.util.find_spec("qm9pack") is None:
        pytest.skip("needs genmol[qm9]")
    files = []
    for path in qm9.qm9pack_files():
        with path.open() as fh:
            head = [next(fh) for _ in range(8)]
        files.append(tmp_path / path.name)
        files[-1].write_text("".join(head))
    monkeypatch.setattr(qm9, "qm9pack_files", lambda: files)
    return qm9, files, tmp_path / "cache"


def test_qm9_subset_cache_cut_short_is_rebuilt_not_returned(small_qm9):
    qm9, _, cache = small_qm9
    mols, _ = qm9.qm9_subset(12, seed=3, cache=cache, progress=False)
    sdf = cache / "qm9" / "subset-12-seed3.sdf"
    records = sdf.read_text().split("$$$$\n")
    sdf.write_text("$$$$\n".join(records[:3]) + "$$$$\n")  # an interrupted copy: whole records, fewer of them
    again, report = qm9.qm9_subset(12, seed=3, cache=cache, progress=False)
    assert [m.name for m in again] == [m.name for m in mols] and report.n_read == len(mols) > 3
    sdf.write_text(sdf.read_text().replace("M  END", "", 1))  # a damaged record: built again, no error
    assert [m.name for m in qm9.qm9_subset(12, seed=3, cache=cache, progress=False)[0]] == [m.name for m in mols]


def test_qm9_caches_built_from_other_source_files_are_stale(small_qm9):
    qm9, files, cache = small_qm9
    before, _ = qm9.qm9_subset(None, cache=cache, progress=False)
    lines = files[0].read_text().splitlines(keepends=True)
    files[0].write_text("".join(lines[:-2]))  # qm9pack changed: two molecules fewer
    after, report = qm9.qm9_subset(None, cache=cache, progress=False)
    _, smiles = qm9.load_raw(cache)
    assert len(smiles) == 3 * 7 - 2 == report.n_read + report.n_skipped
    assert len(after) < len(before)


def test_smiles_that_rdkit_reads_but_genmol_cannot_hold_are_skipped_and_counted(tmp_path):
    from genmol.chem.io import read_smiles, smiles_to_molecules

    path = tmp_path / "q.csv"
    path.write_text("smiles,name\nCCO,a\n[C]$[C],quadruple\nc1ccccc1,b\n")
    mols, report = read_smiles(path)
    assert [m.name for m in mols] == ["a", "b"] and (report.n_read, report.n_skipped) == (2, 1)
    assert (report.bad[0].index, report.bad[0].line) == (1, 3) and "QUADRUPLE" in report.bad[0].reason
    with pytest.raises(InputError, match=r"q\.csv: record 1 \(line 3\): bond 0-1 has type QUADRUPLE"):
        read_smiles(path, on_error="raise")
    mols, report = smiles_to_molecules(["CCO", "[C]$[C]", "CC"])
    assert len(mols) == 2 and [b.index for b in report.bad] == [1]


def test_a_molecule_without_coordinates_stops_an_xyz_write_naming_it_and_writes_nothing(tmp_path):
    from genmol.chem.io import write_xyz
    from genmol.chem.molecule import Molecule

    water = Molecule.from_xyz("3\nw\nO 0 0 0\nH 0.96 0 0\nH -0.24 0.93 0\n")
    with pytest.raises(InputError, match=r"molecule 1 \(flat\) cannot be written as XYZ"):
        write_xyz(tmp_path / "out.xyz", [water, Molecule.from_smiles("CC", name="flat"), water])
    assert list(tmp_path.iterdir()) == []


def test_qm9_raw_cache_whose_tensors_and_json_disagree_is_parsed_again(small_qm9):
    import torch

    from gencore.io import load_tensors, save_tensors

    qm9, _, cache = small_qm9
    tensors, smiles = qm9.load_raw(cache)
    weights = cache / "qm9" / "raw.safetensors"
    cut = int(tensors["counts"][:-1].sum())  # the tensors of one molecule fewer beside the full JSON
    save_tensors(
        weights,
        {
            "atomic_numbers": tensors["atomic_numbers"][:cut],
            "coordinates": tensors["coordinates"][:cut],
            "counts": tensors["counts"][:-1],
            "qm9_index": tensors["qm9_index"][:-1],
        },
    )
    again, smiles_again = qm9.load_raw(cache)
    assert smiles_again == smiles and all(torch.equal(again[k], tensors[k]) for k in tensors)
    assert torch.equal(load_tensors(weights)["counts"], tensors["counts"])  # the cache was written again
