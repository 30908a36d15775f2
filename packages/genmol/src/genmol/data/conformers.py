"""Conformer ensembles with RDKit: ETKDG embedding then MMFF94 relaxation, in parallel workers.

Riniker & Landrum 2015 (ETKDG; version 3 of Wang et al. 2020) and Halgren 1996 (MMFF94). No GEOM
subset ships offline, so these ensembles stand in for GEOM-style reference conformers. Each molecule
is embedded with its own seed (``seed + index`` modulo 2**31: ETKDG takes a non-negative 32-bit seed and reads
-1 as "seed from the clock"), so results do not depend on the number of workers; a molecule that cannot be
embedded is a :class:`~genmol.chem.io.BadRecord`, not an exception. A molecule with 3-D coordinates keeps the
stereochemistry of that geometry (tetrahedral centres, double bonds) in every conformer; one without (from SMILES:
the container holds no stereo flags) gets ETKDG's choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from rdkit import Chem, rdBase
from rdkit.Chem import AllChem

from gencore.errors import ConfigError, InputError
from genmol.chem.io import BadRecord, ReadReport
from genmol.chem.molecule import Molecule

MMFF_ITERS = 500  # MMFF94 iterations per round; a conformer not converged gets up to MMFF_ROUNDS rounds
MMFF_ROUNDS = 4


def _relax(mol: Chem.Mol) -> str:
    """MMFF94-relax every conformer of ``mol`` in place; a note where that was not done to convergence."""
    if not AllChem.MMFFHasAllMoleculeParams(mol):
        return "no MMFF94 parameters for this molecule: its ETKDG geometries are kept unrelaxed"
    for _ in range(MMFF_ROUNDS):  # each round restarts from the last geometries; converged ones stay put
        results = AllChem.MMFFOptimizeMoleculeConfs(mol, maxIters=MMFF_ITERS)
        stuck = sum(flag != 0 for flag, _ in results)
        if not stuck:
            return ""
    return f"MMFF94 did not converge in {MMFF_ROUNDS * MMFF_ITERS} iterations for {stuck} of {len(results)} conformers"


def _embed(args: tuple[int, str, int, int, bool]) -> tuple[int, list[str], str, str]:
    """``(index, mol blocks, reason the molecule failed or "", note on its relaxation or "")``."""
    index, molblock_or_smiles, n_confs, seed, mmff = args
    mol = Chem.MolFromMolBlock(molblock_or_smiles, removeHs=False)
    if mol is None:
        return index, [], "cannot rebuild the molecule", ""
    mol = Chem.AddHs(mol, addCoords=False)
    params = AllChem.ETKDGv3()
    params.randomSeed = seed
    with rdBase.BlockLogs():  # the distance bounds type atoms with UFF: "UFFTYPER: Unrecognized charge state" for S+
        try:
            ids = list(AllChem.EmbedMultipleConfs(mol, numConfs=n_confs, params=params))
        except ValueError as exc:  # RDKit raises for a molecule with no atoms
            return index, [], f"ETKDG could not embed the molecule ({exc})", ""
    if not ids:
        return index, [], "ETKDG could not embed the molecule", ""
    note = _relax(mol) if mmff else ""
    if 0 < len(ids) < n_confs:
        note = "; ".join(filter(None, [f"ETKDG embedded {len(ids)} of {n_confs} conformers", note]))
    return index, [Chem.MolToMolBlock(mol, confId=c) for c in ids], "", note


def generate_conformers(
    molecules: Sequence[Molecule],
    n_confs: int = 5,
    *,
    seed: int = 0,
    workers: int = 1,
    mmff: bool = True,
    progress: bool = True,
) -> tuple[list[list[Molecule]], ReadReport]:
    """``n_confs`` ETKDG(+MMFF) conformers per molecule, with hydrogens; ``workers`` processes.

    The report counts the molecules that could not be embedded (``bad``, no conformers) and, in ``warnings``,
    those kept with fewer conformers than asked, without MMFF94 parameters (unrelaxed) or with conformers that
    MMFF94 did not converge in ``MMFF_ROUNDS * MMFF_ITERS`` iterations.
    """
    from tqdm.auto import tqdm

    if n_confs < 1:
        raise ConfigError(f"the number of conformers per molecule must be positive, got {n_confs}.")
    if workers < 1:
        raise ConfigError(f"the number of worker processes must be positive, got {workers}.")

    jobs = []
    report = ReadReport("conformers")
    for k, m in enumerate(molecules):
        try:
            rd = m.to_rdkit(sanitize=True)
        except InputError as exc:  # e.g. a pentavalent carbon from an SDF read without sanitizing: skipped, counted
            report.bad.append(BadRecord(k, k + 1, str(exc).rstrip("."), "conformers"))
            continue
        if rd.GetNumConformers():  # the stereoisomer of the given geometry, not a random one, reaches the block
            Chem.AssignStereochemistryFrom3D(rd)
        rd.RemoveAllConformers()
        jobs.append((k, Chem.MolToMolBlock(rd), n_confs, (seed + k) % 2**31, mmff))
    out: list[list[Molecule]] = [[] for _ in molecules]
    bar = tqdm(total=len(jobs), desc="conformers", unit="mol", disable=not progress)

    def collect(result: tuple[int, list[str], str, str]) -> None:
        index, blocks, reason, note = result
        if reason:
            report.bad.append(BadRecord(index, index + 1, reason, "conformers"))
        else:
            out[index] = [Molecule.from_molblock(b, sanitize=True) for b in blocks]
            report.n_read += 1
            if note:
                report.warnings.append(BadRecord(index, index + 1, note, "conformers"))
        bar.update()

    workers = min(workers, len(jobs))  # a pool starts every worker at once: no more than there are molecules
    if workers <= 1:
        for job in jobs:
            collect(_embed(job))
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for result in pool.map(_embed, jobs, chunksize=max(1, len(jobs) // (4 * workers))):
                collect(result)
    bar.close()
    report.bad.sort(key=lambda b: b.index)
    report.warnings.sort(key=lambda b: b.index)
    return out, report
