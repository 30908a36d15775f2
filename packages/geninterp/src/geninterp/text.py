"""Offline text: Python's own standard-library sources and docstrings, chunked into token sequences.

The corpus is the installed interpreter's standard library (PSF licence), read in sorted file
order (test suites, ``site-packages`` and ``idlelib`` left out) and shuffled by file with a
seed. ``kind="docstrings"`` keeps module/class/function docstrings (English prose about code),
``"source"`` the raw files, ``"mixed"`` both (docstrings of a file, then its source).
"""

from __future__ import annotations

import ast
import random
import sysconfig
import tokenize
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from gencore.errors import ConfigError, InputError

TEXT_KINDS = ("docstrings", "source", "mixed")
_SKIP_PARTS = {"test", "tests", "site-packages", "idlelib", "lib2to3", "__pycache__", "turtledemo"}


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """Sorted ``*.py`` files of the standard library (``root`` defaults to the running interpreter's)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = [p for p in base.rglob("*.py") if not _SKIP_PARTS.intersection(p.relative_to(base).parts)]
    if not files:
        raise InputError(f"no Python files found under {str(base)!r}.")
    return sorted(files)


def docstrings(source: str) -> list[str]:
    """Module, class and function docstrings of ``source`` (an unparsable file gives none)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return [d for d in (ast.get_docstring(n) for n in nodes) if d]


def stdlib_texts(kind: str = "docstrings", seed: int = 0, root: str | Path | None = None) -> Iterator[str]:
    """Documents of the corpus, one per file (files shuffled by ``seed``)."""
    if kind not in TEXT_KINDS:
        raise ConfigError(f"text kind must be one of {', '.join(TEXT_KINDS)}, got {kind!r}.")
    files = stdlib_files(root)
    random.Random(seed).shuffle(files)
    for path in files:
        try:  # the encoding a Python file declares (PEP 263, a UTF-8 BOM), utf-8 otherwise; the BOM is dropped
            with tokenize.open(path) as f:
                source = f.read()
        except (SyntaxError, UnicodeDecodeError, OSError):  # an unknown or wrong declared encoding: file left out
            continue
        parts = []
        if kind in ("docstrings", "mixed"):
            parts += docstrings(source)
        if kind in ("source", "mixed"):
            parts.append(source)
        text = "\n\n".join(parts).strip()
        if text:
            yield text


def token_chunks(
    texts: Iterator[str],
    encode: Callable[[str], list[int]],
    chunk_len: int,
    *,
    prefix: list[int] | tuple[int, ...] = (),
    suffix: list[int] | tuple[int, ...] = (),
    separator: list[int] | tuple[int, ...] = (),
) -> Iterator[torch.Tensor]:
    """Concatenate encoded documents (``separator`` between them) and cut them into
    ``[len(prefix) + chunk_len + len(suffix)]`` token tensors; the trailing remainder is dropped."""
    if chunk_len < 1:
        raise ConfigError(f"chunk_len must be positive, got {chunk_len}.")
    buffer: list[int] = []
    for text in texts:
        buffer.extend(encode(text))
        buffer.extend(separator)
        while len(buffer) >= chunk_len:
            body, buffer = buffer[:chunk_len], buffer[chunk_len:]
            yield torch.tensor([*prefix, *body, *suffix], dtype=torch.long)
