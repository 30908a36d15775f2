"""Result tables: rendering, pivoting and the mean +- sd cell."""

from __future__ import annotations

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


def test_text_table_aligns_number_columns_right_and_other_columns_left() -> None:
    rows = [{"name": "a", "value": 1.5, "note": 3}, {"name": "longer", "value": 12.25, "note": "many"}]
    assert format_table(rows).splitlines() == [
        "name    value    note",
        "------  -------  ----",
        "a        1.5000  3",
        "longer  12.2500  many",
    ]
