"""/api/paddle/summary: PaddlePaddle's own summary tables of one Paddle trace (cached at ingest)."""

from __future__ import annotations

from typing import Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from profscope.api.deps import get_state, get_trace, json_response, payload_or_status
from profscope.catalog import TraceFile

router = APIRouter(prefix="/api/paddle", tags=["paddle"])

# How many nanoseconds one unit of Profiler.summary()'s time_unit is
TIME_UNITS_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


@router.get(
    "/summary",
    summary="Paddle's summary tables: Overview, Model, Distribution, Operator, Kernel, Memory, UserDefined",
    responses={
        202: {"description": "The trace is being parsed; ask again."},
        404: {"description": "No such run, or no trace for the named worker / span: `{detail}`."},
        422: {"description": "The trace could not be read: `{error, file}`."},
    },
)
def paddle_summary(
    request: Request,
    trace: TraceFile = Depends(get_trace),
    unit: Literal["s", "ms", "us", "ns"] = Query("ms", description="Time unit the page shows (times stay in ns)"),
) -> Response:
    """Times are integer nanoseconds (``*_ns``), sizes bytes; ``unit`` is echoed with its size for the page.

    A trace that is not Paddle's answers ``{applies: false, reason}`` (like the Kernel view's empty
    answer for a CPU-only trace: the trace is fine, it has no such table).
    """
    data, pending = payload_or_status(get_state(request), trace, "paddle_summary")
    if pending is not None:
        return pending
    ident = {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}
    return json_response({**ident, "unit": unit, "unit_ns": TIME_UNITS_NS[unit], **orjson.loads(data)})  # type: ignore[arg-type]
