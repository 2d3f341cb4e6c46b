"""Every chart of every page draws (web/static/js/chart/: SVG made in the page), and each page's script arrives as
one bundle with its first requests fetched beside it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import Server, api_requests, corpus_path, parsed_server, screenshot, who_asked

pytestmark = pytest.mark.browser

DATA = Path(__file__).resolve().parents[1] / "data"

# page -> the kinds of chart it draws on these runs (the data-chart of each .chart-frame)
PAGES = {
    "/overview?run=resnet50_num_workers_0": {"pie", "bars"},
    "/operators?run=resnet50_num_workers_0": {"pie"},
    "/kernels?run=resnet50_num_workers_0": {"pie"},
    "/memory?run=resnet50_num_workers_0": {"xy"},
    "/distributed?run=trace_filter": {"bars"},
    "/modules?run=checkpointing": {"icicle", "bars"},
    "/diff?run=resnet50_num_workers_4&base_run=resnet50_num_workers_0": {"bars"},
    "/memory?run=snapshot": {"xy", "sunburst", "bars"},
    "/memory?run=memory_trace": {"xy", "sunburst"},
}
KINDS = {"pie", "bars", "xy", "icicle", "sunburst"}
# What each kind of chart draws (web/static/js/chart/*.js)
MARKS = {
    "pie": "path.slice",
    "bars": "rect.bar",
    "xy": "path.line, path.area, path.polygons",
    "icicle": "g.node",
    "sunburst": "g.node",
}

# Each chart's kind and how many marks it drew
DRAWN = """(marks) => [...document.querySelectorAll('#main .chart-frame')].map((frame) => ({
  kind: frame.dataset.chart,
  marks: frame.querySelectorAll(`svg.chart-svg :is(${marks[frame.dataset.chart]})`).length,
}))"""


@pytest.fixture(scope="module")
def charts_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("charts-server")
    snapshot = work / "snapshot"
    snapshot.mkdir()
    shutil.copy(corpus_path("memory-snapshots/ZidongLiu_DeComFL/memory.pickle"), snapshot / "memory.pickle")
    roots = [
        corpus_path("kineto-tb_plugin/samples/resnet50_num_workers_0"),
        corpus_path("kineto-tb_plugin/samples/resnet50_num_workers_4"),
        corpus_path("hta/trace_filter"),
        DATA / "modules" / "checkpointing",
        snapshot,
        DATA / "internlm",
    ]
    with parsed_server(roots, work) as server:
        yield server


def _drawn(page, expected: set[str]) -> list[dict]:
    """The page's charts once a chart of every expected kind has drawn its marks."""
    page.wait_for_function(
        f"""([expected, marks]) => {{
          const drawn = new Set(({DRAWN})(marks).filter((c) => c.marks > 0).map((c) => c.kind));
          return expected.every((kind) => drawn.has(kind));
        }}""",
        arg=[sorted(expected), MARKS],
        timeout=60_000,
    )
    return page.evaluate(DRAWN, MARKS)


def test_every_chart_of_every_page_draws(page, charts_server: Server) -> None:
    seen: set[str] = set()
    for path, expected in PAGES.items():
        page.goto(f"{charts_server.url}{path}")
        charts = _drawn(page, expected)
        assert {c["kind"] for c in charts} == expected, path
        assert [c for c in charts if c["marks"] == 0] == [], path  # no chart left empty
        seen |= expected
        screenshot(page, f"charts-{path.strip('/').split('?')[0]}-{path.split('run=')[1].split('&')[0]}")
    assert seen == KINDS  # every kind of chart is drawn on some page


def test_every_page_loads_its_script_as_one_bundle(page, charts_server: Server) -> None:
    """Each page's script and the modules it imports arrive as one script (``/static/bundles/<page>.js``,
    module_bundle.py): the page asks for no module of its own, and its script ran (its view is drawn; the
    ``page`` fixture fails the test on any error the page throws or logs)."""
    for path in (*PAGES, "/trace?run=resnet50_num_workers_0", "/"):
        page.goto(f"{charts_server.url}{path}")
        page.wait_for_function("() => document.querySelector('#sel-run, #runs table')")
        page.wait_for_load_state("load")
        scripts = page.evaluate(
            """() => performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)
                 .filter((p) => p.startsWith('/static/') && p.endsWith('.js'))"""
        )
        bundle = page.eval_on_selector("script[type=module]", "s => new URL(s.src).pathname")
        assert bundle.startswith("/static/bundles/"), (path, bundle)
        assert scripts == [bundle], (path, scripts)


# page -> the request its script makes first (View.first_request), which its HTML has fetched with the modules
FIRST_REQUESTS = {
    "/overview?run=resnet50_num_workers_0": "/api/overview",
    "/operators?run=resnet50_num_workers_0": "/api/operators",
    "/kernels?run=resnet50_num_workers_0": "/api/kernels",
    "/memory?run=resnet50_num_workers_0": "/api/memory",
    "/distributed?run=trace_filter": "/api/distributed",
    "/modules?run=checkpointing": "/api/modules",
    "/trace?run=resnet50_num_workers_0": "/api/timeline/tracks",
}


def test_each_page_s_first_requests_are_fetched_with_its_modules(page, charts_server: Server) -> None:
    """Every page's first question, the runs list, and a run page's first request of its own view are
    fetched with the page's modules (``<link rel=preload>`` in base.html), and the page's own ``fetch`` takes
    those answers: were a request to differ (a header, a credentials mode, a parameter or its encoding), it
    would be asked for again after the modules ran, one round trip later. Pages with more in their URL (the
    Diff's baseline) or without a trace (a snapshot, a memory.log) preload the runs list only."""
    for path in (*PAGES, "/trace?run=resnet50_num_workers_0", "/"):
        page.goto(f"{charts_server.url}{path}")
        page.wait_for_function("() => document.querySelector('#sel-run, #runs table')")
        page.wait_for_load_state("networkidle")
        asked = api_requests(page)
        first = FIRST_REQUESTS.get(path)
        preloaded = ["/api/runs", first] if first else ["/api/runs"]
        assert sorted(p for p, by in asked if by == "link") == sorted(preloaded), (path, asked)
        for request in preloaded:
            assert who_asked(page, request) == ["link"], (path, asked)
