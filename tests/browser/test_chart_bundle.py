"""Every chart of every page draws with the partial plotly.js bundle (web/static/vendor/plotly.min.js, built by
scripts/build_plotly_bundle.sh with only the trace types the pages use): plotly draws a trace of a type the
bundle lacks as an empty scatter, without an error, so each chart's traces are checked to be drawn as the type
the page asked for, and every type the bundle holds is seen on some page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import Server, api_requests, corpus_path, parsed_server, screenshot, who_asked

pytestmark = pytest.mark.browser

BUNDLED_TYPES = {"scatter", "bar", "pie", "sunburst", "icicle", "waterfall"}  # scripts/plotly-bundle/entry.js
DATA = Path(__file__).resolve().parents[1] / "data"

# page -> the trace types it draws on these runs
PAGES = {
    "/overview?run=resnet50_num_workers_0": {"pie", "bar"},
    "/operators?run=resnet50_num_workers_0": {"pie"},
    "/kernels?run=resnet50_num_workers_0": {"pie"},
    "/memory?run=resnet50_num_workers_0": {"scatter"},
    "/distributed?run=trace_filter": {"bar"},
    "/modules?run=checkpointing": {"icicle", "bar"},
    "/diff?run=resnet50_num_workers_4&base_run=resnet50_num_workers_0": {"waterfall"},
    "/memory?run=snapshot": {"scatter", "sunburst", "bar"},
    "/memory?run=memory_trace": {"scatter", "sunburst"},
}

# Each chart's traces: the type the page asked for and the type plotly drew it as.
DRAWN_TRACES = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap((chart) =>
  (chart._fullData || []).length ? chart.data.map((trace, i) => ({
    chart: chart.id || chart.parentElement.className,
    asked: trace.type || 'scatter',
    drawn: chart._fullData[i] && chart._fullData[i].type,
  })) : [])"""


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


def _drawn_types(page, expected: set[str]) -> list[dict]:
    """The page's charts once every expected trace type has been drawn."""
    page.wait_for_function(
        f"""(expected) => {{
          const asked = new Set(({DRAWN_TRACES})().map((t) => t.asked));
          return expected.every((type) => asked.has(type));
        }}""",
        arg=sorted(expected),
        timeout=60_000,
    )
    return page.evaluate(DRAWN_TRACES)


def test_every_chart_of_every_page_draws_its_trace_types(page, charts_server: Server) -> None:
    seen: set[str] = set()
    for path, expected in PAGES.items():
        page.goto(f"{charts_server.url}{path}")
        traces = _drawn_types(page, expected)
        assert [t for t in traces if t["drawn"] != t["asked"]] == [], path
        seen |= {t["asked"] for t in traces}
        screenshot(page, f"charts-{path.strip('/').split('?')[0]}-{path.split('run=')[1].split('&')[0]}")
    assert seen == BUNDLED_TYPES  # nothing bundled that no page draws, nothing drawn that is not bundled


def test_a_type_left_out_of_the_bundle_is_noticed(page, charts_server: Server) -> None:
    """The check above can fail: a heatmap (not bundled) is drawn as something else."""
    page.goto(f"{charts_server.url}/memory?run=resnet50_num_workers_0")
    _drawn_types(page, {"scatter"})
    drawn = page.evaluate(
        """() => {
          const chart = document.createElement('div');
          document.body.append(chart);
          return window.Plotly.newPlot(chart, [{ type: 'heatmap', z: [[1, 2], [3, 4]] }])
            .then(() => chart._fullData[0].type);
        }"""
    )
    assert drawn != "heatmap"


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
        assert [s for s in scripts if s != "/static/vendor/plotly.min.js"] == [bundle], (path, scripts)


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
