"""Names from traces never run as markup: every page of a run built to attack them (``attack_trace.py``), in
real Chromium, with its charts hovered. Nothing from the payload executes (``window.__pwned``), no element is
created from it (inline ``<script>``, ``img[src=x]``, ``[onerror]``), the CSP reports no violation, and the
names show literally, as typed (in the page, in the charts' tooltips and labels)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from attack_trace import (
    FRAMES,
    IMG,
    KERNELS,
    LAYER,
    MARKUP,
    OPS,
    PAYLOADS,
    RUN,
    SCRIPT,
    SNAPSHOT,
    WORKERS,
    write_attack_memory,
    write_attack_run,
    write_attack_sources,
)
from profscope.pages import PAGES, RUN_VIEWS, form_encoded

from .support import (
    BARS,
    NODES,
    PIE_SLICES,
    PLOT_AREA,
    Server,
    corpus_path,
    get_json,
    screenshot,
    start_server,
    who_asked,
)

pytestmark = pytest.mark.browser

WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
"""
# What each page must show literally (besides the run's own name in its selector).
SHOWN = {
    "overview": [],
    "operators": [OPS[0], OPS[1]],
    "kernels": [KERNELS[0], KERNELS[1]],
    "memory": [OPS[0]],
    "distributed": [WORKERS[0], WORKERS[1]],
}
HOVERED = 12  # chart elements hovered per chart kind
SNAPSHOT_FILE = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"
MEMORY_LOG = Path(__file__).resolve().parents[1] / "data" / "internlm" / "memory_trace" / "rank0_dp0_tp0" / "memory.log"


@pytest.fixture(scope="module")
def attack_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("attack")
    run = write_attack_run(work / "traces")
    write_attack_memory(run, corpus_path(SNAPSHOT_FILE), MEMORY_LOG)
    sources = write_attack_sources(work / "sources")
    started = start_server([work / "traces"], work / "cache", work / "server.log", "--source-root", str(sources))
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


@pytest.fixture
def guarded(page):  # type: ignore[no-untyped-def]
    """The test's page, watching CSP violations and any request the payload's ``<img src=x>`` would make."""
    page.add_init_script(WATCH)
    page.requested_x = []
    page.on("request", lambda request: page.requested_x.append(request.url) if request.url.endswith("/x") else None)
    return page


def assert_not_attacked(page) -> None:  # type: ignore[no-untyped-def]
    assert page.evaluate("window.__pwned") is None, "a payload ran"
    created = page.evaluate(
        "() => ({inline: document.querySelectorAll('script:not([src])').length,"
        " img: document.querySelectorAll('img[src=x], img[src$=\"/x\"]').length,"
        " handlers: document.querySelectorAll('[onerror], [onload], [onclick]').length})"
    )
    assert created == {"inline": 0, "img": 0, "handlers": 0}, created
    assert page.evaluate("window.__csp") == [], "the Content-Security-Policy reported a violation"
    assert page.requested_x == []


TOOLTIPS = "() => Array.from(document.querySelectorAll('.chart-tooltip:not([hidden])'))"
TOOLTIPS += ".map((n) => n.textContent).join(' ')"
LABELS = "() => Array.from(document.querySelectorAll('svg.chart-svg text, .chart-legend'))"
LABELS += ".map((n) => n.textContent).join(' ')"


def hover_charts(page) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """Hover pie slices, bars, sunburst and icicle nodes and every plot area: (the tooltips shown, the labels)."""
    tooltips: list[str] = []
    for selector in (PIE_SLICES, BARS, NODES):
        marks = page.locator(selector)
        for i in range(min(marks.count(), HOVERED)):
            if marks.nth(i).is_visible():
                marks.nth(i).hover(force=True)
                tooltips.append(page.evaluate(TOOLTIPS))
    areas = page.locator(PLOT_AREA)
    for i in range(areas.count()):
        box = areas.nth(i).bounding_box()
        if box:
            for fraction in (0.2, 0.5, 0.8):
                page.mouse.move(box["x"] + box["width"] * fraction, box["y"] + box["height"] / 2)
                tooltips.append(page.evaluate(TOOLTIPS))
    return " ".join(tooltips), page.evaluate(LABELS)


def settle(page) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => !document.querySelector('.loading, [aria-busy=true]')", timeout=20_000)


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_page_shows_names_as_text(guarded, attack_server: Server, name: str) -> None:
    guarded.goto(f"{attack_server.url}/{name}?{urlencode({'run': RUN})}")
    settle(guarded)
    tooltips, _ = hover_charts(guarded)
    text = guarded.locator("body").inner_text()
    for expected in SHOWN.get(name, []):
        assert expected in text, f"{expected!r} is not shown literally on /{name}"
    if name in ("operators", "kernels"):  # pies of names: their tooltips show the names as typed
        assert SCRIPT in tooltips and IMG in tooltips and MARKUP in tooltips, tooltips[:500]
    assert_not_attacked(guarded)
    if name == "operators":
        screenshot(guarded, "escaping-operators")
    first = RUN_VIEWS[name].first_request.partition("?")[0]
    if first:  # its first request, with these names in it, was the one preloaded (pages.first_request)
        assert who_asked(guarded, first) == ["link"]


def test_names_are_encoded_in_preloads_as_the_pages_encode_them(page) -> None:
    """``pages.form_encoded`` writes a run, worker or span name into a preloaded URL as the page's script
    does (``URLSearchParams``), or the preload would go unused: names of every ASCII character and of
    random Unicode (seeded), through Chromium's own encoder."""
    rng = random.Random(20261129)
    names = ["".join(chr(c) for c in range(32, 127)), "a b+c&d=e", "~*-._", "é中😀"]
    alphabet = [chr(c) for c in range(32, 127)] + ["é", " ", "中", " ", "﻿", "😀"]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(200)]
    encoded = page.evaluate("(names) => names.map((name) => new URLSearchParams([['k', name]]).toString())", names)
    assert encoded == [f"k={form_encoded(name)}" for name in names]


def test_runs_page_and_api_docs(guarded, attack_server: Server) -> None:
    guarded.goto(f"{attack_server.url}/")
    settle(guarded)
    assert RUN in guarded.locator("body").inner_text()
    assert_not_attacked(guarded)
    screenshot(guarded, "escaping-runs")
    guarded.goto(f"{attack_server.url}/api-docs")
    settle(guarded)
    assert_not_attacked(guarded)


@pytest.mark.parametrize("group_by", ["operator", "operator_input_shape"])
def test_operator_stacks_and_source_viewer(guarded, attack_server: Server, group_by: str) -> None:
    query = {"run": RUN, "group_by": group_by, "stack": OPS[0]}
    if group_by == "operator_input_shape":
        rows = get_json(f"{attack_server.url}/api/operators?{urlencode(query)}")[1]["rows"]
        query["input_shape"] = next(row["input_shape"] for row in rows if row["name"] == OPS[0])
    guarded.goto(f"{attack_server.url}/operators?{urlencode(query)}")
    stacks = guarded.get_by_test_id("stacks")
    stacks.wait_for()
    settle(guarded)
    assert FRAMES[0] in stacks.inner_text() and FRAMES[1] in stacks.inner_text()
    hover_charts(guarded)
    assert_not_attacked(guarded)
    screenshot(guarded, f"escaping-stacks-{group_by}")
    stacks.locator("a", has_text=FRAMES[0]).first.click()  # the frame's file, in the source viewer
    guarded.wait_for_url("**/source?**")
    guarded.locator("tr.target").wait_for()
    settle(guarded)
    assert SCRIPT in guarded.locator("tr.target").inner_text()
    assert IMG in guarded.locator("body").inner_text()
    assert_not_attacked(guarded)


@pytest.mark.parametrize("group_by", ["kernel", "kernel_op"])
def test_kernel_groupings(guarded, attack_server: Server, group_by: str) -> None:
    guarded.goto(f"{attack_server.url}/kernels?{urlencode({'run': RUN, 'group_by': group_by})}")
    settle(guarded)
    text = guarded.locator("body").inner_text()
    assert KERNELS[0] in text and (group_by == "kernel" or OPS[0] in text)
    tooltips, _ = hover_charts(guarded)
    assert any(p in tooltips for p in PAYLOADS), tooltips[:500]
    assert_not_attacked(guarded)


@pytest.mark.parametrize(
    ("source", "sunburst", "shown"),
    [({"snapshot": SNAPSHOT}, "stack-sunburst", SCRIPT), ({"log": "memory.log"}, "layer-sunburst", LAYER)],
)
def test_memory_snapshot_and_memory_log(
    guarded, attack_server: Server, source: dict[str, str], sunburst: str, shown: str
) -> None:
    guarded.goto(f"{attack_server.url}/memory?{urlencode({'run': RUN, **source})}")
    guarded.get_by_test_id(sunburst).locator(NODES).first.wait_for()
    settle(guarded)
    tooltips, _ = hover_charts(guarded)
    assert shown in tooltips, tooltips[:500]  # the sunburst's frames / layers, as typed
    assert_not_attacked(guarded)
    screenshot(guarded, f"escaping-memory-{next(iter(source))}")
