"""PDB records read by ProteinStructure, checked against the hand-written text and biotite."""

from __future__ import annotations

import numpy as np
import pytest

from genmol.chem.protein import ProteinStructure


def _line(rec, serial, name, alt, res, num, ic, xyz, occ, b, el, charge=""):
    x, y, z = xyz
    return (
        f"{rec:<6}{serial:>5} {name:<4}{alt:1}{res:>3} A{num:>4}{ic:1}   "
        f"{x:8.3f}{y:8.3f}{z:8.3f}{occ:6.2f}{b:6.2f}          {el:>2}{charge:2}"
    )


LINES = [
    "MODEL        1",
    _line("ATOM", 1, " N", "", "ALA", 1, "", (0, 0, 0), 1, 10, "N"),
    _line("ATOM", 2, " CA", "B", "ALA", 1, "", (1, 0, 0), 0.4, 11, "C"),
    _line("ATOM", 3, " CA", "A", "ALA", 1, "", (1.1, 0, 0), 0.6, 12, "C"),
    _line("ATOM", 4, " C", "", "ALA", 1, "", (2, 0, 0), 1, 13, "C"),
    _line("HETATM", 5, "CA", "", "CA", 101, "", (5, 5, 5), 1, 20, "CA", "2+"),
    _line("ATOM", 6, " N", "", "GLY", 2, "A", (3, 0, 0), 1, 10, "N"),
    _line("HETATM", 7, " O", "", "HOH", 201, "", (9, 9, 9), 1, 30, "O"),
    "ENDMDL",
    "MODEL        2",
    _line("ATOM", 1, " N", "", "ALA", 1, "", (50, 0, 0), 1, 10, "N"),
    "ENDMDL",
    "END",
]


def test_pdb_atoms_elements_hetero_flags_and_the_first_model(tmp_path):
    """A calcium ion named CA is calcium, not carbon; HETATM records are hetero; model 2 is left out; of the
    alternative locations the first in the file is kept (biotite's altloc='first')."""
    path = tmp_path / "t.pdb"
    path.write_text("\n".join(LINES) + "\n")
    s = ProteinStructure.read(path)
    assert s.num_atoms == 6
    assert [e.upper() for e in s.elements] == ["N", "C", "C", "CA", "N", "O"]
    assert s.hetero.tolist() == [False, False, False, True, False, True]
    assert s.res_ids.tolist() == [1, 1, 1, 101, 2, 201] and s.ins_codes.tolist() == ["", "", "", "", "A", ""]
    np.testing.assert_allclose(s.coords[:, 0], [0, 1, 2, 5, 3, 9])
    np.testing.assert_allclose(s.occupancy, [1, 0.4, 1, 1, 1, 1], atol=1e-6)
    assert s.sequence("A") == "AG"
    bpdb = pytest.importorskip("biotite.structure.io.pdb")
    ref = bpdb.PDBFile.read(str(path)).get_structure(model=1, altloc="first")
    np.testing.assert_allclose(s.coords, ref.coord, atol=1e-3)
    assert [e.upper() for e in s.elements] == [e.upper() for e in ref.element]
    assert s.hetero.tolist() == ref.hetero.tolist()
