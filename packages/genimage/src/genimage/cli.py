"""The ``genimage`` command. Verbs arrive with the package's issues; today it reports
its version and the gencore it runs on."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import gencore
from gencore.command import add_commands, make_parser, run
from genimage import __version__


def _info(args: argparse.Namespace) -> int:
    print(f"genimage {__version__} on gencore {gencore.__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = make_parser(
        "genimage",
        __version__,
        "Image, video and audio-spectrogram generation on gencore's flow-matching math.",
    )
    commands = add_commands(parser)
    info = commands.add_parser("info", help="print the installed versions")
    info.set_defaults(func=_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    return run(parser, argv, lambda args: args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
