"""A query result recomputed after a version bump is published to the shared cache (issue 12, item 2), against
real emulators: replica A, whose Overview query is newer than the bundle in the bucket, computes it once from
the stored tables and writes ``v1/<key>/views/overview.v<N>.json``; replica B (empty local disk, same bucket)
then serves that result without computing it and without parsing the trace."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

import profscope.app
from conftest import corpus_file
from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import Query, query_of
from profscope.cache import TraceCache
from profscope.catalog import TraceFile, build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.shared_cache import LAYOUT, SharedCache
from profscope.sources import LocalSource
from profscope.state import Profscope
from profscope.views import overview
from profscope.views.registry import VIEWS, queries

from .conftest import Bucket

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
OVERVIEW = query_of(overview_payload)
BUMPED = f"{OVERVIEW.name}.v{OVERVIEW.version + 1}"


@pytest.fixture
def published(tmp_path: Path, bucket: Bucket) -> tuple[Path, str, TraceFile]:
    """A trace parsed with today's query versions, its entry published to the bucket: (root, cache URI, trace)."""
    root = tmp_path / "root"
    (root / "cpu").mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), root / "cpu" / Path(TINYGPT).name)
    source = LocalSource(root)
    (trace,) = [t for run in build_runs([("root", source.uri, source.list())]).values() for t in run.traces()]
    writer = TraceCache(Settings(cache_dir=tmp_path / "writer").traces_cache)
    assert "error" not in run_ingest(IngestRequest.for_file(trace, source, writer.root, queries(), 1 << 30))
    uri = bucket.uri("cache")
    assert SharedCache(uri).publish(trace.cache_key, writer, trace) == "bundle"
    return root, uri, trace


@pytest.fixture
def overview_calls(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """The servers created from now on run an Overview query one version newer than the bundle's; the
    counter counts its runs."""
    calls: Counter = Counter()

    def new_formula(context: Any) -> dict[str, Any]:
        calls["overview"] += 1
        return {**overview_payload(context), "formula": "changed"}

    bumped = Query(OVERVIEW.name, OVERVIEW.version + 1, new_formula)
    bumped_view = dataclasses.replace(overview.VIEW, queries=(bumped,))
    views = tuple(bumped_view if view is overview.VIEW else view for view in VIEWS)
    monkeypatch.setattr(profscope.app, "VIEWS", views)
    return calls


@contextmanager
def _replica(root: Path, cache_dir: Path, uri: str, write: bool) -> Iterator[tuple[TestClient, Profscope]]:
    settings = Settings(roots=[str(root)], cache_dir=cache_dir, shared_cache=uri, shared_cache_write=write,
                        eager_ingest=False, workers=1)  # fmt: skip
    with TestClient(profscope.app.create_app(settings)) as client:
        state: Profscope = client.app.state.profscope
        deadline = time.monotonic() + 30
        while state.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        yield client, state


def _overview_when_ready(client: TestClient, run: str) -> dict[str, Any]:
    """The Overview once the entry is fetched from the shared cache (202 until then)."""
    deadline = time.monotonic() + 60
    while True:
        response = client.get("/api/overview", params={"run": run})
        if response.status_code == 200:
            return response.json()
        assert response.status_code == 202 and time.monotonic() < deadline, response.text
        time.sleep(0.1)


def _counted(state: Profscope, metric: str, result: str) -> float:
    return state.metrics.registry.get_sample_value(f"profscope_shared_cache_{metric}_total", {"result": result})


def test_a_recomputed_result_is_published_and_the_next_replica_reads_it(
    published: tuple[Path, str, TraceFile], bucket: Bucket, tmp_path: Path, overview_calls: Counter
) -> None:
    root, uri, trace = published
    calls = overview_calls
    result_key = f"cache/{LAYOUT}/{trace.cache_key}/views/{BUMPED}.json"
    assert result_key not in bucket.keys("cache/")

    with _replica(root, tmp_path / "a", uri, write=True) as (client, state):
        computed = _overview_when_ready(client, trace.run)
        assert computed["formula"] == "changed" and calls == Counter({"overview": 1})
        assert state.ingest.counters["ingested"] == 0 and _counted(state, "lookups", "hit") == 1
        assert _counted(state, "results", "published") == 1
        local = state.cache.read_view(trace.cache_key, BUMPED)
    assert orjson.loads(bucket.get(result_key)) == orjson.loads(local)

    with _replica(root, tmp_path / "b", uri, write=False) as (client, state):
        served = _overview_when_ready(client, trace.run)
        assert calls == Counter({"overview": 1}), "replica B computed the result again"
        assert state.ingest.counters["ingested"] == 0 and _counted(state, "lookups", "hit") == 1
        assert _counted(state, "results", "fetched") == 1 and _counted(state, "results", "published") == 0
        assert state.cache.read_view(trace.cache_key, BUMPED) == local  # kept locally: not fetched again
    assert served == computed


def test_a_read_only_replica_computes_the_result_but_does_not_publish_it(
    published: tuple[Path, str, TraceFile], bucket: Bucket, tmp_path: Path, overview_calls: Counter
) -> None:
    root, uri, trace = published
    calls = overview_calls
    before = bucket.keys("cache/")
    with _replica(root, tmp_path / "ro", uri, write=False) as (client, state):
        assert _overview_when_ready(client, trace.run)["formula"] == "changed"
        assert calls == Counter({"overview": 1}) and _counted(state, "results", "miss") == 1
    assert bucket.keys("cache/") == before


def test_a_published_result_that_is_not_json_is_ignored_and_computed(
    published: tuple[Path, str, TraceFile], bucket: Bucket, tmp_path: Path, overview_calls: Counter
) -> None:
    root, uri, trace = published
    calls = overview_calls
    bucket.put(f"cache/{LAYOUT}/{trace.cache_key}/views/{BUMPED}.json", b'{"cut short": ')
    with _replica(root, tmp_path / "c", uri, write=False) as (client, state):
        assert _overview_when_ready(client, trace.run)["formula"] == "changed"
        assert calls == Counter({"overview": 1}) and _counted(state, "results", "invalid") == 1
