"""The server's shared state: roots, catalog refresh, ingest manager, cache."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from profscope.cache import TraceCache
from profscope.catalog import Run, TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestManager, WorkerLimits
from profscope.metrics import Metrics
from profscope.shared_cache import SharedCache
from profscope.sources import LocalSource, ObjectInfo, Source, SourceError, open_source, redact

log = logging.getLogger("profscope.state")


TRANSIENT_RETRY_SCANS = 6  # a trace whose read failed on a storage error is read again after this many rescans


@dataclass
class RootStatus:
    uri: str  # as shown: never holds a credential
    label: str
    source: Source | None
    error: str | None = None
    listed_at: float = 0.0  # time of the last successful listing
    objects: list[ObjectInfo] = field(default_factory=list)  # that listing, served while the store is down

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.uri,
            "error": self.error,
            "objects": len(self.objects),
            "listed_at": self.listed_at or None,
            "stale": bool(self.error and self.listed_at),  # runs shown are from the last good listing
        }


def _display_uri(uri: str, source: Source | None) -> str:
    if source is None or isinstance(source, LocalSource):
        return redact(uri)
    return source.uri


class Profscope:
    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.cache = TraceCache(settings.traces_cache)
        self.roots: list[RootStatus] = []
        for uri in settings.roots:
            source: Source | None = None
            error = None
            try:
                source = open_source(uri, exclude=[Path(settings.cache_dir)], options=settings.storage)
            except SourceError as exc:
                error = str(exc)
            shown = _display_uri(uri, source)
            label = self._unique_label(shown)
            self.roots.append(RootStatus(uri=shown, label=label, source=source, error=error))
        self._sources = {root.source.uri: root.source for root in self.roots if root.source is not None}
        self.shared_cache = (
            SharedCache(settings.shared_cache, settings.storage, self.metrics.shared_cache, writer="profscope serve")
            if settings.shared_cache
            else None
        )
        self.ingest = IngestManager(
            self.cache,
            settings.workers,
            settings.max_trace_bytes,
            max_snapshot_bytes=settings.max_snapshot_bytes,
            source_for=self._sources.__getitem__,
            metrics=self.metrics.ingest,
            shared=self.shared_cache,
            shared_write=settings.shared_cache_write,
            limits=WorkerLimits(settings.max_parse_seconds, settings.worker_memory_bytes),
        )
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self.scans = 0
        self.metrics.watch(self)

    def _unique_label(self, shown: str) -> str:
        """The root's last folder name (its runs are named LABEL/folder when there are several roots);
        two roots ending in the same name (s3://a/runs, gs://b/runs) keep more of their path."""
        path = PurePosixPath(shown.split("://", 1)[-1].rstrip("/"))
        taken = {root.label for root in self.roots}
        for depth in range(1, len(path.parts) + 1):
            label = "/".join(path.parts[-depth:]).lstrip("/")
            if label and label not in taken:
                return label
        return f"{path.name or shown}~{len(self.roots) + 1}"

    # ---- catalog -------------------------------------------------------------------------------
    def rescan(self) -> None:
        """List every root again (in parallel); a root that fails keeps its last listing and says why."""
        listed = [root for root in self.roots if root.source is not None]
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(listed)))) as pool:
            recovered = [root for root, ok in zip(listed, pool.map(self._list_root, listed), strict=True) if ok]
        listings = [(root.label, root.source.uri, root.objects) for root in listed if root.listed_at]
        runs = build_runs(listings, several=len(self.roots) > 1)
        with self._lock:
            self._runs = runs
        self.scans += 1
        self._retry_storage_failures(runs, {root.source.uri for root in recovered})
        if self.settings.eager_ingest:
            for run in runs.values():
                for trace in run.traces() + run.snapshots() + run.memory_logs():
                    self.ingest.request(trace)

    def _list_root(self, root: RootStatus) -> bool:
        """List one root; True when it is readable again after a failed listing."""
        assert root.source is not None
        try:
            objects = root.source.list()
        except Exception as exc:  # whatever a storage SDK raises, the other roots and the server go on
            message = str(exc) if isinstance(exc, SourceError) else redact(f"cannot list {root.uri}: {exc}")
            if message != root.error:
                log.warning("listing failed: %s", message)
            root.error = message
            return False
        recovered = root.error is not None and root.listed_at > 0
        if recovered:
            log.warning("%s is readable again", root.uri)
        root.error, root.listed_at, root.objects = None, time.time(), objects
        return recovered

    def _retry_storage_failures(self, runs: dict[str, Run], recovered_roots: set[str]) -> None:
        """Read again traces whose read failed on a storage error (not on their content)."""
        now = time.time()
        retry_after_s = TRANSIENT_RETRY_SCANS * self.settings.rescan_seconds
        for run in runs.values():
            for trace in run.traces():
                error = self.cache.error(trace.cache_key)
                if not error or error.get("kind") != "SourceError":
                    continue
                if trace.source in recovered_roots or now - float(error.get("at", 0)) >= retry_after_s:
                    self.ingest.retry(trace)

    def start(self) -> None:
        self.rescan()
        self._scanner = threading.Thread(target=self._scan_forever, name="catalog-rescan", daemon=True)
        self._scanner.start()

    def _scan_forever(self) -> None:
        while not self._stop.wait(self.settings.rescan_seconds):
            try:
                self.rescan()
            except Exception:  # the scanner must survive any storage hiccup
                log.exception("catalog rescan failed")

    def stop(self) -> None:
        self._stop.set()
        self.ingest.close()

    def runs(self) -> dict[str, Run]:
        with self._lock:
            return dict(self._runs)

    def run(self, name: str) -> Run | None:
        with self._lock:
            return self._runs.get(name)

    # ---- per-run status ---------------------------------------------------------------------------
    def run_status(self, run: Run) -> dict[str, Any]:
        traces = run.traces()
        states = [self.ingest.state(t) for t in traces]
        snapshots = run.snapshots()
        snapshot_states = [self.ingest.state(s) for s in snapshots]
        memory_logs = run.memory_logs()
        memory_log_states = [self.ingest.state(f) for f in memory_logs]
        every_state = states + snapshot_states + memory_log_states
        names = [s.state for s in every_state]
        if names and all(n == "error" for n in names):
            state = "error"
        elif any(n in ("pending", "parsing", "queued") for n in names):
            state = "parsing"
        else:
            state = "ready"
        total = sum(s.bytes_total for s in every_state) or 1
        done = sum(s.bytes_total if s.state in ("ready", "error") else s.bytes_done for s in every_state)
        errors = [
            {"file": t.key, "message": s.message or "failed"}
            for t, s in zip(traces + snapshots + memory_logs, every_state, strict=True)
            if s.state == "error"
        ]
        errors += [{"file": f.key, "message": f.refusal} for f in run.files if f.refusal]
        return {
            "run": run.name,
            "state": state,
            "progress": done / total,
            "workers": self._readable_workers(run, traces, states),
            "views": self.views_of(run, traces, states, snapshots + memory_logs),
            "errors": errors,
            "files": [
                {"file": t.key, "worker": t.worker, "span": t.span, "bytes": t.info.size, **s.to_json()}
                for t, s in zip(traces, states, strict=True)
            ],
            "snapshots": [
                {
                    "file": f.key,
                    "worker": f.worker,
                    "snapshot": f.span,
                    "bytes": f.info.size,
                    **s.to_json(),
                    "oom_devices": self.oom_devices(f) if s.state == "ready" else [],
                }
                for f, s in zip(snapshots, snapshot_states, strict=True)
            ],
            "memory_logs": [
                {"file": f.key, "worker": f.worker, "log": f.span, "bytes": f.info.size, **s.to_json()}
                for f, s in zip(memory_logs, memory_log_states, strict=True)
            ],
        }

    def oom_devices(self, snapshot: TraceFile) -> list[int]:
        """The devices that ran out of memory in a parsed snapshot (from its cached summary)."""
        data = self.cache.read_view(snapshot.cache_key, "snapshot.summary")
        return orjson.loads(data).get("oom_devices", []) if data else []

    def memory_view_of(self, traces: list[TraceFile], states: list[Any], memory_files: list[TraceFile]) -> list[str]:
        """["memory"] when the run has allocator snapshots, memory.log files or a parsed trace with memory events."""
        if memory_files:
            return ["memory"]
        for trace, state in zip(traces, states, strict=True):
            if state.state == "ready" and (self.cache.summary(trace.cache_key) or {}).get("memory_events"):
                return ["memory"]
        return []

    @staticmethod
    def _readable_workers(run: Run, traces: list[TraceFile], states: list[Any]) -> list[dict[str, Any]]:
        """Workers and spans, leaving out files that failed to parse (they are listed under errors)."""
        failed = {(t.worker, t.span) for t, s in zip(traces, states, strict=True) if s.state == "error"}
        workers = []
        for worker, spans in run.workers().items():
            readable = [span for span in spans if (worker, span) not in failed]
            if readable:
                workers.append({"worker": worker, "spans": readable})
        return workers

    def views_of(
        self, run: Run, traces: list[TraceFile], states: list[Any], memory_files: list[TraceFile]
    ) -> list[str]:
        """The pages a run has, in the navigation's order (``memory_files``: its snapshots and memory.log files)."""
        if not traces:
            return self.memory_view_of(traces, states, memory_files)
        views = ["overview", "operators"]
        for trace, state in zip(traces, states, strict=True):
            if state.state == "ready":
                summary = self.cache.summary(trace.cache_key) or {}
                if summary.get("kernels"):
                    views.append("kernels")
                    break
        views.extend(self.memory_view_of(traces, states, memory_files))
        first = self.cache.summary(traces[0].cache_key) or {}
        if len(run.workers()) > 1 or first.get("distributed"):  # several ranks, or one rank of a distributed job
            views.append("distributed")
        views.append("trace")
        return views
