"""JSON twins of the Overview, Operator and Kernel pages (payloads cached at ingest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from profscope.api.csv_export import CSV_RESPONSES, ResponseFormat
from profscope.api.deps import get_state, get_trace, json_response, payload_or_status
from profscope.api.source import frame_links
from profscope.catalog import TraceFile

router = APIRouter(prefix="/api", tags=["views"])

_STATUS_DOC = {
    202: {"description": "The trace is being parsed: `{state, progress, bytes_done, bytes_total}`; ask again."},
    404: {"description": "No such run, or no trace for the named worker / span: `{detail}`."},
    422: {"description": "The trace could not be read: `{error, file}`."},
}
_TABLE_DOC = {**_STATUS_DOC, **CSV_RESPONSES}  # a JSON twin that also answers format=csv


def _ident(trace: TraceFile) -> dict[str, str]:
    return {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}


def _view(
    request: Request,
    trace: TraceFile,
    payload: str,
    shape: Callable[[Any], dict[str, Any]],
    output: ResponseFormat | None = None,
) -> Response:
    """The cached payload of ``trace`` passed through ``shape`` (as JSON, or one table as CSV with
    ``output``), or the 202 / 422 status while there is none."""
    data, pending = payload_or_status(get_state(request), trace, payload)
    if pending is not None:
        return pending
    body = {**_ident(trace), **shape(orjson.loads(data))}
    return output.respond(body, f"{trace.run}-{payload}") if output else json_response(body)


@router.get("/overview", responses=_TABLE_DOC, summary="Step time breakdown, GPU summary, recommendations")
def overview(request: Request, trace: TraceFile = Depends(get_trace), output: ResponseFormat = Depends()) -> Response:
    return _view(request, trace, "overview", lambda body: body, output)


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


@router.get("/operators", responses=_TABLE_DOC, summary="Operators grouped by name or by name and input shape")
def operators(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["operator", "operator_input_shape"] = "operator",
    query: TableQuery = Depends(),
    output: ResponseFormat = Depends(),
) -> Response:
    return _view(request, trace, f"operators.{group_by}", query.apply, output)


@router.get("/operators/stacks", responses=_STATUS_DOC, summary="Call stacks of one operator (group)")
def operator_stacks(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    name: str = Query(..., description="Operator name. Stack frames are listed innermost first."),
    input_shape: str | None = Query(None, description="Input shape, when grouped by shape"),
) -> Response:
    settings = get_state(request).settings
    key = name if input_shape is None else f"{name}\u0000{input_shape}"

    def shape(stacks_by_key: dict[str, Any]) -> dict[str, Any]:
        stacks = stacks_by_key.get(key, [])
        for stack in stacks:
            for frame in stack["frames"]:
                frame["links"] = frame_links(settings, frame)
        return {"name": name, "input_shape": input_shape, "stacks": stacks}

    group_by = "operator_input_shape" if input_shape is not None else "operator"
    return _view(request, trace, f"operators.stacks.{group_by}", shape)


@router.get("/kernels", responses=_TABLE_DOC, summary="Kernels grouped by name, or by launch properties and op")
def kernels(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["kernel", "kernel_op"] = "kernel",
    query: TableQuery = Depends(),
    output: ResponseFormat = Depends(),
) -> Response:
    return _view(request, trace, f"kernels.{group_by}", query.apply, output)
