"""The ``Molecule`` container: atoms, formal charges, bonds and optional 3-D coordinates.

One typed object per molecule (in the spirit of SemlaFlow's ``molrepr``), with exact round trips to
RDKit, SMILES, MDL mol blocks (SDF records) and XYZ. Hydrogens are either atoms of the graph
(3-D data, generated molecules) or counts attached to heavy atoms (``num_hs``, SMILES input); both
survive every round trip because :meth:`Molecule.to_rdkit` pins each atom's hydrogen count instead of
letting RDKit re-derive it.

Bond orders are floats: 1, 2, 3 and 1.5 for aromatic bonds (RDKit's ``GetBondTypeAsDouble``).
Coordinates are in angstrom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rdkit import Chem, rdBase
from rdkit.Chem import rdDetermineBonds
from rdkit.Geometry import Point3D

from gencore.errors import InputError

_PT = Chem.GetPeriodicTable()
AROMATIC = 1.5
_BOND_TYPES = {
    1.0: Chem.BondType.SINGLE,
    2.0: Chem.BondType.DOUBLE,
    3.0: Chem.BondType.TRIPLE,
    AROMATIC: Chem.BondType.AROMATIC,
}


def element_symbol(z: int) -> str:
    return _PT.GetElementSymbol(int(z))


def atomic_number(symbol: str) -> int:
    """Atomic number of an element symbol (case-insensitive), or :class:`InputError`."""
    s = symbol.strip()
    s = s[:1].upper() + s[1:].lower()
    try:
        z = _PT.GetAtomicNumber(s)
    except RuntimeError:
        z = 0
    if z <= 0:
        raise InputError(f"unknown element symbol {symbol!r}.")
    return int(z)


def _field(values: Any, dtype: type, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``values`` as an array of ``shape``, or one :class:`InputError` naming the field."""
    out = np.asarray(values, dtype=dtype)
    if out.size != math.prod(shape):
        raise InputError(f"{name} must have shape {shape} (one entry per atom or bond), got {out.shape}.")
    return out.reshape(shape)


@dataclass
class Molecule:
    """A molecular graph with optional coordinates.

    Attributes:
        atomic_numbers: ``[N]`` int.
        formal_charges: ``[N]`` int.
        bonds: ``[E, 2]`` int atom index pairs, each ``i < j``.
        bond_orders: ``[E]`` float in {1, 2, 3, 1.5 (aromatic)}.
        num_hs: ``[N]`` hydrogens attached to each atom that are *not* atoms of the graph.
        coordinates: ``[N, 3]`` float (angstrom) or None.
        name: record title (SDF first line, XYZ comment).
        properties: SDF data fields.
    """

    atomic_numbers: np.ndarray
    formal_charges: np.ndarray
    bonds: np.ndarray
    bond_orders: np.ndarray
    num_hs: np.ndarray
    coordinates: np.ndarray | None = None
    name: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.atomic_numbers = np.asarray(self.atomic_numbers, dtype=np.int64).reshape(-1)
        n = self.atomic_numbers.shape[0]
        self.formal_charges = _field(self.formal_charges, np.int64, (n,), "formal_charges")
        self.bonds = np.asarray(self.bonds, dtype=np.int64).reshape(-1, 2)
        self.bond_orders = _field(self.bond_orders, np.float64, (self.bonds.shape[0],), "bond_orders")
        self.num_hs = _field(self.num_hs, np.int64, (n,), "num_hs")
        if self.coordinates is not None:
            self.coordinates = _field(self.coordinates, np.float64, (n, 3), "coordinates")
        if n and (self.atomic_numbers.min() < 0 or self.atomic_numbers.max() > 118):
            raise InputError(f"atomic numbers must lie in [0, 118], got {sorted(set(self.atomic_numbers.tolist()))}.")
        if n and self.num_hs.min() < 0:
            raise InputError(f"num_hs must be non-negative hydrogen counts, got {self.num_hs.min()}.")
        if self.bonds.size and (self.bonds.min() < 0 or self.bonds.max() >= n):
            raise InputError(f"bond indices must lie in [0, {n}), got range [{self.bonds.min()}, {self.bonds.max()}].")
        if self.bonds.size:
            pairs = np.sort(self.bonds, axis=1)
            if (pairs[:, 0] == pairs[:, 1]).any():
                raise InputError(f"a bond joins atom {int(pairs[pairs[:, 0] == pairs[:, 1]][0, 0])} to itself.")
            key = np.sort(pairs[:, 0] * n + pairs[:, 1])
            if (key[1:] == key[:-1]).any():
                raise InputError("bonds must list each atom pair once, got a pair twice.")
        bad = sorted({float(o) for o in self.bond_orders} - set(_BOND_TYPES))
        if bad:
            raise InputError(f"bond orders must be 1, 2, 3 or 1.5 (aromatic), got {bad}.")

    # basic views --------------------------------------------------------------------------
    @property
    def num_atoms(self) -> int:
        return int(self.atomic_numbers.shape[0])

    @property
    def symbols(self) -> list[str]:
        return [element_symbol(z) for z in self.atomic_numbers]

    @property
    def has_coordinates(self) -> bool:
        return self.coordinates is not None

    def __repr__(self) -> str:
        return (
            f"Molecule({self.name or 'unnamed'!r}, atoms={self.num_atoms}, bonds={len(self.bonds)}, "
            f"charge={int(self.formal_charges.sum())}, 3d={self.has_coordinates})"
        )

    # RDKit --------------------------------------------------------------------------------
    @classmethod
    def from_rdkit(cls, mol: Chem.Mol, conf_id: int = -1, name: str | None = None) -> Molecule:
        """Read atoms, charges, bonds, attached hydrogen counts and (if any) a conformer's coordinates.

        A conformer that is not 3-D is no coordinates: a 2-D drawing (a mol block tagged ``2D``, or untagged
        with every z at 0, which RDKit reads as 2-D) has no geometry for the 3-D metrics or for training, and a
        mol block without coordinates (every atom at the origin, what :meth:`to_molblock` writes for a
        molecule without them) reads the same way.
        """
        if mol is None:
            raise InputError("expected an RDKit molecule, got None (an RDKit parser failed earlier).")
        mol.UpdatePropertyCache(strict=False)
        z = [a.GetAtomicNum() for a in mol.GetAtoms()]
        q = [a.GetFormalCharge() for a in mol.GetAtoms()]
        hs = [a.GetTotalNumHs(includeNeighbors=False) for a in mol.GetAtoms()]
        pairs, orders = [], []
        for b in mol.GetBonds():
            i, j = b.GetBeginAtomIdx(), b.GetEndAtomIdx()
            order = AROMATIC if b.GetIsAromatic() or b.GetBondType() == Chem.BondType.AROMATIC else None
            if order is None:
                order = float(b.GetBondTypeAsDouble())
                if order not in _BOND_TYPES:
                    raise InputError(f"bond {i}-{j} has type {b.GetBondType()}, which genmol does not represent.")
            pairs.append((min(i, j), max(i, j)))
            orders.append(order)
        coords = None
        if mol.GetNumConformers():
            conf = mol.GetConformer(conf_id)
            coords = conf.GetPositions()
            if not conf.Is3D():  # a 2-D drawing, or a mol block's "no coordinates" (all at 0)
                coords = None
        # as the strings they are: GetPropsAsDict would turn an id "007" into "7" and "1e3" into "1000.0"
        props = {k: mol.GetProp(k) for k in mol.GetPropNames(includePrivate=False, includeComputed=False)}
        title = name if name is not None else (mol.GetProp("_Name") if mol.HasProp("_Name") else "")
        return cls(z, q, np.asarray(pairs, dtype=np.int64).reshape(-1, 2), orders, hs, coords, title, props)

    def to_rdkit(self, *, sanitize: bool = True) -> Chem.Mol:
        """An RDKit molecule with exactly these atoms, charges, bonds and hydrogen counts.

        ``sanitize=True`` raises :class:`InputError` with RDKit's reason when the graph is not a
        valid molecule (e.g. a pentavalent carbon).
        """
        rw = Chem.RWMol()
        for z, q, h in zip(self.atomic_numbers, self.formal_charges, self.num_hs, strict=True):
            atom = Chem.Atom(int(z))
            atom.SetFormalCharge(int(q))
            atom.SetNumExplicitHs(int(h))
            atom.SetNoImplicit(True)
            rw.AddAtom(atom)
        for (i, j), order in zip(self.bonds, self.bond_orders, strict=True):
            rw.AddBond(int(i), int(j), _BOND_TYPES[float(order)])
            if order == AROMATIC:
                rw.GetBondBetweenAtoms(int(i), int(j)).SetIsAromatic(True)
                rw.GetAtomWithIdx(int(i)).SetIsAromatic(True)
                rw.GetAtomWithIdx(int(j)).SetIsAromatic(True)
        mol = rw.GetMol()
        if self.coordinates is not None:
            conf = Chem.Conformer(self.num_atoms)
            for k, (x, y, zc) in enumerate(self.coordinates):
                conf.SetAtomPosition(k, Point3D(float(x), float(y), float(zc)))
            conf.Set3D(True)
            mol.AddConformer(conf, assignId=True)
        if self.name:
            mol.SetProp("_Name", self.name)
        for k, v in self.properties.items():
            mol.SetProp(k, v)
        if sanitize:
            try:
                Chem.SanitizeMol(mol)
            except Exception as exc:  # RDKit raises several private exception types
                raise InputError(f"molecule {self.name or ''!s} is not valid: {exc}".replace("  ", " ")) from None
        else:
            mol.UpdatePropertyCache(strict=False)
        return mol

    # SMILES -------------------------------------------------------------------------------
    @classmethod
    def from_smiles(cls, smiles: str, *, name: str = "", explicit_hydrogens: bool = False) -> Molecule:
        """Parse a SMILES string (hydrogens as counts, or as atoms when ``explicit_hydrogens``); a SMILES RDKit
        rejects is one :class:`InputError` with RDKit's reason, and nothing is printed."""
        from genmol.chem.io import _reason, rdkit_messages

        with rdkit_messages() as messages:
            mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            raise InputError(f"cannot parse SMILES {smiles!r} ({_reason(messages, 'RDKit returned no molecule')}).")
        if explicit_hydrogens:
            mol = Chem.AddHs(mol)
        return cls.from_rdkit(mol, name=name)

    def to_smiles(self, *, canonical: bool = True, kekule: bool = False) -> str:
        """SMILES of the graph (hydrogen atoms folded into their heavy atoms). The container holds no stereo
        flags; with coordinates, stereochemistry is assigned from the 3-D structure."""
        mol = self.to_rdkit(sanitize=True)
        if self.coordinates is not None:
            Chem.AssignStereochemistryFrom3D(mol)
        with rdBase.BlockLogs():  # a hydrogen without neighbours stays ('[H]'); RDKit would warn about each one
            mol = Chem.RemoveHs(mol, sanitize=False)
        return Chem.MolToSmiles(mol, canonical=canonical, kekuleSmiles=kekule)

    # mol blocks (SDF records) ---------------------------------------------------------------
    def to_molblock(self) -> str:
        """An MDL V2000/V3000 mol block (RDKit picks V3000 above 999 atoms); no sanitisation is applied.

        Aromatic bonds are written as bond type 4 when the block alone gives every atom its hydrogen count back.
        A mol block has no field for a hydrogen count, so a count a reader cannot infer from type-4 bonds (the H of
        an aromatic ``[nH]`` held in ``num_hs``) makes the bonds Kekule instead: read back with sanitisation the
        molecule is the same, aromatic again; without, the same graph with Kekule bond orders.
        """
        mol = self.to_rdkit(sanitize=False)
        if self.name:  # the title is one line: a line break in it would shift every line of the record
            mol.SetProp("_Name", " ".join(self.name.splitlines()))
        block = Chem.MolToMolBlock(mol, kekulize=False, includeStereo=False)
        if self.num_hs.any() and AROMATIC in self.bond_orders:
            back = Chem.MolFromMolBlock(block, sanitize=False, removeHs=False)
            if back is not None:
                back.UpdatePropertyCache(strict=False)
            if back is None or [a.GetTotalNumHs() for a in back.GetAtoms()] != self.num_hs.tolist():
                with rdBase.BlockLogs():
                    try:
                        block = Chem.MolToMolBlock(mol, kekulize=True, includeStereo=False)
                    except Exception:  # no Kekule structure (an invalid aromatic system): type 4 is all there is
                        pass
        return block

    @classmethod
    def from_molblock(cls, block: str, *, sanitize: bool = True) -> Molecule:
        mol = Chem.MolFromMolBlock(block, sanitize=sanitize, removeHs=False)
        if mol is None:
            raise InputError("cannot parse the mol block.")
        return cls.from_rdkit(mol)

    # XYZ ----------------------------------------------------------------------------------
    def to_xyz(self) -> str:
        """An XYZ block: count line, comment (the name), one ``symbol x y z`` line per atom."""
        if self.coordinates is None:
            raise InputError(f"molecule {self.name!r} has no coordinates to write as XYZ.")
        lines = [str(self.num_atoms), self.name.replace("\n", " ")]
        lines += [
            f"{s:<2s} {x:15.8f} {y:15.8f} {z:15.8f}"
            for s, (x, y, z) in zip(self.symbols, self.coordinates, strict=True)
        ]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_xyz(
        cls, text: str, *, bonds: str = "none", charge: int = 0, source: str = "<xyz>", first_line: int = 1
    ) -> Molecule:
        """Read one XYZ block. XYZ has no bonds: ``bonds="none"`` keeps the bare atoms,
        ``"connectivity"`` or ``"orders"`` infer them with RDKit's ``rdDetermineBonds`` (xyz2mol, Kim & Kim 2015)
        for a molecule of total ``charge``. Errors name lines counted from ``first_line`` (the block's count line
        in its file)."""
        lines = text.strip("\n").splitlines()
        try:
            n = int(lines[0].split()[0])
        except (IndexError, ValueError):
            n = -1
        if n < 0:
            raise InputError(f"{source}: line {first_line} must hold the atom count (0 or more), got {lines[:1]!r}.")
        if n == 0 and len(lines) == 1:  # the empty comment of an empty molecule, stripped with the trailing newline
            lines.append("")
        if len(lines) < n + 2:
            raise InputError(f"{source}: expected {n} atom lines after the comment, found {max(len(lines) - 2, 0)}.")
        z, xyz = [], []
        for k, line in enumerate(lines[2 : n + 2], start=first_line + 2):
            parts = line.split()
            try:
                z.append(atomic_number(parts[0]) if not parts[0].isdigit() else int(parts[0]))
                xyz.append([float(v.replace("*^", "e")) for v in parts[1:4]])
                if len(xyz[-1]) < 3 or not np.isfinite(xyz[-1]).all():
                    raise ValueError(f"expected three finite coordinates, got {parts[1:4]}")
            except (IndexError, ValueError, InputError) as exc:
                raise InputError(f"{source}: line {k} is not 'symbol x y z' ({exc}).") from None
        mol = cls(z, np.zeros(n), np.zeros((0, 2)), np.zeros(0), np.zeros(n), np.asarray(xyz), lines[1].strip())
        if bonds == "none":
            return mol
        if bonds not in ("connectivity", "orders"):
            raise InputError(f"bonds must be 'none', 'connectivity' or 'orders', got {bonds!r}.")
        rd = Chem.MolFromXYZBlock(mol.to_xyz())
        try:
            if bonds == "orders":
                rdDetermineBonds.DetermineBonds(rd, charge=charge)
            else:
                rdDetermineBonds.DetermineConnectivity(rd)
        except Exception as exc:
            raise InputError(f"{source}: cannot determine bonds ({exc}).") from None
        out = cls.from_rdkit(rd, name=mol.name)
        out.num_hs[:] = 0
        return out

    # graph helpers ------------------------------------------------------------------------
    def adjacency_orders(self) -> np.ndarray:
        """Dense ``[N, N]`` bond-order matrix (0 where no bond)."""
        a = np.zeros((self.num_atoms, self.num_atoms))
        if len(self.bonds):
            a[self.bonds[:, 0], self.bonds[:, 1]] = self.bond_orders
            a[self.bonds[:, 1], self.bonds[:, 0]] = self.bond_orders
        return a

    def num_fragments(self) -> int:
        """Connected components of the bond graph (an atom without bonds is its own fragment)."""
        parent = list(range(self.num_atoms))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, j in self.bonds:
            parent[find(int(i))] = find(int(j))
        return len({find(i) for i in range(self.num_atoms)})

    def without_hydrogens(self) -> Molecule:
        """The heavy-atom graph: hydrogen atoms become counts on the atom they are bonded to (``num_hs``).

        A hydrogen bonded to another hydrogen or to nothing is dropped without a count (H2, a stray proton);
        coordinates, when present, keep the heavy atoms' rows.
        """
        heavy = self.atomic_numbers != 1
        num_hs = self.num_hs.copy()
        for (i, j), order in zip(self.bonds, self.bond_orders, strict=True):
            if heavy[i] != heavy[j]:
                num_hs[i if heavy[i] else j] += int(order)
        index = np.cumsum(heavy) - 1
        keep = heavy[self.bonds[:, 0]] & heavy[self.bonds[:, 1]] if len(self.bonds) else np.zeros(0, dtype=bool)
        return Molecule(
            self.atomic_numbers[heavy],
            self.formal_charges[heavy],
            index[self.bonds[keep]],
            self.bond_orders[keep],
            num_hs[heavy],
            None if self.coordinates is None else self.coordinates[heavy],
            self.name,
            dict(self.properties),
        )

    def with_coordinates(self, coordinates: Any) -> Molecule:
        return Molecule(
            self.atomic_numbers.copy(),
            self.formal_charges.copy(),
            self.bonds.copy(),
            self.bond_orders.copy(),
            self.num_hs.copy(),
            np.asarray(coordinates, dtype=np.float64),
            self.name,
            dict(self.properties),
        )
