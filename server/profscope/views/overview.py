"""The Overview page: step time breakdown, GPU summary, recommendations."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import query_of
from profscope.api.csv_export import ResponseFormat
from profscope.api.deps import get_trace
from profscope.catalog import TraceFile
from profscope.views.responses import Overview
from profscope.views.shared import TABLE_DOC, cached_view
from profscope.views.view import View

router = APIRouter(prefix="/api", tags=["views"])


@router.get(
    "/overview",
    response_model=Overview,
    responses=TABLE_DOC,
    summary="Step time breakdown, GPU summary, recommendations",
)
def overview(request: Request, trace: TraceFile = Depends(get_trace), output: ResponseFormat = Depends()) -> Response:
    return cached_view(request, trace, "overview", lambda body: body, output)


VIEW = View("overview", "Overview", router, queries=(query_of(overview_payload),))
