"""Graph-level metrics: RDKit validity, connectivity, uniqueness, novelty, FCD, MMFF strain.

Validity is RDKit sanitisation of the molecule exactly as given (no hydrogens added or removed; a molecule
without atoms is invalid); connectivity is a single bond-graph fragment; uniqueness is the fraction of
distinct canonical SMILES among valid molecules; novelty the fraction of unique valid SMILES absent from a
reference set (the GuacaMol / MOSES definitions). Both compare SMILES without stereochemistry, as EDM,
GeoLDM and MiDi do: a 3-D molecule's SMILES carries the chirality and E/Z of its coordinates, which a model
that treats mirror images alike picks at random, so with stereo a training molecule's mirror image would
count as novel. FCD is the Frechet ChemNet Distance (Preuer et al. 2018) computed by
``fcd-torch`` with the ChemNet weights it ships. MMFF strain (kcal/mol) is the MMFF94 energy of the
given conformer minus that of the nearest local minimum (hydrogen atoms as given; hydrogens held as counts
are placed and relaxed with the heavy atoms fixed first; the conformer is optimised in place of a copy).
"""

from __future__ import annotations

from collections.abc import Sequence

from rdkit import Chem
from rdkit.Chem import AllChem

from genmol.chem.molecule import Molecule


def canonical_smiles(mol: Molecule) -> str | None:
    """Canonical SMILES of a valid molecule (hydrogens folded in), or None when it does not sanitise."""
    try:
        return mol.to_smiles()
    except Exception:
        return None


def without_stereo(smiles: str) -> str:
    """Canonical SMILES without stereochemistry (unchanged when it has none or does not parse)."""
    if not any(c in smiles for c in "@/\\"):
        return smiles
    mol = Chem.MolFromSmiles(smiles)
    return smiles if mol is None else Chem.MolToSmiles(mol, isomericSmiles=False)


def uniqueness(smiles: Sequence[str]) -> float:
    return len({without_stereo(s) for s in smiles}) / len(smiles) if smiles else float("nan")


def novelty(smiles: Sequence[str], reference: set[str]) -> float:
    unique = {without_stereo(s) for s in smiles}
    known = {without_stereo(s) for s in reference}
    return len(unique - known) / len(unique) if unique else float("nan")


def parsable(smiles: Sequence[str]) -> list[str]:
    """The SMILES RDKit can parse (silently dropping the others)."""
    from genmol.chem.io import rdkit_messages

    with rdkit_messages():
        return [s for s in smiles if s and Chem.MolFromSmiles(s) is not None]


def fcd(smiles: Sequence[str], reference: Sequence[str], *, device: str = "cpu", n_jobs: int = 1) -> float:
    """Frechet ChemNet Distance between two SMILES lists (``fcd-torch``, weights bundled).

    Unparsable SMILES are dropped from both lists first (fcd-torch raises on them).
    """
    from fcd_torch import FCD

    from genmol.chem.io import rdkit_messages

    with rdkit_messages():  # fcd-torch parses the SMILES again; RDKit warns once per hydrogen without neighbours
        return float(FCD(device=device, n_jobs=n_jobs)(parsable(smiles), parsable(reference)))


def mmff_strain(mol: Molecule, *, max_iters: int = 2000) -> float:
    """MMFF94 energy of the given conformer minus its locally relaxed energy (kcal/mol).

    Hydrogens held as counts (heavy-atom molecules) are first added as atoms and relaxed with the heavy atoms
    held fixed, so that the strain is that of the given heavy-atom geometry. Raises ``ValueError`` when the
    molecule has no coordinates or MMFF has no parameters for it.
    """
    if mol.coordinates is None:
        raise ValueError("no coordinates")
    rd = mol.to_rdkit(sanitize=True)
    counted_hs = bool(mol.num_hs.any())
    if counted_hs:
        rd = Chem.AddHs(rd, addCoords=True)
    props = AllChem.MMFFGetMoleculeProperties(rd)
    if props is None:
        raise ValueError("MMFF94 has no parameters for this molecule")
    if counted_hs:
        ff = AllChem.MMFFGetMoleculeForceField(rd, props)
        for atom in rd.GetAtoms():
            if atom.GetAtomicNum() != 1 or atom.GetIdx() < mol.num_atoms:
                ff.AddFixedPoint(atom.GetIdx())
        ff.Minimize(maxIts=max_iters)
    ff = AllChem.MMFFGetMoleculeForceField(rd, props)
    e0 = ff.CalcEnergy()
    ff.Minimize(maxIts=max_iters)
    return float(e0 - ff.CalcEnergy())


def is_valid(mol: Molecule) -> tuple[bool, str]:
    """``(True, "")`` when RDKit sanitises the molecule as given, else ``(False, reason)``; a molecule without
    atoms is invalid (RDKit would sanitise it, but its SMILES is empty: MOSES' rule)."""
    if mol.num_atoms == 0:
        return False, "the molecule has no atoms"
    try:
        Chem.SanitizeMol(mol.to_rdkit(sanitize=False))
    except Exception as exc:
        return False, str(exc)
    return True, ""
