"""JSON twins of the Memory page: the profiler's memory events, CUDA allocator snapshots, InternLM memory.log.

Both read the cached tables memory-mapped; the few structures a request needs (device names and
sorted records, the event attribution, a snapshot's tables) are kept in the store's bounded cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import Response

from profscope.analysis import snapshot_stacks as snapshot_queries
from profscope.analysis.memory import (
    MemoryAttribution,
    MemoryRecords,
    curve,
    curve_unavailable_reason,
    memory_attribution,
    memory_events,
    memory_records,
    memory_statistics,
    peaks,
)
from profscope.analysis.memory_log import SUNBURSTS, layer_tree, log_curve, log_summary
from profscope.analysis.payloads import query_of
from profscope.analysis.snapshot_stacks import allocation_row, stack_frames, stack_tree, top_allocations
from profscope.analysis.snapshot_state import oom_moments, segment_state
from profscope.analysis.snapshot_timeline import (
    DEFAULT_HEIGHT_PX,
    DEFAULT_MIN_PX,
    DEFAULT_WIDTH_PX,
    default_timeline_view,
    is_default_request,
    timeline,
    timeline_axis,
)
from profscope.api.csv_export import CSV_RESPONSES, ResponseFormat
from profscope.api.deps import (
    IngestDep,
    SettingsDep,
    StoreDep,
    get_run,
    get_trace,
    json_response,
    payload_or_status,
)
from profscope.api.source import frame_links
from profscope.catalog import Run, TraceFile
from profscope.ingest.jobs import IngestManager
from profscope.ingest.memory_log import MemoryLog
from profscope.ingest.memory_log_job import MEMORY_LOG_VIEW
from profscope.snapshot_tables import SnapshotTables
from profscope.store import Store
from profscope.tables import TraceTables
from profscope.views.responses import (
    MemoryLogCurve,
    MemoryLogLayers,
    ProfilerMemory,
    SnapshotAllocation,
    SnapshotOoms,
    SnapshotSegments,
    SnapshotStacks,
    SnapshotSummary,
    SnapshotTimeline,
    SnapshotTop,
)
from profscope.views.view import IDENT, RunFacts, View

router = APIRouter(prefix="/api/memory", tags=["memory"])

_STATUS_DOC = {
    202: {"description": "The file is being read: `{state, progress, bytes_done, bytes_total}`; ask again."},
    404: {"description": "No such run, worker, span, snapshot, memory.log, device or layout: `{detail}`."},
    422: {"description": "The file could not be read (e.g. a pickle that is not plain data): `{error, file}`."},
}
_TABLE_DOC = {**_STATUS_DOC, **CSV_RESPONSES}  # a JSON twin that also answers format=csv


def _ident(file: TraceFile) -> dict[str, str]:
    return {"run": file.run, "worker": file.worker, "file": file.key}


def applies(facts: RunFacts) -> str | None:
    if facts.memory:
        return None
    return "This run has no memory events (profile_memory=True), allocator snapshots or memory.log files"


def _window(start_us: float | None, end_us: float | None) -> None:
    if start_us is not None and end_us is not None and end_us < start_us:
        raise HTTPException(422, detail=f"end_us ({end_us}) is before start_us ({start_us})")


# ---- profiler memory events ----------------------------------------------------------------------
@router.get(
    "",
    response_model=ProfilerMemory,
    responses=_TABLE_DOC,
    summary="Profiler memory: devices, peaks, curve, memory events, per-op stats",
)
def profiler_memory(
    store: StoreDep,
    ingest: IngestDep,
    trace: TraceFile = Depends(get_trace),
    device: str | None = Query(None, description="CPU, GPU0, ...; default: the first GPU, else CPU"),
    start_us: float | None = Query(None, description="Window start, µs since the trace's first event"),
    end_us: float | None = Query(None, description="Window end, µs since the trace's first event"),
    width_px: int = Query(1500, ge=10, le=20000, description="Plot width: the curve keeps ~4 points per pixel"),
    output: ResponseFormat = Depends(),
) -> Response:
    """The curve is `[[t_us, allocated_bytes, reserved_bytes], ...]`, downsampled per pixel column keeping each
    column's first, last, lowest and highest points. `events` and `stats` are limited to the window.
    `curve_reason` says why a device has no curve (its events carry no address or totals), else null."""
    _window(start_us, end_us)
    data, pending = payload_or_status(store, ingest, trace, "memory.attribution")
    if pending is not None:
        return pending
    tables, records, attribution, whole_trace_stats = store.loaded(
        ("profiler memory", trace.cache_key),
        lambda: _load_profiler_memory(store.trace_tables(trace.cache_key), data),
    )
    base = {**_ident(trace), "span": trace.span, "devices": records.names}
    if not records.names:
        return json_response(
            {
                **base,
                "device": None,
                "reason": "this trace has no [memory] events: profile with profile_memory=True to record them",
                "curve": [],
                "events": [],
                "stats": [],
            }
        )
    chosen = device or next((d for d in records.names if d.startswith("GPU")), records.names[0])
    if chosen not in records.names:
        raise HTTPException(404, detail=f"no device {chosen!r} in this trace; it has {records.names}")
    drawn = curve(records, chosen, start_us, end_us, width_px)
    device_peaks = peaks(records)
    return output.respond(
        {
            **base,
            "device": chosen,
            "peak_allocated_bytes": device_peaks[chosen]["peak_allocated_bytes"],
            "peak_reserved_bytes": device_peaks[chosen]["peak_reserved_bytes"],
            "peaks": device_peaks,
            **drawn,
            "curve_reason": curve_unavailable_reason(records, chosen),
            "events": memory_events(tables, records, attribution, chosen, start_us, end_us),
            "stats": (
                whole_trace_stats
                if start_us is None and end_us is None
                else memory_statistics(tables, records, attribution, start_us, end_us)
            ).get(chosen, []),
        },
        f"{trace.run}-memory-{chosen}",
    )


def _load_profiler_memory(tables: TraceTables, attribution_json: bytes) -> tuple:
    """What every request of the trace reads, and the statistics of the whole trace (the page's first request's,
    ~half of its time: computed once, not on each opening of the page)."""
    records: MemoryRecords = memory_records(tables)
    body = orjson.loads(attribution_json)
    attribution = MemoryAttribution.from_json(body) if body else _no_attribution(tables)
    return tables, records, attribution, memory_statistics(tables, records, attribution)


def _no_attribution(tables: TraceTables) -> MemoryAttribution:
    import numpy as np

    empty = np.zeros(0, dtype=np.int64)
    return MemoryAttribution(
        np.full(tables.row_count("memory"), -1), empty, empty, empty, empty, empty.astype(bool), empty.astype(bool)
    )


# ---- allocator snapshots -------------------------------------------------------------------------
def get_snapshot(
    run: Run = Depends(get_run),
    worker: str | None = Query(None, description="Worker (rank) of the snapshot; default: the first"),
    snapshot: str | None = Query(None, description="Snapshot name (the file name without .pickle); default: first"),
) -> TraceFile:
    found = run.find_snapshot(worker, snapshot)
    if found is None:
        raise HTTPException(404, detail=f"run {run.name!r} has no snapshot {snapshot!r} of worker {worker!r}")
    return found


def _snapshot_view(
    store: Store,
    ingest: IngestManager,
    snapshot: TraceFile,
    shape: Callable[[SnapshotTables, dict], dict],
    output: ResponseFormat | None = None,
) -> Response:
    data, pending = payload_or_status(store, ingest, snapshot, "snapshot.summary")
    if pending is not None:
        return pending
    summary = orjson.loads(data)
    tables = store.snapshot_tables(snapshot.cache_key)
    body = {**_ident(snapshot), "snapshot": snapshot.span, **shape(tables, summary)}
    return output.respond(body, f"{snapshot.run}-{snapshot.span}") if output else json_response(body)


def _device(summary: dict, device: int | None) -> int:
    devices = [d["device"] for d in summary["devices"]]
    if device is None:
        if not devices:
            raise HTTPException(404, detail="this snapshot has no device with segments or trace entries")
        return devices[0]
    if device not in devices:
        raise HTTPException(404, detail=f"no device {device} in this snapshot; it has {devices}")
    return device


DeviceQuery = Query(None, ge=0, description="CUDA device index; default: the first in the snapshot")
Moment = Literal["peak", "end"]
MomentQuery = Query("peak", description="peak: live at the device's peak allocated bytes; end: at snapshot time")


@router.get(
    "/snapshot",
    response_model=SnapshotSummary,
    responses=_STATUS_DOC,
    summary="Snapshot summary: devices, peaks, allocator settings",
)
def snapshot_summary(store: StoreDep, ingest: IngestDep, snapshot: TraceFile = Depends(get_snapshot)) -> Response:
    return _snapshot_view(store, ingest, snapshot, lambda tables, summary: summary)


@router.get(
    "/snapshot/timeline",
    response_model=SnapshotTimeline,
    responses=_STATUS_DOC,
    summary="Active memory timeline, drawn at a size",
)
def snapshot_timeline(
    store: StoreDep,
    ingest: IngestDep,
    snapshot: TraceFile = Depends(get_snapshot),
    device: int | None = DeviceQuery,
    start_us: float | None = Query(
        None, description="Window start, µs since the device's first entry (`axis` time_us)"
    ),
    end_us: float | None = Query(None, description="Window end, µs since the device's first entry (`axis` time_us)"),
    start_entry: int | None = Query(None, ge=0, description="Window start, an entry index (`axis` entry: no times)"),
    end_entry: int | None = Query(None, ge=0, description="Window end, an entry index (`axis` entry: no times)"),
    start: float | None = Query(
        None, deprecated=True, description="Old name of start_us or start_entry, as the axis is"
    ),
    end: float | None = Query(None, deprecated=True, description="Old name of end_us or end_entry, as the axis is"),
    width_px: int = Query(DEFAULT_WIDTH_PX, ge=10, le=8000, description="Plot width in pixels"),
    height_px: int = Query(DEFAULT_HEIGHT_PX, ge=10, le=8000, description="Plot height in pixels"),
    min_px: float = Query(DEFAULT_MIN_PX, gt=0, le=100, description="Allocations less tall than this (pixels) merge"),
) -> Response:
    """Bands: allocations at least `min_px` tall at this window and height, each with its bottom `y` (bytes)
    at the x positions where it moves; the rest is one "small allocations" band (`summarized`). The whole
    window at the default size (the page's first draw) is computed when the snapshot is read, and served
    from the cache. The window is in the unit of the device's `axis`: `start_us` / `end_us` with times,
    `start_entry` / `end_entry` without (a snapshot recorded without times)."""
    data, pending = payload_or_status(store, ingest, snapshot, "snapshot.summary")
    if pending is not None:
        return pending
    chosen = _device(orjson.loads(data), device)
    by_unit = {"time_us": (start_us, end_us), "entry": (start_entry, end_entry)}
    if any(value is not None for pair in by_unit.values() for value in pair):
        axis = timeline_axis(store.snapshot_tables(snapshot.cache_key), chosen)
        start, end = _window_on_axis(axis, by_unit, (start, end))
    _window(start, end)
    if is_default_request(start, end, width_px, height_px, min_px):
        cached = store.result(snapshot.cache_key, default_timeline_view(chosen))
        if cached is not None:
            return json_response({**_ident(snapshot), "snapshot": snapshot.span, **orjson.loads(cached)})
    return _snapshot_view(
        store,
        ingest,
        snapshot,
        lambda tables, summary: timeline(tables, chosen, start, end, width_px, height_px, min_px=min_px),
    )


def _window_on_axis(
    axis: str, by_unit: dict[str, tuple[float | None, float | None]], old: tuple[float | None, float | None]
) -> tuple[float | None, float | None]:
    """The window in the axis's unit: its own names first, then the old ``start`` / ``end``; a window given in
    the other unit is a 422 saying which names this timeline takes."""
    names = {"time_us": "start_us / end_us", "entry": "start_entry / end_entry"}
    for unit, pair in by_unit.items():
        if unit != axis and any(value is not None for value in pair):
            raise HTTPException(422, detail=f"this timeline's axis is {axis}: give its window as {names[axis]}")
    start, end = by_unit[axis]
    return (old[0] if start is None else start), (old[1] if end is None else end)


@router.get(
    "/snapshot/segments",
    response_model=SnapshotSegments,
    responses=_STATUS_DOC,
    summary="Allocator state: segments, blocks, fragmentation",
)
def snapshot_segments(
    store: StoreDep, ingest: IngestDep, snapshot: TraceFile = Depends(get_snapshot), device: int | None = DeviceQuery
) -> Response:
    return _snapshot_view(
        store, ingest, snapshot, lambda tables, summary: segment_state(tables, _device(summary, device))
    )


@router.get(
    "/snapshot/top",
    response_model=SnapshotTop,
    responses=_TABLE_DOC,
    summary="Largest allocations live at the peak (or at the end)",
)
def snapshot_top(
    store: StoreDep,
    ingest: IngestDep,
    snapshot: TraceFile = Depends(get_snapshot),
    device: int | None = DeviceQuery,
    moment: Moment = MomentQuery,
    limit: int = Query(100, ge=1, le=5000, description="How many allocations"),
    output: ResponseFormat = Depends(),
) -> Response:
    return _snapshot_view(
        store,
        ingest,
        snapshot,
        lambda tables, summary: top_allocations(tables, _device(summary, device), moment, limit),
        output,
    )


@router.get(
    "/snapshot/stacks",
    response_model=SnapshotStacks,
    responses=_STATUS_DOC,
    summary="Live bytes grouped by call stack (sunburst)",
)
def snapshot_stacks(
    store: StoreDep,
    ingest: IngestDep,
    snapshot: TraceFile = Depends(get_snapshot),
    device: int | None = DeviceQuery,
    moment: Moment = MomentQuery,
) -> Response:
    return _snapshot_view(
        store, ingest, snapshot, lambda tables, summary: stack_tree(tables, _device(summary, device), moment)
    )


@router.get(
    "/snapshot/oom",
    response_model=SnapshotOoms,
    responses=_STATUS_DOC,
    summary="Out-of-memory moments: request, free memory, live",
)
def snapshot_oom(
    store: StoreDep,
    ingest: IngestDep,
    settings: SettingsDep,
    snapshot: TraceFile = Depends(get_snapshot),
    device: int | None = DeviceQuery,
) -> Response:
    """Each OOM's frames (Python frames when there are any, innermost first) carry jump-to-source links."""

    def shape(tables: SnapshotTables, summary: dict) -> dict:
        moments = oom_moments(tables, _device(summary, device))
        for oom in moments["ooms"]:
            oom["frames"] = [
                _linked(settings, f, snapshot) for f in stack_frames(tables, oom["stack"], python_only=True)
            ]
        return moments

    return _snapshot_view(store, ingest, snapshot, shape)


@router.get(
    "/snapshot/allocation",
    response_model=SnapshotAllocation,
    responses=_STATUS_DOC,
    summary="One allocation with its whole call stack",
)
def snapshot_allocation(
    store: StoreDep,
    ingest: IngestDep,
    settings: SettingsDep,
    snapshot: TraceFile = Depends(get_snapshot),
    id: int = Query(..., ge=0, description="Allocation id (as in the timeline's bands and the top table)"),
    all_frames: bool = Query(False, description="Also the interpreter's and the allocator's own frames"),
) -> Response:
    """Frames innermost first, each with jump-to-source links when its file is under a source root."""

    def shape(tables: SnapshotTables, summary: dict) -> dict:
        if id >= tables.row_count("allocations"):
            raise HTTPException(404, detail=f"no allocation {id}")
        row = allocation_row(tables, id)
        frames = [_linked(settings, f, snapshot) for f in stack_frames(tables, row["stack"], python_only=False)]
        if not all_frames:
            frames = [f for f in frames if f["filename"].endswith(".py")] or frames
        return {**row, "device": int(tables.table("allocations")["device"][id]), "frames": frames}

    return _snapshot_view(store, ingest, snapshot, shape)


def _linked(settings: Any, frame: dict[str, Any], snapshot: TraceFile) -> dict[str, Any]:
    if frame["filename"] in ("", "??") or frame["line"] <= 0:
        return {**frame, "links": {}}
    return {**frame, "links": frame_links(settings, {"path": frame["filename"], "line": frame["line"]}, snapshot)}


# ---- InternLM memory.log ------------------------------------------------------------------------
def get_memory_log(
    run: Run = Depends(get_run),
    worker: str | None = Query(None, description="Worker (rank folder) of the memory.log; default: the first"),
) -> TraceFile:
    found = run.find_memory_log(worker)
    if found is None:
        raise HTTPException(404, detail=f"run {run.name!r} has no memory.log of worker {worker!r}")
    return found


def _memory_log_view(
    store: Store, ingest: IngestManager, file: TraceFile, shape: Callable[[MemoryLog], dict]
) -> Response:
    data, pending = payload_or_status(store, ingest, file, MEMORY_LOG_VIEW)
    if pending is not None:
        return pending
    log = store.loaded(("memory.log", file.cache_key), lambda: MemoryLog.from_json(orjson.loads(data)))
    return json_response({**_ident(file), "log": file.span, **shape(log)})


@router.get(
    "/log",
    response_model=MemoryLogCurve,
    responses=_STATUS_DOC,
    summary="InternLM memory.log: memory curve, by category, with peaks",
)
def memory_log(
    store: StoreDep,
    ingest: IngestDep,
    file: TraceFile = Depends(get_memory_log),
    start_us: float | None = Query(None, description="Window start, µs since the profiler started"),
    end_us: float | None = Query(None, description="Window end, µs since the profiler started"),
    width_px: int = Query(1500, ge=10, le=20000, description="Plot width: the curve keeps ~4 points per pixel"),
) -> Response:
    """`curve` is `[[t_us, allocated_bytes, null], ...]` as in `/api/memory`: t since the profiler started,
    allocated the logged `total_memory` (parameters, gradients, optimizer parameters and state, activations:
    tensor sizes, logged in MB with two decimals); the log has no reserved bytes. `category_curve` holds each
    category's bytes at the same points; `sunbursts` the layer layouts `/api/memory/log/layers` can draw."""
    _window(start_us, end_us)
    return _memory_log_view(
        store, ingest, file, lambda log: {**log_summary(log), **log_curve(log, start_us, end_us, width_px)}
    )


@router.get(
    "/log/layers",
    response_model=MemoryLogLayers,
    responses=_STATUS_DOC,
    summary="InternLM memory.log: one category's bytes by layer",
)
def memory_log_layers(
    store: StoreDep,
    ingest: IngestDep,
    file: TraceFile = Depends(get_memory_log),
    category: Literal["params", "grads", "optimizer", "activations"] = Query(
        "params", description="params, grads, optimizer (its parameter copies and state) or activations"
    ),
) -> Response:
    """Sunburst columns (`ids`, `labels`, `parents`, `values` in bytes) of the category's last logged layout,
    by module path; each value is the node's own bytes plus its subtree's."""

    def shape(log: MemoryLog) -> dict:
        tree = layer_tree(log, category)
        if not tree["ids"]:
            wanted = " or ".join(f"{name}_layout" for name in SUNBURSTS[category])
            raise HTTPException(404, detail=f"this memory.log has no {wanted} yet")
        return tree

    return _memory_log_view(store, ingest, file, shape)


VIEW = View(
    "memory",
    "Memory",
    router,
    queries=(query_of(memory_attribution), query_of(snapshot_queries.snapshot_summary)),
    applies=applies,
    first_request=f"/api/memory?{IDENT}&width_px=1500",  # a trace's memory (a run of snapshots only has none)
)
