"""The server's shared state: roots, catalog refresh, ingest manager, cache."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from profscope.cache import TraceCache
from profscope.catalog import Run, TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestManager
from profscope.sources import Source, SourceError, open_source

log = logging.getLogger("profscope.state")


@dataclass
class RootStatus:
    uri: str
    label: str
    source: Source | None
    error: str | None = None
    listed_at: float = 0.0
    object_count: int = 0


class Profscope:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache = TraceCache(settings.traces_cache)
        self.ingest = IngestManager(
            self.cache, settings.workers, settings.max_trace_bytes, max_snapshot_bytes=settings.max_snapshot_bytes
        )
        self.roots: list[RootStatus] = []
        for uri in settings.roots:
            label = PurePosixPath(uri.rstrip("/")).name or uri
            try:
                source = open_source(uri, exclude=[Path(settings.cache_dir)])
                self.roots.append(RootStatus(uri=uri, label=label, source=source))
            except SourceError as exc:
                self.roots.append(RootStatus(uri=uri, label=label, source=None, error=str(exc)))
        self._runs: dict[str, Run] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self.scans = 0

    # ---- catalog -------------------------------------------------------------------------------
    def rescan(self) -> None:
        listings = []
        for root in self.roots:
            if root.source is None:
                continue
            try:
                objects = root.source.list()
            except (SourceError, OSError) as exc:
                root.error = f"cannot list {root.uri}: {exc}"
                continue
            root.error, root.listed_at, root.object_count = None, time.time(), len(objects)
            listings.append((root.label, root.source.uri, objects))
        runs = build_runs(listings)
        with self._lock:
            self._runs = runs
        self.scans += 1
        if self.settings.eager_ingest:
            for run in runs.values():
                for trace in run.traces() + run.snapshots():
                    self.ingest.request(trace)

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
        names = [s.state for s in states + snapshot_states]
        if names and all(n == "error" for n in names):
            state = "error"
        elif any(n in ("pending", "parsing", "queued") for n in names):
            state = "parsing"
        else:
            state = "ready"
        total = sum(s.bytes_total for s in states + snapshot_states) or 1
        done = sum(s.bytes_total if s.state in ("ready", "error") else s.bytes_done for s in states + snapshot_states)
        errors = [
            {"file": t.key, "message": s.message or "failed"}
            for t, s in zip(traces + snapshots, states + snapshot_states, strict=True)
            if s.state == "error"
        ]
        errors += [{"file": f.key, "message": f.refusal} for f in run.files if f.refusal]
        return {
            "run": run.name,
            "state": state,
            "progress": done / total,
            "workers": self._readable_workers(run, traces, states),
            "views": self.views_of(run, traces, states) + self.memory_view_of(traces, states, snapshots),
            "errors": errors,
            "files": [
                {"file": t.key, "worker": t.worker, "span": t.span, "bytes": t.info.size, **s.to_json()}
                for t, s in zip(traces, states, strict=True)
            ],
            "snapshots": [
                {"file": f.key, "worker": f.worker, "snapshot": f.span, "bytes": f.info.size, **s.to_json()}
                for f, s in zip(snapshots, snapshot_states, strict=True)
            ],
        }

    def memory_view_of(self, traces: list[TraceFile], states: list[Any], snapshots: list[TraceFile]) -> list[str]:
        """["memory"] when the run has allocator snapshots or a parsed trace with memory events."""
        if snapshots:
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

    def views_of(self, run: Run, traces: list[TraceFile], states: list[Any]) -> list[str]:
        if not traces:
            return []
        views = ["overview", "operators"]
        for trace, state in zip(traces, states, strict=True):
            if state.state == "ready":
                summary = self.cache.summary(trace.cache_key) or {}
                if summary.get("kernels"):
                    views.append("kernels")
                    break
        return views
