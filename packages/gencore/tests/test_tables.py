"""Result tables: rendering, pivoting and the mean +- sd cell."""

from __future__ import annotations

import pytest

from gencore.errors import InputError
from gencore.tables import format_table, mean_sd, pivot


def test_mean_sd_uses_the_sample_standard_deviation() -> None:
    assert mean_sd([1.0, 2.0, 3.0]) == "2.000 +- 1.000"  # sd with n - 1: sqrt(((1)^2 + 0 + (1)^2) / 2) = 1
    assert mean_sd([0.5], ".2f") == "0.50"
    assert mean_sd([]) == ""
    assert mean_sd([1234.5, 1234.5], ".4g") == "1234 +- 0"


def test_pivot_and_markdown_table() -> None:
    long = [{"m": "a", "s": 0, "v": 1.0}, {"m": "a", "s": 1, "v": 2.0}, {"m": "b", "s": 0, "v": 3.0}]
    rows = pivot(long, "m", "s", "v")
    assert rows == [{"m": "a", "s=0": 1.0, "s=1": 2.0}, {"m": "b", "s=0": 3.0}]
    md = format_table(rows, ["m", "s=0", "s=1"], markdown=True).splitlines()
    assert md[:2] == ["| m | s=0 | s=1 |", "|---|---|---|"]
    assert md[3] == "| b | 3.0000 |  |"


def test_pivot_names_a_record_without_a_field_it_needs() -> None:
    long = [{"m": "a", "s": 0, "v": 1.0}, {"m": "b", "s": 0}]  # was a bare KeyError: 'v'
    with pytest.raises(InputError, match=r"record 1 has no field 'v'; pivot needs 'm', 's' and 'v'"):
        pivot(long, "m", "s", "v")


def test_text_table_aligns_number_columns_right_and_other_columns_left() -> None:
    rows = [{"name": "a", "value": 1.5, "note": 3}, {"name": "longer", "value": 12.25, "note": "many"}]
    assert format_table(rows).splitlines() == [
        "name    value    note",
        "------  -------  ----",
        "a        1.5000  3",
        "longer  12.2500  many",
    ]


def test_floats_get_four_decimals_in_range_and_scientific_notation_outside() -> None:
    import numpy as np

    rows = [{"v": x} for x in (0.0, 1e-3, 9.99949e-4, 9999.99994, 1e4, -0.5, 123456.0, float("nan"))]
    cells = [line.strip() for line in format_table(rows).splitlines()[2:]]
    assert cells == ["0.0000", "0.0010", "9.999e-04", "9999.9999", "1.000e+04", "-0.5000", "1.235e+05", "nan"]
    # NumPy floats are rounded and right-aligned like Python floats; integers are printed as they are.
    table = format_table([{"v": np.float32(0.1234567), "n": np.int64(7)}, {"v": 2.5, "n": 12}]).splitlines()
    assert table[2:] == ["0.1235   7", "2.5000  12"]


def test_markdown_cells_escape_the_pipe_and_keep_one_row_per_record() -> None:
    """A ``|`` in a cell (or a header) started a new column and a line break ended the row early."""
    rows = [{"run|id": "a|b", "note": "two\nlines", "v": 0.5}]
    md = format_table(rows, markdown=True).splitlines()
    assert md == ["| run\\|id | note | v |", "|---|---|---|", "| a\\|b | two lines | 0.5000 |"]
    # every line has the same number of unescaped separators: as many columns as the header
    unescaped = [line.replace("\\|", "").count("|") for line in md]
    assert unescaped == [4, 4, 4]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1.0, float("nan"), 3.0], "nan +- nan"),
        ([1.0, float("inf")], "inf +- nan"),
        ([float("-inf"), 2.0, 4.0], "-inf +- nan"),
        ([float("inf"), float("-inf")], "nan +- nan"),
    ],
)
def test_mean_sd_of_values_with_a_nan_or_an_infinity(values, expected) -> None:
    """One diverged seed (a NaN or infinite metric) made statistics.stdev raise AttributeError on Python 3.11."""
    assert mean_sd(values, ".2f") == expected
