"""Reading and writing molecule files with a bad-record policy.

Every reader goes record by record. A record that does not parse (or, when asked, does not sanitise)
becomes a :class:`BadRecord` with its 0-based index, the line where it starts and RDKit's reason. The
policy decides what happens next: ``"skip"`` keeps going and counts it in the :class:`ReadReport`,
``"raise"`` stops with an :class:`~gencore.errors.InputError` naming file, record and line. Writers
collect everything first and write one temporary file renamed into place, so a failing record can
never leave a half-written output.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rdkit import Chem, RDLogger

from gencore.errors import ConfigError, InputError, StorageError
from gencore.io import atomic_path
from genmol.chem.molecule import Molecule

POLICIES = ("skip", "raise")
SMILES_SUFFIXES = (".smi", ".smiles", ".txt", ".csv")  # each also read gzipped (".smi.gz")


@dataclass(frozen=True)
class BadRecord:
    """One record that could not be used: where it is and why."""

    index: int  # 0-based record index in the file
    line: int  # 1-based line where the record starts
    reason: str
    source: str = ""

    def __str__(self) -> str:
        return f"{self.source}: record {self.index} (line {self.line}): {self.reason}"


@dataclass
class ReadReport:
    """How a read went: records read, records skipped and why."""

    source: str
    n_read: int = 0
    bad: list[BadRecord] = field(default_factory=list)
    warnings: list[BadRecord] = field(default_factory=list)  # records kept, with a caveat

    @property
    def n_skipped(self) -> int:
        return len(self.bad)

    def summary(self) -> str:
        kept = f", {len(self.warnings)} kept with warnings" if self.warnings else ""
        return f"{self.source}: {self.n_read} records read, {self.n_skipped} skipped{kept}"

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "n_read": self.n_read,
            "n_skipped": self.n_skipped,
            "bad_records": [{"index": b.index, "line": b.line, "reason": b.reason} for b in self.bad],
            "warnings": [{"index": b.index, "line": b.line, "reason": b.reason} for b in self.warnings],
        }


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ConfigError(f"on_error must be one of {', '.join(POLICIES)}, got {policy!r}.")
    return policy


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage().strip())


@contextlib.contextmanager
def rdkit_messages() -> Iterator[list[str]]:
    """Collect RDKit's warnings and errors (instead of printing them) for the duration of the block."""
    RDLogger.logger()  # make sure the logger exists
    Chem.rdBase.LogToPythonLogger()
    logger = logging.getLogger("rdkit")
    handler = _Capture()
    old_handlers, old_propagate = logger.handlers[:], logger.propagate
    logger.handlers = [handler]  # RDKit attaches its own stream handler: replace it for the block
    logger.propagate = False
    try:
        yield handler.messages
    finally:
        logger.handlers = old_handlers
        logger.propagate = old_propagate
        if not any(isinstance(h, _Capture) for h in old_handlers):  # outermost block: back to RDKit's streams
            Chem.rdBase.LogToCppStreams()


def _reason(messages: list[str], fallback: str) -> str:
    """The last two informative lines of RDKit's messages; an invariant violation's C++ stack trace, source location
    and asserted expression (one message per line, e.g. for a bond to atom 0 of a mol block) are left out."""
    useful, in_trace = [], False
    for m in messages:
        text = m.split("] ", 1)[-1].strip()
        if text == "Stacktrace:":
            in_trace = True
        elif in_trace:
            in_trace = not set(text) <= {"-"}
        elif text and not set(text) <= {"*", "-"} and not re.fullmatch(r"\[[\d:.]+\]", text):
            if not text.startswith(("****", "Violation occurred on line", "Failed Expression:")):
                useful.append(text)
    return "; ".join(useful[-2:]) if useful else fallback


def molecule_file_kind(path: str | os.PathLike) -> str:
    """``"sdf"`` or ``"smiles"`` from a file's suffix; one :class:`InputError` sentence for any other name."""
    suffixes = [x.lower() for x in Path(path).suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    if suffixes[-1:] == [".sdf"]:
        return "sdf"
    if suffixes[-1:] and suffixes[-1] in SMILES_SUFFIXES:
        return "smiles"
    raise InputError(
        f"{str(path)!r}: expected an SDF file (.sdf) or a SMILES file ({', '.join(SMILES_SUFFIXES)}), "
        "either optionally gzipped (.gz)."
    )


def check_readable(path: Path) -> None:
    """One :class:`StorageError` sentence unless ``path`` is an existing file."""
    if not path.is_file():
        raise StorageError(f"{str(path)!r} does not exist or is not a file.")


def check_text(path: str | os.PathLike) -> None:
    """:func:`check_readable`, then one :class:`InputError` sentence when the file (decompressed when its name ends in
    ``.gz``) holds a NUL byte in its first 64 KiB: an image, an archive or a weights file, which the readers would
    otherwise turn into records of garbage. Text in any 8-bit encoding passes; a broken gzip stream is left to the
    reader, which names the line where it breaks."""
    import gzip

    p = Path(path)
    check_readable(p)
    opener = gzip.open if p.suffix.lower() == ".gz" else open
    try:
        with opener(p, "rb") as fh:
            head = fh.read(1 << 16)
    except (OSError, EOFError):
        return
    if b"\x00" in head:
        raise InputError(f"{str(p)!r} is not a text file (it holds NUL bytes); expected an SDF or SMILES file.")


def _open_text(path: Path):
    """A text stream of ``path``, decompressed when its name ends in ``.gz`` (any case)."""
    import gzip

    opener = gzip.open if path.suffix.lower() == ".gz" else open
    return opener(path, "rt", encoding="utf-8", errors="replace")


def _lines(fh, path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of an open text file; a broken gzip stream is one :class:`InputError` sentence."""
    lineno = 0
    try:
        for lineno, line in enumerate(fh, start=1):
            yield lineno, line
    except (OSError, EOFError) as exc:
        raise InputError(f"{path}: cannot decompress the file after line {lineno} ({exc}).") from None


def sdf_blocks(path: str | os.PathLike) -> Iterator[tuple[int, int, str]]:
    """Yield ``(index, first_line, mol_block_with_data)`` for each ``$$$$``-terminated record of an SDF
    (``.sdf.gz`` is decompressed on the fly)."""
    p = Path(path)
    check_readable(p)
    lines: list[str] = []
    start = 1
    index = 0
    with _open_text(p) as fh:
        for lineno, line in _lines(fh, p):
            if line.startswith("$$$$"):  # as RDKit reads it: trailing spaces or text do not hide the end of a record
                yield index, start, "".join(lines)
                index += 1
                lines = []
                start = lineno + 1
            else:
                lines.append(line)
    if any(line.strip() for line in lines):  # a last record without its terminator
        yield index, start, "".join(lines)


def parse_molblock(block: str, *, sanitize: bool) -> tuple[Chem.Mol | None, str]:
    """``(mol, "")`` or ``(None, reason)``; data fields after ``M  END`` become properties."""
    with rdkit_messages() as messages:
        try:
            mol = Chem.MolFromMolBlock(block, sanitize=False, removeHs=False, strictParsing=True)
        except (SystemError, UnicodeError):  # RDKit's message quoted a line cut inside a multi-byte character
            mol = None
    if mol is None:
        return None, _reason(messages, "RDKit could not parse the mol block")
    _read_data_fields(block, mol)
    if sanitize:
        with rdkit_messages() as messages:
            try:
                Chem.SanitizeMol(mol)
            except Exception as exc:
                return None, str(exc) or _reason(messages, "sanitisation failed")
    return mol, ""


def _read_data_fields(block: str, mol: Chem.Mol) -> None:
    tail = block.split("M  END", 1)
    if len(tail) < 2:
        return
    key = None
    values: list[str] = []
    for line in tail[1].splitlines():
        if line.startswith(">"):
            if key is not None:
                mol.SetProp(key, "\n".join(values).strip())
            lt, gt = line.find("<"), line.rfind(">")
            key = line[lt + 1 : gt] if 0 <= lt < gt else None
            values = []
        elif key is not None:
            values.append(line)
    if key is not None:
        mol.SetProp(key, "\n".join(values).strip())


def read_sdf(
    path: str | os.PathLike, *, on_error: str = "skip", sanitize: bool = True
) -> tuple[list[Molecule], ReadReport]:
    """Read every record of a (multi-record) SDF into :class:`Molecule` objects.

    ``on_error="skip"`` counts bad records in the report; ``"raise"`` stops at the first one.
    """
    check_policy(on_error)
    report = ReadReport(str(path))
    out: list[Molecule] = []
    for index, line, block in sdf_blocks(path):
        mol, reason = parse_molblock(block, sanitize=sanitize)
        if mol is not None:
            try:
                out.append(Molecule.from_rdkit(mol))
            except InputError as exc:
                mol, reason = None, str(exc)
        if mol is None:
            bad = BadRecord(index, line, reason, str(path))
            if on_error == "raise":
                raise InputError(f"{bad}.")
            report.bad.append(bad)
            continue
        report.n_read += 1
    return out, report


def write_sdf(path: str | os.PathLike, molecules: Iterable[Molecule]) -> Path:
    """Write molecules as one multi-record SDF, atomically (all records or nothing)."""
    blocks = []
    for k, m in enumerate(molecules):
        try:
            block = m.to_molblock()
        except Exception as exc:
            raise InputError(f"molecule {k} ({m.name or 'unnamed'}) cannot be written as a mol block: {exc}") from None
        props = "".join(f">  <{key}>\n{value}\n\n" for key, value in m.properties.items())
        blocks.append(block + props + "$$$$\n")
    with atomic_path(path) as tmp:
        tmp.write_text("".join(blocks), encoding="utf-8")
    return Path(path)


SMILES_HEADERS = ("smiles", "smi", "canonical_smiles", "isomeric_smiles")
NAME_HEADERS = ("name", "id", "title", "mol_id", "molecule_id", "compound_id")


def smiles_records(
    path: str | os.PathLike, *, column: int | None = None, delimiter: str | None = None
) -> Iterator[tuple[int, int, str, str]]:
    """Yield ``(index, line, smiles, name)`` for each record of a SMILES file (see :func:`read_smiles`)."""
    p = Path(path)
    check_readable(p)
    suffixes = [x.lower() for x in p.suffixes if x.lower() != ".gz"]
    is_csv = delimiter is None and suffixes[-1:] == [".csv"]  # quoted fields may hold commas and spaces
    smi_col = column if column is not None else 0
    name_col: int | None = smi_col + 1  # without a header, the field after the SMILES
    with _open_text(p) as fh:
        index, first = 0, True
        for lineno, line in _lines(fh, p):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            if is_csv:
                fields = [f.strip() for f in next(csv.reader([text]))]
            else:
                fields = text.split(delimiter) if delimiter else text.replace(",", " ").split()
            if first:  # a header line names the columns: SMILES from its column, the name from an id column
                first = False
                header = [f.strip().strip('"').lower() for f in fields]
                if any(h in SMILES_HEADERS for h in header):
                    if column is None:
                        smi_col = next(k for k, h in enumerate(header) if h in SMILES_HEADERS)
                    name_col = next((k for k, h in enumerate(header) if h in NAME_HEADERS), None)
                    continue
            smi = fields[smi_col] if smi_col < len(fields) else ""
            name = fields[name_col] if name_col is not None and name_col < len(fields) else ""
            yield index, lineno, smi, name
            index += 1


def parse_smiles(smi: str, *, sanitize: bool = True) -> tuple[Chem.Mol | None, str]:
    """``(mol, "")`` or ``(None, reason)`` for one SMILES string, RDKit's messages kept out of the console."""
    with rdkit_messages() as messages:
        mol = Chem.MolFromSmiles(smi, sanitize=sanitize) if smi else None
    if mol is not None:
        return mol, ""
    # RDKit's parser says what and where over several lines (message, position, the input, a caret line)
    texts = [m.split("] ", 1)[-1].removeprefix("SMILES Parse Error: ").strip() for m in messages]
    where = next((t.rstrip(":") for t in texts if t.startswith("check for mistakes around")), "")
    what = next((t for t in texts if t and t != where + ":" and not t.startswith("Failed parsing")), "")
    if not what:
        return None, _reason(messages, f"cannot parse SMILES {smi!r}")
    return None, f"{what} ({where})" if where else what


def read_smiles(
    path: str | os.PathLike, *, on_error: str = "skip", column: int | None = None, delimiter: str | None = None
) -> tuple[list[Molecule], ReadReport]:
    """Read a SMILES file: one molecule per line, fields split at ``delimiter`` (default: commas and
    whitespace); ``#`` lines are skipped and ``.gz`` files are read transparently. A first line that names a
    column ``smiles`` (or ``smi``, ``canonical_smiles``, ``isomeric_smiles``; any case) is a header: the SMILES
    come from that column (unless ``column`` is given) and the names from a ``name`` / ``id`` / ``title`` column
    (none without one). Without a header the SMILES are field ``column`` (default 0) and the name the field after."""
    check_policy(on_error)
    report = ReadReport(str(path))
    out: list[Molecule] = []
    for index, lineno, smi, name in smiles_records(path, column=column, delimiter=delimiter):
        mol, reason = parse_smiles(smi)
        if mol is not None:
            try:  # RDKit reads bonds genmol does not represent (quadruple, dative): a bad record like any other
                out.append(Molecule.from_rdkit(mol, name=name))
            except InputError as exc:
                mol, reason = None, str(exc).rstrip(".")
        if mol is None:
            bad = BadRecord(index, lineno, reason, str(path))
            if on_error == "raise":
                raise InputError(f"{bad}.")
            report.bad.append(bad)
        else:
            report.n_read += 1
    return out, report


def smiles_to_molecules(smiles: Iterable[str], *, on_error: str = "skip") -> tuple[list[Molecule], ReadReport]:
    """Parse an in-memory list of SMILES with the same policy as the file readers."""
    check_policy(on_error)
    report = ReadReport("<smiles>")
    out: list[Molecule] = []
    for index, smi in enumerate(smiles):
        mol, reason = parse_smiles(smi)
        if mol is not None:
            try:
                out.append(Molecule.from_rdkit(mol))
            except InputError as exc:
                mol, reason = None, str(exc).rstrip(".")
        if mol is None:
            bad = BadRecord(index, index + 1, reason, "<smiles>")
            if on_error == "raise":
                raise InputError(f"{bad}.")
            report.bad.append(bad)
            continue
        report.n_read += 1
    return out, report


def write_molecules(path: str | os.PathLike, molecules: Iterable[Molecule]) -> Path:
    """Write an SDF (``.sdf``) or a multi-frame XYZ file (``.xyz``: coordinates only, no bonds or H counts)."""
    writer = {".sdf": write_sdf, ".xyz": write_xyz}[check_output_suffix(path)]
    return writer(path, molecules)


def check_output_suffix(path: str | os.PathLike) -> str:
    """The suffix of a molecule output file, ``.sdf`` or ``.xyz``; one :class:`InputError` sentence otherwise."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".sdf", ".xyz"):
        raise InputError(f"{str(path)!r}: molecules are written as SDF (.sdf) or XYZ (.xyz); name the file so.")
    return suffix


def read_xyz(path: str | os.PathLike, *, bonds: str = "none") -> list[Molecule]:
    """Read a (multi-frame) XYZ file; a malformed frame raises :class:`InputError` naming the line."""
    p = Path(path)
    check_readable(p)
    lines = p.read_text(encoding="utf-8", errors="replace").splitlines()
    out, k = [], 0
    while k < len(lines):
        if not lines[k].strip():
            k += 1
            continue
        try:
            n = int(lines[k].split()[0])
        except ValueError:
            n = -1
        if n < 0:
            raise InputError(f"{p}: line {k + 1} must hold an atom count (0 or more), got {lines[k]!r}.")
        block = "\n".join(lines[k : k + n + 2])
        out.append(Molecule.from_xyz(block, bonds=bonds, source=f"{p} (frame at line {k + 1})", first_line=k + 1))
        k += n + 2
    return out


def write_xyz(path: str | os.PathLike, molecules: Iterable[Molecule]) -> Path:
    """Write molecules as one multi-frame XYZ file, atomically (all frames or nothing)."""
    frames = []
    for k, m in enumerate(molecules):
        try:
            frames.append(m.to_xyz())
        except InputError as exc:
            raise InputError(f"molecule {k} ({m.name or 'unnamed'}) cannot be written as XYZ: {exc}") from None
    text = "".join(frames)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
