"""``ProteinStructure``: chains, residues and atoms of a macromolecular model, from/to PDB and mmCIF.

Reading and writing go through gemmi (Wojdyr 2022, "GEMMI: A library for structural biology", JOSS;
MPL-2.0). Only the first model of a file is kept, and of atoms with alternative locations only the
first location (biotite's default, ``altloc="first"``). Files may be gzipped (``.pdb.gz``, ``.cif.gz``).
The container is a flat atom table (one row per atom, like biotite's ``AtomArray``) with per-atom
chain, residue and atom names; ``backbone()`` gathers N, CA, C, O per residue. A malformed coordinate
line is reported with file and line number (PDB) or with the atom's serial number (mmCIF).
"""

from __future__ import annotations

import gzip
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gencore.errors import InputError, StorageError
from gencore.io import atomic_path

BACKBONE_ATOMS = ("N", "CA", "C", "O")


@dataclass
class ProteinStructure:
    """Atom table of one model. Arrays have one entry per atom (``coords: [A, 3]`` in angstrom)."""

    chain_ids: np.ndarray  # str
    res_ids: np.ndarray  # int, author residue number
    ins_codes: np.ndarray  # str ('' when none)
    res_names: np.ndarray  # str, e.g. 'ALA'
    atom_names: np.ndarray  # str, e.g. 'CA'
    elements: np.ndarray  # str, e.g. 'C'
    coords: np.ndarray  # float [A, 3]
    occupancy: np.ndarray  # float
    b_factors: np.ndarray  # float
    hetero: np.ndarray  # bool (HETATM)
    name: str = ""

    @property
    def num_atoms(self) -> int:
        return int(self.coords.shape[0])

    @property
    def chains(self) -> list[str]:
        return list(dict.fromkeys(self.chain_ids.tolist()))

    def residues(self, chain: str | None = None) -> list[tuple[str, int, str, str]]:
        """``(chain, number, insertion code, name)`` of each residue in file order."""
        keys = zip(self.chain_ids, self.res_ids, self.ins_codes, self.res_names, strict=True)
        out = list(dict.fromkeys((str(c), int(r), str(i), str(n)) for c, r, i, n in keys))
        return [k for k in out if chain is None or k[0] == chain]

    def sequence(self, chain: str) -> str:
        """One-letter sequence of the polymer residues of ``chain``: amino acids and nucleotides (a modified
        one by its parent's letter, 'X' for an unknown residue of an ATOM record); waters, ions and ligands
        are left out."""
        import gemmi

        hetero = {}
        keys = zip(self.chain_ids, self.res_ids, self.ins_codes, self.res_names, self.hetero, strict=True)
        for c, r, i, n, h in keys:
            hetero.setdefault((str(c), int(r), str(i), str(n)), bool(h))
        letters = []
        for key in self.residues(chain):
            info = gemmi.find_tabulated_residue(key[3])
            if info is not None and (info.is_amino_acid() or info.is_nucleic_acid()):
                letters.append(info.one_letter_code.upper() if info.one_letter_code.strip() else "X")
            elif not hetero[key] and (info is None or not info.is_water()):
                letters.append("X")
        return "".join(letters)

    def backbone(self, chain: str | None = None) -> np.ndarray:
        """``[R, 4, 3]`` N, CA, C, O coordinates per residue (NaN where an atom is missing)."""
        res = self.residues(chain)
        index = {k: r for r, k in enumerate(res)}
        out = np.full((len(res), 4, 3), np.nan)
        for k in range(self.num_atoms):
            key = (str(self.chain_ids[k]), int(self.res_ids[k]), str(self.ins_codes[k]), str(self.res_names[k]))
            if key in index and self.atom_names[k] in BACKBONE_ATOMS:
                out[index[key], BACKBONE_ATOMS.index(self.atom_names[k])] = self.coords[k]
        return out

    # gemmi --------------------------------------------------------------------------------
    @classmethod
    def _from_gemmi(cls, st, name: str) -> ProteinStructure:
        if len(st) == 0:
            raise InputError(f"{name}: the file holds no model.")
        st.remove_alternative_conformations()  # the first of each atom's alternative locations
        cols: dict[str, list] = {k: [] for k in ("c", "r", "i", "n", "a", "e", "x", "o", "b", "h")}
        for chain in st[0]:
            for res in chain:
                for atom in res:
                    if res.seqid.num is None or not np.isfinite(atom.pos.tolist()).all():
                        where = f"atom {atom.serial} ({atom.name} of residue {res.name} in chain {chain.name})"
                        if res.seqid.num is None:
                            raise InputError(f"{name}: {where} has no residue number; expected an integer.")
                        raise InputError(f"{name}: {where} has non-numeric coordinates; expected x, y, z numbers.")
                    cols["c"].append(chain.name)
                    cols["r"].append(res.seqid.num)
                    cols["i"].append(res.seqid.icode.strip())
                    cols["n"].append(res.name)
                    cols["a"].append(atom.name)
                    cols["e"].append(atom.element.name)
                    cols["x"].append(atom.pos.tolist())
                    cols["o"].append(atom.occ)
                    cols["b"].append(atom.b_iso)
                    cols["h"].append(res.het_flag == "H")
        return cls(
            np.asarray(cols["c"], dtype=str),
            np.asarray(cols["r"], dtype=np.int64),
            np.asarray(cols["i"], dtype=str),
            np.asarray(cols["n"], dtype=str),
            np.asarray(cols["a"], dtype=str),
            np.asarray(cols["e"], dtype=str),
            np.asarray(cols["x"], dtype=np.float64).reshape(-1, 3),
            np.asarray(cols["o"], dtype=np.float64),
            np.asarray(cols["b"], dtype=np.float64),
            np.asarray(cols["h"], dtype=bool),
            name=st.name,
        )

    def _to_gemmi(self):
        import gemmi

        st = gemmi.Structure()
        st.name = self.name or "genmol"
        model = gemmi.Model(1) if hasattr(gemmi.Model, "__init__") else gemmi.Model("1")
        chains: list[gemmi.Chain] = []  # one part per run of a chain's atoms: the table's atom order is kept
        last_key = None
        residue = None
        for k in range(self.num_atoms):
            c = str(self.chain_ids[k])
            key = (c, int(self.res_ids[k]), str(self.ins_codes[k]), str(self.res_names[k]))
            if key != last_key:
                if residue is not None:
                    chains[-1].add_residue(residue)
                if last_key is None or c != last_key[0]:
                    chains.append(gemmi.Chain(c))
                residue = gemmi.Residue()
                residue.name = key[3]
                residue.seqid = gemmi.SeqId(key[1], key[2] or " ")
                residue.het_flag = "H" if self.hetero[k] else "A"
                last_key = key
            atom = gemmi.Atom()
            atom.name = str(self.atom_names[k])
            atom.element = gemmi.Element(str(self.elements[k]))
            atom.pos = gemmi.Position(*map(float, self.coords[k]))
            atom.occ = float(self.occupancy[k])
            atom.b_iso = float(self.b_factors[k])
            residue.add_atom(atom)
        if residue is not None:
            chains[-1].add_residue(residue)
        for ch in chains:
            model.add_chain(ch)
        st.add_model(model)
        st.setup_entities()
        return st

    @classmethod
    def read(cls, path: str | os.PathLike) -> ProteinStructure:
        """Read a PDB or mmCIF file (format from the content); errors name the file and line."""
        import gemmi

        p = Path(path)
        if not p.is_file():
            raise StorageError(f"{str(p)!r} does not exist or is not a file.")
        gzipped = p.suffix.lower() == ".gz"
        try:
            raw = gzip.decompress(p.read_bytes()) if gzipped else p.read_bytes()
        except (OSError, EOFError) as exc:
            raise InputError(f"{p}: cannot decompress the gzipped file ({exc}).") from None
        text = raw.decode("utf-8", errors="replace")
        if not text.strip():
            raise InputError(f"{p}: the file is empty; expected a PDB or mmCIF structure.")
        suffix = Path(p.stem).suffix if gzipped else p.suffix
        is_cif = suffix.lower() in (".cif", ".mmcif") or text.lstrip().startswith("data_")
        if not is_cif:
            _check_pdb_lines(text, str(p))
        try:
            # merge_chain_parts=False: a chain's ligands and waters after the other chains stay there (file order)
            fmt = gemmi.CoorFormat.Mmcif if is_cif else gemmi.CoorFormat.Pdb
            st = gemmi.read_structure(str(p), merge_chain_parts=False, format=fmt)
        except (RuntimeError, ValueError, IndexError) as exc:  # gemmi's message may quote the line on a line of its own
            raise InputError(f"{p}: {' '.join(str(exc).split())}") from None
        if is_cif and len(st) == 0:
            _check_atom_site_columns(p)
        structure = cls._from_gemmi(st, str(p))
        if structure.num_atoms == 0:
            raise InputError(f"{p}: no ATOM or HETATM records; expected a PDB or mmCIF structure.")
        return structure

    from_pdb = read
    from_mmcif = read

    def to_pdb(self, path: str | os.PathLike) -> Path:
        try:
            text = self._to_gemmi().make_pdb_string()
        except RuntimeError as exc:  # what PDB's fixed columns cannot hold, e.g. a chain name of 3+ characters
            raise InputError(f"{path}: cannot be written as PDB ({exc}); write mmCIF with to_mmcif.") from None
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return Path(path)

    def to_mmcif(self, path: str | os.PathLike) -> Path:
        doc = self._to_gemmi().make_mmcif_document()
        with atomic_path(path) as tmp:
            tmp.write_text(doc.as_string(), encoding="utf-8")
        return Path(path)


# the _atom_site columns without which gemmi reads no model at all (it says nothing of the missing column)
ATOM_SITE_REQUIRED = ("id", "type_symbol", "label_alt_id", "label_asym_id", "Cartn_x", "Cartn_y", "Cartn_z")


def _check_atom_site_columns(path: Path) -> None:
    """One :class:`InputError` sentence naming the required ``_atom_site`` columns an mmCIF file lacks, if any."""
    import gemmi

    try:
        doc = gemmi.cif.read(str(path))
    except (RuntimeError, ValueError):
        return
    for block in doc:
        table = block.find_mmcif_category("_atom_site.")
        if len(table) == 0:
            continue
        tags = {t.removeprefix("_atom_site.") for t in table.tags}
        missing = [c for c in ATOM_SITE_REQUIRED if c not in tags]
        if missing:
            raise InputError(
                f"{path}: the _atom_site loop of block {block.name!r} lacks the column(s) "
                f"{', '.join('_atom_site.' + c for c in missing)}; expected all of {', '.join(ATOM_SITE_REQUIRED)}."
            )


_RESIDUE_NUMBER = re.compile(r"\s*-?\d+|[A-Za-z][0-9A-Za-z]{3}")  # an integer, or hybrid-36 above 9999


def _check_pdb_lines(text: str, source: str) -> None:
    """ATOM/HETATM records need numeric coordinates in columns 31-54 and an integer residue number in columns 23-26
    (PDB format v3.3; hybrid-36 above 9999); occupancy (55-60) and B-factor (61-66) are numbers when given. gemmi
    reads a malformed field as 0 (or the number before the garbage) without a word."""
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith(("ATOM  ", "HETATM")):
            try:
                float(line[30:38])
                float(line[38:46])
                float(line[46:54])
            except ValueError:
                raise InputError(
                    f"{source}: line {lineno}: expected x, y, z numbers in columns 31-54, got {line[30:54]!r}."
                ) from None
            if not _RESIDUE_NUMBER.fullmatch(line[22:26]):
                raise InputError(
                    f"{source}: line {lineno}: expected an integer residue number in columns 23-26, "
                    f"got {line[22:26]!r}."
                )
            for name, cols in (("occupancy", (54, 60)), ("B-factor", (60, 66))):
                field = line[cols[0] : cols[1]]
                try:
                    float(field) if field.strip() else None
                except ValueError:
                    raise InputError(
                        f"{source}: line {lineno}: expected a number as {name} in columns {cols[0] + 1}-{cols[1]}, "
                        f"got {field!r}."
                    ) from None
