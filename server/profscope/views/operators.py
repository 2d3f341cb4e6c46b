"""The Operator page: operators grouped by name or by name and input shape, and each one's call stacks."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from profscope.analysis.callstacks import stacks_by_name, stacks_by_name_and_shape
from profscope.analysis.operators import operators_by_name, operators_by_name_and_shape
from profscope.analysis.payloads import query_of
from profscope.api.csv_export import ResponseFormat
from profscope.api.deps import IngestDep, SettingsDep, StoreDep, get_trace
from profscope.api.source import frame_links
from profscope.catalog import TraceFile
from profscope.views.responses import Operators, OperatorStacks
from profscope.views.shared import STATUS_DOC, TABLE_DOC, TableQuery, cached_view
from profscope.views.view import View

router = APIRouter(prefix="/api", tags=["views"])


@router.get(
    "/operators",
    response_model=Operators,
    responses=TABLE_DOC,
    summary="Operators grouped by name or by name and input shape",
)
def operators(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    group_by: Literal["operator", "operator_input_shape"] = "operator",
    query: TableQuery = Depends(),
    output: ResponseFormat = Depends(),
) -> Response:
    return cached_view(store, ingest, trace, f"operators.{group_by}", query.apply, output)


@router.get(
    "/operators/stacks",
    response_model=OperatorStacks,
    responses=STATUS_DOC,
    summary="Call stacks of one operator (group)",
)
def operator_stacks(
    store: StoreDep,
    ingest: IngestDep,
    settings: SettingsDep,
    trace: TraceFile = Depends(get_trace),
    name: str = Query(..., description="Operator name. Stack frames are listed innermost first."),
    input_shape: str | None = Query(None, description="Input shape, when grouped by shape"),
) -> Response:
    key = name if input_shape is None else f"{name}\u0000{input_shape}"

    def shape(stacks_by_key: dict[str, Any]) -> dict[str, Any]:
        stacks = stacks_by_key.get(key, [])
        for stack in stacks:
            for frame in stack["frames"]:
                frame["links"] = frame_links(settings, frame, trace)
        return {"name": name, "input_shape": input_shape, "stacks": stacks}

    group_by = "operator_input_shape" if input_shape is not None else "operator"
    return cached_view(store, ingest, trace, f"operators.stacks.{group_by}", shape)


VIEW = View(
    "operators",
    "Operator",
    router,
    queries=tuple(
        query_of(function)
        for function in (operators_by_name, operators_by_name_and_shape, stacks_by_name, stacks_by_name_and_shape)
    ),
)
