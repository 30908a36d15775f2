"""Molecules as torch-geometric graphs and as padded dense tensors.

``to_data``/``to_batch``: one ``Data`` per molecule with ``z`` (atomic numbers), ``charge``, ``pos``
(when present), ``edge_index`` in both directions and ``edge_order`` (bond orders); ``Batch`` collates
them. ``pad`` produces the dense ``[B, N_max]`` tensors the generative backbones use.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gencore.errors import InputError
from genmol.chem.molecule import AROMATIC, Molecule

BOND_CLASSES = (0.0, 1.0, 2.0, 3.0, AROMATIC)  # index 0: no bond


def to_data(mol: Molecule):
    from torch_geometric.data import Data

    ei = np.concatenate([mol.bonds.T, mol.bonds[:, ::-1].T], axis=1) if len(mol.bonds) else np.zeros((2, 0))
    orders = np.concatenate([mol.bond_orders, mol.bond_orders]) if len(mol.bonds) else np.zeros(0)
    data = Data(
        z=torch.as_tensor(mol.atomic_numbers, dtype=torch.long),
        charge=torch.as_tensor(mol.formal_charges, dtype=torch.long),
        num_hs=torch.as_tensor(mol.num_hs, dtype=torch.long),
        edge_index=torch.as_tensor(ei, dtype=torch.long),
        edge_order=torch.as_tensor(orders, dtype=torch.float32),
        num_nodes=mol.num_atoms,
    )
    if mol.coordinates is not None:
        data.pos = torch.as_tensor(mol.coordinates, dtype=torch.float32)
    return data


def to_batch(molecules: Sequence[Molecule]):
    """A torch-geometric ``Batch`` of the molecules (``batch.batch`` maps atoms to molecules)."""
    from torch_geometric.data import Batch

    return Batch.from_data_list([to_data(m) for m in molecules])


def bond_class_matrix(mol: Molecule, n_max: int) -> torch.Tensor:
    """``[n_max, n_max]`` bond classes (0 none, 1-3 single-triple, 4 aromatic)."""
    out = torch.zeros(n_max, n_max, dtype=torch.long)
    for (i, j), o in zip(mol.bonds, mol.bond_orders, strict=True):
        c = BOND_CLASSES.index(float(o))
        out[i, j] = out[j, i] = c
    return out


def pad(molecules: Sequence[Molecule], token_of, n_max: int | None = None) -> dict[str, torch.Tensor]:
    """Dense tensors ``tokens [B, N]``, ``coords [B, N, 3]``, ``mask [B, N]``, ``bonds [B, N, N]``.

    ``token_of(z, charge) -> int`` maps each atom to its vocabulary index; padding tokens are 0. ``n_max`` (default:
    the largest molecule) must hold every molecule.
    """
    if not molecules:
        raise InputError("pad needs at least one molecule, got none.")
    largest = max(m.num_atoms for m in molecules)
    n_max = largest if n_max is None else n_max
    if n_max < largest:
        raise InputError(f"n_max must be at least the largest molecule's {largest} atoms, got {n_max}.")
    b = len(molecules)
    tokens = torch.zeros(b, n_max, dtype=torch.long)
    coords = torch.zeros(b, n_max, 3)
    mask = torch.zeros(b, n_max)
    bonds = torch.zeros(b, n_max, n_max, dtype=torch.long)
    for k, m in enumerate(molecules):
        n = m.num_atoms
        tokens[k, :n] = torch.as_tensor([token_of(int(z), int(q)) for z, q in zip(m.atomic_numbers, m.formal_charges)])
        if m.coordinates is not None:
            coords[k, :n] = torch.as_tensor(m.coordinates, dtype=torch.float32)
        mask[k, :n] = 1.0
        bonds[k] = bond_class_matrix(m, n_max)
    return {"tokens": tokens, "coords": coords, "mask": mask, "bonds": bonds}
