"""``profscope index``: parse a root's traces ahead of time into a cache directory that servers share.

Several stateless replicas of ``profscope serve ROOT --cache-dir DIR`` on one shared cache (a
ReadWriteMany volume) then serve the same runs without parsing anything themselves. A large bucket
is split across the pods of a Kubernetes Indexed Job: pod I of N parses the traces whose object key
hashes to I modulo N (``--shard I/N``), so every trace is parsed by exactly one pod and a re-run
skips what is already cached. Entries are the ones the server would write itself (same cache key:
root URI, object key, size, version, parser version), written atomically, so pods never clash.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from profscope.cache import TraceCache
from profscope.catalog import TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestRequest, map_large_arrays_directly, run_ingest
from profscope.sources import Source, SourceError, StorageOptions, open_source, redact

log = logging.getLogger("profscope.index")


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` -> (I, N), with 0 <= I < N."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like I/N (e.g. 0/4), not {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text}: need 0 <= I < N")
    return index, count


def shard_of(key: str, count: int) -> int:
    """Which of ``count`` shards parses the object ``key`` (stable across machines and runs)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


@dataclass
class IndexReport:
    root: str
    shard: tuple[int, int]
    traces: int = 0  # trace files under the root
    in_shard: int = 0
    parsed: int = 0
    already_cached: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "shard": f"{self.shard[0]}/{self.shard[1]}",
            "traces": self.traces,
            "in_shard": self.in_shard,
            "parsed": self.parsed,
            "already_cached": self.already_cached,
            "failed": len(self.failures),
            "wall_s": round(self.wall_s, 3),
        }


def index_root(
    root: str,
    cache_dir: Path,
    shard: tuple[int, int] = (0, 1),
    max_trace_bytes: int = 64 << 30,
    storage: StorageOptions | None = None,
) -> IndexReport:
    """Parse every trace of ``root`` in ``shard`` that the cache does not hold yet; failures are reported."""
    started = time.perf_counter()
    report = IndexReport(root=redact(root), shard=shard)
    cache = TraceCache(Settings(cache_dir=cache_dir).traces_cache)
    try:
        source = open_source(root, exclude=[Path(cache_dir)], options=storage)
        objects = source.list()
    except (SourceError, OSError) as exc:
        report.failures.append({"file": redact(root), "message": f"cannot list it: {redact(str(exc))}"})
        return report
    label = PurePosixPath(root.rstrip("/")).name or root
    traces = [t for run in build_runs([(label, source.uri, objects)]).values() for t in run.traces()]
    report.traces = len(traces)
    map_large_arrays_directly()  # as the server's worker processes do
    for trace in traces:
        if shard_of(trace.key, shard[1]) != shard[0]:
            continue
        report.in_shard += 1
        if cache.is_ready(trace.cache_key):
            report.already_cached += 1
            continue
        cache.forget(trace.cache_key)  # a failure remembered by an earlier run is tried again
        error = _ingest(source, trace, cache, max_trace_bytes)
        if error is None:
            report.parsed += 1
            log.info("parsed %s", trace.key)
        else:
            report.failures.append({"file": trace.key, "message": error})
            log.warning("failed %s: %s", trace.key, error)
    report.wall_s = time.perf_counter() - started
    return report


def _ingest(source: Source, trace: TraceFile, cache: TraceCache, max_trace_bytes: int) -> str | None:
    request = IngestRequest(
        source=source,
        key=trace.key,
        size=trace.info.size,
        cache_key=trace.cache_key,
        cache_root=str(cache.root),
        max_trace_bytes=max_trace_bytes,
    )
    try:
        result = run_ingest(request)
    except Exception as exc:  # one broken trace must not stop the shard
        message = f"internal error while reading this trace: {type(exc).__name__}: {exc}"
        cache.write_error(trace.cache_key, {"message": message, "kind": "InternalError"})
        return message
    return result.get("error")
