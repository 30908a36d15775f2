"""QM9 with its DFT geometries, read from the files of the ``qm9pack`` distribution.

QM9 (Ramakrishnan, Dral, Rupp & von Lilienfeld 2014, "Quantum chemistry structures and properties of
134 kilo molecules", Scientific Data, open access; qm9pack is MIT-licensed): 130,831 molecules of up to 9
heavy atoms (H, C, N, O, F) with B3LYP/6-31G(2df,p) coordinates. ``pip install genmol[qm9]`` installs
``qm9pack``, whose CSV files genmol reads directly (the package itself is never imported).

Two on-disk caches, both written atomically under ``cache_dir`` (default ``$GENMOL_CACHE`` or
``~/.cache/genmol``):

* ``qm9/raw.safetensors`` + ``qm9/raw.json``: every molecule's atomic numbers, coordinates, QM9 index and
  SMILES, parsed once from the 225 MB of CSV (about 20 x faster to load afterwards);
* ``qm9/subset-<n>-seed<s>.sdf`` + ``.json``: a processed seeded subset with bonds and formal charges
  perceived from the geometry (RDKit ``DetermineBonds``, xyz2mol, for the molecule's total charge)
  and checked against QM9's SMILES; a molecule whose perceived graph disagrees is skipped and counted
  (its index and reason are in the JSON report).

Both JSON files record the name and size of each qm9pack CSV they were built from: when qm9pack is installed
and its files differ (another release), the caches are stale and built again. A subset SDF
that does not read back whole (a damaged record, or fewer records than its JSON says were kept) is built
again too, never returned as it is.

qm9pack holds the 130,831 molecules of QM9's 133,885 that passed its consistency check, so a molecule's place in
the files is not its QM9 index: molecules are named by QM9's own ``Index`` (``qm9_000105`` is
``dsgdb9nsd_000105.xyz``) and a skipped one is reported with its CSV file and line.
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
CACHE_FORMAT = 2  # 2: molecules named by QM9 index (1 named them by their place in the files)


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


def _parse_csv(files: list[Path]) -> tuple[dict[str, torch.Tensor], list[str], list[list]]:
    """Flat tensors (``atomic_numbers``, ``coordinates``, ``counts``, ``qm9_index``), the SMILES and ``[file name,
    number of records]`` of each file (one record per line after the header)."""
    csv.field_size_limit(1 << 30)
    z: list[int] = []
    xyz: list[list[float]] = []
    counts: list[int] = []
    index: list[int] = []
    smiles: list[str] = []
    parts: list[list] = []
    for f in files:
        n_before = len(smiles)
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
                    qm9_index = int(row[col["Index"]])
                except (ValueError, KeyError, IndexError, InputError) as exc:
                    raise InputError(f"{f}: line {lineno} is not a QM9 record ({exc}).") from None
                z += zs
                xyz += coords
                counts.append(len(zs))
                index.append(qm9_index)
                smiles.append(row[col["SMILES"]])
        parts.append([f.name, len(smiles) - n_before])
    tensors = {
        "atomic_numbers": torch.tensor(z, dtype=torch.int8),
        "coordinates": torch.tensor(xyz, dtype=torch.float32),
        "counts": torch.tensor(counts, dtype=torch.int64),
        "qm9_index": torch.tensor(index, dtype=torch.int64),
    }
    return tensors, smiles, parts


def _source_files() -> list[Path] | None:
    """The qm9pack files when installed, else None (a cache is then used as it is)."""
    try:
        return qm9pack_files()
    except InputError:
        return None


def _fingerprint(files: list[Path]) -> list[list]:
    """``[name, size]`` of each source file: another qm9pack release makes the caches stale. Not the modification
    time: every virtualenv installs its own copy of the same files, and one cache folder may serve several."""
    return [[f.name, f.stat().st_size] for f in files]


def _raw_meta(folder: Path, files: list[Path] | None) -> dict | None:
    """The raw cache's JSON when it and its tensors exist in the current format and were parsed from ``files``
    (when known), else None (parse again)."""
    weights, meta = folder / "raw.safetensors", folder / "raw.json"
    if not (weights.is_file() and meta.is_file()):
        return None
    info = read_json(meta)
    if info.get("format") != CACHE_FORMAT:
        return None
    if files is not None and info.get("source_files") != _fingerprint(files):
        return None
    return info


def load_raw(cache: str | os.PathLike | None = None) -> tuple[dict[str, torch.Tensor], list[str]]:
    """All of QM9 as flat tensors (``atomic_numbers``, ``coordinates``, ``counts``, ``qm9_index``) plus SMILES,
    cached."""
    tensors, smiles, _ = _load_raw(cache)
    return tensors, smiles


def _load_raw(cache: str | os.PathLike | None) -> tuple[dict[str, torch.Tensor], list[str], list[list]]:
    folder = cache_dir(cache) / "qm9"
    weights, meta = folder / "raw.safetensors", folder / "raw.json"
    files = _source_files()
    info = _raw_meta(folder, files)
    if info is not None:
        tensors = load_tensors(weights)  # a damaged file is a StorageError naming it
        counts = tensors.get("counts")
        if counts is not None and counts.numel() == len(info["smiles"]) == sum(size for _, size in info["files"]):
            if int(counts.sum()) == tensors["atomic_numbers"].numel() == tensors["coordinates"].shape[0]:
                return tensors, info["smiles"], info["files"]
        # tensors and JSON of different parses (one of them replaced): parse again
    files = files if files is not None else qm9pack_files()
    tensors, smiles, parts = _parse_csv(files)
    save_tensors(weights, tensors)
    write_json(
        meta,
        {
            "source": "qm9pack",
            "format": CACHE_FORMAT,
            "source_files": _fingerprint(files),
            "n": len(smiles),
            "files": parts,
            "smiles": smiles,
        },
    )
    return tensors, smiles, parts


def _where(position: int, parts: list[list]) -> tuple[str, int]:
    """``(CSV file name, line)`` of the record at ``position`` of the concatenated files."""
    for name, size in parts:
        if position < size:
            return name, position + 2  # line 1 is the header
        position -= size
    raise IndexError(position)


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
    info = read_json(meta) if sdf.is_file() and meta.is_file() else {}
    files = _source_files()
    fresh = info.get("format") == CACHE_FORMAT  # an older cache named its molecules by their place in the files
    if fresh and files is not None and info.get("source_files") != _fingerprint(files):
        fresh = False  # built from other qm9pack files
    if fresh:
        try:
            mols, _ = read_sdf(sdf, on_error="raise", sanitize=False)
        except InputError:  # a damaged cache is built again
            mols = None
        if mols is not None and len(mols) == info.get("n_kept"):  # a truncated SDF holds fewer records
            report = ReadReport(str(sdf), len(mols), [BadRecord(**b) for b in info["skipped"]])
            return mols, report
    raw, smiles, parts = _load_raw(cache)
    total = len(smiles)
    if n is not None and not 0 < n <= total:
        raise InputError(f"subset must lie in [1, {total}], got {n}.")
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed)).tolist()
    chosen = sorted(order[: total if n is None else n])
    offsets = np.concatenate([[0], np.cumsum(raw["counts"].numpy())])
    zs, xyz, qm9_index = raw["atomic_numbers"].numpy(), raw["coordinates"].numpy(), raw["qm9_index"].numpy()
    mols, report = [], ReadReport(f"qm9 {tag}")
    for idx in tqdm(chosen, desc="qm9: bonds from geometry", unit="mol", disable=not progress):
        a, b = offsets[idx], offsets[idx + 1]
        mol, reason = _perceive(zs[a:b], xyz[a:b], smiles[idx], f"qm9_{int(qm9_index[idx]):06d}")
        if mol is None:
            file, line = _where(idx, parts)
            report.bad.append(BadRecord(line - 2, line, f"QM9 index {int(qm9_index[idx])}: {reason}", file))
        else:
            mols.append(mol)
            report.n_read += 1
    write_sdf(sdf, mols)
    mols, _ = read_sdf(sdf, on_error="raise", sanitize=False)  # what a cached call returns (coordinates to 1e-4 A)
    skipped = [{"index": b.index, "line": b.line, "reason": b.reason, "source": b.source} for b in report.bad]
    meta_info = {"format": CACHE_FORMAT, "n_requested": n, "seed": seed, "n_kept": len(mols), "skipped": skipped}
    if files is not None:
        meta_info["source_files"] = _fingerprint(files)
    write_json(meta, meta_info)
    return mols, report
