"""Command-line plumbing shared by every package's console script.

A user mistake (a :class:`~gencore.errors.GenError`) becomes one sentence on
stderr and exit code 2, never a traceback; a run stopped by a signal exits with
``128 + signal`` (130 for Ctrl-C); a warning is one line, ``prog: warning: ...``,
without the Python source line under it.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from gencore.checks import SEED_LIMIT
from gencore.errors import GenError, Interrupted, StorageError


class _HelpFormatter(argparse.HelpFormatter):
    """Help text that ends with the option's default when it has one and the text does not already name it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if not action.option_strings or default is None or default is False or default == argparse.SUPPRESS:
            return text
        if "default" in text:
            return text
        if isinstance(default, (tuple, list)):
            default = ",".join(map(str, default))
        return f"{text} (default {str(default).replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """argparse parser whose usage errors also end in one sentence and exit code 2, and whose help names every
    option's default."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}.\n")


def int_list(text: str) -> tuple[int, ...]:
    """argparse type: comma-separated positive integers such as ``1,2,4``."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,2,4, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers such as 1,2,4, got {text!r}")
    return values


def _storage_checked(check: Callable[[str], Path], text: str) -> Path:
    """Run a :mod:`gencore.io` check as an argparse type: its :class:`StorageError` becomes a usage error."""
    from gencore.errors import StorageError

    try:
        return check(text)
    except StorageError as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from None


def output_file(text: str) -> Path:
    """argparse type: a file the command will write, checked before any work (see :func:`gencore.io.check_writable`)."""
    from gencore.io import check_writable

    return _storage_checked(check_writable, text)


def output_folder(text: str) -> Path:
    """argparse type: a folder the command will write into, checked before any work
    (see :func:`gencore.io.check_folder_writable`)."""
    from gencore.io import check_folder_writable

    return _storage_checked(check_folder_writable, text)


def seed_int(text: str) -> int:
    """argparse type: a seed, an integer in ``[0, 2**32)`` as every ``--seed`` of the suite takes (a negative one
    was a traceback from gymnasium or NumPy, one of 2**64 or more a traceback from torch's generator)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < SEED_LIMIT:  # gencore.checks.check_seed's range
        raise argparse.ArgumentTypeError(f"expected a seed, an integer in [0, 2**32), got {text!r}")
    return value


def refuse_overwriting_input(output: str | Path | None, flag: str, *inputs: str | Path | None) -> None:
    """Raise :class:`~gencore.errors.StorageError` when the file ``output`` (the value of ``flag``) is one of the files
    ``inputs`` that the command reads, so that writing it would destroy that input; ``None`` entries are skipped."""
    if output is None or not Path(output).is_file():
        return  # a file that does not exist yet is no input
    for source in inputs:
        if source is not None and Path(source).is_file() and os.path.samefile(output, source):
            raise StorageError(
                f"{flag} {str(output)!r} is the input file {str(source)!r}, which writing it would destroy; "
                f"choose another {flag}."
            )


def refuse_foreign_run(out: str | Path, fields: tuple[str, ...], command: str, record: str = "run.json") -> None:
    """Raise :class:`~gencore.errors.StorageError` when ``out/record`` exists without ``fields``: ``out`` holds the run
    of another command (several write a ``run.json``), whose record training into it would overwrite."""
    from gencore.io import read_json, require_fields

    path = Path(out) / record
    if path.is_file():
        hint = f"; it was not written by `{command}`, so choose a new --out folder"
        require_fields(read_json(path), fields, repr(str(path)), hint)


def name_list(text: str) -> tuple[str, ...]:
    """argparse type: comma-separated names such as ``rfm,gfm-lsd`` (blanks dropped; at least one)."""
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    if not names:  # an empty list would run a command that computes nothing
        raise argparse.ArgumentTypeError(f"expected one or more comma-separated names such as a,b, got {text!r}")
    return names


DEVICE_CHOICES = ("auto", "cpu", "cuda")


ENGINE_OPTIONS: dict[str, dict] = {  # gencore.train.TrainConfig fields a training command may expose
    "checkpoint-every": {
        "type": int,
        "dest": "checkpoint_every",
        "help": "steps between checkpoints (default 0: only at the end and on a signal)",
    },
    "keep-last": {"type": int, "dest": "keep_last", "help": "checkpoints kept (default 3)"},
    "precision": {"choices": ("fp32", "bf16"), "help": "bf16 autocast (GPU; ignored on CPU; default fp32)"},
    "nan-policy": {
        "choices": ("skip", "stop"),
        "dest": "nan_policy",
        "help": "on a NaN/inf loss or gradient: skip the step (default) or stop",
    },
    "clip-grad-norm": {"type": float, "dest": "clip_grad_norm", "help": "max global gradient norm (default: none)"},
    "parallel": {"choices": ("ddp", "fsdp"), "help": "with --nproc > 1: DDP (default) or FSDP2 fully_shard"},
}


def add_engine_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *names: str) -> None:
    """Add the training engine's options ``--NAME`` (keys of :data:`ENGINE_OPTIONS`; all when none are named), each
    defaulting to None so that a config file's value stands unless the flag is given."""
    for name in names or ENGINE_OPTIONS:
        parser.add_argument(f"--{name}", **ENGINE_OPTIONS[name])


def add_device_argument(parser: argparse.ArgumentParser, *, nproc: bool = False) -> None:
    """``--device auto|cpu|cuda`` (default ``auto``); read it back with :func:`resolve_device`.

    ``nproc=True`` for a command that also has ``--nproc``: its help then says that each process takes a GPU.
    """
    per_process = "; with --nproc N, one GPU per process" if nproc else ""
    parser.add_argument(
        "--device",
        default="auto",
        choices=DEVICE_CHOICES,
        help=f"where the model runs (auto: CUDA when available{per_process})",
    )


def resolve_device(choice: str, nproc: int = 1) -> str:
    """``--device`` as ``"cpu"`` or ``"cuda"`` for :func:`gencore.train.setup` (``auto``: CUDA when available).

    ``cuda`` must exist with a GPU for each of ``nproc`` local processes (``setup`` then gives each
    ``cuda:LOCAL_RANK``); otherwise a :class:`~gencore.errors.ConfigError` says what to change.
    """
    import torch

    from gencore.errors import ConfigError

    if choice not in DEVICE_CHOICES:
        raise ConfigError(f"--device must be one of {', '.join(DEVICE_CHOICES)}, got {choice!r}.")
    cuda = torch.cuda.is_available()
    if choice == "cpu" or (choice == "auto" and not cuda):
        return "cpu"
    if not cuda:
        raise ConfigError("--device cuda was given but this machine has no usable CUDA device; use --device cpu.")
    if nproc > torch.cuda.device_count():
        raise ConfigError(
            f"--nproc {nproc} needs one GPU per process but {torch.cuda.device_count()} are visible; "
            "lower --nproc or use --device cpu."
        )
    return "cuda"


def report_finished(out: str | Path) -> int:
    """Say that ``out`` holds a finished run of the requested settings (a ``--resume`` with nothing to train); 0."""
    print(f"{out} already holds this run, finished; nothing to train (raise --steps to train it further).")
    return 0


def benchmark_parser(doc: str, default_out: str | None = None) -> argparse.ArgumentParser:
    """A benchmark script's parser: the first line of its docstring ``doc`` as description and an optional
    positional ``out_json`` (where the records go; ``default_out`` when not given)."""
    parser = _Parser(description=doc.strip().splitlines()[0])
    where = "where to write the JSON records" + (f" (default {default_out})" if default_out else "")
    parser.add_argument("out_json", nargs="?", default=default_out, help=where)
    return parser


def make_parser(prog: str, version: str, description: str) -> argparse.ArgumentParser:
    """A top-level parser with ``--version`` and a required sub-command slot."""
    parser = _Parser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} {version}")
    return parser


def add_commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    """Add the sub-command group (``train``, ``sample``, ...) to ``parser``."""
    return parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)


def package_parser(
    prog: str, version: str, description: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """A package command's parser with its sub-command group and the shared ``info`` verb."""
    parser = make_parser(prog, version, description)
    commands = add_commands(parser)
    info = commands.add_parser("info", help="print the installed versions")
    info.set_defaults(func=lambda args: _print_info(prog, version))
    return parser, commands


def _print_info(prog: str, version: str) -> int:
    import torch

    from gencore import __version__ as core_version

    print(f"{prog} {version} on gencore {core_version}, torch {torch.__version__}")
    return 0


def run(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    dispatch: Callable[[argparse.Namespace], int | None] | None = None,
) -> int:
    """Parse ``argv``, call ``dispatch(args)`` (default: the verb's ``func``) and map suite errors to exit code 2.

    Warnings raised meanwhile print as one line each (a command's user has no use for our source line).
    """
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0

    def one_line(message, category, filename, lineno, file=None, line=None) -> None:
        print(f"{parser.prog}: warning: {message}", file=sys.stderr if file is None else file)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = one_line
            return int((dispatch or (lambda a: a.func(a)))(args) or 0)
    except Interrupted as exc:
        print(f"{parser.prog}: interrupted: {exc}", file=sys.stderr)
        return 128 + exc.signum
    except GenError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
