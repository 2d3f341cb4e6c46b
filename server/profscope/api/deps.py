"""Shared lookups for the routers: the server state (its store), and (run, worker, span) -> trace file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from profscope.cache import dumps
from profscope.catalog import Run, TraceFile

if TYPE_CHECKING:
    from profscope.state import Profscope


def get_state(request: Request) -> Profscope:
    return request.app.state.profscope


def get_run(request: Request, run: str = Query(..., description="Run name, as listed by /api/runs")) -> Run:
    state = get_state(request)
    found = state.run(run)
    if found is None:
        moved = state.moved_run(run)
        where = f"; it is now {moved!r} (run names no longer carry their root's name)" if moved else ""
        raise HTTPException(status_code=404, detail=f"no run named {run!r}{where}")
    return found


def get_trace(
    request: Request,
    run: str = Query(..., description="Run name, as listed by /api/runs"),
    worker: str | None = Query(None, description="Worker (process / rank); default: the first"),
    span: str | None = Query(None, description="Span id; default: the first of the worker"),
) -> TraceFile:
    found = get_run(request, run).find(worker, span)
    if found is None:
        what = f"worker {worker!r}" if span is None else f"worker {worker!r} span {span!r}"
        raise HTTPException(status_code=404, detail=f"run {run!r} has no trace for {what}")
    return found


def json_response(value: object, status_code: int = 200) -> Response:
    return Response(content=dumps(value), media_type="application/json", status_code=status_code)


def payload_or_status(state: Profscope, trace: TraceFile, name: str) -> tuple[bytes | None, Response | None]:
    """The cached payload, or the response to send while the trace is parsing or after it failed."""
    data = state.store.result(trace.cache_key, name)
    if data is not None:
        return data, None
    status = state.ingest.request(trace, urgent=True)
    ident = {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}
    if status.state == "error":
        return None, JSONResponse({"error": status.message, **ident, "state": "error"}, status_code=422)
    if status.state == "ready":  # ready but the payload is missing: cache deleted under us
        state.ingest.retry(trace)
        status = state.ingest.state(trace)
    return None, json_response({**status.to_json(), **ident}, status_code=202)
