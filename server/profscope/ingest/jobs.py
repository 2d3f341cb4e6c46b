"""Ingest in worker processes: a bounded pool parses traces and computes their view payloads.

The server never parses: it queues traces here, the pool (``--workers`` processes, spawned once)
reads each from its source, parses it, computes every registered payload and writes the cache.
Progress (bytes read) comes back over a pipe (``progress_channel``). A worker that dies (killed, out of
memory) breaks the pool: the pool is rebuilt, the trace is retried once and then marked failed with the reason.
Faults are pinned on the file that caused them: each worker reports its pid when it starts a trace,
so when the pool breaks, only the traces whose worker died spend an attempt (the others, whose
workers the broken pool stopped, are parsed again as if nothing happened). A parse running longer
than ``--max-parse-seconds`` (a hang: e.g. a pickle whose dict key takes 2**40 steps to hash) has its
worker killed; with ``--worker-memory-bytes`` each worker's address space is capped, so a parse that
needs more fails with MemoryError instead of waking the kernel's OOM killer. A cache that cannot be
written (disk full, directory gone read-only) fails the parse for now and it is tried again later.

With a shared cache in object storage (``shared_cache.py``), a trace the local cache lacks is first
looked up there by a few threads (downloads, no parsing); only a miss goes on to the parse queue.
With ``--shared-cache-write``, every parse result (or failure) is then published for other replicas.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for_processes
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profscope.analysis.payloads import declared_queries
from profscope.cache import TraceCache, is_cache_write_failure
from profscope.catalog import NSYS, TRACE, TraceFile
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.malloc_tuning import map_large_arrays_directly, objects_frozen_for_fork, release_freed_memory
from profscope.ingest.nsys import parse_nsys
from profscope.ingest.paddle import parse_any_trace
from profscope.ingest.parallel_decode import SpeculationFailed
from profscope.ingest.parallel_queries import TreeBuilding, compute_views, job_names, stored_name, two_cores
from profscope.ingest.progress_channel import ProgressChannel
from profscope.ingest.request import ALL, FIRST, REST, IngestRequest, ingest_timings
from profscope.sources import Source, SourceError

if TYPE_CHECKING:
    from profscope.analysis.payloads import Query
    from profscope.metrics import IngestMetrics
    from profscope.shared_cache import SharedCache

log = logging.getLogger("profscope.ingest")

PROGRESS_INTERVAL_S = 0.2
SHARED_CACHE_FETCHERS = 4  # downloads from the shared cache at once (network-bound threads, not processes)
SHARED_CACHE_UPLOADERS = 2
WORKER_NICENESS = 10  # added to the server's: parse workers run at a lower CPU priority
CACHE_RETRY_SECONDS = 30.0  # a trace whose cache could not be written is parsed again after this
WATCHDOG_INTERVAL_S = 0.5
_progress_channel: ProgressChannel | None = None
# file kind -> the parser of its event tables: (stream, on_progress=, max_trace_bytes=) -> TraceTables
TABLE_PARSERS: dict[str, Callable[..., Any]] = {TRACE: parse_any_trace, NSYS: parse_nsys}


@dataclass(frozen=True)
class WorkerLimits:
    """What one parse may take: wall time (its worker is killed past it) and address space (0: no cap)."""

    max_parse_seconds: float = 3600.0
    memory_bytes: int = 0
    cores: int = 2  # processes a parse may use when it is the only one (its decoding and its views); 1: least memory


@dataclass
class IngestState:
    state: str = "pending"  # pending | parsing | ready | error
    bytes_done: int = 0
    bytes_total: int = 0
    message: str | None = None
    attempts: int = 0
    started: float = field(default_factory=time.time)
    retry_at: float | None = None  # a failure that may pass (cache not writable): ask again after this

    def to_json(self) -> dict[str, Any]:
        progress = self.bytes_done / self.bytes_total if self.bytes_total else 0.0
        return {
            "state": self.state,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "progress": 1.0 if self.state == "ready" else min(progress, 0.99),
            "message": self.message,
        }


# ---- in the worker process -------------------------------------------------------------------
def _init_worker(channel: ProgressChannel, memory_bytes: int = 0) -> None:
    global _progress_channel
    _progress_channel = channel
    # Ctrl+C in a terminal reaches the whole process group: the server stops its workers itself, so a
    # worker must not die mid-parse with a KeyboardInterrupt traceback of its own. It was spawned with SIGINT
    # blocked (a Ctrl+C while it was still importing waits, then is dropped here).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if memory_bytes:  # allocations past it raise MemoryError in the parse instead of the OOM killer's SIGKILL
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    map_large_arrays_directly()
    # Parsing yields the CPU to the server process: pages stay responsive while a large trace is read.
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), name="parent-watch", daemon=True).start()


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread: processes it spawns inherit the mask through exec."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose server died (even by SIGKILL) must not linger: its queues never close."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(0)


def run_ingest(request: IngestRequest) -> dict[str, Any]:
    """Parse one trace and cache its tables and query results. Runs in a worker process."""

    cache = TraceCache(Path(request.cache_root))
    last_report = 0.0
    if _progress_channel is not None:  # which process parses what: a fault is pinned on its own file
        _progress_channel.put((request.cache_key, "worker", os.getpid()))

    def on_progress(bytes_read: int) -> None:
        nonlocal last_report
        now = time.monotonic()
        if _progress_channel is not None and now - last_report >= PROGRESS_INTERVAL_S:
            last_report = now
            _progress_channel.put((request.cache_key, "bytes", bytes_read))

    if request.kind == "snapshot":
        from profscope.ingest.snapshot_job import ingest_snapshot

        return ingest_snapshot(request, on_progress)
    if request.kind == "memory_log":
        from profscope.ingest.memory_log_job import ingest_memory_log

        return ingest_memory_log(request, on_progress)
    if request.stage == REST:
        return _finish_views(cache, request)
    started = time.perf_counter()
    parse = TABLE_PARSERS[request.kind]
    cache.forget(request.cache_key)  # what an earlier, interrupted parse left: its manifest must not list it
    try:
        # other parses running or waiting have the other core: a second decoding process would only compete
        options = {} if request.kind != TRACE or request.second_core else {"use_second_core": False}
        try:
            with request.source.open(request.key) as raw:
                tables = parse(raw, on_progress=on_progress, max_trace_bytes=request.max_trace_bytes, **options)
        except SpeculationFailed:  # a piece the second process took was cut wrongly: read it again, on one core
            with request.source.open(request.key) as raw:
                tables = parse(
                    raw, on_progress=on_progress, max_trace_bytes=request.max_trace_bytes, use_second_core=False
                )
    except (TraceFormatError, SourceError) as exc:
        # a SourceError (storage down, object gone) is retried by later listings: see Profscope.rescan
        error = {"message": str(exc), "kind": type(exc).__name__, "at": time.time()}
        cache.write_error(request.cache_key, error)
        return {"error": error["message"]}
    parse_s = time.perf_counter() - started
    release_freed_memory()  # the parse's millions of short-lived objects: give their pages back
    phase_s: dict[str, float] = {}
    progress: dict[str, Any] = {"facts": _parse_facts(request, tables), "views": []}  # results listed once written
    request = request.for_its_run(progress["facts"])

    def written(stored_name: str) -> None:
        progress["views"].append(stored_name)
        cache.write_progress(request.cache_key, progress)

    # on two cores the call tree, which nearly every view reads, is built on a thread from the tables in memory while
    # they are saved, and while the first view is computed (parallel_queries.TreeBuilding)
    with TreeBuilding.started(tables) if two_cores(request) else contextlib.nullcontext() as building:
        mark = time.perf_counter()
        tables.save(cache.tables_dir(request.cache_key))
        phase_s["save_tables"] = time.perf_counter() - mark
        tables = tables.mapped_from(cache.tables_dir(request.cache_key))
        if building is not None:
            building.read_saved(tables)
        cache.write_progress(request.cache_key, progress)
        view_errors, by_helper = compute_views(cache, request, tables, phase_s, written, building=building)
    timings = {**ingest_timings(started, parse_s, phase_s, view_errors), "views_by_helper": by_helper}
    if request.stage == FIRST:  # the entry stays unfinished: its other views come with a REST request
        progress["first_stage"] = timings
        cache.write_progress(request.cache_key, progress)
        return {"rest_later": True}
    summary = {**progress["facts"], **timings}
    cache.write_summary(request.cache_key, summary)
    return summary


def _finish_views(cache: TraceCache, request: IngestRequest) -> dict[str, Any]:
    """The REST stage: the views a FIRST stage left, computed from the saved tables; then the entry is finished.
    An entry that is not as the FIRST stage left it (removed meanwhile) is parsed again from the start."""
    from profscope.tables import TraceTables

    progress = cache.progress(request.cache_key)
    if progress is None or "first_stage" not in progress:
        return run_ingest(dataclasses.replace(request, stage=ALL))
    request = request.for_its_run(progress["facts"])
    started = time.perf_counter()
    tables = TraceTables.load(cache.tables_dir(request.cache_key))
    first = progress["first_stage"]  # kept until the summary is written: an interrupted REST stage can start over

    def written(stored: str) -> None:
        progress["views"].append(stored)
        cache.write_progress(request.cache_key, progress)

    listed = set(progress["views"])
    names = [name for name in job_names(request) if stored_name(request, name) not in listed]
    phase_s = dict(first["phase_s"])
    view_errors, by_helper = compute_views(cache, request, tables, phase_s, written, names)
    summary = {
        **progress["facts"],
        **first,
        "phase_s": phase_s,
        "total_s": first["total_s"] + time.perf_counter() - started,
        "view_errors": {**first["view_errors"], **view_errors},
        "views_by_helper": first["views_by_helper"] + by_helper,
    }
    cache.write_summary(request.cache_key, summary)
    return summary


def _parse_facts(request: IngestRequest, tables: Any) -> dict[str, Any]:
    """What the parse found, known before any view is computed: the run's tabs and the Distributed view's
    grouping read it (``Profscope.run_facts``)."""
    return {
        "key": request.key,
        "events": int(tables.row_count("events")),
        "kernels": int(tables.row_count("kernels")),
        "memory_events": int(tables.row_count("memory")),
        "warnings": tables.meta.get("warnings", []),
        "pieces": tables.meta.get("pieces"),
        "decoder": tables.meta.get("decoder"),
        "format": tables.meta.get("format", "kineto"),
        "device_properties": tables.meta.get("deviceProperties", []),
        "distributed": tables.meta.get("distributedInfo"),
        "process": tables.meta.get("process"),  # Paddle's: its process ids and wall-clock window (definitions §10)
    }


def _run_guarded(request: IngestRequest) -> dict[str, Any]:
    try:
        return run_ingest(request)
    except MemoryError:
        release_freed_memory()
        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        cap = f" (its limit: {limit:,} bytes, --worker-memory-bytes)" if limit != resource.RLIM_INFINITY else ""
        return {"error": f"the parser ran out of memory{cap}", "worker_fault": True}
    except OSError as exc:
        if not is_cache_write_failure(exc, request.cache_root):
            raise
        TraceCache(Path(request.cache_root)).forget(request.cache_key)  # no half-written entry stays
        return {
            "error": f"the parsed result could not be written to the cache ({exc.strerror or exc}); "
            f"it is parsed again in {CACHE_RETRY_SECONDS:.0f} s",
            "retry_after_s": CACHE_RETRY_SECONDS,
        }


def run_job(request: IngestRequest) -> dict[str, Any]:
    """What the pool runs: the ingest, with every failure turned into an answer for the page."""
    try:
        return _run_guarded(request)
    except Exception as exc:  # report bugs on the page instead of losing them in a log
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        log.error("ingest of %s failed:\n%s", request.key, traceback.format_exc())
        return {"error": f"internal error while reading this trace: {detail}"}


def _warm_up() -> None:
    """A prestarted worker's first task: import every analysis module a parse's views need."""
    declared_queries()


# ---- in the server process -------------------------------------------------------------------
_prestarted: tuple[ProcessPoolExecutor, ProgressChannel, int, int] | None = None  # pool, progress, workers, memory cap


def prestart_workers(workers: int, memory_bytes: int = 0) -> None:
    """Start the parse workers now; the next ``IngestManager`` with the same worker settings takes them over.

    On Linux, in a process with no other thread yet, they are forked: ``serve`` calls this once it has
    imported the parsers and the analysis, so the workers start at once with all of it imported (shared
    copy-on-write), ~0.4 s before spawned ones would have imported it. Elsewhere (or once threads run, when a
    fork could copy a lock another thread holds) they are spawned and import it in parallel with the caller.
    Workers the manager starts later (a second parse, a restart after a crash) are always spawned."""
    global _prestarted
    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    context = multiprocessing.get_context("fork" if fork else "spawn")
    # the manager hands this channel to the spawned workers it starts later (a restart): forked workers
    # inherit its pipe, spawned ones get it pickled
    channel = ProgressChannel()
    with _sigint_blocked():  # as in IngestManager._pump: the workers start with Ctrl+C held off
        pool = ProcessPoolExecutor(
            max_workers=max(1, workers), mp_context=context, initializer=_init_worker, initargs=(channel, memory_bytes)
        )
        # forked: every worker starts now, before the pool's own thread; spawned: one, the others when a
        # second parse is queued
        with objects_frozen_for_fork():
            pool.submit(os.getpid if fork else _warm_up)  # a forked worker has everything imported already
    _prestarted = (pool, channel, max(1, workers), memory_bytes)


def stop_prestarted_workers() -> None:
    """Stop the workers ``prestart_workers`` started if no manager took them (the server could not start)."""
    global _prestarted
    if _prestarted is not None:
        _stop_pool(_prestarted[0])
        _prestarted = None


def _take_prestarted(workers: int, memory_bytes: int) -> tuple[ProcessPoolExecutor, ProgressChannel] | None:
    global _prestarted
    taken, _prestarted = _prestarted, None
    if taken is None:
        return None
    pool, channel, prestarted_workers, prestarted_memory = taken
    if (prestarted_workers, prestarted_memory) != (workers, memory_bytes):
        _stop_pool(pool)
        return None
    return pool, channel


class IngestManager:
    def __init__(
        self,
        cache: TraceCache,
        workers: int,
        max_trace_bytes: int,
        source_for: Callable[[str], Source],
        metrics: IngestMetrics | None = None,
        max_snapshot_bytes: int = 8 << 30,
        shared: SharedCache | None = None,
        shared_write: bool = False,
        limits: WorkerLimits | None = None,
        queries: tuple[Query, ...] = (),
        alone_in_run: Callable[[TraceFile], bool] = lambda trace: False,
    ) -> None:
        self.cache = cache
        self.queries = queries  # computed for each file after its parse (profscope.views.registry.queries)
        # whether a trace's run holds no trace of another worker now (its parse skips the Distributed view's query)
        self.alone_in_run = alone_in_run
        self.limits = limits or WorkerLimits()
        self.shared = shared  # looked up before parsing; None: parse whatever the local cache lacks
        self.shared_write = shared_write and shared is not None  # publish parse results for other replicas
        self.source_for = source_for  # a trace's root URI -> the Source that reads it
        self.metrics = metrics
        self.workers = max(1, workers)
        self.max_trace_bytes = max_trace_bytes
        self.max_snapshot_bytes = max_snapshot_bytes
        self._context = multiprocessing.get_context("spawn")
        # A worker's put() writes to the pipe itself (a Queue hands it to a feeder thread, which never runs
        # while a hung parse holds the GIL: its pid would never reach the watchdog), and takes no lock (a
        # SimpleQueue's, held by a killed worker, would block every later put: see progress_channel)
        self._progress = ProgressChannel()
        self._pool: ProcessPoolExecutor | None = None
        prestarted = _take_prestarted(self.workers, self.limits.memory_bytes)
        if prestarted is not None:
            self._pool, self._progress = prestarted
        self._lock = threading.RLock()
        self._states: dict[str, IngestState] = {}
        self._pending: OrderedDict[str, TraceFile] = OrderedDict()
        self._running: dict[str, Future] = {}
        self._to_fetch: OrderedDict[str, TraceFile] = OrderedDict()  # to look up in the shared cache
        self._fetching: dict[str, Future] = {}
        self._urgent: set[str] = set()  # asked for by a page while being looked up: first in the parse queue
        self._replace: set[str] = set()  # their shared entry was invalid: the parse result replaces it
        self._fetchers = ThreadPoolExecutor(SHARED_CACHE_FETCHERS, "shared-cache-fetch") if shared else None
        self._uploaders = ThreadPoolExecutor(SHARED_CACHE_UPLOADERS, "shared-cache-upload") if shared_write else None
        self._closed = False
        self._worker_pids: dict[str, tuple[int, float]] = {}  # cache key -> (pid of its worker, monotonic start)
        self._exit_codes: dict[str, int | None] = {}  # cache key -> exit code of its worker, which died
        self._overtime: set[str] = set()  # parses whose worker the watchdog killed
        # parsed with their first views only, while other files waited: their REST stage is queued behind them
        self._rest_later: set[str] = set()
        self._holding = False  # request_all is queueing: no parse starts yet
        self.counters = {"ingested": 0, "failed": 0, "retried": 0, "pool_restarts": 0, "killed_overtime": 0}
        self.durations: list[float] = []
        self._progress_thread = threading.Thread(target=self._drain_progress, name="ingest-progress", daemon=True)
        self._progress_thread.start()
        self._watchdog = threading.Thread(target=self._watch_parse_time, name="ingest-watchdog", daemon=True)
        self._watchdog.start()

    # ---- public --------------------------------------------------------------------------------
    def state(self, trace: TraceFile) -> IngestState:
        with self._lock:
            known = self._states.get(trace.cache_key)
            if known is not None and known.state in ("pending", "parsing"):
                return known
            if known is not None and known.retry_at is not None and time.time() >= known.retry_at:
                del self._states[trace.cache_key]  # its failure may have passed: the next request parses again
                known = None
        if self.cache.is_ready(trace.cache_key):
            return IngestState(state="ready", bytes_done=trace.info.size, bytes_total=trace.info.size)
        error = self.cache.error(trace.cache_key)
        if error is not None:
            return IngestState(state="error", message=error.get("message"), bytes_total=trace.info.size)
        with self._lock:
            return self._states.get(trace.cache_key) or IngestState(state="queued", bytes_total=trace.info.size)

    def request(self, trace: TraceFile, urgent: bool = False) -> IngestState:
        """Make sure the trace is (being) ingested; ``urgent`` puts it at the front of the queue."""
        current = self.state(trace)
        if current.state in ("ready", "error"):
            return current
        with self._lock:
            key = trace.cache_key
            if key in self._running:
                return self._states[key]
            if key in self._fetching:
                if urgent:
                    self._urgent.add(key)
                return self._states[key]
            queue = self._pending
            if key not in self._pending and key not in self._to_fetch:
                queue = self._to_fetch if self.shared is not None else self._pending
                queue[key] = trace
                self._states[key] = IngestState(state="pending", bytes_total=trace.info.size)
            elif key in self._to_fetch:
                queue = self._to_fetch
            if urgent:
                queue.move_to_end(key, last=False)
                self._urgent.add(key)
            self._pump_fetches()
            self._pump()
            return self._states[key]

    def request_all(self, traces: list[TraceFile]) -> None:
        """``request`` for each file, parses started once every one is queued: the first parse then knows that
        others wait (it computes its first views only: see IngestRequest.stage)."""
        with self._lock:
            self._holding = True
            try:
                for trace in traces:
                    self.request(trace)
            finally:
                self._holding = False
            self._pump()

    def retry(self, trace: TraceFile) -> None:
        """Parse again from scratch; a trace already queued or being read is left to that read."""
        key = trace.cache_key
        with self._lock:
            if any(key in queue for queue in (self._pending, self._running, self._to_fetch, self._fetching)):
                return
            self.cache.forget(key)
            self._states.pop(key, None)
        self.request(trace, urgent=True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            _stop_pool(pool)
        for threads in (self._fetchers, self._uploaders):
            if threads is not None:
                threads.shutdown(wait=False, cancel_futures=True)
        self._progress.put(None)

    def busy(self) -> int:
        with self._lock:
            return len(self._running) + len(self._pending)

    def load(self) -> tuple[int, int]:
        """(traces being parsed now, traces waiting for a worker)."""
        with self._lock:
            return len(self._running), len(self._pending)

    # ---- internals -----------------------------------------------------------------------------
    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=self._context,
                initializer=_init_worker,
                initargs=(self._progress, self.limits.memory_bytes),
            )
        return self._pool

    def _pump_fetches(self) -> None:
        while not self._closed and self._to_fetch and len(self._fetching) < SHARED_CACHE_FETCHERS:
            assert self.shared is not None and self._fetchers is not None
            key, trace = self._to_fetch.popitem(last=False)
            self._states[key].message = "fetching from the shared cache"
            future = self._fetchers.submit(self.shared.fetch, key, self.cache)
            self._fetching[key] = future
            future.add_done_callback(lambda f, k=key, t=trace: self._fetched(k, t, f))

    def _fetched(self, key: str, trace: TraceFile, future: Future) -> None:
        with self._lock:
            self._fetching.pop(key, None)
            if future.cancelled() or self._closed:
                return
            try:
                outcome = future.result()
            except Exception:  # a bug: parse as if the shared cache had nothing
                log.exception("shared cache lookup of %s failed", trace.key)
                outcome = "error"
            if outcome in ("hit", "failure"):  # the local cache answers from now on
                self._states.pop(key, None)
                self._urgent.discard(key)
            else:
                if outcome == "invalid":
                    self._replace.add(key)
                self._states.setdefault(key, IngestState(state="pending", bytes_total=trace.info.size)).message = None
                self._pending[key] = trace
                if key in self._urgent:
                    self._pending.move_to_end(key, last=False)
            self._pump_fetches()
            self._pump()

    def _publish(self, key: str, trace: TraceFile) -> None:
        if self._uploaders is None or self._closed:
            return
        replace = key in self._replace
        self._replace.discard(key)

        def upload() -> None:
            assert self.shared is not None
            try:
                written = self.shared.publish(key, self.cache, trace, replace=replace)
            except OSError as exc:  # the store (SourceError) or the local entry: this replica still serves it
                log.warning("could not write %s to the shared cache: %s", trace.key, exc)
                return
            if written in ("bundle", "failure"):
                log.info("wrote %s to the shared cache (%s)", trace.key, written)

        self._uploaders.submit(upload)

    def _pump(self) -> None:
        while not self._holding and not self._closed and self._pending and len(self._running) < self.workers:
            key, trace = self._pending.popitem(last=False)
            self._urgent.discard(key)
            state = self._states[key]
            state.state, state.started = "parsing", time.time()
            state.attempts += 1
            if key in self._rest_later:
                stage = REST
            else:
                # other files wait for their parse: this one's first views now, its others once theirs are done
                waiting = any(other not in self._rest_later for other in self._pending)
                stage = FIRST if waiting and trace.kind in TABLE_PARSERS else ALL
            request = IngestRequest.for_file(
                trace,
                self.source_for(trace.source),
                self.cache.root,
                self.queries,
                self.max_trace_bytes,
                self.max_snapshot_bytes,
                cache_key=key,
                # alone on the machine: its views may take a second core (several parses share the cores)
                second_core=self.limits.cores > 1 and not self._running and not self._pending,
                stage=stage,
                alone_in_run=self.alone_in_run(trace),
            )
            with _sigint_blocked():  # a worker spawned here starts with Ctrl+C held off (see _init_worker)
                try:
                    future = self._ensure_pool().submit(run_job, request)
                except (BrokenProcessPool, RuntimeError):
                    self._restart_pool()
                    future = self._ensure_pool().submit(run_job, request)
            self._running[key] = future
            if stage != REST and state.attempts == 1 and self.metrics is not None:
                self.metrics.on_start()  # once the parse is handed out: it does not wait for the metrics' import
            future.add_done_callback(lambda f, k=key, t=trace: self._finished(k, t, f))

    def _restart_pool(self) -> None:
        pool, self._pool = self._pool, None
        self.counters["pool_restarts"] += 1
        if pool is not None:
            self._record_exit_codes(pool)
            _stop_pool(pool)

    def _record_exit_codes(self, pool: ProcessPoolExecutor) -> None:
        """Before the broken pool's other workers are stopped: which running parses lost their worker, and how."""
        processes = getattr(pool, "_processes", None) or {}
        for key, (pid, _) in self._worker_pids.items():
            process = processes.get(pid)
            if process is not None and wait_for_processes([process.sentinel], timeout=0):  # it has ended
                process.join(timeout=5)  # its pipes close a moment before it can be reaped
                self._exit_codes[key] = process.exitcode

    def _finished(self, key: str, trace: TraceFile, future: Future) -> None:
        with self._lock:
            self._running.pop(key, None)
            if self._closed:  # stopped by the server's shutdown: not the file's fault, parsed again at next start
                return
            state = self._states.get(key) or IngestState()
            had_worker = key in self._worker_pids
            try:
                result = future.result()
            except BrokenProcessPool:
                result = None
                if self._pool is not None and getattr(self._pool, "_broken", False):
                    self._restart_pool()
            except Exception as exc:
                result = {"error": f"internal error: {exc}"}
            self._worker_pids.pop(key, None)
            worker_died = key in self._exit_codes
            exit_code = self._exit_codes.pop(key, None)
            if result is None and had_worker and not worker_died:
                self._requeue_bystander(key, trace, state)
            elif result is None or result.get("worker_fault"):
                reason = self._death_reason(key, exit_code) if result is None else result["error"]
                self._worker_fault(key, trace, state, reason)
            elif result.get("rest_later"):
                self._rest_later.add(key)
                state.attempts = 0  # the REST stage has its own attempts (a worker that dies in it: once more)
                state.state, state.bytes_done = "pending", trace.info.size
                state.message = "first views ready; the others once every file's first views are"
                self._pending[key] = trace  # behind every file queued before it
            elif "error" in result:
                state.state, state.message = "error", result["error"]
                _log_failure(trace, result["error"])
                self.counters["failed"] += 1
                self._report_end(state, ok=False)
                if "retry_after_s" in result:  # the cache could not be written: not the file's fault, nothing to share
                    state.retry_at = time.time() + result["retry_after_s"]
                else:
                    if not self.cache.error(key):
                        self._remember_error(key, {"message": result["error"], "kind": "InternalError"})
                    self._publish(key, trace)
            else:
                state.state, state.bytes_done = "ready", trace.info.size
                self.counters["ingested"] += 1
                self.durations.append(float(result.get("total_s", 0.0)))
                self._report_end(state, ok=True)
                self._publish(key, trace)
            if state.state in ("ready", "error"):
                self._rest_later.discard(key)
            self._pump()

    def _requeue_bystander(self, key: str, trace: TraceFile, state: IngestState) -> None:
        """Its worker was alive: the pool broke under another parse. Parse it again, free of charge."""
        state.attempts -= 1
        state.state, state.message, state.bytes_done = "pending", "parsing again (another file's parser died)", 0
        self._pending[key] = trace
        self._pending.move_to_end(key, last=False)

    def _worker_fault(self, key: str, trace: TraceFile, state: IngestState, reason: str) -> None:
        """Its worker died or ran out of memory: retry once, then remember the failure with the reason."""
        if state.attempts < 2 and not self._closed:
            self.counters["retried"] += 1
            state.state, state.message, state.bytes_done = "pending", f"{reason}; retrying", 0
            self._pending[key] = trace
            self._pending.move_to_end(key, last=False)
            return
        self._remember_error(key, {"message": reason, "kind": "WorkerDied"})
        state.state, state.message = "error", reason
        _log_failure(trace, reason)
        self.counters["failed"] += 1
        self._report_end(state, ok=False)
        self._publish(key, trace)

    def _death_reason(self, key: str, exit_code: int | None) -> str:
        if key in self._overtime:
            self._overtime.discard(key)
            return (
                f"the parse took longer than {self.limits.max_parse_seconds:g} s (--max-parse-seconds) and was stopped"
            )
        if exit_code is None:
            return "the worker process parsing this trace died (killed, or out of memory)"
        if exit_code < 0:
            number = -exit_code
            name = signal.Signals(number).name if number in signal.valid_signals() else "?"
            hint = " (out of memory, or killed by hand)" if number == signal.SIGKILL else ""
            return f"the parser process was killed (signal {number}, {name}){hint}"
        return f"the parser process exited with code {exit_code}"

    def _remember_error(self, key: str, error: dict[str, Any]) -> None:
        """Write the failure to the cache; when the cache cannot be written, the in-memory state still holds it."""
        try:
            self.cache.write_error(key, error)
        except OSError as exc:
            log.warning("could not write the failure of %s to the cache: %s", key, exc)

    def _watch_parse_time(self) -> None:
        """Kill the worker of a parse running longer than the limit (a hang never returns by itself)."""
        while not self._closed:
            time.sleep(WATCHDOG_INTERVAL_S)
            deadline = time.monotonic() - self.limits.max_parse_seconds
            with self._lock:
                overdue = [
                    (key, pid)
                    for key, (pid, started) in self._worker_pids.items()
                    if key in self._running and key not in self._overtime and started < deadline
                ]
                for key, pid in overdue:
                    log.warning("parse of %s exceeded %g s: killing its worker", key, self.limits.max_parse_seconds)
                    self._overtime.add(key)
                    self.counters["killed_overtime"] += 1
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)

    def _report_end(self, state: IngestState, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.on_end(time.time() - state.started, ok)

    def _drain_progress(self) -> None:
        while True:
            try:
                item = self._progress.get()
            except (EOFError, OSError):
                return
            if item is None:
                return
            key, what, value = item
            with self._lock:
                state = self._states.get(key)
                if state is None or state.state != "parsing":
                    continue
                if what == "worker":
                    self._worker_pids[key] = (value, time.monotonic())
                else:
                    state.bytes_done = value


def _log_failure(trace: TraceFile, reason: str) -> None:
    """Once per failed parse (a failure is remembered in the cache, so the file is not parsed again to fail again)."""
    where = trace.source if trace.source.endswith(f"/{trace.key}") else f"{trace.source.rstrip('/')}/{trace.key}"
    log.warning("cannot read %s: %s", where, reason)


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool now, including workers in the middle of a parse (shutdown alone waits for them)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
