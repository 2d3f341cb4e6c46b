"""/api/distributed: all ranks of one span, built from each rank's cached ``distributed.rank`` summary."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import Response

from profscope.analysis.distributed import build_distributed, summary_from_json
from profscope.api.csv_export import CSV_RESPONSES, ResponseFormat
from profscope.api.deps import get_run, get_state, json_response
from profscope.catalog import Run, TraceFile
from profscope.state import Profscope

router = APIRouter(prefix="/api", tags=["distributed"])

PAYLOAD = "distributed.rank"
_BUILT_CACHE_SIZE = 8
_built: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_built_lock = threading.Lock()


@router.get(
    "/distributed",
    summary="All ranks of a span: computation/communication overlap, synchronizing vs data transfer, stragglers",
    responses={
        202: {"description": "Ranks are still being parsed: `{state, progress, ranks_ready, ranks_total}`; ask again."},
        404: {"description": "No such run, or no such span: `{detail}`."},
        **CSV_RESPONSES,
    },
)
def distributed(
    request: Request,
    run: Run = Depends(get_run),
    span: str | None = Query(
        None,
        description="Any worker's span id (the n-th span of every worker is the same window), or `#n` (1-based); "
        "default: the first span",
    ),
    output: ResponseFormat = Depends(),
) -> Response:
    state = get_state(request)
    found = run.span_group(span)
    if found is None:
        raise HTTPException(status_code=404, detail=f"run {run.name!r} has no span {span!r}")
    position, group = found
    traces = [trace for worker, span_id in group.items() if (trace := run.find(worker, span_id)) is not None]
    inputs, pending = _collect(state, traces)
    ident = {"run": run.name, "span": group[traces[0].worker], "span_position": position + 1}
    if pending:
        return json_response({**ident, **_progress(state, traces, pending)}, status_code=202)
    key = tuple((item["cache_key"], "summary" in item) for item in inputs)
    with _built_lock:
        body = _built.get(key)
    if body is None:
        body = build_distributed([_loaded(state, item) for item in inputs])
        with _built_lock:
            _built[key] = body
            while len(_built) > _BUILT_CACHE_SIZE:
                _built.popitem(last=False)
    return output.respond({**ident, "workers": len(traces), **_with_links(body, run, group)}, f"{run.name}-distributed")


def _collect(state: Profscope, traces: list[TraceFile]) -> tuple[list[dict[str, Any]], list[TraceFile]]:
    """What each rank has: its summary (read later, one at a time), its error, or nothing yet."""
    inputs, pending = [], []
    for trace in traces:
        item: dict[str, Any] = {
            "worker": trace.worker,
            "span": trace.span,
            "file": trace.key,
            "cache_key": trace.cache_key,
        }
        if state.cache.view_path(trace.cache_key, PAYLOAD).exists():
            inputs.append({**item, "summary": None})
            continue
        status = state.ingest.request(trace, urgent=True)
        if status.state == "error":
            inputs.append({**item, "error": status.message or "the trace could not be read"})
        elif status.state == "ready":  # parsed by an older version, or the cache was cleared under us
            state.ingest.retry(trace)
            pending.append(trace)
        else:
            pending.append(trace)
    return inputs, pending


def _loaded(state: Profscope, item: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in item.items() if k != "cache_key"}
    if "summary" not in item:
        return out
    data = state.cache.read_view(item["cache_key"], PAYLOAD)
    summary, error = summary_from_json(data) if data is not None else (None, "its summary disappeared from the cache")
    out.pop("summary")
    return {**out, "summary": summary} if summary is not None else {**out, "error": error}


def _progress(state: Profscope, traces: list[TraceFile], pending: list[TraceFile]) -> dict[str, Any]:
    states = [state.ingest.state(t) for t in traces]
    done = sum(s.bytes_total if s.state in ("ready", "error") else s.bytes_done for s in states)
    total = sum(s.bytes_total for s in states) or 1
    ready = len(traces) - len(pending)
    return {
        "state": "parsing",
        "progress": min(done / total, 0.99),
        "bytes_done": done,
        "bytes_total": total,
        "ranks_ready": ready,
        "ranks_total": len(traces),
        "file": f"{len(pending)} of {len(traces)} ranks",
        "message": f"{ready} of {len(traces)} ranks parsed",
    }


def _with_links(body: dict[str, Any], run: Run, group: dict[str, str]) -> dict[str, Any]:
    """Add Trace view links (``/trace?run&span&workers&start_us&end_us``) to stragglers and collectives."""

    def link(target: dict[str, Any] | None) -> dict[str, Any] | None:
        if not target:
            return target
        trace = target["trace"]
        return {**target, "trace_url": trace_url(run.name, group[trace["workers"][0]], trace["workers"], trace)}

    return {
        **body,
        "collectives": [link(c) for c in body["collectives"]],
        "stragglers": [{**s, "worst": link(s["worst"])} for s in body["stragglers"]],
    }


def trace_url(run: str, span: str, workers: list[str], window: dict[str, float]) -> str:
    """The Trace view of these workers side by side; the window is relative to the FIRST worker's trace
    origin (``/work/notes/timeline-api.md``: page URL ``/trace``)."""
    query = {
        "run": run,
        "span": span,
        "workers": ",".join(workers),
        "start_us": f"{window['start_us']:.3f}",
        "end_us": f"{window['end_us']:.3f}",
    }
    return f"/trace?{urlencode(query)}"
