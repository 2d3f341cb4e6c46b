"""``format=csv`` on the JSON twins: one list of rows of an answer as a CSV download.

The dialect is the one of the pages' CSV buttons (web/static/js/csv.js): RFC 4180 with CRLF line
ends, a header of the columns in order of first appearance, empty cells for missing values, lists
joined with commas, and a leading ``'`` on text that a spreadsheet would run as a formula.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from fastapi import HTTPException, Query
from fastapi.responses import Response

from profscope.api.deps import json_response

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

# The OpenAPI entries of a route with ``ResponseFormat``: its CSV answer and the 400 of a missing table.
CSV_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    400: {"description": "`format=csv` with a `table` the answer does not hold: `{detail}` names its tables."},
}


def csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(csv_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    text = str(value)
    return f"'{text}" if isinstance(value, str) and text.startswith(FORMULA_STARTS) else text


def rows_to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(column)) for column in columns])
    return out.getvalue()


def csv_response(rows: Sequence[Mapping[str, Any]], filename: str) -> Response:
    """Rows (dicts) as a CSV file download."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in filename)
    return Response(
        content=rows_to_csv(rows).encode(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{safe}"'},
    )


class ResponseFormat:
    """``format`` / ``table`` query parameters of a JSON twin that holds tables."""

    def __init__(
        self,
        format: Literal["json", "csv"] = Query("json", description="`csv`: one table of the answer as a CSV file"),
        table: str | None = Query(None, description="With format=csv: which list of the answer (default `rows`)"),
    ) -> None:
        self.format, self.table = format, table

    def respond(self, body: dict[str, Any], name: str) -> Response:
        """``body`` as JSON, or its table ``table`` (default ``rows``) as ``{name}-{table}.csv``."""
        if self.format == "json":
            return json_response(body)
        key = self.table or "rows"
        rows = body.get(key)
        if not _is_table(rows):
            tables = sorted(k for k, v in body.items() if _is_table(v) and v)
            raise HTTPException(400, detail=f"format=csv: this answer has no table {key!r}; its tables: {tables}")
        return csv_response(rows, f"{name}-{key}.csv")


def _is_table(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(row, dict) for row in value)
