"""The ``gengraph`` command. Its verbs arrive with the package's issues; today it answers
``--help``, ``--version`` and ``info``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gencore.command import package_parser, run
from gengraph import __version__

DESCRIPTION = "Graph, graph-signal, causal-DAG and manifold generation on gencore's flow-matching math."


def build_parser() -> argparse.ArgumentParser:
    parser, _commands = package_parser("gengraph", __version__, DESCRIPTION)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    raise SystemExit(main())
