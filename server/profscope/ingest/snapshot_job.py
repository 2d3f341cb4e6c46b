"""Ingest of one allocator snapshot, in a worker process: read safely, normalise, pair, cache."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profscope.cache import TraceCache
from profscope.ingest.malloc_tuning import release_freed_memory
from profscope.ingest.request import IngestRequest, ingest_timings, write_query_results
from profscope.ingest.safe_pickle import PickleRefused
from profscope.ingest.snapshot import SnapshotFormatError, parse_snapshot
from profscope.sources import SourceError

log = logging.getLogger("profscope.ingest")


def ingest_snapshot(request: IngestRequest, on_progress: Callable[[int], None]) -> dict[str, Any]:
    from profscope.analysis.snapshot_allocations import build_allocations, build_levels

    cache = TraceCache(Path(request.cache_root))
    started = time.perf_counter()
    try:
        with request.source.open(request.key) as raw:
            tables = parse_snapshot(raw, request.max_snapshot_bytes, on_progress=on_progress)
    except (PickleRefused, SnapshotFormatError, SourceError) as exc:
        error = {"message": f"{request.key}: {exc}", "kind": type(exc).__name__}
        cache.write_error(request.cache_key, error)
        return {"error": error["message"]}
    parse_s = time.perf_counter() - started
    release_freed_memory()  # the decoded pickle's objects: give their pages back before pairing
    phase_s: dict[str, float] = {}
    mark = time.perf_counter()
    tables.columns["allocations"] = build_allocations(tables)
    phase_s["allocations"] = time.perf_counter() - mark
    mark = time.perf_counter()
    tables.columns["levels"], tables.columns["device_levels"] = build_levels(tables)
    phase_s["levels"] = time.perf_counter() - mark
    mark = time.perf_counter()
    tables.save(cache.tables_dir(request.cache_key))
    phase_s["save_tables"] = time.perf_counter() - mark
    view_errors = write_query_results(cache, request, tables, phase_s)
    mark = time.perf_counter()
    _save_default_timelines(cache, request, tables, view_errors)
    phase_s["default_timelines"] = time.perf_counter() - mark
    summary = {
        "key": request.key,
        "kind": "snapshot",
        "entries": tables.row_count("entries"),
        "segments": tables.row_count("segments"),
        "blocks": tables.row_count("blocks"),
        "allocations": tables.row_count("allocations"),
        "devices": tables.meta["devices"],
        "warnings": tables.meta.get("warnings", []),
        **ingest_timings(started, parse_s, phase_s, view_errors),
    }
    cache.write_summary(request.cache_key, summary)
    return summary


def _save_default_timelines(cache: TraceCache, request: IngestRequest, tables: Any, view_errors: dict) -> None:
    """Each device's whole-window timeline at the page's first-draw size: the first draw reads a file.

    A device whose timeline fails gets none: the request computes it (and shows the error) itself.
    """
    from profscope.analysis.snapshot_timeline import default_timeline_view, timeline

    for device in tables.meta["devices"]:
        name = default_timeline_view(device)
        try:
            cache.write_view(request.cache_key, name, timeline(tables, device))
        except Exception as exc:
            log.exception("default timeline of device %s failed for %s", device, request.key)
            view_errors[name] = f"{type(exc).__name__}: {exc}"
