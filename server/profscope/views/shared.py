"""What the view modules share: the status answers, a file's identity, a cached query's response, table queries."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from fastapi import Query
from fastapi.responses import Response

from profscope.api.csv_export import CSV_RESPONSES, ResponseFormat
from profscope.api.deps import json_response, payload_or_status
from profscope.catalog import TraceFile
from profscope.ingest.jobs import IngestManager
from profscope.store import Store

STATUS_DOC: dict[int | str, dict[str, Any]] = {
    202: {"description": "The trace is being parsed: `{state, progress, bytes_done, bytes_total}`; ask again."},
    404: {"description": "No such run, or no trace for the named worker / span: `{detail}`."},
    422: {"description": "The trace could not be read: `{error, file}`."},
}
TABLE_DOC = {**STATUS_DOC, **CSV_RESPONSES}  # a JSON twin that also answers format=csv


def ident(trace: TraceFile) -> dict[str, str]:
    return {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}


def cached_view(
    store: Store,
    ingest: IngestManager,
    trace: TraceFile,
    query: str,
    shape: Callable[[Any], dict[str, Any]],
    output: ResponseFormat | None = None,
) -> Response:
    """The cached result of ``query`` for ``trace`` passed through ``shape`` (as JSON, or one table as CSV with
    ``output``), or the 202 / 422 status while there is none."""
    data, pending = payload_or_status(store, ingest, trace, query)
    if pending is not None:
        return pending
    body = {**ident(trace), **shape(orjson.loads(data))}
    return output.respond(body, f"{trace.run}-{query}") if output else json_response(body)


class TableQuery:
    """search / sort / top, shared by the table views."""

    def __init__(
        self,
        search: str = Query("", description="Keep rows whose name (or operator) contains this, case-insensitive"),
        sort: str | None = Query(None, description="Column to sort by; prefix '-' for descending"),
        top: int | None = Query(None, ge=1, description="Keep the first N rows"),
    ) -> None:
        self.search, self.sort, self.top = search, sort, top

    def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        """The payload with its rows searched, sorted and cut; counts before (total) and after search."""
        rows = body.get("rows", [])
        matched = _search(rows, self.search)
        if self.sort:
            matched = _sorted(matched, self.sort)
        shown = matched[: self.top] if self.top else matched
        return {**body, "rows": shown, "total_rows": len(rows), "matched_rows": len(matched)}


def _search(rows: list[dict], search: str) -> list[dict]:
    needle = search.lower()
    if not needle:
        return rows
    return [
        r for r in rows if needle in str(r.get("name", "")).lower() or needle in str(r.get("operator") or "").lower()
    ]


def _sorted(rows: list[dict], sort: str) -> list[dict]:
    """Sort by a column; rows without a value go last whatever the direction."""
    column, descending = sort.lstrip("-"), sort.startswith("-")
    if not rows or column not in rows[0]:
        return rows
    present = [r for r in rows if r.get(column) is not None]
    absent = [r for r in rows if r.get(column) is None]
    return sorted(present, key=lambda r: r[column], reverse=descending) + absent
