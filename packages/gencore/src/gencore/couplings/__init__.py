"""Couplings: how a batch of noise ``x0`` is paired with data ``x1`` for flow matching.

Every coupling answers ``coupling(x0, x1, *, generator=None) -> (x0_paired, x1_paired)``:

==================  ===============================================================  =====================
name                class                                                            pairing cost / batch
==================  ===============================================================  =====================
``"independent"``   :class:`IndependentCoupling` (Lipman et al. 2023)                  O(1)
``"exact"``         :class:`ExactOTCoupling` (Tong et al. 2024; Pooladian et al. 2023) O(B^3) assignment
``"sinkhorn"``      :class:`SinkhornCoupling` (entropic OT, Cuturi 2013)               O(B^2) per iteration
``"semidiscrete"``  :class:`SemidiscreteCoupling` (SD-FM, ICLR 2026)                   O(B N D), after fit
==================  ===============================================================  =====================

``make_coupling(name, **kwargs)`` builds one by name. For samples that are sets (a permutation-equivariant
field over the rows of ``[B, N, D]``), :func:`align_sets` pairs the noise rows of each set with its data rows by
the optimal assignment (equivariant flow matching, Klein et al. 2023).
"""

from __future__ import annotations

from typing import Any

from gencore.checks import check_choice
from gencore.couplings.assignment import optimal_assignment
from gencore.couplings.base import Coupling, max_inner_product, sq_euclidean_cost
from gencore.couplings.exact import ExactOTCoupling, exact_ot_permutation
from gencore.couplings.independent import IndependentCoupling
from gencore.couplings.semidiscrete import SemidiscreteCoupling, SemidiscreteDiagnostics, data_fingerprint
from gencore.couplings.sets import align_sets
from gencore.couplings.sinkhorn import SinkhornCoupling, SinkhornResult, sinkhorn
from gencore.errors import ConfigError

COUPLINGS: dict[str, type] = {
    "independent": IndependentCoupling,
    "exact": ExactOTCoupling,
    "sinkhorn": SinkhornCoupling,
    "semidiscrete": SemidiscreteCoupling,
}


def make_coupling(name: str, **kwargs: Any) -> Coupling:
    """Build a coupling by registry name (see :data:`COUPLINGS`), passing ``kwargs`` to its constructor.

    ``make_coupling("semidiscrete", data=y, epsilon=0.0)``; unknown names raise :class:`ConfigError`
    listing the valid ones, and unknown keyword arguments raise :class:`ConfigError` naming them.
    """
    check_choice(name, tuple(COUPLINGS), "coupling")
    cls = COUPLINGS[name]
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"invalid arguments for coupling {name!r}: {exc}.") from exc


__all__ = [
    "COUPLINGS",
    "Coupling",
    "ExactOTCoupling",
    "IndependentCoupling",
    "SemidiscreteCoupling",
    "SemidiscreteDiagnostics",
    "SinkhornCoupling",
    "SinkhornResult",
    "align_sets",
    "data_fingerprint",
    "exact_ot_permutation",
    "make_coupling",
    "max_inner_product",
    "optimal_assignment",
    "sinkhorn",
    "sq_euclidean_cost",
]
