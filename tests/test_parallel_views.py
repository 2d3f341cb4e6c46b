"""A big trace's views are computed on two cores (ingest/parallel_queries.py): the helper process reads the
saved tables memory-mapped and computes with its own context. Whoever computes a job, every stored result
must be byte for byte what one process computes from the parsed tables; a helper that dies loses nothing."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import corpus_file
from profscope.cache import TraceCache
from profscope.catalog import build_runs
from profscope.ingest import parallel_queries
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.ingest.parallel_queries import TIMELINE, ViewHelper, compute_views, job_names
from profscope.sources import LocalSource
from profscope.tables import TraceTables
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


def _forget_views(cache: TraceCache, request: IngestRequest) -> None:
    for query in request.queries:
        cache.view_path(request.cache_key, query.stored_name).unlink()
    cache.view_path(request.cache_key, TIMELINE).unlink()
    shutil.rmtree(cache.timeline_dir(request.cache_key))


@pytest.fixture(scope="module")
def helper() -> ViewHelper:
    started = ViewHelper()
    yield started
    started.close()


@pytest.mark.parametrize("relative", TRACES)
def test_the_helper_computes_every_view_as_one_process_does(tmp_path: Path, relative: str, helper: ViewHelper) -> None:
    one = _request(tmp_path, relative, "one", second_core=False)
    summary = run_ingest(one)
    assert "error" not in summary and summary["views_by_helper"] == []
    expected = _results(one)
    assert len(expected) > len(job_names(one)), "not every view was written"
    # the helper alone: the worker's own tables are the saved ones, it takes every job itself
    two = _request(tmp_path, relative, "two", second_core=False)
    run_ingest(two)
    cache = TraceCache(Path(two.cache_root))
    _forget_views(cache, two)
    jobs = job_names(two)
    helper.counter.reset()
    assert helper.begin(two, jobs)
    reports = list(helper.reports(wait=True))
    assert reports[-1] is None
    assert [report[0] for report in reports[:-1]] == jobs
    assert _results(two) == expected


def test_both_processes_share_the_jobs_and_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: ViewHelper
) -> None:
    relative = TRACES[0]
    one = _request(tmp_path, relative, "one", second_core=False)
    run_ingest(one)
    monkeypatch.setattr(parallel_queries, "ONE_CORE_BELOW_BYTES", 0)
    monkeypatch.setattr(parallel_queries, "_helper", helper)  # started already: it takes jobs from the start
    two = _request(tmp_path, relative, "two", second_core=True)
    summary = run_ingest(two)
    assert "error" not in summary and summary["view_errors"] == {}
    assert summary["views_by_helper"], "the helper took no job"
    assert set(summary["phase_s"]) >= set(job_names(two))
    assert _results(two) == _results(one)
    progress = TraceCache(Path(two.cache_root)).progress(two.cache_key)
    assert progress is None or sorted(progress["views"]) == sorted([q.stored_name for q in two.queries] + [TIMELINE])


def test_a_helper_that_died_costs_nothing_but_time(tmp_path: Path) -> None:
    relative = TRACES[1]
    one = _request(tmp_path, relative, "one", second_core=False)
    run_ingest(one)
    two = _request(tmp_path, relative, "two", second_core=False)
    run_ingest(two)
    cache = TraceCache(Path(two.cache_root))
    _forget_views(cache, two)
    dead = ViewHelper()
    dead._process.kill()
    dead._process.join()
    written: list[str] = []
    tables = TraceTables.load(cache.tables_dir(two.cache_key))
    errors, by_helper = compute_views(cache, two, tables, {}, written.append, dead)
    assert errors == {} and by_helper == []
    assert sorted(written) == sorted([q.stored_name for q in two.queries] + [TIMELINE])
    assert _results(two) == _results(one)


def test_loaded_tables_are_the_parsed_tables(tmp_path: Path) -> None:
    """What the helper computes from: the saved tables read back column for column."""
    from profscope.ingest.kineto import parse_trace_file

    parsed = parse_trace_file(corpus_file(TRACES[0]))
    parsed.save(tmp_path / "tables")
    loaded = TraceTables.load(tmp_path / "tables")
    for table, columns in parsed.columns.items():
        for column, values in columns.items():
            np.testing.assert_array_equal(loaded.columns[table][column], values)
            assert loaded.columns[table][column].dtype == values.dtype
    assert loaded.strings.strings == parsed.strings.strings
