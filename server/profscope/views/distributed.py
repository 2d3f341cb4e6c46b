"""/api/distributed: all ranks of one span, built from each rank's cached ``distributed.rank`` summary."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from profscope.analysis.distributed import build_distributed, summary_from_json
from profscope.analysis.payloads import query_of
from profscope.analysis.rank_summary import rank_payload
from profscope.api.csv_export import CSV_RESPONSES, ResponseFormat
from profscope.api.deps import IngestDep, ServerState, StoreDep, get_run, json_response
from profscope.catalog import Run, TraceFile
from profscope.ingest.jobs import IngestManager
from profscope.store import Store
from profscope.views.responses import Distributed, NotDistributed
from profscope.views.view import NO_TRACE, RunFacts, View

router = APIRouter(prefix="/api", tags=["distributed"])

PAYLOAD = query_of(rank_payload).name


@router.get(
    "/distributed",
    response_model=Distributed | NotDistributed,
    summary="All ranks of a span: computation/communication overlap, synchronizing vs data transfer, stragglers",
    responses={
        202: {"description": "Ranks are still being parsed: `{state, progress, ranks_ready, ranks_total}`; ask again."},
        404: {"description": "No such run, or no such span: `{detail}`."},
        **CSV_RESPONSES,
        200: {
            "description": "The ranks side by side; or, for a run that is not distributed, "
            "`{run, applies: false, reason}`.",
            **CSV_RESPONSES[200],
        },
    },
)
def distributed(
    state: ServerState,
    store: StoreDep,
    ingest: IngestDep,
    run: Run = Depends(get_run),
    span: str | None = Query(
        None,
        description="Any worker's span id (the n-th span of every worker is the same window), or `#n` (1-based); "
        "default: the first span",
    ),
    output: ResponseFormat = Depends(),
) -> Response:
    found = run.span_group(span)
    if found is None:  # a link to a span that is not there is a 404, distributed run or not
        raise HTTPException(status_code=404, detail=f"run {run.name!r} has no span {span!r}")
    ranks = state.job_ranks(run)
    if ranks.reason is not None:
        return json_response(
            {"run": run.name, "applies": False, "reason": f"Distributed does not apply: {ranks.reason}."}
        )
    position, group = found
    traces = [trace for worker, span_id in group.items() if (trace := run.find(worker, span_id)) is not None]
    ident = {"run": run.name, "span": group[traces[0].worker], "span_position": position + 1}
    body, progress = span_distributed(store, ingest, traces, ranks.inferred)
    if body is None:
        return json_response({**ident, **progress}, status_code=202)
    body = {**ident, "applies": True, "workers": len(traces), **_with_links(body, run, group)}
    return output.respond(body, f"{run.name}-distributed")


def span_distributed(
    store: Store, ingest: IngestManager, traces: list[TraceFile], inferred_ranks: dict[str, int]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The Distributed view of these ranks (one span group), or None and the parse progress while one is parsing.
    Built from the ranks' cached summaries, once per set of them. ``inferred_ranks``: ``JobRanks.inferred``."""
    inputs, pending = _collect(store, ingest, traces, inferred_ranks)
    if pending:
        return None, _progress(ingest, traces, pending)
    key = ("distributed", *((item["cache_key"], "summary" in item) for item in inputs))
    return store.loaded(key, lambda: build_distributed([_loaded(store, item) for item in inputs])), {}


def _collect(
    store: Store, ingest: IngestManager, traces: list[TraceFile], inferred_ranks: dict[str, int]
) -> tuple[list[dict[str, Any]], list[TraceFile]]:
    """What each rank has: its summary (read later, one at a time), its error, or nothing yet."""
    inputs, pending = [], []
    for trace in traces:
        item: dict[str, Any] = {
            "worker": trace.worker,
            "span": trace.span,
            "file": trace.key,
            "cache_key": trace.cache_key,
            "inferred_rank": inferred_ranks.get(trace.worker),
        }
        if store.available(trace.cache_key, PAYLOAD):
            inputs.append({**item, "summary": None})
            continue
        status = ingest.request(trace, urgent=True)
        if status.state == "error":
            inputs.append({**item, "error": status.message or "the trace could not be read"})
        elif status.state == "ready":  # parsed by an older version, or the cache was cleared under us
            ingest.retry(trace)
            pending.append(trace)
        else:
            pending.append(trace)
    return inputs, pending


def _loaded(store: Store, item: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in item.items() if k != "cache_key"}
    if "summary" not in item:
        return out
    data = store.result(item["cache_key"], PAYLOAD)
    summary, error = summary_from_json(data) if data is not None else (None, "its summary disappeared from the cache")
    out.pop("summary")
    return {**out, "summary": summary} if summary is not None else {**out, "error": error}


def _progress(ingest: IngestManager, traces: list[TraceFile], pending: list[TraceFile]) -> dict[str, Any]:
    states = [ingest.state(t) for t in traces]
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
    """The Trace view of these workers side by side, the first worker's call (``event``) selected; the
    window is relative to the FIRST worker's trace origin (the Trace page reads ``start_us`` / ``end_us`` so)."""
    query = {
        "run": run,
        "span": span,
        "workers": ",".join(workers),
        "start_us": f"{window['start_us']:.3f}",
        "end_us": f"{window['end_us']:.3f}",
    }
    if window.get("event") is not None:  # the late rank's call, selected and scrolled into view
        query.update({"slice": str(window["event"]), "slice_worker": workers[0], "slice_span": span})
    return f"/trace?{urlencode(query)}"


def applies(facts: RunFacts) -> str | None:
    if not facts.traces:
        return NO_TRACE
    return facts.not_distributed


VIEW = View(
    "distributed",
    "Distributed",
    router,
    queries=(query_of(rank_payload),),
    applies=applies,
    first_request="/api/distributed?run={run}&span={span}",
)
