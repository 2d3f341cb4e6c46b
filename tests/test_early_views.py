"""The first views of a file answer before its slower results are computed (issue 18, items 3 and 4), over
real HTTP: the worker is held before the queries that are not ``first`` (``PROFSCOPE_TEST_HOLD_QUERIES``),
so the Overview and the Distributed view (every rank's summary) answer 200 while the Operator view and the
Trace view's index still answer 202, and ``/api/runs`` says which views are ready. Released, every view
answers, and the early answers are the same as the final ones. A result the manifest does not list (written
but not yet recorded, or left by an interrupted parse) is never served."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from profscope.analysis.overview import overview_payload
from profscope.analysis.payloads import query_of
from profscope.cache import TraceCache
from profscope.store import Store
from serving import running_server, wait_for

TRACE_FILTER = "hta/trace_filter"  # two ranks of one job
OVERVIEW = query_of(overview_payload)


def _get(base: str, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{base}{path}", params=params, timeout=30)


def _run(base: str) -> dict:
    return _get(base, "/api/run", run="filter").json()


def test_overview_and_distributed_answer_while_the_slower_views_are_computed(tmp_path: Path, held: Path) -> None:
    root = tmp_path / "roots"
    shutil.copytree(corpus_file(TRACE_FILTER), root / "filter")
    with running_server([root], tmp_path / "cache", workers=2) as base:
        early_overview = wait_for(
            lambda: (r := _get(base, "/api/overview", run="filter")).status_code == 200 and r, timeout=180
        )
        early_distributed = wait_for(
            lambda: (r := _get(base, "/api/distributed", run="filter")).status_code == 200 and r, timeout=180
        )
        run = _run(base)
        assert run["state"] == "parsing"
        assert run["view_states"]["overview"] == "ready"
        assert run["view_states"]["distributed"] == "ready"
        assert {run["view_states"][view] for view in ("operators", "kernels", "trace", "modules")} == {"computing"}
        assert _get(base, "/api/operators", run="filter").status_code == 202
        assert _get(base, "/api/kernels", run="filter").status_code == 202
        assert _get(base, "/api/timeline/tracks", run="filter").status_code == 202

        held.touch()
        wait_for(lambda: _run(base)["state"] == "ready", timeout=180)
        run = _run(base)
        assert set(run["view_states"].values()) == {"ready"}
        assert _get(base, "/api/operators", run="filter").status_code == 200
        assert _get(base, "/api/timeline/tracks", run="filter").status_code == 200
        assert _get(base, "/api/overview", run="filter").json() == early_overview.json()
        assert _get(base, "/api/distributed", run="filter").json() == early_distributed.json()


def test_a_result_is_served_before_the_entry_is_complete_only_once_its_manifest_lists_it(tmp_path: Path) -> None:
    cache = TraceCache(tmp_path)
    store = Store(cache, [OVERVIEW])
    cache.write_view("k", OVERVIEW.stored_name, {"steps": 3})  # written, not yet listed
    assert store.result("k", "overview") is None and not store.available("k", "overview")
    cache.write_progress("k", {"facts": {"kernels": 0}, "views": []})
    assert store.result("k", "overview") is None and not store.available("k", "overview")
    cache.write_progress("k", {"facts": {"kernels": 0}, "views": [OVERVIEW.stored_name]})
    assert store.result("k", "overview") == b'{"steps":3}' and store.available("k", "overview")
    assert store.result("k", "operators.operator") is None  # another query: not listed, not computed
    assert cache.facts("k") == {"kernels": 0}


def test_every_result_of_a_view_is_checked_as_one_by_one(tmp_path: Path) -> None:
    """``Store.all_available`` (the Runs page's view states: one manifest read per file) says what ``available``
    says of each name, before the entry is complete and after."""
    cache = TraceCache(tmp_path)
    store = Store(cache, [OVERVIEW])
    names = ["overview", "timeline"]

    def one_by_one() -> bool:
        return all(store.available("k", name) for name in names)

    assert not store.all_available("k", names, ready=False) and not one_by_one()
    for listed in ([], [OVERVIEW.stored_name], ["timeline"], [OVERVIEW.stored_name, "timeline"]):
        cache.write_progress("k", {"facts": {}, "views": listed})
        assert store.all_available("k", names, ready=False) == one_by_one() == (len(listed) == 2)
    cache.write_summary("k", {"kind": "trace"})
    assert store.all_available("k", names, ready=True) == one_by_one() is False  # no timeline file
    cache.write_view("k", "timeline", {"version": 1})
    assert store.all_available("k", names, ready=True) == one_by_one() is True
