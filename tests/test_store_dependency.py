"""The routers reach the store through FastAPI dependencies (issue 12, item 3): every /api route that reads
cached data declares ``get_store``, no view module looks the server state up by itself, and the store a
route uses is the one the dependency gives (``app.dependency_overrides`` swaps it)."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.testclient import TestClient

import profscope.app
from conftest import app_routes, corpus_file
from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import Query, query_of
from profscope.api.deps import get_state, get_store
from profscope.cache import TraceCache
from profscope.catalog import build_runs
from profscope.config import Settings
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.sources import LocalSource
from profscope.store import Store
from profscope.views.registry import queries

SERVER = Path(__file__).resolve().parents[1] / "server" / "profscope"
TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"

# The /api routes that read no cached result, and why. Every other /api route must depend on get_store.
NO_CACHED_DATA = {
    "/api/runs": "the runs' status, assembled by the server state from the catalog and the ingest queue",
    "/api/run": "one run's status, as /api/runs",
    "/api/runs/moved": "the catalog's run names only",
    "/api/retry": "queues a parse: the ingest queue only",
    "/api/source": "a source file under --source-root, not the cache",
}


def _api_routes() -> Iterator[Any]:
    return (
        route for route in app_routes(profscope.app.create_app(Settings()).routes) if route.path.startswith("/api/")
    )


def _dependency_calls(dependant: Dependant) -> set[Callable[..., Any]]:
    """Every dependency a route declares, sub-dependencies included."""
    found = set()
    for dependency in dependant.dependencies:
        found.add(dependency.call)
        found |= _dependency_calls(dependency)
    return found


def test_every_api_route_that_reads_cached_data_depends_on_get_store() -> None:
    routes = {route.path: route for route in _api_routes()}
    assert set(NO_CACHED_DATA) <= set(routes), "an exempt route is gone: drop it from NO_CACHED_DATA"
    without = sorted(
        path
        for path, route in routes.items()
        if path not in NO_CACHED_DATA and get_store not in _dependency_calls(route.dependant)
    )
    assert without == [], f"these routes read the store without declaring it (store: StoreDep): {without}"
    assert len(routes) - len(NO_CACHED_DATA) >= 20  # the walk found the views' routes, not an empty list


def _calls_of(path: Path, name: str) -> list[int]:
    tree = ast.parse(path.read_text())
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def test_no_view_looks_up_the_server_state_itself() -> None:
    """``get_state(request)`` inside a view hides what the route reads from FastAPI (and from overrides)."""
    modules = sorted((SERVER / "views").glob("*.py")) + sorted((SERVER / "api").glob("*.py"))
    calls = {
        str(path.relative_to(SERVER)): lines
        for path in modules
        if path.name != "deps.py" and (lines := _calls_of(path, "get_state"))
    }
    assert calls == {}
    assert _calls_of(SERVER / "api" / "deps.py", "get_state"), "the check reads the calls it looks for"


# ---- the dependency is the store the routes use ----------------------------------------------------------
@pytest.fixture
def parsed_root(tmp_path: Path) -> tuple[Path, Path, str]:
    """A real trace parsed once into a cache, as a server's worker would: (root, cache dir, run name)."""
    root = tmp_path / "root" / "cpu"
    root.mkdir(parents=True)
    shutil.copy(corpus_file(TINYGPT), root / Path(TINYGPT).name)
    source = LocalSource(tmp_path / "root")
    runs = build_runs([("root", source.uri, source.list())])
    (trace,) = [trace for run in runs.values() for trace in run.traces()]
    cache_dir = tmp_path / "cache"
    cache = TraceCache(Settings(cache_dir=cache_dir).traces_cache)
    assert "error" not in run_ingest(IngestRequest.for_file(trace, source, cache.root, queries(), 1 << 30))
    return tmp_path / "root", cache_dir, trace.run


class RecordingStore(Store):
    """A real store over the same cache that records what the routes read through it."""

    def __init__(self, cache: TraceCache, with_queries: list[Query]) -> None:
        super().__init__(cache, with_queries)
        self.reads: Counter = Counter()

    def result(self, cache_key: str, name: str) -> bytes | None:
        self.reads[name] += 1
        return super().result(cache_key, name)

    def timeline_index(self, cache_key: str) -> Any:
        self.reads["timeline index"] += 1
        return super().timeline_index(cache_key)


def test_an_overridden_store_is_the_one_the_routes_read(parsed_root: tuple[Path, Path, str]) -> None:
    """The substitute's Overview query has a new version: only a route that reads the injected store
    answers with the new result; the server's own store would serve the stored one."""
    root, cache_dir, run = parsed_root
    overview = query_of(overview_payload)
    bumped = Query(
        overview.name, overview.version + 1, lambda context: {**overview_payload(context), "via": "override"}
    )
    substitute_queries = [bumped if query.name == overview.name else query for query in queries()]
    settings = Settings(roots=[str(root)], cache_dir=cache_dir, eager_ingest=False)
    app = profscope.app.create_app(settings)
    with TestClient(app) as client:
        state = client.app.state.profscope
        deadline = time.monotonic() + 30
        while state.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "via" not in client.get("/api/overview", params={"run": run}).json()  # the server's own store
        substitute = RecordingStore(state.cache, substitute_queries)
        app.dependency_overrides[get_store] = lambda: substitute
        answers = {
            path: client.get(path, params={"run": run})
            for path in ("/api/overview", "/api/kernels", "/api/operators", "/api/timeline/tracks")
        }
    assert {path: answer.status_code for path, answer in answers.items()} == dict.fromkeys(answers, 200)
    assert answers["/api/overview"].json()["via"] == "override"
    assert substitute.reads == Counter(
        {"overview": 1, "kernels.kernel": 1, "operators.operator": 1, "timeline": 1, "timeline index": 1}
    )
    assert state.ingest.counters["ingested"] == 0  # everything came from the parsed cache


def test_a_route_reads_the_server_state_through_its_dependency(parsed_root: tuple[Path, Path, str]) -> None:
    """The catalog too is injected: a substitute state that knows no run makes /api/overview a 404."""
    root, cache_dir, run = parsed_root
    app = profscope.app.create_app(Settings(roots=[str(root)], cache_dir=cache_dir, eager_ingest=False))
    with TestClient(app) as client:
        state = client.app.state.profscope
        deadline = time.monotonic() + 30
        while state.scans == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.get("/api/overview", params={"run": run}).status_code == 200

        @dataclasses.dataclass
        class NoRuns:
            def run(self, name: str) -> None:
                return None

            def moved_run(self, name: str) -> None:
                return None

        app.dependency_overrides[get_state] = NoRuns
        answer = client.get("/api/overview", params={"run": run})
    assert answer.status_code == 404 and run in answer.json()["detail"]
