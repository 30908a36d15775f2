"""The metric suite behind ``genmol evaluate``: one record per molecule, one summary per set.

Every metric is computed per record and a failure is a row (``error``), never an exception: an
unparsable SDF record is a row with ``parsed=False`` and RDKit's reason; an invalid molecule is a row
with ``valid=False`` and the sanitisation message. Summary fractions are over *all* records
(unparsed records count as invalid and unstable), except ``atom_stability`` (over the atoms of parsed
records) and ``uniqueness`` (over valid molecules).

A SMILES file is evaluated the same way (:func:`evaluate_smiles_file`): each line is parsed without
sanitisation, so a molecule RDKit rejects (a pentavalent carbon, an aromatic ring that does not kekulize) is
an invalid row, not a skipped one; its atoms carry the SMILES's hydrogen counts and there are no coordinates,
so the 3-D metrics (MMFF strain, bond-length and bond-angle distances) are absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from genmol.chem.io import (
    BadRecord,
    ReadReport,
    check_readable,
    molecule_file_kind,
    parse_molblock,
    parse_smiles,
    rdkit_messages,
    sdf_blocks,
    smiles_records,
)
from genmol.chem.molecule import Molecule
from genmol.metrics.chemistry import canonical_smiles, fcd, is_valid, mmff_strain, novelty, uniqueness
from genmol.metrics.geometry import bond_angles, bond_lengths, distribution_distance
from genmol.metrics.stability import STABILITY_DEFINITION, stability

ROW_KEYS = (
    "index",
    "name",
    "parsed",
    "n_atoms",
    "valid",
    "connected",
    "atom_stability",
    "mol_stable",
    "smiles",
    "mmff_strain",
    "error",
)


@dataclass
class Reference:
    """What samples are compared with: training SMILES (novelty, FCD) and 3-D molecules (geometry).

    ``smiles`` must be canonical as :func:`~genmol.metrics.chemistry.canonical_smiles` writes them (the run
    folder's ``train_smiles.txt`` is): novelty compares strings, so another spelling of a training molecule
    would count as novel.
    """

    smiles: list[str] = field(default_factory=list)
    molecules: list[Molecule] = field(default_factory=list)


@dataclass
class Evaluation:
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    report: ReadReport | None = None


def molecule_row(index: int, mol: Molecule, *, strain: bool = True) -> dict[str, Any]:
    """Every per-molecule metric of one parsed molecule (RDKit's console messages are kept out of the output)."""
    with rdkit_messages():
        return _molecule_row(index, mol, strain=strain)


def _molecule_row(index: int, mol: Molecule, *, strain: bool) -> dict[str, Any]:
    st = stability(mol)
    valid, reason = is_valid(mol)
    smi = canonical_smiles(mol) if valid else None
    row = {
        "index": index,
        "name": mol.name,
        "parsed": True,
        "n_atoms": mol.num_atoms,
        "valid": valid,
        "connected": mol.num_fragments() == 1,
        "atom_stability": st.atom_stability,
        "mol_stable": st.molecule_stable,
        "smiles": smi,
        "mmff_strain": None,
        "error": "" if valid else reason,
        "unstable_atoms": list(st.unstable),
    }
    if strain and valid and mol.coordinates is not None:
        try:
            value = mmff_strain(mol)
        except Exception as exc:
            row["error"] = f"mmff: {exc}"
        else:
            if np.isfinite(value):
                row["mmff_strain"] = value
            else:  # coincident atoms: an infinite or NaN energy would make the summary's median NaN
                row["error"] = f"mmff: the energy is not finite ({value}); are two atoms on top of each other?"
    return row


def failed_row(index: int, reason: str, name: str = "") -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "parsed": False,
        "n_atoms": 0,
        "valid": False,
        "connected": False,
        "atom_stability": None,
        "mol_stable": False,
        "smiles": None,
        "mmff_strain": None,
        "error": reason,
        "unstable_atoms": [],
    }


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarise(
    rows: list[dict[str, Any]],
    molecules: Sequence[Molecule],
    reference: Reference | None = None,
    *,
    with_fcd: bool = True,
) -> dict[str, Any]:
    """Set-level numbers from the rows (see the module docstring for denominators)."""
    n = len(rows)
    parsed = [r for r in rows if r["parsed"]]
    valid_smiles = [r["smiles"] for r in rows if r["valid"] and r["smiles"]]
    atoms = sum(r["n_atoms"] for r in parsed)
    stable_atoms = sum(round(r["atom_stability"] * r["n_atoms"]) for r in parsed if r["n_atoms"])
    strains = [r["mmff_strain"] for r in rows if r["mmff_strain"] is not None]
    out: dict[str, Any] = {
        "n_records": n,
        "n_parsed": len(parsed),
        "validity": sum(r["valid"] for r in rows) / n if n else float("nan"),
        "validity_connected": sum(r["valid"] and r["connected"] for r in rows) / n if n else float("nan"),
        "connectivity": sum(r["connected"] for r in rows) / n if n else float("nan"),
        "atom_stability": stable_atoms / atoms if atoms else float("nan"),
        "molecule_stability": sum(r["mol_stable"] for r in rows) / n if n else float("nan"),
        "uniqueness": uniqueness(valid_smiles),
        "mmff_strain_median": float(np.median(strains)) if strains else float("nan"),
        "stability_definition": STABILITY_DEFINITION,
    }
    if reference is not None and reference.smiles:
        ref_set = set(reference.smiles)
        out["novelty"] = novelty(valid_smiles, ref_set)
        if with_fcd and len(valid_smiles) < 2:  # the key is there whenever FCD was asked for, with the reason
            out["fcd"] = float("nan")
            out["fcd_error"] = f"FCD needs at least 2 valid molecules, got {len(valid_smiles)}"
        elif with_fcd:
            try:
                out["fcd"] = fcd(valid_smiles, reference.smiles)
            except Exception as exc:  # the suite reports, it does not crash
                out["fcd"] = float("nan")
                out["fcd_error"] = str(exc)
    if reference is not None and reference.molecules:
        out["bond_length_w1"] = distribution_distance(bond_lengths(molecules), bond_lengths(reference.molecules))[
            "mean"
        ]
        out["bond_angle_w1"] = distribution_distance(bond_angles(molecules), bond_angles(reference.molecules))["mean"]
    return out


def evaluate_molecules(
    molecules: Sequence[Molecule], reference: Reference | None = None, *, strain: bool = True, with_fcd: bool = True
) -> Evaluation:
    rows = [molecule_row(i, m, strain=strain) for i, m in enumerate(molecules)]
    return Evaluation(rows, summarise(rows, molecules, reference, with_fcd=with_fcd))


def _evaluate_records(
    records: Iterable[tuple[int, int, str, Any, str]],
    path: str | os.PathLike,
    reference: Reference | None,
    *,
    strain: bool,
    with_fcd: bool,
    progress: bool,
) -> Evaluation:
    """Rows and summary of ``(index, line, name, rdkit_mol or None, reason)`` records read from ``path``."""
    from tqdm.auto import tqdm

    check_readable(Path(path))  # before the progress bar starts: a missing file is one sentence
    report = ReadReport(str(path))
    rows: list[dict[str, Any]] = []
    molecules: list[Molecule] = []
    for index, line, name, mol, reason in tqdm(records, desc="evaluate", unit="mol", disable=not progress):
        if mol is not None:
            try:
                m = Molecule.from_rdkit(mol, name=name)
            except Exception as exc:
                mol, reason = None, str(exc)
        if mol is None:
            rows.append(failed_row(index, f"line {line}: {reason}", name))
            report.bad.append(BadRecord(index, line, reason, str(path)))
            continue
        report.n_read += 1
        molecules.append(m)
        rows.append(molecule_row(index, m, strain=strain))
    return Evaluation(rows, summarise(rows, molecules, reference, with_fcd=with_fcd), report)


def evaluate_sdf(
    path: str | os.PathLike,
    reference: Reference | None = None,
    *,
    strain: bool = True,
    with_fcd: bool = True,
    progress: bool = False,
) -> Evaluation:
    """Evaluate every record of an SDF; unparsable records become rows, not exceptions."""
    records = (
        (index, line, block.splitlines()[0].strip() if block.strip() else "", *parse_molblock(block, sanitize=False))
        for index, line, block in sdf_blocks(path)
    )
    return _evaluate_records(records, path, reference, strain=strain, with_fcd=with_fcd, progress=progress)


def evaluate_smiles_file(
    path: str | os.PathLike, reference: Reference | None = None, *, with_fcd: bool = True, progress: bool = False
) -> Evaluation:
    """Evaluate every line of a SMILES file (see the module docstring); unparsable lines become rows."""
    records = (
        (index, line, name, *parse_smiles(smi, sanitize=False)) for index, line, smi, name in smiles_records(path)
    )
    return _evaluate_records(records, path, reference, strain=False, with_fcd=with_fcd, progress=progress)


def evaluate_file(
    path: str | os.PathLike,
    reference: Reference | None = None,
    *,
    strain: bool = True,
    with_fcd: bool = True,
    progress: bool = False,
) -> Evaluation:
    """:func:`evaluate_sdf` or :func:`evaluate_smiles_file`, by the file's suffix (:func:`molecule_file_kind`)."""
    if molecule_file_kind(path) == "sdf":
        return evaluate_sdf(path, reference, strain=strain, with_fcd=with_fcd, progress=progress)
    return evaluate_smiles_file(path, reference, with_fcd=with_fcd, progress=progress)


def evaluate_smiles(smiles: Sequence[str], reference: Sequence[str], *, with_fcd: bool = True) -> dict[str, Any]:
    """Validity, uniqueness, novelty (and FCD) of a SMILES list against reference SMILES (2-D metrics only)."""
    from rdkit import Chem

    from genmol.chem.io import rdkit_messages

    canon = []
    with rdkit_messages():
        for s in smiles:
            mol = Chem.MolFromSmiles(s)
            canon.append(Chem.MolToSmiles(mol) if mol is not None else None)
    valid = [s for s in canon if s]
    with rdkit_messages():
        ref_canon = [Chem.MolToSmiles(m) for m in map(Chem.MolFromSmiles, reference) if m is not None]
    out = {
        "n": len(smiles),
        "validity": len(valid) / len(smiles) if smiles else float("nan"),
        "uniqueness": uniqueness(valid),
        "novelty": novelty(valid, set(ref_canon)),
    }
    if with_fcd:
        out["fcd"] = fcd(valid, ref_canon)
    return out
