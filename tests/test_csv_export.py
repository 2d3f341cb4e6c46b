"""format=csv on the JSON twins: the dialect of the pages' CSV buttons (docs/definitions.md, "CSV downloads")."""

from __future__ import annotations

import csv
import io

from profscope.api.csv_export import rows_to_csv


def test_columns_in_order_of_first_appearance_and_cells_as_documented() -> None:
    rows = [
        {"name": 'a "quoted", name', "calls": 3, "grid": [1, 2, 3], "used": True},
        {"name": "=HYPERLINK(1)", "calls": None, "extra": 1.5, "used": False},
    ]
    text = rows_to_csv(rows)
    assert text.endswith("\r\n") and text.count("\r\n") == 3
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed == [
        ["name", "calls", "grid", "used", "extra"],
        ['a "quoted", name', "3", "1,2,3", "true", ""],
        ["'=HYPERLINK(1)", "", "", "false", "1.5"],
    ]


def test_negative_numbers_are_numbers_not_formulas() -> None:
    assert rows_to_csv([{"delta_bytes": -1024, "op": "-neg"}]) == "delta_bytes,op\r\n-1024,'-neg\r\n"


def test_no_rows_is_an_empty_header() -> None:
    assert rows_to_csv([]) == "\r\n"
