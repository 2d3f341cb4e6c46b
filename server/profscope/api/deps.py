"""What the routers are given through FastAPI ``Depends``: the store, the ingest queue, the settings, the server
state (its catalog), and (run, worker, span) -> trace file. A route names what it reads as a parameter
(``store: StoreDep``), so a test or another deployment can swap it (``app.dependency_overrides[get_store]``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response

from profscope.cache import dumps
from profscope.catalog import Run, TraceFile
from profscope.config import Settings
from profscope.ingest.jobs import IngestManager
from profscope.store import Store

if TYPE_CHECKING:
    from profscope.state import Profscope


def get_state(request: Request) -> Profscope:
    """The server state: the catalog of runs, the roots. Routes take it as ``state: ServerState``."""
    return request.app.state.profscope


def get_store(request: Request) -> Store:
    """Cached query results, loaded tables, timeline indexes (``store.py``)."""
    return get_state(request).store


def get_ingest(request: Request) -> IngestManager:
    """The ingest queue: asked to parse a file whose results are not in the store yet."""
    return get_state(request).ingest


def get_settings(request: Request) -> Settings:
    return get_state(request).settings


ServerState = Annotated["Profscope", Depends(get_state)]
StoreDep = Annotated[Store, Depends(get_store)]
IngestDep = Annotated[IngestManager, Depends(get_ingest)]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_run(state: ServerState, run: str = Query(..., description="Run name, as listed by /api/runs")) -> Run:
    found = state.run(run)
    if found is None:
        moved = state.moved_run(run)
        where = f"; it is now {moved!r} (run names no longer carry their root's name)" if moved else ""
        raise HTTPException(status_code=404, detail=f"no run named {run!r}{where}")
    return found


def get_trace(
    state: ServerState,
    run: str = Query(..., description="Run name, as listed by /api/runs"),
    worker: str | None = Query(None, description="Worker (process / rank); default: the first"),
    span: str | None = Query(None, description="Span id; default: the first of the worker"),
) -> TraceFile:
    found = get_run(state, run).find(worker, span)
    if found is None:
        what = f"worker {worker!r}" if span is None else f"worker {worker!r} span {span!r}"
        raise HTTPException(status_code=404, detail=f"run {run!r} has no trace for {what}")
    return found


def json_response(value: object, status_code: int = 200) -> Response:
    return Response(content=dumps(value), media_type="application/json", status_code=status_code)


def payload_or_status(
    store: Store, ingest: IngestManager, trace: TraceFile, name: str
) -> tuple[bytes | None, Response | None]:
    """The cached payload, or the response to send while the trace is parsing or after it failed."""
    data = store.result(trace.cache_key, name)
    if data is not None:
        return data, None
    status = ingest.request(trace, urgent=True)
    ident = {"run": trace.run, "worker": trace.worker, "span": trace.span, "file": trace.key}
    if status.state == "error":
        return None, JSONResponse({"error": status.message, **ident, "state": "error"}, status_code=422)
    if status.state == "ready":  # ready but the payload is missing: cache deleted under us
        ingest.retry(trace)
        status = ingest.state(trace)
    return None, json_response({**status.to_json(), **ident}, status_code=202)
