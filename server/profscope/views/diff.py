"""The Diff page: a baseline trace and a target trace (any two runs, ranks or spans) compared, from both sides'
cached query results; nothing is parsed for a diff. The join is ``analysis/diff.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from profscope.analysis import diff
from profscope.analysis.op_tree import operator_tree
from profscope.analysis.payloads import query_of
from profscope.api.deps import IngestDep, ServerState, StoreDep, get_trace, json_response, payload_or_status
from profscope.catalog import TraceFile
from profscope.ingest.jobs import IngestManager
from profscope.store import Store
from profscope.views.distributed import span_distributed
from profscope.views.responses import Diff
from profscope.views.shared import STATUS_DOC, ident
from profscope.views.view import View

if TYPE_CHECKING:
    from profscope.state import Profscope

router = APIRouter(prefix="/api", tags=["views"])

TREE = query_of(operator_tree).name
SAME_TRACE = "Baseline and target are the same trace: there is nothing to compare. Choose another baseline."
CPU_ONLY = (
    "The {side} recorded no GPU activity (a CPU-only trace): its device columns are empty, not zero, "
    "and changes are measured on host self time."
)
STEP_NOTE = {
    "total": "Counts and times are the totals of each trace (both have {steps} steps).",
    "per_step": "The sides have different step counts ({base} and {target}): counts and times are per step.",
}


def get_base_trace(
    state: ServerState,
    base_run: str = Query(..., description="Baseline run"),
    base_worker: str | None = Query(None, description="Baseline worker; default: the run's first"),
    base_span: str | None = Query(None, description="Baseline span id; default: the worker's first"),
) -> TraceFile:
    return get_trace(state, base_run, base_worker, base_span)


@router.get(
    "/diff",
    response_model=Diff,
    responses=STATUS_DOC,
    summary="A target trace compared with a baseline: step time, operators, kernels, call tree, ranks",
)
def diff_view(
    state: ServerState,
    store: StoreDep,
    ingest: IngestDep,
    target: TraceFile = Depends(get_trace),
    base: TraceFile = Depends(get_base_trace),
    group_by: Literal["operator", "operator_input_shape"] = "operator",
    kernel_group_by: Literal["kernel", "kernel_op"] = "kernel",
    tree_path: list[str] = Query([], description="Names from the top of the call tree to the node to expand"),
) -> Response:
    head = {**ident(target), "base": ident(base), "group_by": group_by, "kernel_group_by": kernel_group_by}
    if base.cache_key == target.cache_key:
        return json_response({**head, **_empty(tree_path)})
    names = ("overview", f"operators.{group_by}", f"kernels.{kernel_group_by}", TREE)
    sides = {label: _results(store, ingest, trace, names) for label, trace in (("base", base), ("target", target))}
    waiting = sorted((pending.status_code != 422, label, pending) for label, (_, pending) in sides.items() if pending)
    if waiting:  # both sides asked first, so both parse; a failed side's 422 before a parsing side's 202
        _, label, pending = waiting[0]
        return _for_side(pending, label)
    body = _compare(sides["base"][0], sides["target"][0], group_by, kernel_group_by, tree_path)
    return json_response({**head, **body, "distributed": _distributed(state, store, ingest, base, target)})


def _results(
    store: Store, ingest: IngestManager, trace: TraceFile, names: tuple[str, ...]
) -> tuple[list[Any], Response | None]:
    """The cached results of one side, or the 202 / 422 answer while it has none."""
    results = []
    for name in names:
        data, pending = payload_or_status(store, ingest, trace, name)
        if pending is not None:
            return [], pending
        results.append(orjson.loads(data))
    return results, None


def _for_side(pending: Response, side: str) -> Response:
    """A side's 202 / 422 answer, saying which side it is."""
    body = orjson.loads(bytes(pending.body))
    return json_response({**body, "side": side}, status_code=pending.status_code)


def _compare(base: list[Any], target: list[Any], group_by: str, kernel_group_by: str, path: list[str]) -> dict:
    (base_overview, base_ops, base_kernels, base_tree), (target_overview, target_ops, target_kernels, target_tree) = (
        base,
        target,
    )
    steps = (diff.step_count(base_overview), diff.step_count(target_overview))
    normalisation = diff.normalisation(*steps)
    scale = (float(max(steps[0], 1)), float(max(steps[1], 1))) if normalisation == "per_step" else (1.0, 1.0)
    device = (
        diff.has_device(base_overview, base_kernels["rows"]),
        diff.has_device(target_overview, target_kernels["rows"]),
    )
    return {
        "same_trace": False,
        "message": None,
        "normalisation": normalisation,
        "normalisation_note": STEP_NOTE[normalisation].format(steps=steps[0], base=steps[0], target=steps[1]),
        "device_columns": _device_columns(device),
        "steps": diff.diff_steps(base_overview, target_overview),
        "operators": diff.diff_operators(
            base_ops["rows"], target_ops["rows"], group_by == "operator_input_shape", scale, device
        ),
        "kernels": diff.diff_kernels(
            base_kernels["rows"], target_kernels["rows"], kernel_group_by == "kernel_op", scale
        ),
        "tree": diff.diff_tree(base_tree["nodes"], target_tree["nodes"], path, scale, device),
    }


def _device_columns(device: tuple[bool, bool]) -> dict[str, Any]:
    notes = [
        CPU_ONLY.format(side=side)
        for side, on_device in zip(("baseline", "target"), device, strict=True)
        if not on_device
    ]
    return {"base": device[0], "target": device[1], "note": " ".join(notes) or None}


def _empty(path: list[str]) -> dict[str, Any]:
    return {
        "same_trace": True,
        "message": SAME_TRACE,
        "normalisation": "total",
        "normalisation_note": None,
        "device_columns": None,
        "steps": None,
        "operators": [],
        "kernels": [],
        "tree": {"path": path, "found": False, "node": None, "children": []},
        "distributed": None,
    }


def _distributed(
    state: Profscope, store: Store, ingest: IngestManager, base: TraceFile, target: TraceFile
) -> dict[str, Any] | None:
    """Per-rank deltas when both sides are runs of several ranks (the spans at the sides' positions)."""
    if base.run == target.run:  # two ranks or spans of one job: its Distributed view already compares them
        return None
    groups = [_rank_traces(state, trace) for trace in (base, target)]
    if any(len(traces) < 2 for traces, _ in groups):
        return None
    bodies = []
    for traces, inferred_ranks in groups:
        body, progress = span_distributed(store, ingest, traces, inferred_ranks)
        if body is None:
            return {"ranks": [], "note": f"The ranks are still being parsed ({progress['message']}); reload for them."}
        bodies.append(body)
    return {"ranks": diff.diff_ranks(bodies[0]["ranks"], bodies[1]["ranks"]), "note": None}


def _rank_traces(state: Profscope, trace: TraceFile) -> tuple[list[TraceFile], dict[str, int]]:
    """The traces of the span group ``trace`` is in, and the rank numbers inferred for them (definitions §10)."""
    run = state.run(trace.run)
    found = run.span_group(trace.span) if run is not None else None
    if run is None or found is None:
        return [], {}
    traces = [t for worker, span_id in found[1].items() if (t := run.find(worker, span_id)) is not None]
    return traces, state.job_ranks(run).inferred


VIEW = View("diff", "Diff", router, queries=(query_of(operator_tree),))
