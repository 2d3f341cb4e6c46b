"""The server's shared state: roots, catalog refresh, ingest manager, cache."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import orjson

from profscope.analysis.distributed import JobRanks, job_ranks
from profscope.analysis.payloads import unique_queries
from profscope.cache import TraceCache
from profscope.cache_bounds import TIDY_EVERY_S, tidy_cache
from profscope.catalog import Run, RunFacts, TraceFile, build_runs, moved_run
from profscope.config import Settings
from profscope.ingest.jobs import IngestManager, WorkerLimits
from profscope.ingest.request import QUERY_KIND
from profscope.shared_cache import SharedCache
from profscope.sources import LocalSource, ObjectInfo, Source, SourceError, is_object_store_uri, open_source, redact
from profscope.store import Store

if TYPE_CHECKING:
    from profscope.analysis.payloads import Query
    from profscope.metrics import Metrics
    from profscope.views.view import View

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
    local: bool = False  # a folder on the server's disk: shown by its label, its absolute path only in the log

    @property
    def shown(self) -> str:
        return self.label if self.local else self.uri

    @property
    def shown_error(self) -> str | None:
        """The listing error as users see it: a local root's absolute path replaced by its label."""
        return self.error.replace(self.uri, self.label) if self.error and self.local else self.error

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.shown,
            "error": self.shown_error,
            "objects": len(self.objects),
            "listed_at": self.listed_at or None,
            "stale": bool(self.error and self.listed_at),  # runs shown are from the last good listing
        }


class _IngestMetricsLater:
    """The ingest manager's metrics (metrics.IngestMetrics), reached through the state when the first parse
    has been handed out: the state builds its metrics on first use."""

    def __init__(self, state: Profscope) -> None:
        self._state = state

    def on_start(self) -> None:
        self._state.metrics.ingest.on_start()

    def on_end(self, seconds: float, ok: bool) -> None:
        self._state.metrics.ingest.on_end(seconds, ok)


def _display_uri(uri: str, source: Source | None) -> str:
    if source is None or isinstance(source, LocalSource):
        return redact(uri)
    return source.uri


class Profscope:
    def __init__(
        self,
        settings: Settings,
        metrics: Metrics | None = None,
        views: Sequence[View] = (),
        queries: Sequence[Query] | None = None,
    ) -> None:
        """``views``: the registry (profscope.views.VIEWS), handed in: views sit above this layer. ``queries``:
        the cached queries each file's ingest computes, by default the views'. ``serve`` builds the state
        before the views are imported, with every declared query (the same set), and hands the views in later
        (``show_views``): the first parse starts while the web framework is still being imported."""
        self.settings = settings
        self._metrics = metrics
        self._metrics_lock = threading.Lock()
        self.cache = TraceCache(settings.traces_cache)
        self.views = tuple(views)
        queries = (
            unique_queries(query for view in self.views for query in view.queries)
            if queries is None
            else tuple(queries)
        )
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
            local = not is_object_store_uri(uri)
            self.roots.append(RootStatus(uri=shown, label=label, source=source, error=error, local=local))
        self._sources = {root.source.uri: root.source for root in self.roots if root.source is not None}
        self.shared_cache = (
            SharedCache(settings.shared_cache, settings.storage, self.metrics.shared_cache, writer="profscope serve")
            if settings.shared_cache
            else None
        )
        self.store = Store(self.cache, queries, shared=self.shared_cache, publish=settings.shared_cache_write)
        self.ingest = IngestManager(
            self.cache,
            settings.workers,
            settings.max_trace_bytes,
            max_snapshot_bytes=settings.max_snapshot_bytes,
            source_for=self._sources.__getitem__,
            metrics=_IngestMetricsLater(self),
            shared=self.shared_cache,
            shared_write=settings.shared_cache_write,
            limits=WorkerLimits(settings.max_parse_seconds, settings.worker_memory_bytes, settings.cores_per_parse),
            queries=queries,
            alone_in_run=self._alone_in_run,
        )
        self._runs: dict[str, Run] = {}
        self._first_listed: dict[str, float] = {}  # cache key -> Unix time of the first listing that held the file
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None
        self.scans = 0
        self._tidied: tuple[float, frozenset[str]] = (float("-inf"), frozenset())  # when, and the files then
        self._told_cache_too_small = False
        if self._metrics is not None:
            self._metrics.watch(self)

    @property
    def metrics(self) -> Metrics:
        """The Prometheus metrics, built on first use: ``serve`` hands out its first parses before
        prometheus_client is imported (~40 ms), which then happens while they run."""
        with self._metrics_lock:
            if self._metrics is None:
                from profscope.metrics import Metrics

                self._metrics = Metrics()
                self._metrics.watch(self)
            return self._metrics

    def _unique_label(self, shown: str) -> str:
        """The root's last folder name (a run named like one of an earlier root becomes LABEL/folder);
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
        runs = build_runs(listings)
        self._note_first_listings(runs, {root.source.uri: root.listed_at for root in listed if root.listed_at})
        with self._lock:
            self._runs = runs
        self.scans += 1
        self._retry_storage_failures(runs, {root.source.uri for root in recovered})
        self._tidy_cache(runs)
        if self.settings.eager_ingest:
            self.ingest.request_all(
                [file for run in runs.values() for file in run.traces() + run.snapshots() + run.memory_logs()]
            )

    def _alone_in_run(self, trace: TraceFile) -> bool:
        """Whether the run of ``trace`` (as last listed) holds no trace of another worker: no Distributed view."""
        run = self._runs.get(trace.run)
        return run is not None and len(run.workers()) == 1

    def _note_first_listings(self, runs: dict[str, Run], listed_at: dict[str, float]) -> None:
        """When each file was first listed (each version of it: a changed file is new): ``/api/runs`` gives it as
        ``seen_at``, where "ready N s after the server saw the file" starts (bench/bench_serve.py). A file no longer
        listed is forgotten."""
        known = self._first_listed
        first = {f.cache_key: known.get(f.cache_key) or listed_at[f.source] for run in runs.values() for f in run.files}
        new = len(first.keys() - known.keys())
        self._first_listed = first
        if new:
            log.info("%d file(s) listed for the first time", new)

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
        elif root.error is not None:
            log.info("%s can be listed now: %d files", root.uri, len(objects))
        if not objects and (root.objects or not root.listed_at):
            log.info("%s holds no file (yet): listed again every %s s", root.uri, self.settings.rescan_seconds)
        root.error, root.listed_at, root.objects = None, time.time(), objects
        return recovered

    def _tidy_cache(self, runs: dict[str, Run]) -> None:
        """Bound the cache (cache_bounds.py) when the files served changed, and every minute for its size."""
        files = [f for run in runs.values() for f in run.traces() + run.snapshots() + run.memory_logs()]
        for file in files:  # entries written since the last scan: from then on known as this root's
            self.cache.record_origin(file.cache_key, file.source, file.key)
        live = {f.cache_key for f in files}
        last_at, last_files = self._tidied
        if frozenset(live) == last_files and time.monotonic() - last_at < TIDY_EVERY_S:
            return
        self._tidied = (time.monotonic(), frozenset(live))
        listed = {r.source.uri for r in self.roots if r.source is not None and r.error is None and r.listed_at}
        report = tidy_cache(self.cache, live, listed, self.settings.cache_max_bytes)
        if report.gone:  # both series exist from the start, at 0 (metrics.Metrics)
            self.metrics.cache_removed.labels("gone").inc(len(report.gone))
        if report.evicted:
            self.metrics.cache_removed.labels("size").inc(len(report.evicted))
        if report.gone or report.evicted:
            log.info("cache: removed %d entries of deleted or overwritten files and %d least recently used "
                     "ones; %d bytes kept", len(report.gone), len(report.evicted), report.bytes_kept)  # fmt: skip
        if 0 < self.settings.cache_max_bytes < report.live_bytes and not self._told_cache_too_small:
            self._told_cache_too_small = True
            log.warning("the runs served take %d bytes of cache, more than --cache-max-bytes %d: they are kept "
                        "(evicting them would parse them again at every rescan)", report.live_bytes,
                        self.settings.cache_max_bytes)  # fmt: skip

    def readiness(self) -> tuple[bool, list[dict[str, str]]]:
        """(ready, roots that cannot be listed). Ready once the first scan is done and every root has been listed
        at least once. A root failing after a good listing does not make the server unready: its runs are still
        served (marked stale), and a storage outage taking every replica out of its Service at once would
        serve nothing instead. A root never listed (a folder not there yet, a wrong bucket or credentials at
        start) keeps it unready, so a probe or a script waiting for it sees why."""
        failing = [{"root": root.shown, "error": root.shown_error or ""} for root in self.roots if root.error]
        never_listed = any(not root.listed_at for root in self.roots)
        return self.scans > 0 and not never_listed, failing

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

    def show_views(self, views: Sequence[View]) -> None:
        """The views, for a state built before they were imported: they must ask for the queries it computes."""
        if {query.name for view in views for query in view.queries} != set(self.store.queries):
            raise ValueError("the views ask for other cached queries than the ingest computes")
        self.views = tuple(views)

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

    def moved_run(self, name: str) -> str | None:
        """The run a link to an unknown run most likely means (see catalog.moved_run)."""
        with self._lock:
            names = list(self._runs)
        return moved_run(name, names, [root.label for root in self.roots])

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
        ranks = self.job_ranks(run)
        applicable = self.views_of(self.run_facts(run, traces, states, snapshots + memory_logs, ranks))
        views = [name for name, reason in applicable.items() if reason is None]
        every_file = traces + snapshots + memory_logs
        files = [(f, s) for f, s in zip(every_file, every_state, strict=True) if s.state != "error"]
        return {
            "run": run.name,
            "state": state,
            "progress": done / total,
            "workers": self._readable_workers(run, traces, states, ranks.inferred),
            "views": views,
            "view_states": {name: self._view_state(name, files) for name in views},
            "unavailable": {name: reason for name, reason in applicable.items() if reason is not None},
            "errors": errors,
            "files": [
                {"file": t.key, "worker": t.worker, "span": t.span, "bytes": t.info.size, **self._file_state(t, s)}
                for t, s in zip(traces, states, strict=True)
            ],
            "snapshots": [
                {
                    "file": f.key,
                    "worker": f.worker,
                    "snapshot": f.span,
                    "bytes": f.info.size,
                    **self._file_state(f, s),
                    "oom_devices": self.oom_devices(f) if s.state == "ready" else [],
                }
                for f, s in zip(snapshots, snapshot_states, strict=True)
            ],
            "memory_logs": [
                {"file": f.key, "worker": f.worker, "log": f.span, "bytes": f.info.size, **self._file_state(f, s)}
                for f, s in zip(memory_logs, memory_log_states, strict=True)
            ],
        }

    def _file_state(self, file: TraceFile, state: Any) -> dict[str, Any]:
        return {**state.to_json(), "seen_at": self._first_listed.get(file.cache_key)}

    def _view_state(self, name: str, files: list[tuple[TraceFile, Any]]) -> str:
        """``ready`` once every result the view reads is there for each of the run's files that has not failed
        (a file still being computed may already have its first results: see cache.py), else ``computing``."""
        view = next(v for v in self.views if v.name == name)
        for file, ingest_state in files:
            needed = [q.name for q in view.queries if q.kind == QUERY_KIND.get(file.kind)]
            needed += list(view.stored) if file.kind in ("trace", "nsys") else []
            if not needed and ingest_state.state != "ready":
                return "computing"
            if not self.store.all_available(file.cache_key, needed, ingest_state.state == "ready"):
                return "computing"
        return "ready"

    def oom_devices(self, snapshot: TraceFile) -> list[int]:
        """The devices that ran out of memory in a parsed snapshot (from its cached summary)."""
        data = self.store.result(snapshot.cache_key, "snapshot.summary")
        return orjson.loads(data).get("oom_devices", []) if data else []

    @staticmethod
    def _readable_workers(
        run: Run, traces: list[TraceFile], states: list[Any], inferred_ranks: dict[str, int]
    ) -> list[dict[str, Any]]:
        """Workers and spans, leaving out files that failed to parse (they are listed under errors); with the
        rank number inferred for a worker whose trace records none (``docs/definitions.md`` §10)."""
        failed = {(t.worker, t.span) for t, s in zip(traces, states, strict=True) if s.state == "error"}
        workers = []
        for worker, spans in run.workers().items():
            readable = [span for span in spans if (worker, span) not in failed]
            if readable:
                inferred = {"inferred_rank": inferred_ranks[worker]} if worker in inferred_ranks else {}
                workers.append({"worker": worker, "spans": readable, **inferred})
        return workers

    def run_facts(
        self, run: Run, traces: list[TraceFile], states: list[Any], memory_files: list[TraceFile], ranks: JobRanks
    ) -> RunFacts:
        """What the views ask of a run (``memory_files``: its snapshots and memory.log files)."""
        readable = [t for t, s in zip(traces, states, strict=True) if s.state != "error"]
        parsed = [self.cache.facts(t.cache_key) or {} for t in readable]
        first = (self.cache.facts(traces[0].cache_key) or {}) if traces else {}
        return RunFacts(
            traces=len(traces),
            kernels=any(summary.get("kernels") for summary in parsed),
            memory=bool(memory_files) or any(summary.get("memory_events") for summary in parsed),
            workers=len(run.workers()),
            distributed_info=bool(first.get("distributed")),
            not_distributed=ranks.reason,
            trace_format=first.get("format"),
        )

    def views_of(self, facts: RunFacts) -> dict[str, str | None]:
        """Each per-run page in the navigation's order: None when it applies to the run, else the reason."""
        return {view.name: view.applies(facts) for view in self.views if view.run_tab}

    def job_ranks(self, run: Run) -> JobRanks:
        """Whether a run's traces are ranks of one job (else why the Distributed view does not apply), and the
        rank numbers inferred for traces that record none (``docs/definitions.md`` §10)."""
        workers = run.workers()

        def summaries() -> list[dict[str, Any] | None]:
            # the parse facts, known before the views are computed (the manifest), or the summary
            firsts = [run.find(worker, spans[0]) for worker, spans in workers.items()]
            return [self.cache.facts(t.cache_key) if t else None for t in firsts]

        return job_ranks(list(workers), summaries)
