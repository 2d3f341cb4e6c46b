"""JSON twins of the Overview, Operator and Kernel pages (payloads cached at ingest)."""

from __future__ import annotations

from typing import Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from profscope.api.deps import get_state, get_trace, json_response, payload_or_status
from profscope.api.source import frame_links
from profscope.catalog import TraceFile

router = APIRouter(prefix="/api", tags=["views"])

_STATUS_DOC = {
    202: {"description": "The trace is being parsed: `{state, progress, bytes_done, bytes_total}`; ask again."},
    404: {"description": "No such run, or no trace for the named worker / span: `{detail}`."},
    422: {"description": "The trace could not be read: `{error, file}`."},
}


def _ident(trace: TraceFile) -> dict[str, str]:
    return {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}


@router.get("/overview", responses=_STATUS_DOC, summary="Step time breakdown, GPU summary, recommendations")
def overview(request: Request, trace: TraceFile = Depends(get_trace)) -> Response:
    data, pending = payload_or_status(get_state(request), trace, "overview")
    if pending is not None:
        return pending
    return json_response({**_ident(trace), **orjson.loads(data)})


def _filtered(body: dict, search: str, sort: str | None, top: int | None) -> dict:
    """The payload with its rows searched, sorted and cut; counts before (total) and after search."""
    rows = body.get("rows", [])
    matched = _filter_rows(rows, search, sort, None)
    return {**body, "rows": matched[:top] if top else matched, "total_rows": len(rows), "matched_rows": len(matched)}


def _filter_rows(rows: list[dict], search: str, sort: str | None, top: int | None) -> list[dict]:
    if search:
        needle = search.lower()
        rows = [
            r
            for r in rows
            if needle in str(r.get("name", "")).lower() or needle in str(r.get("operator") or "").lower()
        ]
    if sort:
        column, descending = sort.lstrip("-"), sort.startswith("-")
        if rows and column in rows[0]:
            present = [r for r in rows if r.get(column) is not None]
            absent = [r for r in rows if r.get(column) is None]
            rows = sorted(present, key=lambda r: r[column], reverse=descending) + absent
    if top is not None and top > 0:
        rows = rows[:top]
    return rows


@router.get("/operators", responses=_STATUS_DOC, summary="Operators grouped by name or by name and input shape")
def operators(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["operator", "operator_input_shape"] = "operator",
    search: str = Query("", description="Keep rows whose name contains this (case-insensitive)"),
    sort: str | None = Query(None, description="Column to sort by; prefix '-' for descending"),
    top: int | None = Query(None, ge=1, description="Keep the first N rows"),
) -> Response:
    data, pending = payload_or_status(get_state(request), trace, f"operators.{group_by}")
    if pending is not None:
        return pending
    return json_response({**_ident(trace), **_filtered(orjson.loads(data), search, sort, top)})


@router.get("/operators/stacks", responses=_STATUS_DOC, summary="Call stacks of one operator (group)")
def operator_stacks(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    name: str = Query(..., description="Operator name. Stack frames are listed innermost first."),
    input_shape: str | None = Query(None, description="Input shape, when grouped by shape"),
) -> Response:
    group_by = "operator_input_shape" if input_shape is not None else "operator"
    data, pending = payload_or_status(get_state(request), trace, f"operators.stacks.{group_by}")
    if pending is not None:
        return pending
    key = name if input_shape is None else f"{name}\u0000{input_shape}"
    stacks = orjson.loads(data).get(key, [])
    settings = get_state(request).settings
    for stack in stacks:
        for frame in stack["frames"]:
            frame["links"] = frame_links(settings, frame)
    return json_response({**_ident(trace), "name": name, "input_shape": input_shape, "stacks": stacks})


@router.get("/kernels", responses=_STATUS_DOC, summary="Kernels grouped by name, or by launch properties and op")
def kernels(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["kernel", "kernel_op"] = "kernel",
    search: str = Query("", description="Keep rows whose kernel or operator name contains this"),
    sort: str | None = Query(None, description="Column to sort by; prefix '-' for descending"),
    top: int | None = Query(None, ge=1, description="Keep the first N rows"),
) -> Response:
    data, pending = payload_or_status(get_state(request), trace, f"kernels.{group_by}")
    if pending is not None:
        return pending
    return json_response({**_ident(trace), **_filtered(orjson.loads(data), search, sort, top)})
