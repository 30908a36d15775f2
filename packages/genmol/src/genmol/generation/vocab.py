"""The atom vocabulary of a generative model: (element, formal charge) pairs as one token each.

Generating the pair as one categorical variable makes the model choose type and charge jointly
(an N+ is a different token from an N), as in MiDi / EQGAT-diff's joint charge modelling.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gencore.errors import InputError
from genmol.chem.molecule import Molecule, element_symbol


class AtomVocabulary:
    """Ordered (atomic number, charge) pairs."""

    def __init__(self, pairs: Sequence[tuple[int, int]]) -> None:
        self.pairs = [(int(z), int(q)) for z, q in pairs]
        self.index = {p: k for k, p in enumerate(self.pairs)}
        if not self.pairs:
            raise InputError("the atom vocabulary is empty.")

    @classmethod
    def from_molecules(cls, molecules: Iterable[Molecule]) -> AtomVocabulary:
        seen = set()
        for m in molecules:
            seen.update(zip(m.atomic_numbers.tolist(), m.formal_charges.tolist(), strict=True))
        return cls(sorted(seen, key=lambda p: (p[0], p[1] != 0, p[1])))

    def __len__(self) -> int:
        return len(self.pairs)

    def token(self, z: int, q: int) -> int:
        try:
            return self.index[(int(z), int(q))]
        except KeyError:
            raise InputError(
                f"atom {element_symbol(z)}({int(q):+d}) is not in the model's vocabulary {self.labels()}."
            ) from None

    def labels(self) -> list[str]:
        return [element_symbol(z) + ("" if q == 0 else f"{q:+d}") for z, q in self.pairs]

    def to_list(self) -> list[list[int]]:
        return [list(p) for p in self.pairs]
