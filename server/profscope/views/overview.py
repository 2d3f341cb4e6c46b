"""The Overview page: step time breakdown, GPU summary, recommendations."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from profscope.analysis.context import TraceContext
from profscope.analysis.overview import overview_for_step_range, overview_payload
from profscope.analysis.payloads import query_of
from profscope.api.csv_export import ResponseFormat
from profscope.api.deps import IngestDep, StoreDep, get_trace, payload_or_status
from profscope.catalog import TraceFile
from profscope.views.responses import Overview
from profscope.views.shared import TABLE_DOC, cached_view, ident
from profscope.views.view import IDENT, View

router = APIRouter(prefix="/api", tags=["views"])
OVERVIEW = query_of(overview_payload)


@router.get(
    "/overview",
    response_model=Overview,
    responses=TABLE_DOC,
    summary="Step time breakdown, GPU summary, recommendations",
)
def overview(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    step_range: str | None = Query(
        None,
        description="Name of the host ranges (NVTX, record_function) to take as the steps, numbered in time order; "
        "default: ProfilerStep#N, else ranges named like steps (`iteration N`). Candidates: `step_ranges`.",
    ),
    output: ResponseFormat = Depends(),
) -> Response:
    if step_range is None:
        return cached_view(store, ingest, trace, OVERVIEW.name, lambda body: body, output)
    _, pending = payload_or_status(store, ingest, trace, OVERVIEW.name)  # the stored tables are there once it is
    if pending is not None:
        return pending
    # kept per range name (and query version) among the store's loaded structures: a pick is computed once
    key = (OVERVIEW.stored_name, "step_range", trace.cache_key, step_range)
    try:
        body = store.loaded(
            key, lambda: overview_for_step_range(TraceContext(store.trace_tables(trace.cache_key)), step_range)
        )
    except ValueError as exc:
        raise HTTPException(status_code=404, detail=f"{trace.key}: {exc}") from exc
    return output.respond({**ident(trace), **body}, f"{trace.run}-{OVERVIEW.name}")


VIEW = View("overview", "Overview", router, queries=(OVERVIEW,), first_request=f"/api/overview?{IDENT}")
