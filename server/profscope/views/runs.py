"""/api/runs: every run found under the roots, with parse progress, workers, spans and errors."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from profscope.api.deps import IngestDep, ServerState, get_run, get_trace, json_response
from profscope.catalog import Run, TraceFile
from profscope.views.responses import IngestStatus, MovedRun, RunList, RunStatus
from profscope.views.view import View, always

router = APIRouter(prefix="/api", tags=["runs"])


@router.get(
    "/runs",
    response_model=RunList,
    summary="All runs with their state, workers, spans, views and errors; each root with its listing status",
    description="A root whose listing fails keeps serving the runs of its last good listing: it has an `error` "
    "and `stale: true`, and recovers by itself at a later listing.",
)
def list_runs(state: ServerState) -> Response:
    return json_response(
        {
            "runs": [state.run_status(run) for run in state.runs().values()],
            "roots": [root.to_json() for root in state.roots],
        }
    )


@router.get(
    "/runs/moved",
    response_model=MovedRun,
    summary="Where the run a link names went: `{run, moved_to}` (`moved_to` null when there is no such run)",
    description="Links written while several roots prefixed run names with the root's name (`root/folder`) "
    "lead to `folder`, and the other way round; else the one run whose last folder is the link's.",
)
def moved_run(state: ServerState, run: str = Query(..., description="The run name a link holds")) -> Response:
    moved_to = run if state.run(run) is not None else state.moved_run(run)
    return json_response({"run": run, "moved_to": moved_to})


_NO_SUCH_RUN = {404: {"description": "No such run (or, for a retry, no such worker or span): `{detail}`."}}


@router.get("/run", response_model=RunStatus, responses=_NO_SUCH_RUN, summary="One run's status")
def one_run(state: ServerState, run: Run = Depends(get_run)) -> Response:
    return json_response(state.run_status(run))


@router.post(
    "/retry",
    response_model=IngestStatus,
    status_code=202,
    responses=_NO_SUCH_RUN,
    summary="Parse a trace again (after a fix or a transient storage failure)",
)
def retry(ingest: IngestDep, trace: TraceFile = Depends(get_trace)) -> Response:
    ingest.retry(trace)
    return json_response(ingest.state(trace).to_json(), status_code=202)


VIEW = View("runs", "Runs", router, applies=always, run_tab=False, path="/")
