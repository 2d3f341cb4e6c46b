"""The Paddle Summary page: PaddlePaddle's own summary tables of one Paddle trace (``docs/definitions.md`` §13)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from profscope.analysis.paddle_summary import paddle_summary_payload
from profscope.analysis.payloads import query_of
from profscope.api.deps import IngestDep, StoreDep, get_trace
from profscope.catalog import TraceFile
from profscope.views.responses import PaddleSummary
from profscope.views.shared import STATUS_DOC, cached_view
from profscope.views.view import IDENT, NO_TRACE, RunFacts, View

router = APIRouter(prefix="/api/paddle", tags=["views"])

# How many nanoseconds one unit of Profiler.summary()'s time_unit is
TIME_UNITS_NS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}


@router.get(
    "/summary",
    response_model=PaddleSummary,
    responses=STATUS_DOC,
    summary="Paddle's summary tables: Overview, Model, Distribution, Operator, Kernel, Memory, UserDefined",
)
def paddle_summary(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    unit: Literal["s", "ms", "us", "ns"] = Query("ms", description="Time unit the page shows (times stay in ns)"),
) -> Response:
    """Times are integer nanoseconds (``*_ns``), sizes bytes; ``unit`` is echoed with its size for the page.

    A trace that is not Paddle's answers ``{applies: false, reason}`` (like the Kernel view's empty
    answer for a CPU-only trace: the trace is fine, it has no such table).
    """
    return cached_view(
        store, ingest, trace, "paddle_summary", lambda body: {"unit": unit, "unit_ns": TIME_UNITS_NS[unit], **body}
    )


def applies(facts: RunFacts) -> str | None:
    if not facts.traces:
        return NO_TRACE
    if facts.trace_format is None:
        return "Shown once the run's first trace is parsed, if it is a PaddlePaddle trace"
    return None if facts.trace_format == "paddle" else "Paddle's summary tables need a PaddlePaddle profiler trace"


VIEW = View(
    "paddle",
    "Paddle Summary",
    router,
    queries=(query_of(paddle_summary_payload),),
    applies=applies,
    first_request=f"/api/paddle/summary?{IDENT}&unit=ms",
)
