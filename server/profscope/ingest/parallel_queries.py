"""Compute a parsed trace's views on two cores: a helper process takes jobs from the same list as the worker.

After the parse, a big trace's cached queries and its timeline index cost more than the parse itself, and
they are independent of each other. So the worker spawns a helper process when it starts such a trace (its
imports overlap the parse), and once the tables are saved, both take the next job of one ordered list
through a shared counter: the ``first`` queries, then the timeline index, then the others. The helper
reads the saved tables memory-mapped (as the store does when it recomputes a result), computes with its own
``TraceContext``, writes each result into the cache entry and says so; the worker lists it in the entry's
manifest as the results come, so each page answers as soon as its own result is written.

A helper that dies or fails to start costs nothing but time: the jobs it had taken and not reported are
done by the worker. Small traces never pay for a process: they take ``ONE_CORE_BELOW_BYTES`` or less.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profscope.cache import TraceCache
from profscope.ingest.request import IngestRequest, held_for_tests

if TYPE_CHECKING:
    from profscope.analysis.context import TraceContext
    from profscope.tables import TraceTables

log = logging.getLogger("profscope.ingest")

ONE_CORE_BELOW_BYTES = 4 << 20  # stored bytes (gzip: ~60-90 MB of JSON): the views take well under a second
TIMELINE = "timeline"  # the job that builds the Trace view's index (not a query: arrays, not JSON)


def job_names(request: IngestRequest) -> list[str]:
    """The jobs in the order they are taken: the first views, then the longest job, then the rest as declared."""
    first = [q.name for q in request.queries if q.first]
    rest = [q.name for q in request.queries if not q.first]
    return [*first, TIMELINE, *rest]


class ViewJobs:
    """The jobs of one trace as one process runs them: ``run(name)`` computes one job and writes its result."""

    def __init__(self, cache: TraceCache, request: IngestRequest, tables: TraceTables) -> None:
        from profscope.analysis.context import TraceContext

        self.cache = cache
        self.request = request
        self.tables = tables
        self.context: TraceContext | None = TraceContext(tables)
        self.queries = {q.name: q for q in request.queries}

    def run(self, name: str) -> tuple[str, float, str | None]:
        """(the stored name, seconds, the error or None) of job ``name``, whose result is written once this returns."""
        if name == TIMELINE or not self.queries[name].first:
            held_for_tests()
        mark = time.perf_counter()
        if name == TIMELINE:
            stored, error = TIMELINE, self._timeline()
        else:
            query = self.queries[name]
            assert self.context is not None
            value, error = query.compute(self.context)
            self.cache.write_view(self.request.cache_key, query.stored_name, value)
            stored = query.stored_name
            if error is not None:
                log.error("query %s failed for %s", name, self.request.key)
        return stored, time.perf_counter() - mark, error

    def _timeline(self) -> str | None:
        """The Trace view's index (arrays read memory-mapped) and its listing, as the "timeline" view."""
        from profscope.analysis.timeline_index import build_timeline_index

        try:
            index = build_timeline_index(self.tables)
            index.save(self.cache.timeline_dir(self.request.cache_key))
            self.cache.write_view(self.request.cache_key, TIMELINE, {"version": index.info["version"]})
            return None
        except Exception as exc:  # the other views stay usable
            log.exception("timeline index failed for %s", self.request.key)
            error = f"{type(exc).__name__}: {exc}"
            self.cache.write_view(self.request.cache_key, TIMELINE, {"error": error})
            return error


class Counter:
    """The index of the next job, shared by the worker and its helper (one process only: a plain int)."""

    def __init__(self, shared: Any = None) -> None:
        self._shared = shared
        self._local = 0

    def take(self) -> int:
        if self._shared is None:
            self._local += 1
            return self._local - 1
        with self._shared.get_lock():
            taken = self._shared.value
            self._shared.value = taken + 1
            return taken

    def reset(self) -> None:
        if self._shared is None:
            self._local = 0
        else:
            with self._shared.get_lock():
                self._shared.value = 0


class ViewHelper:
    """The helper process of one worker: spawned once, reused for every big trace the worker reads."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self.counter = Counter(context.Value("q", 0))
        ours, theirs = context.Pipe()
        self._connection: Connection | None = ours
        self._process = context.Process(
            target=_helper_main, args=(theirs, self.counter), name="profscope-views-helper", daemon=True
        )
        self._process.start()
        theirs.close()

    def alive(self) -> bool:
        return self._connection is not None and self._process.is_alive()

    def begin(self, request: IngestRequest, jobs: list[str]) -> bool:
        """Ask the helper to take jobs of ``request`` (the counter must be reset first); False if it is gone."""
        try:
            assert self._connection is not None
            self._connection.send((request, jobs))
            return True
        except (OSError, AssertionError):
            self.close()
            return False

    def reports(self, wait: bool) -> Iterator[tuple[str, str, float, str | None] | None]:
        """What the helper finished since the last call: (job, stored name, seconds, error); None once it has
        taken no further job (it is idle). ``wait``: block until it is idle (or gone)."""
        while self._connection is not None:
            try:
                if not wait and not self._connection.poll():
                    return
                message = self._connection.recv()
            except (EOFError, OSError):
                self.close()
                return
            yield message
            if message is None:
                return

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        with contextlib.suppress(Exception):
            self._process.join(timeout=2)
            if self._process.is_alive():
                self._process.kill()


_helper: ViewHelper | None = None


def helper_for(request: IngestRequest, enabled: bool) -> ViewHelper | None:
    """This worker's helper for ``request`` (started now if needed), or None when one core does."""
    global _helper
    if not enabled or request.size <= ONE_CORE_BELOW_BYTES or (os.cpu_count() or 1) < 2:
        return None
    if _helper is None or not _helper.alive():
        try:
            _helper = ViewHelper()
        except (OSError, AssertionError):  # no process can be started here: one core it is
            _helper = None
    return _helper


def compute_views(
    cache: TraceCache,
    request: IngestRequest,
    tables: TraceTables,
    phase_s: dict[str, float],
    on_written: Callable[[str], None],
    helper: ViewHelper | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Compute and write every job of ``request``; ``on_written(stored name)`` is called for each result once
    it is written (in either process). Returns the errors by job name and the jobs the helper did."""
    jobs = job_names(request)
    errors: dict[str, str] = {}
    done: set[str] = set()
    by_helper: list[str] = []

    def record(name: str, stored: str, seconds: float, error: str | None, helper_did: bool = False) -> None:
        if helper_did:
            by_helper.append(name)
        done.add(name)
        phase_s[name] = seconds
        if error is not None:
            errors[name] = error
        on_written(stored)

    def drain(wait: bool) -> bool:
        """Record the helper's reports; True once it is idle (it said so) or gone."""
        assert helper is not None
        for report in helper.reports(wait):
            if report is None:
                return True
            record(*report, helper_did=True)
        return not helper.alive()

    counter = Counter()
    if helper is not None:
        helper.counter.reset()
        if helper.begin(request, jobs):
            counter = helper.counter
        else:
            helper = None
    local = ViewJobs(cache, request, tables)
    helper_idle = helper is None
    while (taken := counter.take()) < len(jobs):
        record(jobs[taken], *local.run(jobs[taken]))
        if not helper_idle:
            helper_idle = drain(wait=False)
    if not helper_idle:
        drain(wait=True)
    for name in jobs:  # taken by a helper that died before reporting it
        if name not in done:
            record(name, *local.run(name))
    return errors, by_helper


def _helper_main(connection: Connection, counter: Counter) -> None:
    """The helper: for each trace it is given, take jobs until none is left, then say it is idle."""
    from profscope.ingest.malloc_tuning import map_large_arrays_directly, release_freed_memory
    from profscope.tables import TraceTables

    map_large_arrays_directly()
    # the imports the jobs need, while the worker is still parsing
    import profscope.analysis.timeline_index
    import profscope.views.registry  # noqa: F401

    while True:
        try:
            request, jobs = connection.recv()
        except (EOFError, OSError):
            return
        cache = TraceCache(Path(request.cache_root))
        local: ViewJobs | None = None
        try:
            while (taken := counter.take()) < len(jobs):
                if local is None:
                    local = ViewJobs(cache, request, TraceTables.load(cache.tables_dir(request.cache_key)))
                connection.send((jobs[taken], *local.run(jobs[taken])))
            connection.send(None)
        except (EOFError, OSError):
            return
        except Exception:  # the entry vanished, a bug: the worker does the jobs this process took
            log.exception("the views helper failed on %s", request.key)
            with contextlib.suppress(OSError):
                connection.send(None)
        finally:
            local = None
            release_freed_memory()
