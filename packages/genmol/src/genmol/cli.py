"""The ``genmol`` command. Its verbs arrive with the package's issues; today it answers
``--help``, ``--version`` and ``info``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gencore.command import package_parser, run
from genmol import __version__

DESCRIPTION = "Molecule, protein, peptide and DNA generation on gencore's flow-matching math."


def build_parser() -> argparse.ArgumentParser:
    parser, _commands = package_parser("genmol", __version__, DESCRIPTION)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
