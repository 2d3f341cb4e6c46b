"""``profscope index``: parse a root's traces ahead of time into a cache directory that servers share.

Several stateless replicas of ``profscope serve ROOT --cache-dir DIR`` on one shared cache (a
ReadWriteMany volume) then serve the same runs without parsing anything themselves. A large bucket
is split across the pods of a Kubernetes Indexed Job: pod I of N parses the traces whose object key
hashes to I modulo N (``--shard I/N``), so every trace is parsed by exactly one pod and a re-run
skips what is already cached. Entries are the ones the server would write itself (same cache key:
root URI, object key, size, version, parser version), written atomically, so pods never clash.

With ``--cache-dir s3://...`` (or gs://, az://) the cache lives in object storage instead
(``shared_cache.py``): each trace is parsed into a local scratch directory, published as a bundle
plus a manifest (or a failure record), and removed locally. An entry counts as cached when its
manifest and a bundle of the manifest's size are there; failure records are tried again. The first
error of the cache's store ends the run: nothing else could be written either.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from profscope.cache import TraceCache
from profscope.catalog import TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestRequest, map_large_arrays_directly, run_ingest
from profscope.shared_cache import SharedCache
from profscope.sources import Source, SourceError, StorageOptions, open_source, redact
from profscope.views.registry import queries

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
    cache: str = ""
    traces: int = 0  # files under the root the catalog reads: traces, allocator snapshots, memory.log files
    in_shard: int = 0
    parsed: int = 0
    already_cached: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "cache": self.cache,
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
    cache_dir: Path | None,
    shard: tuple[int, int] = (0, 1),
    max_trace_bytes: int = 64 << 30,
    storage: StorageOptions | None = None,
    shared_cache: str | None = None,
    max_snapshot_bytes: int = 8 << 30,
) -> IndexReport:
    """Parse every trace of ``root`` in ``shard`` that the cache does not hold yet; failures are reported.

    The cache is ``cache_dir``, or with ``shared_cache`` (a URI) that object store, with ``cache_dir`` (or a
    temporary directory) as the scratch space each trace is parsed into before its upload."""
    started = time.perf_counter()
    if shared_cache is None:
        assert cache_dir is not None
        report = _index(root, cache_dir, None, shard, (max_trace_bytes, max_snapshot_bytes), storage)
    else:
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="profscope-index-", dir=cache_dir) as scratch:
            shared = SharedCache(shared_cache, storage, writer="profscope index")
            report = _index(root, Path(scratch), shared, shard, (max_trace_bytes, max_snapshot_bytes), storage)
    report.wall_s = time.perf_counter() - started
    return report


def _index(
    root: str,
    cache_dir: Path,
    shared: SharedCache | None,
    shard: tuple[int, int],
    limits: tuple[int, int],
    storage: StorageOptions | None,
) -> IndexReport:
    report = IndexReport(root=redact(root), shard=shard, cache=shared.uri if shared else str(cache_dir))
    cache = TraceCache(Settings(cache_dir=cache_dir).traces_cache)
    try:
        source = open_source(root, exclude=[Path(cache_dir)], options=storage)
        objects = source.list()
    except (SourceError, OSError) as exc:
        report.failures.append({"file": redact(root), "message": f"cannot list it: {redact(str(exc))}"})
        return report
    label = PurePosixPath(root.rstrip("/")).name or root
    runs = build_runs([(label, source.uri, objects)]).values()
    traces = [file for run in runs for file in run.traces() + run.snapshots() + run.memory_logs()]
    report.traces = len(traces)
    map_large_arrays_directly()  # as the server's worker processes do
    for trace in traces:
        if shard_of(trace.key, shard[1]) != shard[0]:
            continue
        report.in_shard += 1
        try:
            if shared.has_bundle(trace.cache_key) if shared else cache.is_ready(trace.cache_key):
                report.already_cached += 1
                continue
            cache.forget(trace.cache_key)  # a failure remembered by an earlier run is tried again
            error = _ingest(source, trace, cache, limits)
            if shared is not None:
                try:
                    shared.publish(trace.cache_key, cache, trace, replace=True)
                finally:
                    cache.forget(trace.cache_key)  # scratch: the shared cache has it now
        except SourceError as exc:  # the cache's store: every other trace would fail the same way
            report.failures.append({"file": report.cache, "message": f"cannot use the cache: {exc}"})
            log.error("stopping: cannot use the cache %s: %s", report.cache, exc)
            return report
        if error is None:
            report.parsed += 1
            log.info("parsed %s", trace.key)
        else:
            report.failures.append({"file": trace.key, "message": error})
            log.warning("failed %s: %s", trace.key, error)
    return report


def _ingest(source: Source, trace: TraceFile, cache: TraceCache, limits: tuple[int, int]) -> str | None:
    """Parse one trace or snapshot into ``cache``; ``limits``: (max trace bytes, max snapshot bytes)."""
    max_trace_bytes, max_snapshot_bytes = limits
    request = IngestRequest.for_file(trace, source, cache.root, queries(), max_trace_bytes, max_snapshot_bytes)
    try:
        result = run_ingest(request)
    except Exception as exc:  # one broken trace must not stop the shard
        message = f"internal error while reading this trace: {type(exc).__name__}: {exc}"
        cache.write_error(trace.cache_key, {"message": message, "kind": "InternalError"})
        return message
    return result.get("error")
