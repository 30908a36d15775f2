"""Checks that every package's test suite runs against its own console script and benchmark scripts.

Kept in the library (not copied into each package's tests) so that the contract
"a package installs alone and its command answers" is written once.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any


def check_console_script(package: str) -> None:
    """Assert that ``package`` reports its installed version, gives one-sentence usage errors and documents its
    options.

    Runs ``python -m <package>.cli`` for ``--version``, ``--help``, ``info`` and an unknown verb, and checks that
    every sub-command's help renders and that every sub-command and option in it has help text.
    """
    module = importlib.import_module(package)
    assert module.__version__ == version(package), "package __version__ differs from its installed metadata"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", f"{package}.cli", *args], capture_output=True, text=True)

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"{package} {module.__version__}", out
    out = cli("--help")
    assert out.returncode == 0 and f"usage: {package}" in out.stdout, out
    out = cli("info")
    assert out.returncode == 0 and "on gencore" in out.stdout, out
    out = cli("no-such-verb")
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and "invalid choice" in out.stderr, out.stderr
    parser = importlib.import_module(f"{package}.cli").build_parser()
    for sub in command_parsers(parser):
        sub.format_help()  # every sub-command's --help renders (a stray '%' in a help text would raise)
    missing = undocumented_options(parser)
    assert not missing, f"options without help text: {', '.join(missing)}"


def command_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and the parsers of its sub-commands at any depth (an alias's parser once)."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += command_parsers(sub)
    return found


def undocumented_options(parser: argparse.ArgumentParser) -> list[str]:
    """Every argument and sub-command of ``parser`` and of its sub-commands, at any depth, that ``--help`` shows
    without a description, as ``"<command path> <flag or sub-command>"``."""
    missing = []
    for p in command_parsers(parser):
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                described = {id(a.choices[c.dest]) for c in a._choices_actions if c.help}  # aliases share a parser
                first_names: dict[int, str] = {}
                for name, sub in a.choices.items():
                    first_names.setdefault(id(sub), name)
                missing += [f"{p.prog} {name}" for key, name in first_names.items() if key not in described]
            elif a.help is None:
                missing.append(f"{p.prog} {'/'.join(a.option_strings) or a.dest}")
    return missing


def check_out_folder_refused(package: str, tmp_path: Path, *args: str) -> None:
    """Assert that ``<package> *args --out F`` exits 2 with one sentence when ``F`` is a file or lies below
    one, and leaves that file as it was (the check runs when the flags are read, before any data or model)."""
    occupied = tmp_path / "occupied"
    occupied.write_text("keep")
    for out, needle in ((occupied, "is a file; name a folder"), (occupied / "run", "is a file, not a folder")):
        proc = subprocess.run(
            [sys.executable, "-m", f"{package}.cli", *args, "--out", str(out)], capture_output=True, text=True
        )
        assert proc.returncode == 2, proc
        lines = proc.stderr.strip().splitlines()  # argparse's usage, then the one error sentence
        errors = [line for line in lines if ": error: " in line]
        assert errors == lines[-1:] and needle in errors[0] and "Traceback" not in proc.stderr, proc.stderr
    assert occupied.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["occupied"]


def check_engine_refusals_leave_no_folder(
    package: str, tmp_path: Path, *args: str, flags: tuple[str, ...] = ("--nproc", "--checkpoint-every", "--resume")
) -> None:
    """Assert that ``<package> *args --out F`` with a bad engine setting (``--nproc 0``, a negative
    ``--checkpoint-every``, a ``--resume`` folder that does not exist; those of ``flags``) exits 2 with one
    sentence and leaves no folder ``F`` behind: the settings are checked before the run folder is made."""
    out = tmp_path / "run"
    bad = {"--nproc": "0", "--checkpoint-every": "-5", "--resume": str(tmp_path / "missing")}
    for flag in flags:
        value = bad[flag]
        proc = subprocess.run(
            [sys.executable, "-m", f"{package}.cli", *args, flag, value, "--out", str(out)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (flag, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1].count(": error: ") == 1, (flag, proc.stderr)
        assert not out.exists(), f"{flag} {value} left {out} behind"


def check_seed_refused(main: Callable[[list[str]], int], capsys: Any, verbs: list[list[str]], value: str) -> None:
    """Assert that ``main([*verb, "--seed", value])`` exits 2 for every verb with the seed type's one argparse sentence
    (``--seed`` takes [0, 2**32); outside it a seed was a traceback from torch's generator, gymnasium or NumPy)."""
    for verb in verbs:
        try:
            main([*verb, "--seed", value])
        except SystemExit as stop:
            assert stop.code == 2, (verb, stop.code)
        else:
            raise AssertionError(f"{verb} accepted --seed {value}")
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith(f"argument --seed: expected a seed, an integer in [0, 2**32), got {value!r}."), (
            verb,
            err,
        )


def check_benchmark_scripts(folder: Path) -> None:
    """Assert that every script in ``folder`` that runs as ``__main__`` reads its arguments with argparse, never
    from ``sys.argv`` by hand, so that ``python <script> --help`` prints usage instead of running the benchmark
    (and writing its records to a file named ``--help``). A static check: nothing is imported or run."""
    scripts = sorted(Path(folder).glob("*.py"))
    assert scripts, f"no scripts in {folder}"
    bad = []
    for script in scripts:
        tree = ast.parse(script.read_text(), filename=str(script))
        runs = any(
            isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body
        )  # a helper module without a main block is not a script
        nodes = list(ast.walk(tree))
        argv = sum(isinstance(n, ast.Attribute) and n.attr == "argv" for n in nodes)
        handed_on = sum(  # sys.argv[1:], handed on whole to a parser, is the one use allowed
            isinstance(n, ast.Subscript) and ast.unparse(n) == "sys.argv[1:]" for n in nodes
        )
        parses = any(isinstance(n, ast.Attribute) and n.attr == "parse_args" for n in nodes)
        if runs and (argv > handed_on or not parses):
            bad.append(script.name)
    assert not bad, f"scripts that do not parse their arguments with argparse: {', '.join(bad)}"
