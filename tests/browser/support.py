"""Helpers for the browser tests: the corpus, a real ``profscope serve`` subprocess, screenshots."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from conftest import corpus_file
from serving import Server, get_json, start_server

__all__ = ["Server", "corpus_path", "get_json", "start_server"]

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("PROFSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1280, "height": 900}

# The runs every page test uses; each root is one run folder, so the run is named after it.
ROOTS = {
    "resnet50_num_workers_0": "kineto-tb_plugin/samples/resnet50_num_workers_0",  # old format, V100
    "tinygpt_cpu": "generated/tinygpt_cpu",  # torch 2.x, CPU only, with_stack
    "trace_filter": "hta/trace_filter",  # HTA: 2 ranks of a 128-rank NCCL job on A100s
    "memory_analysis": "hta/memory_analysis",  # not a Chrome trace: fails with 422
    "execution_trace": "hta/execution_trace",  # an execution trace next to a kineto trace
}

# A stand-in for the script the tinygpt_cpu stacks point at (gen_cpu_traces.py(67): train).
SOURCE_FILE = "gen_cpu_traces.py"
SOURCE_TARGET_LINE = 67


@contextmanager
def parsed_server(roots: list[Path], work: Path, *extra: str) -> Iterator[Server]:
    """A server on these roots, every trace parsed; stopped on leaving."""
    server = start_server(roots, work / "cache", work / "server.log", *extra)
    try:
        server.wait_parsed()
        yield server
    finally:
        server.stop()


def corpus_path(relative: str) -> Path:
    return corpus_file(relative)


def watch_page(target, errors: list[str]) -> None:
    target.on("console", lambda message: errors.append(f"console: {message.text}") if message.type == "error" else None)
    target.on("pageerror", lambda error: errors.append(f"pageerror: {error}"))


def screenshot(target, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.png"
    target.screenshot(path=str(path), full_page=True)
    return path


API_REQUESTS = """() => performance.getEntriesByType('resource')
  .map((e) => [new URL(e.name).pathname, e.initiatorType]).filter(([path]) => path.startsWith('/api/'))"""


def api_requests(target) -> list[tuple[str, str]]:
    """The page's API requests so far, in order: (path, who asked: ``link`` for a preload, ``fetch`` for a script).
    A preload the page's ``fetch`` takes is one entry, by the link; one it does not take is asked twice."""
    return [(path, initiator) for path, initiator in target.evaluate(API_REQUESTS)]


def who_asked(target, path: str) -> list[str]:
    """Who asked for the API path ``path``, once per request: ``["link"]`` when the page's script took the
    answer its head preloaded (``pages.first_request``, ``base.html``)."""
    return [initiator for asked, initiator in api_requests(target) if asked == path]


def query_of(url: str) -> dict[str, str]:
    """The query parameters of a URL (one value each)."""
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))


def wait_for_plot(target, selector: str, marks: str, timeout_ms: int = 20_000) -> int:
    """Wait until the chart under `selector` has drawn at least one of `marks`; their count."""
    target.wait_for_function(
        "([sel, marks]) => document.querySelectorAll(`${sel} ${marks}`).length > 0",
        arg=[selector, marks],
        timeout=timeout_ms,
    )
    return target.locator(f"{selector} {marks}").count()


# What the charts draw (web/static/js/chart/): an <svg class="chart-svg"> in a .chart-frame, and in it
CHART_SVG = "svg.chart-svg"
PIE_SLICES = "path.slice"  # a donut's slices
BARS = "rect.bar"  # bars, series by series, each series' bars in category order
NODES = "g.node"  # a sunburst's sectors or an icicle's cells (each with its text)
LINES = "path.line"  # the line of a line or area series
AREAS = "path.area"  # a filled area (stacked categories, the snapshot's small allocations)
POLYGONS = "path.polygons"  # filled polygons (a snapshot's allocations)
PLOT_AREA = "rect.plot-area"  # an x-y chart's plot, where the pointer hovers, drags to zoom, double-clicks back
TOOLTIP = ".chart-tooltip"  # the tooltip of a chart's frame (hidden unless the pointer is on a mark)


def point_on(target, selector: str) -> dict:
    """A point of the page (``{"x", "y"}``) where the pointer is on the mark ``selector`` names (the first), found
    on a grid over its box, nearest its middle first: a slice or a ring's sector need not cover its box's middle."""
    point = target.evaluate(
        """(selector) => {
          const mark = document.querySelector(selector);
          mark.scrollIntoView({ block: "center" });
          const box = mark.getBoundingClientRect();
          const grid = [];
          for (let i = 1; i < 20; i += 1) for (let j = 1; j < 20; j += 1) grid.push([i / 20, j / 20]);
          grid.sort((a, b) => Math.hypot(a[0] - 0.5, a[1] - 0.5) - Math.hypot(b[0] - 0.5, b[1] - 0.5));
          for (const [fx, fy] of grid) {
            const x = box.left + box.width * fx;
            const y = box.top + box.height * fy;
            const hit = document.elementFromPoint(x, y);
            if (hit && mark.contains(hit)) return { x, y };
          }
          return null;
        }""",
        selector,
    )
    assert point is not None, f"no point of the page is on {selector}"
    return point


TRACE_HOOK = "window.__profscopeTrace"  # the Trace page's test hook (web/static/js/pages/trace.js)


def canvas_box(page) -> dict:
    return page.get_by_test_id("timeline").bounding_box()


def scroll_to_track(page, section: int, track: str) -> None:
    """On the Trace page, scroll the rows with the mouse wheel until the track's row is on screen."""
    box = canvas_box(page)
    top = page.evaluate(f"([i, t]) => {TRACE_HOOK}.rowTop(i, t)", [section, track])
    page.mouse.move(box["x"] + 600, box["y"] + 200)
    page.mouse.wheel(0, top - 200)
    page.wait_for_function(
        f"([i, t, h]) => {TRACE_HOOK}.rowTop(i, t) >= 26 && {TRACE_HOOK}.rowTop(i, t) < h - 20",
        arg=[section, track, box["height"]],
    )
