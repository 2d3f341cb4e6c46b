"""The Operator page: operators grouped by name or by name and input shape, and each one's call stacks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from profscope.analysis.callstacks import stacks_by_name, stacks_by_name_and_shape
from profscope.analysis.module_operators import (
    module_operator_table,
    module_stacks,
    operators_by_module,
    stacks_by_module,
)
from profscope.analysis.operators import operators_by_name, operators_by_name_and_shape
from profscope.analysis.payloads import query_of
from profscope.api.csv_export import ResponseFormat
from profscope.api.deps import IngestDep, SettingsDep, StoreDep, get_trace
from profscope.api.source import frame_links
from profscope.catalog import TraceFile
from profscope.views.responses import Operators, OperatorStacks
from profscope.views.shared import STATUS_DOC, TABLE_DOC, TableQuery, cached_view
from profscope.views.view import IDENT, View

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
    module: int | None = Query(
        None, ge=0, description="Only the calls of this module (an `id` of /api/modules) and its submodules"
    ),
    query: TableQuery = Depends(),
    output: ResponseFormat = Depends(),
) -> Response:
    if module is None:
        return cached_view(store, ingest, trace, f"operators.{group_by}", query.apply, output)
    return cached_view(
        store,
        ingest,
        trace,
        "operators.modules",
        lambda stored: query.apply(
            _of_module(stored, trace, module, lambda: module_operator_table(stored, module, group_by))
        ),
        output,
    )


def _of_module(stored: dict[str, Any], trace: TraceFile, module: int, build: Callable[[], Any]) -> Any:
    """``build()``'s answer about module ``module`` (``docs/definitions.md`` §14.3); 422 when the query failed on
    this file (``Query.compute``: the other views still answer), 404 when the trace has no such module."""
    if "error" in stored:
        raise HTTPException(422, f"The operators by module of {trace.key} could not be computed: {stored['error']}")
    if not stored["applies"]:
        raise HTTPException(404, f"No module {module} in {trace.key}: {stored['reason']}")
    answer = build()
    if answer is None:
        raise HTTPException(404, f"No module {module} in {trace.key}: see /api/modules for its module ids")
    return answer


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
    module: int | None = Query(None, ge=0, description="Only the calls of this module and its submodules"),
) -> Response:
    key = name if input_shape is None else f"{name}\u0000{input_shape}"

    def with_links(stacks: list[dict[str, Any]]) -> dict[str, Any]:
        for stack in stacks:
            for frame in stack["frames"]:
                frame["links"] = frame_links(settings, frame, trace)
        return {"name": name, "input_shape": input_shape, "stacks": stacks}

    if module is not None:
        return cached_view(
            store,
            ingest,
            trace,
            "operators.stacks.modules",
            lambda stored: with_links(
                _of_module(stored, trace, module, lambda: module_stacks(stored, module, name, input_shape))
            ),
        )
    group_by = "operator_input_shape" if input_shape is not None else "operator"
    return cached_view(
        store, ingest, trace, f"operators.stacks.{group_by}", lambda stored: with_links(stored.get(key, []))
    )


VIEW = View(
    "operators",
    "Operator",
    router,
    queries=tuple(
        query_of(function)
        for function in (
            operators_by_name,
            operators_by_name_and_shape,
            stacks_by_name,
            stacks_by_name_and_shape,
            operators_by_module,
            stacks_by_module,
        )
    ),
    first_request=f"/api/operators?{IDENT}&group_by=operator",
)
