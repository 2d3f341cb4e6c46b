"""Compute a parsed trace's views on two cores: a forked helper takes jobs from the same list as the worker.

After the parse, a big trace's cached queries and its timeline index cost more than the parse itself, and
they are independent of each other. The call tree, which nearly every query reads, is built on a thread
(``TreeBuilding``: from the tables still in memory, started as soon as the parse is done, read from their files
once saved) while the worker saves the tables and runs its first job, the Overview, which computes what needs no
tree first. Once both are done the worker forks a child for the timeline index, which needs no call tree, and a
second child, which shares the tables, the tree and every import (copy on write: nothing is loaded or computed
twice), waits for the timeline child to end, and from then on takes, as the worker does, the next job of one
ordered list through a shared counter: the ``first`` queries, then the others as declared. The child writes each
result into the cache entry and says so; the worker lists it in the entry's manifest as the results come, so each
page answers as soon as its own result is written.

A helper that dies or cannot start costs nothing but time: the jobs it had taken and not reported are done
by the worker. Small traces never pay for a process (``ONE_CORE_BELOW_BYTES``), nor does a parse that shares
the machine with others (``IngestRequest.second_core``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import multiprocessing
import os
import struct
import termios
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for_processes
from typing import TYPE_CHECKING

from profscope.cache import TraceCache
from profscope.ingest.malloc_tuning import freed_heap_set_aside, objects_frozen_for_fork
from profscope.ingest.request import FIRST, REST, IngestRequest, held_for_tests

if TYPE_CHECKING:
    from profscope.analysis.call_tree import CallTree, RuntimeLaunches
    from profscope.analysis.context import TraceContext
    from profscope.tables import TraceTables

log = logging.getLogger("profscope.ingest")

ONE_CORE_BELOW_BYTES = 4 << 20  # stored bytes (gzip: ~60-90 MB of JSON): the views take well under a second
TIMELINE = "timeline"  # the job that builds the Trace view's index (not a query: arrays, not JSON)
Report = tuple[str, str, float, "str | None"]  # (job, stored name, seconds, error)


def job_names(request: IngestRequest) -> list[str]:
    """The jobs of the request's stage in the order they are taken: the first views, then the longest job (the
    timeline index), then the rest as declared."""
    first = [q.name for q in request.queries if q.first]
    rest = [q.name for q in request.queries if not q.first]
    return {FIRST: first, REST: [TIMELINE, *rest]}.get(request.stage, [*first, TIMELINE, *rest])


def stored_name(request: IngestRequest, job: str) -> str:
    """The name job ``job``'s result is stored and listed under."""
    return next((q.stored_name for q in request.queries if q.name == job), job)


class ViewJobs:
    """The jobs of one trace: ``run(name)`` computes one job and writes its result."""

    def __init__(self, cache: TraceCache, request: IngestRequest, tables: TraceTables) -> None:
        from profscope.analysis.context import TraceContext

        self.cache = cache
        self.request = request
        self.tables = tables
        self.context: TraceContext = TraceContext(tables)
        self.queries = {q.name: q for q in request.queries}
        self.tree_s = 0.0

    @contextlib.contextmanager
    def tree_meanwhile(self, building: TreeBuilding) -> Iterator[None]:
        """Meanwhile the call tree, which nearly every query reads, is built on ``building``'s thread, and
        ``context.tree`` waits for it: the job run meanwhile computes what needs no tree first (the Overview does:
        ``overview.build_overview``). On leaving, the thread has ended, so that a fork may follow, and the tree and
        the steps are built, before the fork, so once. A failure is left to the queries, which report it."""
        self.context = self.context_of(building)
        try:
            yield
        finally:
            building.join()
            self.tree_s = building.seconds
            with contextlib.suppress(Exception):
                self.context.steps  # noqa: B018
                self.context.tree  # noqa: B018
            # the jobs that follow read the saved tables: the building's tables (its columns mapped since the save)
            # and the launches, held for the jobs run meanwhile, go
            self.context = self.context.on(self.tables)
            building.release()
            self.tables.release_pages()  # the helper forked next would hold the pages they read too

    def context_of(self, building: TreeBuilding) -> TraceContext:
        """A context whose call tree and launches are ``building``'s, over the tables it holds (in memory) if any."""
        from profscope.analysis.context import TraceContext

        tables, launches = building.tables or self.tables, building.launches
        return TraceContext(tables, tree=building.tree.result, launches=launches.result if launches else None)

    def release(self) -> None:
        """Drop the call tree and every shared structure: what comes next (the timeline index) needs the room."""
        from profscope.analysis.context import TraceContext
        from profscope.ingest.malloc_tuning import release_freed_memory

        self.context = TraceContext(self.tables)
        release_freed_memory()

    def run(self, name: str) -> Report:
        """Job ``name``, whose result is written once this returns."""
        if name == TIMELINE or not self.queries[name].first:
            held_for_tests()
        mark = time.perf_counter()
        if name == TIMELINE:
            stored, error = TIMELINE, self._timeline()
        else:
            query = self.queries[name]
            value, error = query.compute(self.context)
            self.cache.write_view(self.request.cache_key, query.stored_name, value)
            stored = query.stored_name
            if error is not None:
                log.error("query %s failed for %s", name, self.request.key)
        self.tables.release_pages()  # this process holds only the pages of the job it runs
        return name, stored, time.perf_counter() - mark, error

    def _timeline(self) -> str | None:
        """The Trace view's index (arrays read memory-mapped) and its listing, as the "timeline" view."""
        from profscope.analysis.timeline_index import write_timeline_index

        try:
            index = write_timeline_index(self.tables, self.cache.timeline_dir(self.request.cache_key))
            self.cache.write_view(self.request.cache_key, TIMELINE, {"version": index.info["version"]})
            return None
        except Exception as exc:  # the other views stay usable
            log.exception("timeline index failed for %s", self.request.key)
            error = f"{type(exc).__name__}: {exc}"
            self.cache.write_view(self.request.cache_key, TIMELINE, {"error": error})
            return error


class TreeBuilding:
    """The call tree, and the runtime launches the steps need, built on a thread from ``tables`` (its C loops and
    numpy's gathers and sorts release the GIL), which it holds until then. Started by the worker on the tables a
    parse left in memory, it is built while they are saved (``jobs.run_ingest``) and while the first job computes
    what needs no tree (``ViewJobs.tree_meanwhile``); no process is forked until it has ended."""

    def __init__(self, tables: TraceTables) -> None:
        self.tables: TraceTables | None = tables  # what the jobs run meanwhile read too (ViewJobs.tree_meanwhile)
        self.launches: Future[RuntimeLaunches] | None = Future()
        self.tree: Future[CallTree] = Future()
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._build, args=(tables,), name="profscope-call-tree", daemon=True)
        self._thread.start()

    def _build(self, tables: TraceTables) -> None:
        from profscope.analysis.call_tree import build_call_tree, runtime_launches

        mark = time.perf_counter()
        found = self.launches
        try:
            launches = runtime_launches(tables)
            found.set_result(launches)
            self.tree.set_result(build_call_tree(tables, launches))
        except Exception as exc:  # the queries that read them report it
            for future in (found, self.tree):
                if not future.done():
                    future.set_exception(exc)
        self.seconds = time.perf_counter() - mark

    def read_saved(self, saved: TraceTables) -> None:
        """The tables are saved (``saved``: read from their files): from here every column is read from its file,
        by the thread and the jobs run meanwhile alike. The tables in memory are changed in place, column by column:
        the thread's own reference to them sees the change, and each column in memory goes once no frame holds it
        (the events: ~150 MB at 1 GB, held to the fork otherwise). Their pages are in the page cache the save just
        filled: a read maps them (the call tree unmaps what it has read, ``build_call_tree``)."""
        if self.tables is not None:
            for name, columns in saved.columns.items():
                self.tables.columns.setdefault(name, {}).update(columns)

    def join(self) -> None:
        self._thread.join()

    def release(self) -> None:
        """Drop what the building held for the jobs run meanwhile: the tables in memory, the launches (the steps
        are found: ~13 MB of nsres_x1GB)."""
        self.tables = None
        self.launches = None

    @classmethod
    @contextlib.contextmanager
    def started(cls, tables: TraceTables) -> Iterator[TreeBuilding]:
        """A building of ``tables``' tree, joined on leaving (whatever happened meanwhile: no fork while it runs)."""
        building = cls(tables)
        del tables  # held by the building alone (its columns read from their files once saved: ``read_saved``)
        try:
            yield building
        finally:
            building.join()
            building.release()


class Counter:
    """The index of the next job: a plain int in one process; with ``jobs``, shared by the worker and the helpers
    it forks, through a pipe that holds one byte a job not yet taken (its index, in order). A take is a one-byte
    read: a process killed at any moment (the OOM killer, by hand) has taken its job or not, and holds nothing the
    others wait for. (A lock, as ``multiprocessing.Value``'s, held by a killed helper, blocked the worker until the
    parse's deadline; it also needed shared memory, which a container without /dev/shm lacks.)"""

    def __init__(self, jobs: int | None = None) -> None:
        self._local = 0
        self._jobs = jobs
        self._read: int | None = None
        if jobs is not None:
            tokens = bytes(range(jobs))  # ValueError past 256 jobs
            self._read, write = os.pipe()
            os.write(write, tokens)  # all at once: a pipe holds 64 KiB
            os.close(write)  # no writer left: a read of the empty pipe returns nothing at once

    def peek(self) -> int:
        """The next index, not taken."""
        if self._read is None:
            return self._local
        assert self._jobs is not None
        return self._jobs - _unread(self._read)

    def take(self) -> int:
        """The next index, taken; the number of jobs once every one is."""
        if self._read is None:
            self._local += 1
            return self._local - 1
        assert self._jobs is not None
        taken = os.read(self._read, 1)
        return taken[0] if taken else self._jobs

    def close(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def __enter__(self) -> Counter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unread(fd: int) -> int:
    """The bytes a pipe holds, not read yet."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]


class ForkedHelper:
    """The worker's child for one trace's jobs: forked with the trace's tables and context in memory."""

    def __init__(self, jobs: ViewJobs, names: list[str], counter: Counter, after: ForkedHelper | None = None) -> None:
        """``after``: a helper this one waits for before it takes a job (its process ended)."""
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe(duplex=False)
        self._connection: Connection | None = ours
        after_ended = after._process.sentinel if after is not None else None
        self._process = context.Process(
            target=_helper_process,
            args=(theirs, jobs, names, counter, after_ended),
            name="profscope-views-helper",
            daemon=True,
        )
        with objects_frozen_for_fork():
            self._process.start()
        theirs.close()

    def alive(self) -> bool:
        return self._connection is not None

    def reports(self, wait: bool) -> Iterator[Report | None]:
        """What the helper finished since the last call; None once it takes no further job (it is done).
        ``wait``: block until it is done (or gone)."""
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
                self.close()
                return

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        with contextlib.suppress(Exception):
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()


def two_cores(request: IngestRequest) -> bool:
    """Whether ``request``'s views are computed by a forked helper too."""
    return (
        request.second_core
        and request.size > ONE_CORE_BELOW_BYTES
        and (os.cpu_count() or 1) >= 2
        and "fork" in multiprocessing.get_all_start_methods()
    )


def compute_views(
    cache: TraceCache,
    request: IngestRequest,
    tables: TraceTables,
    phase_s: dict[str, float],
    on_written: Callable[[str], None],
    names: list[str] | None = None,
    building: TreeBuilding | None = None,
) -> tuple[dict[str, str], list[str]]:
    """Compute and write the jobs ``names`` (default: those of the request's stage); ``on_written(stored name)``
    is called for each result once it is written (in either process). Returns the errors by job name and the
    jobs the helper did. Meanwhile the heap the parse freed is set aside (``freed_heap_set_aside``): the large
    arrays of the call tree, the timeline index and the queries get mappings of their own, in every process.
    ``building``: the call tree, started on a thread already (on two cores, by the worker that parsed)."""
    with freed_heap_set_aside() as heap, contextlib.ExitStack() as closing:
        names = job_names(request) if names is None else names
        every_job = list(names)
        errors: dict[str, str] = {}
        done: set[str] = set()
        by_helper: list[str] = []

        def record(report: Report, helper_did: bool = False) -> None:
            name, stored, seconds, error = report
            if helper_did:
                by_helper.append(name)
            done.add(name)
            phase_s[name] = seconds
            if error is not None:
                errors[name] = error
            on_written(stored)

        local = ViewJobs(cache, request, tables)
        helpers: list[ForkedHelper] = []
        timeline_last = TIMELINE in names  # on one core the timeline index comes last, with the room the others had
        names = [name for name in names if name != TIMELINE]
        counter, timeline_child = Counter(), None
        second = two_cores(request)
        if second:
            try:
                counter = closing.enter_context(Counter(len(names)))
            except OSError:  # no file descriptor left for its pipe: one core it is
                second = False
        if building is not None and not second:  # no second core after all (no pipe for the counter): the built tree
            building.join()
            local.context = local.context_of(building).on(tables)
            building.release()
        if second:
            # no fork meanwhile: the tree's thread runs (a child would hold what its frames hold, for good), and
            # the arrays of the tree and of the first job reuse the heap's pages
            with heap.reused(), local.tree_meanwhile(building or TreeBuilding(tables)):
                if counter.peek() < len(names):  # the first job (the Overview's) while the tree is built
                    record(local.run(names[counter.take()]))
            phase_s["call_tree"] = local.tree_s
            if timeline_last:  # needs no call tree: a child builds it while this process computes the queries
                helpers += _fork(local, [TIMELINE], Counter())
                timeline_child, timeline_last = (helpers[0], False) if helpers else (None, True)
            # the child that shares the queries is forked now, between two jobs of this process, and takes its first
            # job once the timeline child is done: two processes at most compute at a time, so the peak memory is
            # that of two (the tables and the tree are shared, the temporaries are not). Forked while a job ran (as
            # it was from a thread when the timeline child ended), it kept that job's arrays for its whole life
            # (~50 MB at 1 GB): a forked process holds every object the other threads' frames held, for good
            if counter.peek() < len(names):
                helpers += _fork(local, names, counter, after=timeline_child)

        def reports(wait: bool) -> None:
            for helper in helpers:
                for report in helper.reports(wait):
                    if report is not None:
                        record(report, helper_did=True)

        while (taken := counter.take()) < len(names):
            record(local.run(names[taken]))
            reports(wait=False)
        reports(wait=True)
        if timeline_last:
            local.release()
            record(local.run(TIMELINE))
        for name in every_job:
            if name not in done:  # taken by a helper that died before reporting it
                record(local.run(name))
        return errors, by_helper


def _fork(jobs: ViewJobs, names: list[str], counter: Counter, after: ForkedHelper | None = None) -> list[ForkedHelper]:
    """A forked helper taking ``names`` through ``counter`` once ``after`` has ended (none when no process can be
    started now)."""
    try:
        return [ForkedHelper(jobs, names, counter, after)]
    except (OSError, AssertionError):  # no process can be started here (AssertionError: from a daemon process)
        return []


def _helper_process(
    connection: Connection, jobs: ViewJobs, names: list[str], counter: Counter, after_ended: int | None
) -> None:
    """The forked helper's process: it waits for the process whose sentinel is ``after_ended``, then works."""
    if after_ended is not None:
        wait_for_processes([after_ended])
    _helper_main(connection, jobs, names, counter)


def _helper_main(connection: Connection, jobs: ViewJobs, names: list[str], counter: Counter) -> None:
    """The forked helper: take jobs until none is left, report each, then say it is done."""
    try:
        while (taken := counter.take()) < len(names):
            connection.send(jobs.run(names[taken]))
        connection.send(None)
    except Exception:  # the worker does the jobs this process took and did not report
        log.exception("the views helper failed on %s", jobs.request.key)
    finally:
        connection.close()
