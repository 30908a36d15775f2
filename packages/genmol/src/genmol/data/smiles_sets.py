"""SMILES sets that ship with installed packages (no download at run time).

* RDKit's NCI sample: ``RDConfig.RDDataDir/NCI/first_5K.smi`` (4,999 SMILES despite the name from the NCI open
  database; public domain, distributed with RDKit under BSD-3).
* MOSES (Polykovskiy et al. 2020; MIT): the ``train.csv.gz`` / ``test.csv.gz`` files of the
  ``molsets`` package (install it with ``pip install --no-deps molsets``; its pinned dependencies are
  not needed to read the files), or any SMILES/CSV file of your own through :func:`read_smiles`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from gencore.errors import InputError
from genmol.chem.io import ReadReport, read_smiles
from genmol.chem.molecule import Molecule


def nci_path() -> Path:
    from rdkit import RDConfig

    return Path(RDConfig.RDDataDir) / "NCI" / "first_5K.smi"


def nci_5k(*, on_error: str = "skip") -> tuple[list[Molecule], ReadReport]:
    """RDKit's bundled 5,000 NCI molecules (SMILES in the first column, an id in the second)."""
    path = nci_path()
    if not path.is_file():
        raise InputError(f"RDKit's NCI sample is missing at {path}; reinstall rdkit.")
    return read_smiles(path, on_error=on_error)


def moses_path(split: str = "train") -> Path:
    """The MOSES ``split`` file of an installed ``molsets`` package."""
    spec = importlib.util.find_spec("moses")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("MOSES needs the molsets files: `pip install --no-deps molsets`.")
    path = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "data" / f"{split}.csv.gz"
    if not path.is_file():
        raise InputError(f"no MOSES {split!r} split at {path}.")
    return path
