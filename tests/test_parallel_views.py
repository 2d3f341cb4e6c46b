"""A big trace's views are computed on two cores (ingest/parallel_queries.py): a forked helper takes jobs from
the same list as the worker. Whoever computes a job, every stored result must be byte for byte what one
process computes; a helper that dies loses nothing."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis import call_tree
from profscope.analysis.call_tree import build_call_tree
from profscope.cache import TraceCache
from profscope.catalog import build_runs
from profscope.ingest import parallel_queries
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.ingest.parallel_queries import TIMELINE, TreeBuilding, ViewJobs, job_names
from profscope.sources import LocalSource
from profscope.views.registry import queries

# a GPU training trace (kernels, memory events, steps), a CPU one with modules, a distributed rank
TRACES = (
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
)


def _request(tmp_path: Path, relative: str, name: str, second_core: bool) -> IngestRequest:
    root = tmp_path / name / "root"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(relative), root / Path(relative).name)
    source = LocalSource(root)
    runs = build_runs([("root", source.uri, source.list())])
    (trace,) = [trace for run in runs.values() for trace in run.traces()]
    request = IngestRequest.for_file(trace, source, tmp_path / name / "cache", queries(), 1 << 30)
    return dataclasses.replace(request, second_core=second_core)


def _results(request: IngestRequest) -> dict[str, bytes]:
    """Every file the views wrote into the entry: query results, the timeline listing and its arrays."""
    cache = TraceCache(Path(request.cache_root))
    entry = cache.timeline_dir(request.cache_key).parent
    return {
        str(path.relative_to(entry)): path.read_bytes()
        for path in sorted(entry.rglob("*"))
        if path.is_file() and not path.name.startswith(("summary", "progress")) and "tables" not in path.parts
    }


@pytest.fixture
def two_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small corpus traces take the two-core path, and the worker's own jobs take a little longer, so that the
    helper, forked once the worker's first job is done, takes some of them whatever the machine's load."""
    monkeypatch.setattr(parallel_queries, "ONE_CORE_BELOW_BYTES", 0)
    worker = os.getpid()
    run = ViewJobs.run

    def slower_in_the_worker(self: ViewJobs, name: str) -> parallel_queries.Report:
        if os.getpid() == worker:
            time.sleep(0.1)
        return run(self, name)

    monkeypatch.setattr(ViewJobs, "run", slower_in_the_worker)


@pytest.mark.parametrize("relative", TRACES)
def test_views_computed_on_two_cores_are_those_of_one(tmp_path: Path, relative: str, two_cores: None) -> None:
    one = _request(tmp_path, relative, "one", second_core=False)
    summary = run_ingest(one)
    assert "error" not in summary and summary["views_by_helper"] == []
    expected = _results(one)
    assert len(expected) > len(job_names(one)), "not every view was written"
    two = _request(tmp_path, relative, "two", second_core=True)
    manifests: list[list[str]] = []  # what the entry's manifest listed, each time it was written
    write_progress = TraceCache.write_progress

    def listed(cache: TraceCache, key: str, progress: dict) -> None:
        manifests.append(list(progress["views"]))
        write_progress(cache, key, progress)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TraceCache, "write_progress", listed)
        summary = run_ingest(two)
    assert "error" not in summary and summary["view_errors"] == {}
    assert summary["views_by_helper"], "the helper took no job"
    assert set(summary["phase_s"]) >= set(job_names(two))
    assert _results(two) == expected
    # every result listed once, as it came, whichever process wrote it
    assert sorted(manifests[-1]) == sorted([q.stored_name for q in two.queries] + [TIMELINE])
    assert [len(views) for views in manifests] == list(range(len(manifests)))


def test_a_helper_that_died_costs_nothing_but_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cores: None
) -> None:
    relative = TRACES[1]
    one = _request(tmp_path, relative, "one", second_core=False)
    run_ingest(one)

    # the helper takes a job and dies before reporting it (as if killed): the worker does that job too
    def dies(connection: object, jobs: ViewJobs, names: list[str], counter: parallel_queries.Counter) -> None:
        counter.take()
        os._exit(3)

    monkeypatch.setattr(parallel_queries, "_helper_main", dies)
    two = _request(tmp_path, relative, "two", second_core=True)
    summary = run_ingest(two)
    assert "error" not in summary and summary["view_errors"] == {} and summary["views_by_helper"] == []
    assert _results(two) == _results(one)


def test_the_shared_counter_gives_each_job_once_in_order_then_the_number_of_jobs() -> None:
    with parallel_queries.Counter(5) as counter:
        assert counter.peek() == 0
        assert [counter.take(), counter.take()] == [0, 1]
        assert counter.peek() == 2
        assert [counter.take() for _ in range(5)] == [2, 3, 4, 5, 5]
        assert counter.peek() == 5
    alone = parallel_queries.Counter()
    assert [alone.take(), alone.peek(), alone.take()] == [0, 1, 1]


def _take_every_job(counter: parallel_queries.Counter) -> None:
    while counter.take() < 255:
        pass


def test_a_helper_killed_at_any_moment_blocks_no_take_of_the_worker() -> None:
    """A helper the OOM killer ends in the middle of a take: the worker's next take still answers at once.
    (With ``multiprocessing.Value``'s lock, which the killed helper held, the worker waited for good.)"""
    rng = random.Random(20261207)
    context = multiprocessing.get_context("fork")
    for _ in range(30):
        with parallel_queries.Counter(255) as counter:
            helper = context.Process(target=_take_every_job, args=(counter,))
            helper.start()
            while counter.peek() == 0:  # killed as soon as it takes jobs, at a moment of its takes
                pass
            spin = time.perf_counter() + rng.uniform(0.0, 0.0001)
            while time.perf_counter() < spin:
                pass
            os.kill(helper.pid, signal.SIGKILL)
            helper.join()
            seen: list[tuple[int, int]] = []  # the worker's peek, then its take
            worker = threading.Thread(target=lambda c=counter, t=seen: t.append((c.peek(), c.take())), daemon=True)
            worker.start()
            worker.join(10)
            assert not worker.is_alive(), "the worker's counter is blocked"
            [(next_job, taken)] = seen
            assert taken == next_job  # the next job, or 255 (none) once all are taken


def test_small_or_crowded_parses_stay_on_one_core(tmp_path: Path) -> None:
    request = _request(tmp_path, TRACES[1], "one", second_core=True)
    assert request.size <= parallel_queries.ONE_CORE_BELOW_BYTES and not parallel_queries.two_cores(request)
    big = dataclasses.replace(request, size=parallel_queries.ONE_CORE_BELOW_BYTES + 1)
    assert parallel_queries.two_cores(big)
    assert not parallel_queries.two_cores(dataclasses.replace(big, second_core=False))


def test_the_first_job_runs_with_the_tree_s_thread_before_any_fork_and_the_helper_takes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's first job (the Overview's) runs while the call tree is built on a thread, before any process is
    forked: a child forked while the thread runs would hold what its frames hold, for good. Then the timeline child
    and the helper that shares the queries are forked, the helper before the worker's next job: while that job
    waits for every other result to be written, the helper writes them all (forked only after it, it would never
    start and the wait would run out)."""
    monkeypatch.setattr(parallel_queries, "ONE_CORE_BELOW_BYTES", 0)
    worker = os.getpid()
    run = ViewJobs.run
    taken: list[tuple[str, int, bool]] = []  # (job, children alive, the tree's thread alive)

    def second_job_waits_for_the_others(self: ViewJobs, name: str) -> parallel_queries.Report:
        if os.getpid() == worker:
            building = any(thread.name == "profscope-call-tree" for thread in threading.enumerate())
            taken.append((name, len(multiprocessing.active_children()), building))
        if os.getpid() == worker and len(taken) == 2:
            done = {name, taken[0][0]}
            others = [query.stored_name for query in self.request.queries if query.name not in done]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(self.cache.read_view(self.request.cache_key, stored) is not None for stored in others):
                    break
                time.sleep(0.05)
        return run(self, name)

    def slow_tree(*args: object, **kwargs: object) -> object:
        time.sleep(0.5)  # still building when the first job starts, whatever the machine's load
        return build_call_tree(*args, **kwargs)

    monkeypatch.setattr(ViewJobs, "run", second_job_waits_for_the_others)
    monkeypatch.setattr(call_tree, "build_call_tree", slow_tree)
    request = _request(tmp_path, TRACES[1], "two", second_core=True)
    summary = run_ingest(request)
    assert "error" not in summary and summary["view_errors"] == {}
    names = job_names(request)
    assert taken[0] == (names[0], 0, True)  # the first of the first views, with the tree's thread, no child yet
    assert len(taken) == 2 and taken[1][1] >= 1 and not taken[1][2]
    assert sorted(summary["views_by_helper"]) == sorted(set(names) - {taken[0][0], taken[1][0]})


@pytest.mark.parametrize("cores", [1, 2])
def test_the_views_read_the_saved_tables_and_the_parse_s_arrays_are_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    """The parse's columns (229 MB of nsres_x1GB) stayed in the worker's memory while the views were computed, all
    of them, from the start: each is read from the file the save just wrote now (memory-mapped), and takes memory
    only once a view reads it (the views of that trace never read 24 MB of it, and the flows' 41 MB only late). On
    two cores the call tree's thread starts on the columns in memory before they are saved; once they are, a column
    in memory lives only while one of the thread's frames holds it, and none is left when the helpers are forked."""
    import gc
    import weakref

    from profscope.ingest import jobs
    from profscope.tables import SCHEMA

    monkeypatch.setattr(parallel_queries, "ONE_CORE_BELOW_BYTES", 0 if cores == 2 else 1 << 40)
    request = _request(tmp_path, TRACES[0], "mapped", second_core=True)
    parse, compute, run, fork = (
        jobs.TABLE_PARSERS[request.kind],
        jobs.compute_views,
        ViewJobs.run,
        parallel_queries._fork,
    )
    parsed: list[weakref.ref] = []
    seen: list[tuple[int, int, int]] = []
    alive_at_job: list[int] = []  # in the worker: its jobs'
    alive_at_fork: list[int] = []

    def parse_watched(*arguments, **options):
        tables = parse(*arguments, **options)
        parsed.extend(weakref.ref(column) for table in tables.columns.values() for column in table.values())
        return tables

    def compute_watched(cache, request, tables, *rest, **options):
        gc.collect()
        tables_dir = cache.tables_dir(request.cache_key).resolve()
        columns = [column for table in tables.columns.values() for column in table.values()]
        mapped = [isinstance(c, np.memmap) and Path(c.filename).parent == tables_dir for c in columns]
        seen.append((len(columns), sum(mapped), sum(ref() is not None for ref in parsed)))
        return compute(cache, request, tables, *rest, **options)

    def run_watched(self: ViewJobs, name: str) -> parallel_queries.Report:
        gc.collect()
        alive_at_job.append(sum(ref() is not None for ref in parsed))
        return run(self, name)

    def fork_watched(*arguments: object, **options: object) -> list:
        gc.collect()  # the first job and the tree are done: the children are forked
        alive_at_fork.append(sum(ref() is not None for ref in parsed))
        return fork(*arguments, **options)

    monkeypatch.setitem(jobs.TABLE_PARSERS, request.kind, parse_watched)
    monkeypatch.setattr(jobs, "compute_views", compute_watched)
    monkeypatch.setattr(ViewJobs, "run", run_watched)
    monkeypatch.setattr(parallel_queries, "_fork", fork_watched)
    summary = run_ingest(request)
    assert "error" not in summary and summary["view_errors"] == {}
    ((columns, mapped, alive),) = seen
    assert len(parsed) == columns > 20 and mapped == columns
    # on two cores the tree's thread may hold a few of the events' columns in its frames for now; on one, none
    assert alive <= (len(SCHEMA["events"]) if cores == 2 else 0)
    assert alive_at_job[0] <= alive and alive_at_job[1:] == [0] * (len(alive_at_job) - 1)
    assert alive_at_fork == ([0, 0] if cores == 2 else [])


def test_each_view_job_leaves_no_page_of_the_tables_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker and its helper each computed view after view on the memory-mapped tables, and kept every page any
    of them had read: at 1 GB ~100 MB per process at the peak, of pages the view computing now did not read. Each
    job, and the shared structures before them, now unmaps what it read; the results are the same."""
    from conftest import resident_bytes_mapped_under
    from profscope.tables import TraceTables

    request = _request(tmp_path, TRACES[0], "released", second_core=False)
    assert run_ingest(request)["view_errors"] == {}
    written = _results(request)
    cache = TraceCache(Path(request.cache_root))
    tables_dir = cache.tables_dir(request.cache_key)
    mapped_when_released: list[int] = []
    release = TraceTables.release_pages

    def release_watched(self: TraceTables, **but: Any) -> None:
        mapped_when_released.append(resident_bytes_mapped_under(tables_dir))
        release(self, **but)

    monkeypatch.setattr(TraceTables, "release_pages", release_watched)
    tables = TraceTables.load(tables_dir)
    jobs = ViewJobs(cache, request, tables)
    with jobs.tree_meanwhile(TreeBuilding(tables)):
        pass
    after = {"shared structures": resident_bytes_mapped_under(tables_dir)}
    for name in job_names(request):
        jobs.run(name)
        after[name] = resident_bytes_mapped_under(tables_dir)
    assert len(after) > 10 and after == dict.fromkeys(after, 0)
    assert max(mapped_when_released) > 1 << 20  # the jobs did read the tables, and released them
    assert _results(request) == written


def test_once_saved_every_column_is_read_from_its_file_and_none_in_memory_outlives_the_tree(tmp_path: Path) -> None:
    """The call tree is built from the columns in memory while the tables are saved; once they are, every column is
    read from its file (mapped: pages shared with the helpers forked later, and unmapped as the tree reads them),
    the thread's own tables too, so each column in memory goes as soon as no frame of the thread holds it: the
    events' held ~150 MB to the fork at 1 GB. The tree is the one built from the saved tables."""
    import gc
    import weakref

    from profscope.ingest.kineto import parse_trace
    from profscope.tables import TraceTables

    with open(corpus_file(TRACES[0]), "rb") as raw:
        parsed = parse_trace(raw, use_second_core=False)
    in_memory = [weakref.ref(values) for columns in parsed.columns.values() for values in columns.values()]
    events = parsed.events  # the dict the tree's thread reads through (build_call_tree's ``events``)
    parsed.save(tmp_path / "tables")
    saved = TraceTables.load(tmp_path / "tables")
    building = TreeBuilding(parsed)
    building.read_saved(saved)
    assert building.tables is parsed and parsed.events is events  # changed in place, column by column
    for table, columns in saved.columns.items():
        for column, values in columns.items():
            assert parsed.columns[table][column] is values and isinstance(values, np.memmap), (table, column)
    building.join()
    tree = building.tree.result()
    gc.collect()
    assert len(in_memory) > 20 and not any(ref() is not None for ref in in_memory)
    assert np.array_equal(tree.node_event, build_call_tree(TraceTables.load(tmp_path / "tables")).node_event)
    assert np.array_equal(tree.host_self_ns, build_call_tree(TraceTables.load(tmp_path / "tables")).host_self_ns)
