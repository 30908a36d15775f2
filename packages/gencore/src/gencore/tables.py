"""Plain-text and Markdown tables of result records (lists of dicts)."""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gencore.errors import InputError


def _fmt(v: Any) -> str:
    """A float (Python or NumPy) with 4 decimals when ``1e-3 <= |v| < 1e4`` or ``v == 0``, else in scientific
    notation with 4 significant digits; anything else as ``str``."""
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        v = float(v)
        if v == 0 or 1e-3 <= abs(v) < 1e4:
            return f"{v:.4f}"
        return f"{v:.3e}"
    return str(v)


def format_table(
    records: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, *, markdown: bool = False
) -> str:
    """Render ``records`` as an aligned text table (a column of numbers right-aligned, so that it lines up on
    its units; any other column left-aligned), or a GitHub Markdown table. Floats are rounded as in :func:`_fmt`:
    4 decimals for ``1e-3 <= |v| < 1e4`` (and 0), else ``1.234e-05`` style."""
    if not records:
        return "(no records)"
    cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in records for k in r))
    rows = [[_fmt(r.get(c, "")) for c in cols] for r in records]
    numeric = [all(_is_number(r[c]) for r in records if r.get(c) not in (None, "")) for c in cols]
    if markdown:
        lines = ["| " + " | ".join(map(_md_cell, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    out = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  ".join(v.rjust(w) if n else v.ljust(w) for v, n, w in zip(row, numeric, widths)).rstrip())
    return "\n".join(out)


def _md_cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` escaped (else it starts a new column), a line break as a space
    (else it ends the row)."""
    return " ".join(text.replace("|", "\\|").splitlines())


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def pivot(records: Sequence[Mapping[str, Any]], row: str, col: str, value: str) -> list[dict[str, Any]]:
    """Reshape long records into one row per ``row`` value with a column per ``col`` value."""
    out: dict[Any, dict[str, Any]] = {}
    for k, r in enumerate(records):
        missing = [key for key in (row, col, value) if key not in r]
        if missing:
            raise InputError(f"record {k} has no field {missing[0]!r}; pivot needs {row!r}, {col!r} and {value!r}.")
        out.setdefault(r[row], {row: r[row]})[f"{col}={r[col]}"] = r[value]
    return list(out.values())


def mean_sd(values: Iterable[float], fmt: str = ".3f") -> str:
    """``"mean +- sd"`` (sample standard deviation) of repeated measurements, e.g. over seeds; the value alone
    for one measurement, ``""`` for none."""
    vals = [float(v) for v in values]
    if not vals:
        return ""
    if len(vals) == 1:
        return format(vals[0], fmt)
    if not all(math.isfinite(v) for v in vals):  # statistics.stdev raises AttributeError on NaN/inf (Python 3.11)
        mean = sum(vals) / len(vals)  # nan for a nan; +-inf for an infinity; nan for +inf and -inf together
        return f"{format(mean, fmt)} +- {format(math.nan, fmt)}"
    return f"{format(statistics.mean(vals), fmt)} +- {format(statistics.stdev(vals), fmt)}"
