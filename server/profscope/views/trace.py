"""The Trace view's API: tracks, windows with level of detail, one slice, search, area summary, export."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import orjson
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from profscope.analysis import timeline
from profscope.analysis.timeline_index import TimelineIndex
from profscope.api.deps import IngestDep, SettingsDep, StoreDep, get_trace, json_response, payload_or_status
from profscope.api.source import frame_links
from profscope.catalog import TraceFile
from profscope.ingest.jobs import IngestManager
from profscope.store import Store
from profscope.tables import TraceTables
from profscope.views.responses import AreaSummary, SliceDetails, SliceSearch, TimelineWindow, TraceExport, TrackListing
from profscope.views.shared import ident
from profscope.views.view import IDENT, View

router = APIRouter(prefix="/api/timeline", tags=["trace view"])

_STATUS_DOC = {
    202: {"description": "The trace is being parsed: `{state, progress, bytes_done, bytes_total}`; ask again."},
    400: {"description": "The window ends before it starts, or (summary) holds too much to summarise: `{detail}`."},
    404: {"description": "No such run / worker / span (or slice id): `{detail}`."},
    422: {"description": "The trace (or its timeline index) could not be built: `{error, file}`."},
}
MAX_WIDTH_PX = 16384
DEFAULT_EXPORT_LIMIT = 1_000_000


def _open(store: Store, ingest: IngestManager, trace: TraceFile) -> tuple[TraceTables, TimelineIndex] | Response:
    data, pending = payload_or_status(store, ingest, trace, "timeline")
    if pending is not None:
        return pending
    marker = orjson.loads(data)
    if "error" in marker:
        return json_response({"error": marker["error"], "file": trace.key, "state": "error"}, status_code=422)
    try:
        return store.trace_tables(trace.cache_key), store.timeline_index(trace.cache_key)
    except (OSError, ValueError, KeyError):  # the cache was removed under us: parse again
        ingest.retry(trace)
        _, pending = payload_or_status(store, ingest, trace, "timeline")
        return pending if pending is not None else json_response({"state": "queued"}, status_code=202)


def _track_set(tracks: str | None) -> set[str] | None:
    if not tracks:
        return None
    return {t for t in re.split(r"[,\s]+", tracks) if t}


def _window_ns(index: TimelineIndex, start_us: float | None, end_us: float | None) -> tuple[int, int]:
    start = 0 if start_us is None else round(start_us * 1000)
    end = int(index.info["duration_ns"]) if end_us is None else round(end_us * 1000)
    if end <= start:
        raise HTTPException(status_code=400, detail=f"end_us ({end_us}) must be after start_us ({start_us})")
    return start, end


# ±31 years: any real window fits, and nanoseconds stay far inside int64 (the index's keys are int64)
MAX_ABS_TIME_US = 1e15
START = Query(None, ge=-MAX_ABS_TIME_US, le=MAX_ABS_TIME_US,
              description="Window start, microseconds from the trace start; default 0")  # fmt: skip
END = Query(None, ge=-MAX_ABS_TIME_US, le=MAX_ABS_TIME_US,
            description="Window end, microseconds from the trace start; default the trace end")  # fmt: skip
TRACKS = Query(None, description="Comma-separated track ids (from /api/timeline/tracks); default all")


@router.get(
    "/tracks",
    response_model=TrackListing,
    responses=_STATUS_DOC,
    summary="The trace's track groups and tracks, in display order",
)
def tracks(store: StoreDep, ingest: IngestDep, trace: TraceFile = Depends(get_trace)) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, index = opened
    return json_response({**ident(trace), **timeline.track_listing(tables, index)})


@router.get(
    "",
    response_model=TimelineWindow,
    responses=_STATUS_DOC,
    summary="What is visible in a time window at a pixel width (server-side level of detail)",
    description=(
        "Slices at least a pixel wide come as themselves; neighbouring narrower slices (gaps under a "
        "pixel) are merged into blocks with their count, busy time and dominant name, per track and "
        "depth. Counter tracks come as step-function points, downsampled per pixel (means for "
        "utilization, min and max otherwise). The answer's size is bounded by `width_px`."
    ),
)
def window(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    start_us: float | None = START,
    end_us: float | None = END,
    width_px: int = Query(1000, ge=1, le=MAX_WIDTH_PX, description="Width of the drawing in pixels"),
    tracks: str | None = TRACKS,
) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, index = opened
    start, end = _window_ns(index, start_us, end_us)
    return json_response(timeline.window(tables, index, start, end, width_px, _track_set(tracks)))


@router.get(
    "/slice",
    response_model=SliceDetails,
    responses=_STATUS_DOC,
    summary="One slice: details, arguments, flows and Python stack",
)
def slice_details(
    store: StoreDep,
    ingest: IngestDep,
    settings: SettingsDep,
    trace: TraceFile = Depends(get_trace),
    id: int = Query(..., ge=0, description="Slice id, as given by /api/timeline"),
) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, index = opened
    if id >= tables.row_count("events"):
        raise HTTPException(status_code=404, detail=f"no slice {id} in {trace.key}")
    details = timeline.slice_details(tables, index, id)
    details["stack"] = [_frame(settings, frame, trace) for frame in details["stack"]]
    return json_response({**ident(trace), **details})


def _frame(settings: Any, frame: dict[str, Any], trace: TraceFile) -> dict[str, Any]:
    links = frame_links(settings, frame, trace)
    return {
        "name": frame["text"],
        "file": frame.get("path"),
        "line": frame.get("line"),
        "href": links.get("view"),
        "external": links.get("external"),
    }


@router.get(
    "/search",
    response_model=SliceSearch,
    responses=_STATUS_DOC,
    summary="Slices whose name contains a text, in time order",
)
def search(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    q: str = Query(..., min_length=1, max_length=500, description="Text to find in slice names (case-insensitive)"),
    index: int = Query(0, description="Which match to return (0-based; wraps around)"),
) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, timeline_index = opened
    rows = store.loaded(("search", trace.cache_key, q.lower()), lambda: timeline.search_rows(tables, q))
    position = index % len(rows) if len(rows) else 0
    match = timeline.search_match(tables, timeline_index, rows, position)
    return json_response({**ident(trace), "q": q, "count": len(rows), "index": position, "match": match})


@router.get(
    "/summary",
    response_model=AreaSummary,
    responses=_STATUS_DOC,
    summary="What runs in a time range: time per name and per track",
)
def summary(
    store: StoreDep,
    ingest: IngestDep,
    settings: SettingsDep,
    trace: TraceFile = Depends(get_trace),
    start_us: float | None = START,
    end_us: float | None = END,
    tracks: str | None = TRACKS,
) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, index = opened
    start, end = _window_ns(index, start_us, end_us)
    _refuse_oversized_summary(index, start, end, _track_set(tracks), settings.max_summary_work)
    return json_response({**ident(trace), **timeline.area_summary(tables, index, start, end, _track_set(tracks))})


def _refuse_oversized_summary(
    index: TimelineIndex, start_ns: int, end_ns: int, track_ids: set[str] | None, max_work: int
) -> None:
    """400 when the area holds too many slices on too many tracks to summarise in one request.

    The summary's busy time per track costs about (tracks) x (slices) steps of a few ns each:
    ``--max-summary-work`` (3x10^8 by default) keeps one request to seconds of one core."""
    chosen = [t for t in index.info["tracks"] if t["kind"] == "slices" and (track_ids is None or t["id"] in track_ids)]
    lanes = np.asarray([lane for t in chosen for lane in t["lanes"]], dtype=np.int64)
    lanes, first, stop = timeline.lane_ranges(index, lanes, start_ns, end_ns)
    slices = int((stop - first).sum())
    busy_tracks = len(np.unique(index.arrays["lane_track"][lanes]))
    if slices * busy_tracks > max_work:
        raise HTTPException(
            status_code=400,
            detail=f"the area holds {slices:,} slices on {busy_tracks:,} tracks: too much to summarise at once; "
            "select fewer tracks or a shorter time range",
        )


@router.get(
    "/export",
    response_model=TraceExport,
    responses={**_STATUS_DOC, 200: {"description": "A Chrome trace JSON file (opens in Perfetto / chrome://tracing)"}},
    summary="The slices of a time window as a Chrome trace file",
)
def export(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    start_us: float | None = START,
    end_us: float | None = END,
    tracks: str | None = TRACKS,
    limit: int = Query(DEFAULT_EXPORT_LIMIT, ge=1, le=10_000_000, description="At most this many slices"),
) -> Response:
    opened = _open(store, ingest, trace)
    if isinstance(opened, Response):
        return opened
    tables, index = opened
    start, end = _window_ns(index, start_us, end_us)
    body = timeline.export_chrome_trace(tables, index, start, end, _track_set(tracks), limit)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", trace.worker)[:80] or "trace"
    filename = f"{stem}_{start // 1000}-{end // 1000}us.trace.json"
    return Response(
        content=orjson.dumps(body),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


VIEW = View("trace", "Trace", router, stored=("timeline",), first_request=f"/api/timeline/tracks?{IDENT}")
