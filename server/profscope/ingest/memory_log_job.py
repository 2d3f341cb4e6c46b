"""Ingest of one InternLM memory.log, in a worker process: read, parse, cache the parsed log."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profscope.cache import TraceCache
from profscope.ingest.memory_log import MemoryLogFormatError, parse_memory_log
from profscope.ingest.request import IngestRequest
from profscope.sources import SourceError

MEMORY_LOG_VIEW = "memory_log"  # the parsed log (MemoryLog.to_json), read by api/memory.py


def ingest_memory_log(request: IngestRequest, on_progress: Callable[[int], None]) -> dict[str, Any]:
    cache = TraceCache(Path(request.cache_root))
    started = time.perf_counter()
    try:
        with request.source.open(request.key) as raw:
            log = parse_memory_log(raw, request.max_trace_bytes, on_progress=on_progress)
    except (MemoryLogFormatError, SourceError) as exc:
        error = {"message": f"{request.key}: {exc}", "kind": type(exc).__name__}
        cache.write_error(request.cache_key, error)
        return {"error": error["message"]}
    cache.write_view(request.cache_key, MEMORY_LOG_VIEW, log.to_json())
    summary = {
        "key": request.key,
        "kind": "memory_log",
        "points": log.points,
        "layouts": sorted(log.layouts),
        "warnings": log.warnings,
        "total_s": time.perf_counter() - started,
    }
    cache.write_summary(request.cache_key, summary)
    return summary
