"""The Kernel page: GPU kernels grouped by name, or by launch properties and operator."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from profscope.analysis.kernels import kernels_by_launch, kernels_by_name
from profscope.analysis.payloads import query_of
from profscope.api.csv_export import ResponseFormat
from profscope.api.deps import IngestDep, StoreDep, get_trace
from profscope.catalog import TraceFile
from profscope.views.responses import Kernels
from profscope.views.shared import TABLE_DOC, TableQuery, cached_view
from profscope.views.view import IDENT, NO_TRACE, RunFacts, View

router = APIRouter(prefix="/api", tags=["views"])


@router.get(
    "/kernels",
    response_model=Kernels,
    responses=TABLE_DOC,
    summary="Kernels grouped by name, or by launch properties and op",
)
def kernels(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["kernel", "kernel_op"] = "kernel",
    query: TableQuery = Depends(),
    output: ResponseFormat = Depends(),
) -> Response:
    return cached_view(store, ingest, trace, f"kernels.{group_by}", query.apply, output)


def applies(facts: RunFacts) -> str | None:
    if not facts.traces:
        return NO_TRACE
    return None if facts.kernels else "This run has no GPU kernels"


VIEW = View(
    "kernels",
    "Kernel",
    router,
    queries=(query_of(kernels_by_name), query_of(kernels_by_launch)),
    applies=applies,
    first_request=f"/api/kernels?{IDENT}&group_by=kernel",
)
