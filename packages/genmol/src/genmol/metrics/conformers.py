"""Conformer-ensemble metrics: coverage and average minimum RMSD, recall side (COV-R, AMR-R).

Definitions of Xu et al. 2021 (ConfGF) / GeoDiff (Xu et al. 2022), used by Torsional Diffusion and
ET-Flow: for reference conformers ``C_r`` and generated ``C_g`` of one molecule and the matrix of
symmetry-aware heavy-atom RMSDs,

    COV-R = |{r in C_r : min_g RMSD(r, g) < delta}| / |C_r|,    AMR-R = mean_r min_g RMSD(r, g).

``delta`` is 0.5 angstrom for QM9-sized molecules and 0.75-1.25 for drug-like ones.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np

from gencore.errors import ConfigError
from genmol.chem.molecule import Molecule
from genmol.metrics.rmsd import symmetry_rmsd


def rmsd_matrix(generated: Sequence[Molecule], reference: Sequence[Molecule]) -> np.ndarray:
    """``[len(reference), len(generated)]`` symmetry-aware heavy-atom RMSDs (NaN where RDKit fails)."""
    out = np.full((len(reference), len(generated)), np.nan)
    for i, r in enumerate(reference):
        for j, g in enumerate(generated):
            try:
                out[i, j] = symmetry_rmsd(g, r)
            except Exception:
                out[i, j] = np.nan
    return out


def coverage_recall(generated: Sequence[Molecule], reference: Sequence[Molecule], threshold: float = 0.5) -> dict:
    """``{"cov_r": ..., "amr_r": ..., "threshold": ...}`` for one molecule's conformer sets."""
    if isinstance(threshold, bool) or not (
        isinstance(threshold, numbers.Real) and math.isfinite(threshold) and threshold > 0
    ):  # True is a Real equal to 1: a flag passed where a distance belongs
        raise ConfigError(f"threshold must be a positive RMSD in angstrom, got {threshold!r}.")
    if not generated or not reference:
        return {"cov_r": float("nan"), "amr_r": float("nan"), "threshold": threshold}
    d = rmsd_matrix(generated, reference)
    best = np.nanmin(np.where(np.isnan(d), np.inf, d), axis=1)
    return {
        "cov_r": float(np.mean(best < threshold)),
        "amr_r": float(np.mean(best[np.isfinite(best)])) if np.isfinite(best).any() else float("nan"),
        "threshold": threshold,
    }
