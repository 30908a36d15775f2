"""QM9 with its DFT geometries, read from the files of the ``qm9pack`` distribution.

QM9 (Ramakrishnan, Dral, Rupp & von Lilienfeld 2014, "Quantum chemistry structures and properties of
134 kilo molecules", Scientific Data, open access; qm9pack is MIT-licensed): 130,831 molecules of up to 9
heavy atoms (H, C, N, O, F) with B3LYP/6-31G(2df,p) coordinates. ``pip install genmol[qm9]`` installs
``qm9pack``, whose CSV files genmol reads directly (the package itself is never imported).

Two on-disk caches, both written atomically under ``cache_dir`` (default ``$GENMOL_CACHE`` or
``~/.cache/genmol``):

* ``qm9/raw.safetensors`` + ``qm9/raw.json``: every molecule's atomic numbers and coordinates and its
  SMILES, parsed once from the 225 MB of CSV (about 20 x faster to load afterwards);
* ``qm9/subset-<n>-seed<s>.sdf`` + ``.json``: a processed seeded subset with bonds and formal charges
  perceived from the geometry (RDKit ``DetermineBonds``, xyz2mol, for the molecule's total charge)
  and checked against QM9's SMILES; a molecule whose perceived graph disagrees is skipped and counted
  (its index and reason are in the JSON report).
"""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path

import numpy as np
import torch
from rdkit import Chem
from rdkit.Chem import rdDetermineBonds
from rdkit.Geometry import Point3D

from gencore.errors import InputError
from gencore.io import load_tensors, read_json, save_tensors, write_json
from genmol.chem.io import BadRecord, ReadReport, rdkit_messages, read_sdf, write_sdf
from genmol.chem.molecule import Molecule, atomic_number

QM9_SIZE = 130_831


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    if path is not None:
        return Path(path)
    return Path(os.environ.get("GENMOL_CACHE", Path.home() / ".cache" / "genmol"))


def qm9pack_files() -> list[Path]:
    """The three ``qm9_part*.csv`` files of an installed ``qm9pack`` (found without importing it)."""
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("QM9 needs the qm9pack files: install them with `pip install genmol[qm9]`.")
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    files = [folder / f"qm9_part{k}.csv" for k in (1, 2, 3)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise InputError(f"the qm9pack installation lacks {', '.join(missing)}; reinstall genmol[qm9].")
    return files


def _parse_csv(files: list[Path]) -> tuple[dict[str, torch.Tensor], list[str]]:
    csv.field_size_limit(1 << 30)
    z: list[int] = []
    xyz: list[list[float]] = []
    counts: list[int] = []
    smiles: list[str] = []
    for f in files:
        with f.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader)
            col = {name: k for k, name in enumerate(header)}
            for lineno, row in enumerate(reader, start=2):
                try:
                    els = [e.strip().strip("'\"") for e in row[col["Elements"]].strip("[]").split(",")]
                    flat = row[col["XYZ_Ang"]].replace("[", "").replace("]", "").replace("*^", "e").split(",")
                    coords = np.asarray([float(v) for v in flat if v.strip()]).reshape(-1, 3).tolist()
                    if len(coords) != len(els):
                        raise ValueError(f"{len(els)} elements but {len(coords)} coordinates")
                    zs = [atomic_number(e) for e in els]
                except (ValueError, KeyError, InputError) as exc:
                    raise InputError(f"{f}: line {lineno} is not a QM9 record ({exc}).") from None
                z += zs
                xyz += coords
                counts.append(len(zs))
                smiles.append(row[col["SMILES"]])
    tensors = {
        "atomic_numbers": torch.tensor(z, dtype=torch.int8),
        "coordinates": torch.tensor(xyz, dtype=torch.float32),
        "counts": torch.tensor(counts, dtype=torch.int64),
    }
    return tensors, smiles


def load_raw(cache: str | os.PathLike | None = None) -> tuple[dict[str, torch.Tensor], list[str]]:
    """All of QM9 as flat tensors (``atomic_numbers``, ``coordinates``, ``counts``) plus SMILES, cached."""
    folder = cache_dir(cache) / "qm9"
    weights, meta = folder / "raw.safetensors", folder / "raw.json"
    if weights.is_file() and meta.is_file():
        return load_tensors(weights), read_json(meta)["smiles"]
    tensors, smiles = _parse_csv(qm9pack_files())
    save_tensors(weights, tensors)
    write_json(meta, {"source": "qm9pack", "n": len(smiles), "smiles": smiles})
    return tensors, smiles


def _perceive(z: np.ndarray, xyz: np.ndarray, smiles: str, name: str) -> tuple[Molecule | None, str]:
    ref = Chem.MolFromSmiles(smiles)
    if ref is None:
        return None, f"QM9 SMILES {smiles!r} does not parse"
    rw = Chem.RWMol()
    for zi in z:
        rw.AddAtom(Chem.Atom(int(zi)))
    mol = rw.GetMol()
    conf = Chem.Conformer(len(z))
    for k, p in enumerate(xyz):
        conf.SetAtomPosition(k, Point3D(*map(float, p)))
    mol.AddConformer(conf, assignId=True)
    with rdkit_messages():
        try:
            rdDetermineBonds.DetermineBonds(mol, charge=Chem.GetFormalCharge(ref))
        except Exception as exc:
            return None, f"bond perception failed ({exc})"
    try:
        same = Chem.MolToSmiles(Chem.RemoveAllHs(mol), isomericSmiles=False) == Chem.MolToSmiles(
            ref, isomericSmiles=False
        )
    except Exception as exc:
        return None, f"perceived graph is not a valid molecule ({exc})"
    if not same:
        return None, "the graph perceived from the geometry differs from the QM9 SMILES"
    Chem.Kekulize(mol, clearAromaticFlags=False)
    out = Molecule.from_rdkit(mol, name=name)
    out.num_hs[:] = 0
    return out, ""


def qm9_subset(
    n: int | None = 2000,
    *,
    seed: int = 0,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
) -> tuple[list[Molecule], ReadReport]:
    """A seeded random subset of ``n`` QM9 molecules (None: all) with bonds and charges, cached as SDF.

    Returns the molecules (in a fixed order) and the report of those skipped.
    """
    from tqdm.auto import tqdm

    folder = cache_dir(cache) / "qm9"
    tag = f"subset-{'all' if n is None else n}-seed{seed}"
    sdf, meta = folder / f"{tag}.sdf", folder / f"{tag}.json"
    if sdf.is_file() and meta.is_file():
        mols, _ = read_sdf(sdf, on_error="raise", sanitize=False)
        info = read_json(meta)
        report = ReadReport(str(sdf), len(mols), [BadRecord(**b) for b in info["skipped"]])
        return mols, report
    raw, smiles = load_raw(cache)
    total = len(smiles)
    if n is not None and not 0 < n <= total:
        raise InputError(f"subset must lie in [1, {total}], got {n}.")
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    chosen = sorted(order[: total if n is None else n])
    offsets = np.concatenate([[0], np.cumsum(raw["counts"].numpy())])
    zs, xyz = raw["atomic_numbers"].numpy(), raw["coordinates"].numpy()
    mols, report = [], ReadReport(f"qm9 {tag}")
    for idx in tqdm(chosen, desc="qm9: bonds from geometry", unit="mol", disable=not progress):
        a, b = offsets[idx], offsets[idx + 1]
        mol, reason = _perceive(zs[a:b], xyz[a:b], smiles[idx], f"qm9_{idx + 1:06d}")
        if mol is None:
            report.bad.append(BadRecord(idx, idx + 2, reason, "qm9"))
        else:
            mols.append(mol)
            report.n_read += 1
    write_sdf(sdf, mols)
    skipped = [{"index": b.index, "line": b.line, "reason": b.reason, "source": b.source} for b in report.bad]
    write_json(meta, {"n_requested": n, "seed": seed, "n_kept": len(mols), "skipped": skipped})
    return mols, report
