"""Bond-length and bond-angle distributions and their distance to a reference set.

Lengths are grouped by bond type (``"C-C:1"``, ``"C-O:2"``, ``"C-C:ar"``: element symbols sorted, then the
order 1, 2, 3 or ``ar`` for aromatic). The type is the one RDKit's sanitisation perceives (its aromaticity
model), so that a ring written with Kekule bonds (what bonds inferred from distances give) and the same ring
written aromatic (training data read from SDF or SMILES) are one type; a molecule that does not sanitise keeps
the orders it was given. Angles are grouped by the triple ``"C-C-O"`` (centre atom in the middle, ends
sorted). The distance between the samples' and the reference's distribution of one type is the
1-Wasserstein distance (angstrom or degrees; ``scipy.stats.wasserstein_distance``); the summary averages
over types weighted by the reference counts, over types present in both sets (as in the bond-length W1 of
MiDi / EQGAT-diff).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from genmol.chem.molecule import AROMATIC, Molecule, element_symbol


def _order_label(order: float) -> str:
    return "ar" if order == AROMATIC else str(int(order))


def perceived_orders(mol: Molecule) -> np.ndarray:
    """``mol.bond_orders`` with the bonds RDKit's sanitisation finds aromatic set to 1.5 and the others kekulised
    (the orders as given when the molecule does not sanitise)."""
    from genmol.chem.io import rdkit_messages

    with rdkit_messages():
        try:
            rd = mol.to_rdkit(sanitize=True)
        except Exception:
            return mol.bond_orders
    orders = np.empty(len(mol.bonds))
    for k, (i, j) in enumerate(mol.bonds):
        b = rd.GetBondBetweenAtoms(int(i), int(j))
        orders[k] = AROMATIC if b.GetIsAromatic() else b.GetBondTypeAsDouble()
    return orders


def bond_lengths(molecules: Iterable[Molecule]) -> dict[str, np.ndarray]:
    """Bond lengths per bond type (angstrom; types as in the module docstring) of the molecules with coordinates."""
    out: dict[str, list[float]] = defaultdict(list)
    for m in molecules:
        if m.coordinates is None or not len(m.bonds):
            continue
        d = np.linalg.norm(m.coordinates[m.bonds[:, 0]] - m.coordinates[m.bonds[:, 1]], axis=1)
        for (i, j), order, length in zip(m.bonds, perceived_orders(m), d, strict=True):
            a, b = sorted((element_symbol(m.atomic_numbers[i]), element_symbol(m.atomic_numbers[j])))
            out[f"{a}-{b}:{_order_label(order)}"].append(float(length))
    return {k: np.asarray(v) for k, v in out.items()}


def bond_angles(molecules: Iterable[Molecule]) -> dict[str, np.ndarray]:
    """Bond angles (degrees) per element triple, centre atom in the middle."""
    out: dict[str, list[float]] = defaultdict(list)
    for m in molecules:
        if m.coordinates is None or len(m.bonds) < 2:
            continue
        nbrs: dict[int, list[int]] = defaultdict(list)
        for i, j in m.bonds:
            nbrs[int(i)].append(int(j))
            nbrs[int(j)].append(int(i))
        x = m.coordinates
        for c, ns in nbrs.items():
            for a_i in range(len(ns)):
                for b_i in range(a_i + 1, len(ns)):
                    a, b = ns[a_i], ns[b_i]
                    u, v = x[a] - x[c], x[b] - x[c]
                    nu, nv = np.linalg.norm(u), np.linalg.norm(v)
                    if nu < 1e-8 or nv < 1e-8:
                        continue
                    ang = np.degrees(np.arccos(np.clip(u @ v / (nu * nv), -1.0, 1.0)))
                    ea, eb = sorted((element_symbol(m.atomic_numbers[a]), element_symbol(m.atomic_numbers[b])))
                    out[f"{ea}-{element_symbol(m.atomic_numbers[c])}-{eb}"].append(float(ang))
    return {k: np.asarray(v) for k, v in out.items()}


def distribution_distance(sample: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    """Per-type W1 and their reference-count-weighted mean (``"mean"``); NaN when no type is shared."""
    from scipy.stats import wasserstein_distance

    per, weights = {}, {}
    for key, ref in reference.items():
        if key in sample and len(sample[key]) and len(ref):
            per[key] = float(wasserstein_distance(sample[key], ref))
            weights[key] = len(ref)
    total = sum(weights.values())
    mean = sum(per[k] * weights[k] for k in per) / total if total else float("nan")
    return {"mean": mean} | dict(sorted(per.items()))
