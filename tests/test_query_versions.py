"""Every cached result is a versioned query: bumping one query's version recomputes that result alone,
from the stored tables, without parsing the trace again (issue 12, item 2)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

import profscope.app
from conftest import corpus_file
from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import Query, declared_queries, query_of
from profscope.cache import TraceCache
from profscope.catalog import TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.sources import LocalSource
from profscope.state import Profscope
from profscope.store import Store
from profscope.views import overview
from profscope.views.registry import VIEWS, queries

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
OVERVIEW = query_of(overview_payload)


def _catalogued(root: Path) -> TraceFile:
    source = LocalSource(root)
    runs = build_runs([("root", source.uri, source.list())])
    (trace,) = [trace for run in runs.values() for trace in run.traces()]
    return trace


@pytest.fixture
def parsed(tmp_path: Path) -> tuple[TraceFile, TraceCache]:
    """A real trace parsed once, as a server's worker would, with the registry's queries at their versions."""
    root = tmp_path / "root" / "cpu"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), root / Path(TINYGPT).name)
    trace = _catalogued(tmp_path / "root")
    cache = TraceCache(Settings(cache_dir=tmp_path / "cache").traces_cache)
    request = IngestRequest.for_file(trace, LocalSource(tmp_path / "root"), cache.root, queries(), 1 << 30)
    assert "error" not in run_ingest(request)
    return trace, cache


def _file_stamps(directory: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file: a file written again, or replaced, changes it."""
    return {
        str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _counted(calls: Counter, name: str, build: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def counting(source: Any) -> Any:
        calls[name] += 1
        return build(source)

    return counting


def _bumped(calls: Counter) -> Query:
    """The Overview query after a formula change: a new version whose result says so."""

    def new_formula(context: Any) -> dict[str, Any]:
        calls["overview"] += 1
        return {**overview_payload(context), "formula": "changed"}

    return Query(OVERVIEW.name, OVERVIEW.version + 1, new_formula)


def _refuse_parsing(monkeypatch: pytest.MonkeyPatch, calls: Counter) -> None:
    def parse(*args: Any, **kwargs: Any) -> Any:
        calls["parse"] += 1
        raise AssertionError("the trace was parsed again")

    monkeypatch.setattr("profscope.ingest.jobs.parse_any_trace", parse)  # the worker reads any Chrome trace
    monkeypatch.setattr("profscope.ingest.kineto.parse_trace", parse)


def test_a_bumped_query_is_recomputed_alone_from_the_stored_tables(
    parsed: tuple[TraceFile, TraceCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, cache = parsed
    entry = cache.directory(trace.cache_key)
    before = _file_stamps(entry)
    calls: Counter = Counter()
    _refuse_parsing(monkeypatch, calls)
    trace_queries = [query for query in queries("trace") if query is not OVERVIEW and query.at_ingest]
    others = [dataclasses.replace(query, build=_counted(calls, query.name, query.build)) for query in trace_queries]
    store = Store(cache, [*others, _bumped(calls)])

    old = orjson.loads(cache.read_view(trace.cache_key, OVERVIEW.stored_name))
    new = orjson.loads(store.result(trace.cache_key, "overview"))
    assert "formula" not in old and new["formula"] == "changed"
    assert {k: v for k, v in new.items() if k != "formula"} == old  # same tables, same numbers
    for query in others:
        assert store.result(trace.cache_key, query.name) is not None
    assert store.result(trace.cache_key, "overview") is not None  # now stored: not computed again

    assert calls == Counter({"overview": 1}), "only the bumped query ran, once; nothing was parsed"
    after = _file_stamps(entry)
    new_file = f"views/{OVERVIEW.name}.v{OVERVIEW.version + 1}.json"
    assert set(after) - set(before) == {new_file}
    assert {name: stamp for name, stamp in after.items() if name != new_file} == before  # tables, results untouched


def test_the_server_answers_a_bumped_query_without_parsing(
    parsed: tuple[TraceFile, TraceCache], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The app, given a registry whose Overview query has a new version, serves the new result from the
    cache entry an older version wrote: its ingest pool parses nothing."""
    trace, _ = parsed
    calls: Counter = Counter()
    bumped_overview = dataclasses.replace(overview.VIEW, queries=(_bumped(calls),))
    views = tuple(bumped_overview if view is overview.VIEW else view for view in VIEWS)
    monkeypatch.setattr(profscope.app, "VIEWS", views)
    settings = Settings(roots=[str(tmp_path / "root")], cache_dir=tmp_path / "cache", eager_ingest=False)
    with TestClient(profscope.app.create_app(settings)) as client:
        state = client.app.state.profscope
        deadline = time.monotonic() + 30
        while state.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        response = client.get("/api/overview", params={"run": trace.run})
        assert response.status_code == 200, response.text
        assert response.json()["formula"] == "changed"
        assert client.get("/api/runs").json()["runs"][0]["state"] == "ready"
        assert state.ingest.counters["ingested"] == 0 and calls == Counter({"overview": 1})


def test_a_query_left_to_the_first_request_is_computed_then_once_without_parsing(
    parsed: tuple[TraceFile, TraceCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queries declared ``at_ingest=False`` (the Operator page filtered to a module) cost the ingest nothing:
    the first request computes them from the stored tables, later ones read the stored result."""
    trace, cache = parsed
    on_demand = [query for query in queries("trace") if not query.at_ingest]
    assert {query.name for query in on_demand} == {"operators.modules", "operators.stacks.modules"}
    assert all(cache.read_view(trace.cache_key, query.stored_name) is None for query in on_demand)
    calls: Counter = Counter()
    _refuse_parsing(monkeypatch, calls)
    store = Store(cache, [dataclasses.replace(q, build=_counted(calls, q.name, q.build)) for q in on_demand])
    for query in on_demand:
        first = store.result(trace.cache_key, query.name)
        assert first is not None and "applies" in orjson.loads(first)
        assert store.result(trace.cache_key, query.name) == first
        assert cache.read_view(trace.cache_key, query.stored_name) == first
    assert calls == Counter({query.name: 1 for query in on_demand}), "each computed once; nothing parsed"


def test_every_declared_query_is_a_views_query_and_the_reverse() -> None:
    """``serve`` hands the first parses every ``@payload`` query before the views are imported (state.py,
    cli.serve): that must be the set the views ask for, the same objects."""
    declared = {query.name: query for query in declared_queries()}
    assert declared == {query.name: query for query in queries()}
    assert OVERVIEW.name in declared


def test_a_state_started_early_refuses_views_asking_for_other_queries(tmp_path: Path) -> None:
    settings = Settings(roots=[str(tmp_path)], cache_dir=tmp_path / "cache")
    state = Profscope(settings, queries=[q for q in declared_queries() if q.name != OVERVIEW.name])
    try:
        with pytest.raises(ValueError, match="other cached queries"):
            state.show_views(VIEWS)
        assert state.views == ()
        complete = Profscope(settings, queries=declared_queries())
        complete.show_views(VIEWS)
        assert complete.views == VIEWS
        complete.stop()
    finally:
        state.stop()
