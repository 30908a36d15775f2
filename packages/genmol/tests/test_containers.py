from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from conftest import embedded
from rdkit import Chem

from gencore.errors import InputError
from genmol.chem.batching import pad, to_batch
from genmol.chem.io import read_sdf, read_smiles, read_xyz, smiles_to_molecules, write_sdf, write_xyz
from genmol.chem.molecule import Molecule
from genmol.chem.protein import ProteinStructure

SMILES = [
    "CCO",
    "c1ccccc1",
    "c1cc[nH]c1",
    "C[N+](=O)[O-]",
    "c1cc[nH+]cc1",
    "[O-]C(=O)C[NH3+]",
    "CC(C)(C)c1ccc(O)cc1",
    "N#CC#N",
]


@pytest.mark.parametrize("smi", SMILES)
def test_smiles_round_trip_is_exact(smi):
    mol = Molecule.from_smiles(smi)
    again = Molecule.from_smiles(mol.to_smiles())
    assert Chem.CanonSmiles(mol.to_smiles()) == Chem.CanonSmiles(smi)
    assert again.to_smiles() == mol.to_smiles()
    assert mol.formal_charges.sum() == Chem.GetFormalCharge(Chem.MolFromSmiles(smi))


def test_explicit_and_implicit_hydrogens_describe_the_same_molecule():
    implicit = Molecule.from_smiles("c1cc[nH+]cc1")
    explicit = Molecule.from_smiles("c1cc[nH+]cc1", explicit_hydrogens=True)
    assert implicit.num_hs.sum() == 6 and explicit.num_hs.sum() == 0
    assert (explicit.atomic_numbers == 1).sum() == 6
    assert implicit.to_smiles() == explicit.to_smiles()


@pytest.mark.parametrize("smi", SMILES)
def test_without_hydrogens_folds_hydrogen_atoms_into_counts(smi):
    explicit = Molecule.from_smiles(smi, explicit_hydrogens=True)
    heavy = explicit.without_hydrogens()
    implicit = Molecule.from_smiles(smi)
    assert (heavy.atomic_numbers != 1).all()
    np.testing.assert_array_equal(heavy.atomic_numbers, implicit.atomic_numbers)
    np.testing.assert_array_equal(heavy.num_hs, implicit.num_hs)
    assert heavy.to_smiles() == implicit.to_smiles()


def test_without_hydrogens_keeps_heavy_coordinates_and_reindexes_bonds():
    mol = embedded("OCC#N", 0)
    heavy = mol.without_hydrogens()
    keep = mol.atomic_numbers != 1
    np.testing.assert_array_equal(heavy.coordinates, mol.coordinates[keep])
    assert heavy.num_atoms == 4 and len(heavy.bonds) == 3 and heavy.bonds.max() == 3
    assert heavy.num_hs.tolist() == [1, 2, 0, 0]  # O-H, CH2, C, N


def test_sdf_round_trip_multi_record(tmp_path, small_3d):
    small_3d[0].properties["energy"] = "-1.5"
    path = write_sdf(tmp_path / "m.sdf", small_3d)
    back, report = read_sdf(path)
    assert report.n_read == len(small_3d) and report.n_skipped == 0
    for a, b in zip(small_3d, back, strict=True):
        np.testing.assert_array_equal(a.atomic_numbers, b.atomic_numbers)
        np.testing.assert_array_equal(a.formal_charges, b.formal_charges)
        np.testing.assert_array_equal(a.bonds, b.bonds)
        np.testing.assert_array_equal(a.bond_orders, b.bond_orders)
        np.testing.assert_allclose(a.coordinates, b.coordinates, atol=1e-4)  # mol blocks keep 4 decimals
        assert a.name == b.name and a.to_smiles() == b.to_smiles()
    assert back[0].properties["energy"] == "-1.5"


def test_xyz_round_trip_and_bond_perception(tmp_path, small_3d):
    path = write_xyz(tmp_path / "m.xyz", small_3d)
    frames = read_xyz(path)
    assert len(frames) == len(small_3d)
    for a, b in zip(small_3d, frames, strict=True):
        np.testing.assert_array_equal(a.atomic_numbers, b.atomic_numbers)
        np.testing.assert_allclose(a.coordinates, b.coordinates, atol=1e-7)
    assert Molecule.from_xyz(small_3d[0].to_xyz(), bonds="orders").to_smiles() == "CCO"
    ammonium = Molecule.from_xyz(small_3d[3].to_xyz(), bonds="orders", charge=1)
    assert ammonium.to_smiles() == "C[NH3+]"
    with pytest.raises(InputError, match="cannot determine bonds"):
        Molecule.from_xyz(small_3d[3].to_xyz(), bonds="orders", charge=0, source="m.xyz")


def test_bad_sdf_records_are_skipped_with_index_and_line_or_fatal(tmp_path, small_3d):
    good = write_sdf(tmp_path / "g.sdf", small_3d[:2]).read_text()
    broken = "garbage\n  line two\n\n  2  1  0  0  0  0  0  0  0  0999 V2000\n  nonsense\nM  END\n$$$$\n"
    path = tmp_path / "mixed.sdf"
    path.write_text(good.split("$$$$\n")[0] + "$$$$\n" + broken + good.split("$$$$\n")[1] + "$$$$\n")
    mols, report = read_sdf(path, on_error="skip")
    assert len(mols) == 2 and report.n_skipped == 1
    bad = report.bad[0]
    assert bad.index == 1 and bad.line == good.split("$$$$\n")[0].count("\n") + 2 and bad.reason
    with pytest.raises(InputError, match=r"record 1 \(line \d+\)"):
        read_sdf(path, on_error="raise")


def test_invalid_valence_is_reported_when_sanitising(tmp_path):
    pentavalent = Molecule([6, 1, 1, 1, 1, 1], np.zeros(6), [[0, k] for k in range(1, 6)], np.ones(5), np.zeros(6))
    path = write_sdf(tmp_path / "bad.sdf", [pentavalent])
    mols, report = read_sdf(path, on_error="skip")
    assert not mols and "valence" in report.bad[0].reason.lower()
    mols, report = read_sdf(path, on_error="skip", sanitize=False)
    assert len(mols) == 1


def test_smiles_reader_counts_bad_lines(tmp_path):
    path = tmp_path / "s.smi"
    path.write_text("smiles name\nCCO ethanol\nC1CC bad_ring\nc1ccccc1 benzene\n")
    mols, report = read_smiles(path)
    assert [m.name for m in mols] == ["ethanol", "benzene"]
    assert report.bad[0].index == 1 and report.bad[0].line == 3
    with pytest.raises(InputError, match="line 3"):
        read_smiles(path, on_error="raise")
    _, rep = smiles_to_molecules(["CCO", "C(("])
    assert rep.n_skipped == 1 and rep.bad[0].index == 1


def test_a_csv_header_names_the_smiles_and_name_columns(tmp_path):
    """ChEMBL/MoleculeNet-style CSVs put an id or a label before the SMILES; the header says which column is which."""
    (tmp_path / "a.csv").write_text("mol_id,activity,SMILES\nm1,0.5,CCO\nm2,1.2,c1ccccc1\n")
    (tmp_path / "b.csv").write_text('"smiles","split"\nCCO,train\nCCN,test\n')  # MOSES: no name column
    (tmp_path / "c.csv").write_text('id,smiles\n"ethyl alcohol, absolute",CCO\n')  # a quoted name with a comma
    mols, report = read_smiles(tmp_path / "a.csv")
    assert [(m.to_smiles(), m.name) for m in mols] == [("CCO", "m1"), ("c1ccccc1", "m2")] and not report.bad
    assert [(m.to_smiles(), m.name) for m in read_smiles(tmp_path / "b.csv")[0]] == [("CCO", ""), ("CCN", "")]
    mols, _ = read_smiles(tmp_path / "c.csv", column=1)  # an explicit column still skips the header
    assert [(m.to_smiles(), m.name) for m in mols] == [("CCO", "ethyl alcohol, absolute")]
    (tmp_path / "d.smi").write_text("CCO ethanol\nCCN\n")  # no header: the first line is a molecule
    assert [m.name for m in read_smiles(tmp_path / "d.smi")[0]] == ["ethanol", ""]


def test_write_sdf_is_all_or_nothing(tmp_path, small_3d):
    out = tmp_path / "out.sdf"
    write_sdf(out, small_3d[:1])
    before = out.read_text()

    class Broken(Molecule):
        def to_molblock(self) -> str:
            raise RuntimeError("boom")

    bad = Broken(**{k: getattr(small_3d[1], k) for k in small_3d[1].__dataclass_fields__})
    with pytest.raises(InputError, match="molecule 1"):
        write_sdf(out, [small_3d[0], bad])
    assert out.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.sdf"]


def _peptide_pdb(tmp_path):
    from rdkit.Chem import AllChem

    mol = Chem.AddHs(Chem.MolFromSequence("ACDGK"))
    AllChem.EmbedMolecule(mol, randomSeed=1)
    path = tmp_path / "pep.pdb"
    path.write_text(Chem.MolToPDBBlock(mol))
    return path


def test_pdb_and_mmcif_round_trips(tmp_path):
    s = ProteinStructure.read(_peptide_pdb(tmp_path))
    assert s.sequence("A") == "ACDGK"
    bb = s.backbone("A")
    assert bb.shape == (5, 4, 3) and np.isfinite(bb).all()
    ca_c = np.linalg.norm(bb[:, 1] - bb[:, 2], axis=-1)
    assert np.all((ca_c > 1.4) & (ca_c < 1.65))
    for writer, name in ((s.to_mmcif, "p.cif"), (s.to_pdb, "p2.pdb")):
        back = ProteinStructure.read(writer(tmp_path / name))
        np.testing.assert_allclose(back.coords, s.coords, atol=1e-3)
        assert back.residues() == s.residues()
        assert (back.atom_names == s.atom_names).all() and (back.elements == s.elements).all()


def test_pdb_reader_agrees_with_biotite(tmp_path):
    biotite_pdb = pytest.importorskip("biotite.structure.io.pdb")
    path = _peptide_pdb(tmp_path)
    ours = ProteinStructure.read(path)
    ref = biotite_pdb.PDBFile.read(str(path)).get_structure(model=1)
    np.testing.assert_allclose(ours.coords, ref.coord, atol=1e-3)
    assert list(ours.atom_names) == list(ref.atom_name)
    assert list(ours.res_names) == list(ref.res_name)


def test_pdb_error_names_file_and_line(tmp_path):
    path = _peptide_pdb(tmp_path)
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith(("ATOM", "HETATM")))
    lines[k + 2] = lines[k + 2][:30] + "   xx.yyy" + lines[k + 2][39:]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"pep.pdb: line {k + 3}:"):
        ProteinStructure.read(path)
    # a file without coordinates (wrong file, empty export) is an error, not an empty structure
    (tmp_path / "empty.pdb").write_text("HEADER    NOTHING HERE\nEND\n")
    with pytest.raises(InputError, match=r"empty.pdb: no ATOM or HETATM records"):
        ProteinStructure.read(tmp_path / "empty.pdb")


def test_torch_geometric_batch_and_padding(small_3d):
    batch = to_batch(small_3d)
    assert batch.num_graphs == len(small_3d)
    assert batch.pos.shape == (sum(m.num_atoms for m in small_3d), 3)
    assert batch.edge_index.shape[1] == 2 * sum(len(m.bonds) for m in small_3d)
    assert torch.equal(torch.bincount(batch.batch), torch.tensor([m.num_atoms for m in small_3d]))
    vocab = {}
    dense = pad(small_3d, lambda z, q: vocab.setdefault((z, q), len(vocab)))
    assert dense["mask"].sum() == sum(m.num_atoms for m in small_3d)
    assert int((dense["bonds"] > 0).sum()) == 2 * sum(len(m.bonds) for m in small_3d)


def test_molecule_rejects_bad_fields():
    with pytest.raises(InputError, match="bond indices"):
        Molecule([6], [0], [[0, 3]], [1.0], [0])
    with pytest.raises(InputError, match="bond orders"):
        Molecule([6, 6], [0, 0], [[0, 1]], [4.0], [0, 0])
    with pytest.raises(InputError, match="cannot parse SMILES"):
        Molecule.from_smiles("C1CC")


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (([6, 6], [0, 0], [[0, 0]], [1.0], [0, 0]), "to itself"),
        (([6, 6], [0, 0], [[0, 1], [1, 0]], [1.0, 1.0], [3, 3]), "each atom pair once"),
        (([6, 200], [0, 0], [], [], [0, 0]), "atomic numbers"),
        (([6], [0], [], [], [-1]), "num_hs must be non-negative"),
        (([6, 6], [0], [], [], [0, 0]), "formal_charges must have shape"),
        (([6, 6], [0, 0], [[0, 1]], [], [0, 0]), "bond_orders must have shape"),
        (([6, 6], [0, 0], [], [], [0, 0], np.zeros((3, 3))), "coordinates must have shape"),
    ],
)
def test_molecule_rejects_inconsistent_fields_in_one_sentence(fields, match):
    """These used to be accepted (a self-bond or a doubled bond then crashed RDKit with a C++ stack trace on
    stderr, or silently doubled a valence) or failed in a numpy reshape."""
    with pytest.raises(InputError, match=match):
        Molecule(*fields)


def test_embedded_fixture_has_hydrogens_as_atoms():
    m = embedded("CO")
    assert m.num_hs.sum() == 0 and (m.atomic_numbers == 1).sum() == 4


def test_mmcif_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.cif"
    path.write_text('data_x\nloop_\n_atom_site.id\n_atom_site.Cartn_x\n1 1.0\n2 "unterminated\n')
    with pytest.raises(InputError, match=r"bad.cif:6"):
        ProteinStructure.read(path)


def _with_extras_pdb(tmp_path):
    """The peptide plus an alternative location on one CA, a selenomethionine, a water and a zinc ion."""
    lines = [line for line in _peptide_pdb(tmp_path).read_text().splitlines() if line.startswith(("ATOM", "HETATM"))]
    k = next(i for i, line in enumerate(lines) if line[12:16] == " CA ")
    first = lines[k][:16] + "A" + lines[k][17:54] + "  0.60" + lines[k][60:]
    second = lines[k][:16] + "B" + lines[k][17:30] + f"{float(lines[k][30:38]) + 0.5:8.3f}" + lines[k][38:54]
    second += "  0.40" + lines[k][60:]
    extra = [
        "HETATM  900  N   MSE B   1      10.000  10.000  10.000  1.00  0.00           N",
        "HETATM  901  CA  MSE B   1      11.400  10.000  10.000  1.00  0.00           C",
        "HETATM  902  O   HOH B 101      20.000  20.000  20.000  1.00  0.00           O",
        "HETATM  903 ZN    ZN B 102      25.000  20.000  20.000  1.00  0.00          ZN",
    ]
    path = tmp_path / "extras.pdb"
    path.write_text("\n".join([*lines[:k], first, second, *lines[k + 1 :], *extra, "END"]) + "\n")
    return path, first


def test_sequence_leaves_out_waters_and_ions_and_altlocs_keep_the_first(tmp_path):
    path, first = _with_extras_pdb(tmp_path)
    s = ProteinStructure.read(path)
    assert s.sequence("A") == "ACDGK"
    assert s.sequence("B") == "M"  # selenomethionine by its parent's letter; HOH and ZN are no residues of it
    assert [r[3] for r in s.residues("B")] == ["MSE", "HOH", "ZN"]
    ca = s.backbone("A")[0, 1]
    np.testing.assert_allclose(ca, [float(first[30:38]), float(first[38:46]), float(first[46:54])])
    assert s.num_atoms == len(ProteinStructure.read(_peptide_pdb(tmp_path)).atom_names) + 4  # one CA, not two
    back = ProteinStructure.read(s.to_pdb(tmp_path / "back.pdb"))
    assert back.num_atoms == s.num_atoms and back.sequence("A") == "ACDGK"


def test_gzipped_pdb_and_mmcif_are_read_and_checked(tmp_path):
    import gzip

    s = ProteinStructure.read(_peptide_pdb(tmp_path))
    for writer, name in ((s.to_pdb, "p.pdb"), (s.to_mmcif, "p.cif")):
        plain = writer(tmp_path / name)
        packed = tmp_path / (name + ".gz")
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        back = ProteinStructure.read(packed)
        np.testing.assert_allclose(back.coords, s.coords, atol=1e-3)
        assert back.sequence("A") == "ACDGK"
    lines = (tmp_path / "p.pdb").read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    lines[k] = lines[k][:30] + "   xx.yyy" + lines[k][39:]
    (tmp_path / "bad.pdb.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    with pytest.raises(InputError, match=rf"bad.pdb.gz: line {k + 1}:"):  # not read as 0.0
        ProteinStructure.read(tmp_path / "bad.pdb.gz")


def test_malformed_mmcif_atoms_and_empty_files_are_input_errors(tmp_path):
    s = ProteinStructure.read(_peptide_pdb(tmp_path))
    text = s.to_mmcif(tmp_path / "p.cif").read_text().splitlines()
    k = next(i for i, line in enumerate(text) if line.startswith("ATOM 3 "))
    fields = text[k].split()
    header = [line for line in text if line.startswith("_atom_site.")]
    x, num = header.index("_atom_site.Cartn_x"), header.index("_atom_site.auth_seq_id")
    for column, value, message in ((x, "abc", "non-numeric coordinates"), (num, "?", "no residue number")):
        bad = list(fields)
        bad[column] = value
        path = tmp_path / "bad.cif"
        path.write_text("\n".join([*text[:k], " ".join(bad), *text[k + 1 :]]) + "\n")
        with pytest.raises(InputError, match=rf"bad.cif: atom 3 \(.*\) has {message}"):
            ProteinStructure.read(path)
    for name in ("empty.cif", "empty.pdb", "blank.cif"):
        (tmp_path / name).write_text("" if name.startswith("empty") else "\n\n")
        with pytest.raises(InputError, match=rf"{name}: "):
            ProteinStructure.read(tmp_path / name)


def test_a_molecule_without_coordinates_stays_without_them_through_sdf(tmp_path):
    flat = Molecule.from_smiles("CCO", name="ethanol")  # no coordinates: the mol block holds zeros, not 3D
    helium = Molecule([2], [0], np.zeros((0, 2)), [], [0], np.zeros((1, 3)), "helium")  # 3-D, at the origin
    back, _ = read_sdf(write_sdf(tmp_path / "m.sdf", [flat, helium]))
    assert back[0].coordinates is None and back[0].to_smiles() == "CCO"
    np.testing.assert_array_equal(back[1].coordinates, np.zeros((1, 3)))


def test_a_2d_drawing_is_not_read_as_3d_coordinates(tmp_path):
    """A flat depiction (ChemDraw, PubChem 2-D) has no geometry: the 3-D metrics must not score it as a conformer."""
    from rdkit import Chem
    from rdkit.Chem import AllChem

    from genmol.metrics.suite import evaluate_file

    drawing = Chem.MolFromSmiles("c1ccccc1O")
    AllChem.Compute2DCoords(drawing)
    (tmp_path / "drawn.sdf").write_text(Chem.MolToMolBlock(drawing) + "$$$$\n")
    untagged = Chem.MolToMolBlock(drawing).splitlines()
    untagged[1] = "  other-tool"  # no dimension code; every z is 0
    (tmp_path / "untagged.sdf").write_text("\n".join(untagged) + "\n$$$$\n")
    for name in ("drawn.sdf", "untagged.sdf"):
        (mol,), _ = read_sdf(tmp_path / name)
        assert mol.coordinates is None and mol.to_smiles() == "Oc1ccccc1"
    result = evaluate_file(tmp_path / "drawn.sdf", None, strain=True, with_fcd=False, progress=False)
    assert result.rows[0]["mmff_strain"] is None and result.rows[0]["valid"] and not result.rows[0]["error"]


def test_gzipped_sdf_and_binary_records(tmp_path, small_3d):
    import gzip

    text = write_sdf(tmp_path / "m.sdf", small_3d[:2]).read_text()
    (tmp_path / "m.SDF.GZ").write_bytes(gzip.compress(text.encode()))
    mols, report = read_sdf(tmp_path / "m.SDF.GZ")
    assert report.n_read == 2 and [m.name for m in mols] == [m.name for m in small_3d[:2]]
    (tmp_path / "cut.sdf.gz").write_bytes(gzip.compress(text.encode())[:60])
    with pytest.raises(InputError, match=r"cut.sdf.gz: cannot decompress"):
        read_sdf(tmp_path / "cut.sdf.gz")
    # gzip bytes under a plain .sdf name: one unparsable record, no exception out of RDKit's logging
    (tmp_path / "packed.sdf").write_bytes(gzip.compress(text.encode()))
    mols, report = read_sdf(tmp_path / "packed.sdf")
    assert not mols and report.n_skipped >= 1
    (tmp_path / "m.SMI.GZ").write_bytes(gzip.compress(b"CCO ethanol\nc1ccccc1 benzene\n"))
    assert [m.name for m in read_smiles(tmp_path / "m.SMI.GZ")[0]] == ["ethanol", "benzene"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"-1\n\n", "line 1 must hold an atom count"),
        (b"\x1f\x8b\x08\x00binary\xff\xfe\n", "line 1 must hold an atom count"),
        (b"1\n\nO 0 0 nan\n", "line 3 is not 'symbol x y z'"),
        (b"1\n\nO 0 0\n", "line 3 is not 'symbol x y z'"),
    ],
)
def test_malformed_xyz_is_one_input_error(tmp_path, text, message):
    path = tmp_path / "m.xyz"
    path.write_bytes(text)
    with pytest.raises(InputError, match=message):
        read_xyz(path)


def test_a_chain_name_pdb_cannot_hold_is_an_input_error_and_mmcif_keeps_it(tmp_path):
    s = ProteinStructure.read(_peptide_pdb(tmp_path))
    s.chain_ids = np.full(s.num_atoms, "AAA")  # mmCIF files of large assemblies use such names
    out = tmp_path / "long.pdb"
    with pytest.raises(InputError, match=r"long.pdb: cannot be written as PDB .*chain name"):
        s.to_pdb(out)
    assert not out.exists()
    assert ProteinStructure.read(s.to_mmcif(tmp_path / "long.cif")).chains == ["AAA"]


def test_a_truncated_pdb_line_is_a_one_line_error(tmp_path):
    path = _peptide_pdb(tmp_path)
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM"))
    lines[k + 1] = lines[k + 1][:50]  # the z coordinate cut off
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"pep.pdb: .*line {k + 2}") as exc:
        ProteinStructure.read(path)
    assert "\n" not in str(exc.value)


def test_a_smiles_rdkit_rejects_is_one_input_error_with_the_reason_and_prints_nothing(capfd):
    with pytest.raises(InputError, match=r"cannot parse SMILES 'c1cc\[s\+\]c1' \(.*kekulize"):
        Molecule.from_smiles("c1cc[s+]c1")
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_smiles_of_a_molecule_with_a_lone_hydrogen_keeps_it_and_prints_nothing(capfd):
    """Generated molecules often hold a hydrogen with no bond; RDKit's RemoveHs keeps it and warned each time."""
    m = Molecule(
        atomic_numbers=np.array([6, 1, 1, 1, 1, 1]),
        formal_charges=np.zeros(6),
        bonds=np.array([[0, 1], [0, 2], [0, 3], [0, 4]]),
        bond_orders=np.ones(4),
        num_hs=np.zeros(6),
    )
    assert m.to_smiles() == "C.[H]"
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


@pytest.mark.parametrize(
    ("smi", "old"),
    [("c1cc[nH]c1", None), ("O=c1cccc[nH]1", None), ("S=c1[nH][nH]c(=S)s1", "S=C1N=NC(=S)S1")],
)
def test_sdf_keeps_hydrogen_counts_on_aromatic_atoms(tmp_path, smi, old):
    """A mol block has no hydrogen-count field: written with type-4 (aromatic) bonds, the H of an [nH] held as a count
    was lost, so a pyrrole read from SMILES came back as an unreadable record (RDKit cannot kekulize it), unsanitised as
    a nitrogen without its H, and a dithione as another molecule (``old``)."""
    from genmol.metrics.suite import evaluate_file

    mol = Molecule.from_smiles(smi, name="m")
    path = write_sdf(tmp_path / "m.sdf", [mol])
    (back,), report = read_sdf(path)
    assert not report.bad and back.to_smiles() == mol.to_smiles() != old
    for field in ("atomic_numbers", "formal_charges", "bonds", "bond_orders", "num_hs"):
        np.testing.assert_array_equal(getattr(back, field), getattr(mol, field))
    (raw,), _ = read_sdf(path, sanitize=False)  # the graph as written: Kekule bonds, the same hydrogens
    np.testing.assert_array_equal(raw.num_hs, mol.num_hs)
    assert raw.to_smiles() == mol.to_smiles()
    assert Chem.MolToSmiles(next(Chem.SDMolSupplier(str(path)))) == Chem.CanonSmiles(smi)  # RDKit reads it alike
    row = evaluate_file(path, None, strain=False, with_fcd=False).rows[0]
    assert row["valid"] and row["smiles"] == mol.to_smiles()


def test_sdf_with_hydrogen_atoms_keeps_aromatic_bond_orders_unsanitised(tmp_path, small_3d):
    """Molecules with hydrogen atoms (3-D data, samples) keep type-4 bonds: unsanitised reads still see 1.5."""
    (back,), _ = read_sdf(write_sdf(tmp_path / "b.sdf", [small_3d[1]]), sanitize=False)
    np.testing.assert_array_equal(back.bond_orders, small_3d[1].bond_orders)
    assert (back.bond_orders == 1.5).sum() == 6


@pytest.mark.parametrize(
    ("columns", "value", "message"),
    [
        ((22, 26), "  xx", "integer residue number in columns 23-26, got '  xx'"),
        ((22, 26), "  1A", "integer residue number in columns 23-26"),
        ((54, 60), "  x.xx", "number as occupancy in columns 55-60"),
        ((60, 66), "  y.yy", "number as B-factor in columns 61-66"),
    ],
)
def test_a_malformed_pdb_field_names_the_line(tmp_path, columns, value, message):
    """gemmi reads a malformed residue number as 0 (or the digits before the garbage) and a malformed occupancy or
    B-factor as 0, without a word: residue 'xx' became residue 0 of the chain."""
    path = _peptide_pdb(tmp_path)
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("ATOM")) + 1
    lines[k] = lines[k][: columns[0]] + value + lines[k][columns[1] :]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=rf"pep.pdb: line {k + 1}: expected .*{re.escape(message)}"):
        ProteinStructure.read(path)


def test_pdb_residue_numbers_above_9999_round_trip_as_hybrid_36(tmp_path):
    s = ProteinStructure.read(_peptide_pdb(tmp_path))
    s.res_ids = s.res_ids + 9997  # residues 9998 ... 10002
    back = ProteinStructure.read(s.to_pdb(tmp_path / "big.pdb"))
    assert [r[1] for r in back.residues("A")] == [9998, 9999, 10000, 10001, 10002]
    assert "A000" in (tmp_path / "big.pdb").read_text()


def test_sdf_data_fields_and_xyz_titles_round_trip_as_rdkit_reads_them(tmp_path, small_3d):
    mol = small_3d[0]
    mol.properties = {"energy": "-1.5", "note": "first line\nsecond line"}
    path = write_sdf(tmp_path / "p.sdf", [mol])
    (back,), _ = read_sdf(path)
    rdkit = next(Chem.SDMolSupplier(str(path), removeHs=False))
    assert back.properties == mol.properties == {k: str(v) for k, v in rdkit.GetPropsAsDict().items()}
    frame = Molecule.from_xyz(mol.to_xyz())
    assert frame.name == mol.name == "CCO"


def test_xyz_connectivity_keeps_hydrogen_atoms_without_counts(small_3d):
    """Connectivity alone gives single bonds; RDKit would fill each atom up with implicit hydrogens."""
    m = Molecule.from_xyz(small_3d[0].to_xyz(), bonds="connectivity")
    assert not m.num_hs.any() and len(m.bonds) == len(small_3d[0].bonds) and (m.bond_orders == 1).all()
    np.testing.assert_array_equal(m.adjacency_orders() > 0, small_3d[0].adjacency_orders() > 0)


def test_num_fragments_counts_connected_components_as_networkx_does():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        pairs = {tuple(sorted(p)) for p in rng.integers(0, n, (int(rng.integers(0, 2 * n)), 2)) if p[0] != p[1]}
        bonds = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
        m = Molecule(np.full(n, 6), np.zeros(n), bonds, np.ones(len(bonds)), np.zeros(n))
        g = nx.Graph(list(map(tuple, bonds)))
        g.add_nodes_from(range(n))
        assert m.num_fragments() == nx.number_connected_components(g)


def test_an_unparsable_record_names_the_reason_not_rdkits_stack_trace(tmp_path):
    """A bond to atom 0 trips an RDKit invariant whose message is a C++ stack trace, one log line per frame; the
    reason was the trace's last two lines ('37# _start in .../python; ----------')."""
    block = Chem.MolToMolBlock(Chem.MolFromSmiles("CCO")).replace("  1  2  1  0", "  1  0  1  0")
    (tmp_path / "b.sdf").write_text(block + "$$$$\n")
    _, report = read_sdf(tmp_path / "b.sdf")
    reason = report.bad[0].reason
    assert "Range Error" in reason and "#" not in reason and "----" not in reason and "/" not in reason


def test_protein_fields_survive_pdb_and_mmcif_round_trips(tmp_path):
    """Insertion codes, HETATM flags, occupancies and B-factors, as biotite reads them, come back from both writers."""
    biotite_pdb = pytest.importorskip("biotite.structure.io.pdb")
    path, _ = _with_extras_pdb(tmp_path)
    lines = path.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line[17:20] == "GLY")  # residue 4 becomes 3A
    gly = [i for i, line in enumerate(lines) if line[17:20] == "GLY" and line[22:26] == lines[k][22:26]]
    for i in gly:
        lines[i] = lines[i][:22] + "   3A" + lines[i][27:60] + " 12.50" + lines[i][66:]
    path.write_text("\n".join(lines) + "\n")
    s = ProteinStructure.read(path)
    ref = biotite_pdb.PDBFile.read(str(path)).get_structure(model=1, extra_fields=["occupancy", "b_factor"])
    order = np.lexsort((ref.coord[:, 0].round(3), ref.atom_name, ref.ins_code, ref.res_id, ref.chain_id))
    mine = np.lexsort((s.coords[:, 0].round(3), s.atom_names, s.ins_codes, s.res_ids, s.chain_ids))
    np.testing.assert_array_equal(s.ins_codes[mine], ref.ins_code[order])
    for ours, theirs in (
        (s.hetero, ref.hetero),
        (s.occupancy, ref.occupancy),
        (s.b_factors, ref.b_factor),
        (s.res_ids, ref.res_id),
    ):
        np.testing.assert_allclose(np.asarray(ours)[mine], np.asarray(theirs)[order], atol=1e-6)
    assert set(s.ins_codes) == {"", "A"} and 0 < s.hetero.sum() < s.num_atoms
    assert set(s.occupancy.round(3)) == {0.6, 1.0}
    for writer, name in ((s.to_pdb, "rt.pdb"), (s.to_mmcif, "rt.cif")):
        back = ProteinStructure.read(writer(tmp_path / name))
        for field in ("chain_ids", "res_ids", "ins_codes", "res_names", "atom_names", "elements", "hetero"):
            np.testing.assert_array_equal(getattr(back, field), getattr(s, field), err_msg=f"{name} {field}")
        for field in ("coords", "occupancy", "b_factors"):
            np.testing.assert_allclose(getattr(back, field), getattr(s, field), atol=1e-3, err_msg=f"{name} {field}")
        assert back.sequence("B") == "M"


def test_graph_tensors_hold_both_directions_charges_and_bond_classes():
    from genmol.chem.batching import bond_class_matrix, to_data

    m = Molecule.from_smiles("C#Cc1cc[nH+]cc1[O-]")
    data = to_data(m)
    pairs = {tuple(p) for p in data.edge_index.T.tolist()}
    assert pairs == {(int(i), int(j)) for i, j in m.bonds} | {(int(j), int(i)) for i, j in m.bonds}
    assert data.charge.tolist() == m.formal_charges.tolist() == [0, 0, 0, 0, 0, 1, 0, 0, -1]
    classes = bond_class_matrix(m, m.num_atoms)
    assert classes[0, 1] == classes[1, 0] == 3 and classes[3, 4] == 4 and classes[7, 8] == 1


def test_protein_atoms_keep_file_order_when_a_chains_ligands_follow_the_other_chains(tmp_path):
    """An RCSB entry lists chain A, chain B, then A's ligand and waters; gemmi merged A's parts, which moved those
    atoms ahead of chain B (biotite and the file keep them last), and the writers wrote that order back."""
    biotite_pdb = pytest.importorskip("biotite.structure.io.pdb")
    peptide = [line for line in _peptide_pdb(tmp_path).read_text().splitlines() if line.startswith("ATOM")]
    chain_b = [line[:21] + "B" + line[22:30] + f"{float(line[30:38]) + 30:8.3f}" + line[38:] for line in peptide]
    extra = [
        "HETATM 1000 ZN    ZN A 201      25.000  20.000  20.000  1.00 20.00          ZN",
        "HETATM 1001  O   HOH A 301      20.000  20.000  20.000  1.00 30.00           O",
        "HETATM 1002  O   HOH B 301      50.000  20.000  20.000  1.00 30.00           O",
    ]
    path = tmp_path / "two.pdb"
    path.write_text("\n".join([*peptide, "TER", *chain_b, "TER", *extra, "END"]) + "\n")
    s = ProteinStructure.read(path)
    ref = biotite_pdb.PDBFile.read(str(path)).get_structure(model=1)
    np.testing.assert_allclose(s.coords, ref.coord, atol=1e-3)
    assert list(s.chain_ids) == list(ref.chain_id) and list(s.res_names) == list(ref.res_name)
    assert [r[3] for r in s.residues()][-3:] == ["ZN", "HOH", "HOH"]
    assert s.sequence("A") == s.sequence("B") == "ACDGK"
    for writer, name in ((s.to_pdb, "rt.pdb"), (s.to_mmcif, "rt.cif")):
        back = ProteinStructure.read(writer(tmp_path / name))
        np.testing.assert_allclose(back.coords, s.coords, atol=1e-3, err_msg=name)
        assert back.residues() == s.residues()


def test_sdf_data_fields_are_read_as_the_strings_in_the_file(tmp_path, small_3d):
    """Fields went through RDKit's GetPropsAsDict, which turns a numeric-looking string into a number: an id "007"
    came back as "7", "1e3" as "1000.0" and a 20-digit registry number as "1.2345678901234567e+19"."""
    values = {"id": "007", "energy": "1e3", "score": "1.50", "cas": "64-17-5", "big": "12345678901234567890"}
    path = tmp_path / "fields.sdf"
    with Chem.SDWriter(str(path)) as writer:
        for m in small_3d[:2]:
            rd = m.to_rdkit()
            for key, value in values.items():
                rd.SetProp(key, value)
            writer.write(rd)
    ref = [{k: r.GetProp(k) for k in r.GetPropNames()} for r in Chem.SDMolSupplier(str(path), removeHs=False)]
    mols, _ = read_sdf(path)
    assert ref == [values, values] and [m.properties for m in mols] == ref
    back, _ = read_sdf(write_sdf(tmp_path / "again.sdf", mols))
    assert [m.properties for m in back] == ref


def test_a_record_terminator_with_trailing_spaces_still_ends_the_record(tmp_path, small_3d):
    """A '$$$$ ' line (trailing blanks, as some exporters write it) was not a terminator: the whole file was read as
    one molecule, the later records swallowed as its data fields, without a word."""
    text = write_sdf(tmp_path / "m.sdf", small_3d).read_text().replace("$$$$\n", "$$$$  \n")
    path = tmp_path / "spaces.sdf"
    path.write_text(text)
    ref = list(Chem.SDMolSupplier(str(path), removeHs=False))
    mols, report = read_sdf(path)
    assert report.n_read == len(ref) == len(small_3d) and not report.bad
    assert [m.name for m in mols] == [r.GetProp("_Name") for r in ref]
    for m, r in zip(mols, ref, strict=True):
        np.testing.assert_allclose(m.coordinates, r.GetConformer().GetPositions())
        assert m.properties == {k: r.GetProp(k) for k in r.GetPropNames()} == {}


def test_a_multi_line_name_and_an_empty_molecule_round_trip_through_sdf_and_xyz(tmp_path, small_3d):
    """A name with a line break was written into the one-line title of the mol block and shifted the counts line:
    RDKit and read_sdf then rejected the record. An empty molecule's XYZ frame ("0", empty comment) did not read
    back."""
    named = small_3d[0].with_coordinates(small_3d[0].coordinates)
    named.name = "sample 3\nstep 100"
    empty = Molecule([], [], np.zeros((0, 2)), [], [], np.zeros((0, 3)))
    path = write_sdf(tmp_path / "m.sdf", [named, empty])
    ref = list(Chem.SDMolSupplier(str(path), removeHs=False))
    mols, report = read_sdf(path)
    assert not report.bad and all(r is not None for r in ref)
    assert [m.name for m in mols] == [r.GetProp("_Name") for r in ref] == ["sample 3 step 100", ""]
    assert [m.num_atoms for m in mols] == [named.num_atoms, 0]
    frames = read_xyz(write_xyz(tmp_path / "m.xyz", [empty, named, empty]))
    assert [f.num_atoms for f in frames] == [0, named.num_atoms, 0]
    np.testing.assert_allclose(frames[1].coordinates, named.coordinates, atol=1e-7)


def test_pad_places_each_molecule_in_its_row_and_refuses_an_n_max_too_small(small_3d):
    """Every row holds its molecule's tokens, coordinates and symmetric bond classes, then zeros under a zero mask;
    an n_max below the largest molecule was a torch shape error, an empty list a bare max() error."""
    from genmol.chem.batching import BOND_CLASSES

    vocab = {}
    dense = pad(small_3d, lambda z, q: vocab.setdefault((z, q), len(vocab) + 1), n_max=20)
    for k, m in enumerate(small_3d):
        n = m.num_atoms
        assert dense["mask"][k].tolist() == [1.0] * n + [0.0] * (20 - n)
        assert dense["tokens"][k, :n].tolist() == [
            vocab[(int(z), int(q))] for z, q in zip(m.atomic_numbers, m.formal_charges, strict=True)
        ]
        np.testing.assert_allclose(dense["coords"][k, :n].numpy(), m.coordinates, atol=1e-5)
        assert not dense["tokens"][k, n:].any() and not dense["coords"][k, n:].any() and not dense["bonds"][k, n:].any()
        expected = np.zeros((20, 20), dtype=int)
        for (i, j), o in zip(m.bonds, m.bond_orders, strict=True):
            expected[i, j] = expected[j, i] = BOND_CLASSES.index(float(o))
        np.testing.assert_array_equal(dense["bonds"][k].numpy(), expected)
    largest = max(m.num_atoms for m in small_3d)
    assert pad(small_3d, lambda z, q: 1)["mask"].shape == (len(small_3d), largest)
    with pytest.raises(InputError, match=f"at least the largest molecule's {largest} atoms, got 5"):
        pad(small_3d, lambda z, q: 1, n_max=5)
    with pytest.raises(InputError, match="at least one molecule"):
        pad([], lambda z, q: 1)
