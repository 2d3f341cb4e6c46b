"""The Trace page in Chromium on real corpus traces: the canvas draws what the server's windows hold,
zoom / pan / keys move the window, a kernel's flow leads to its launching op, search steps through
matches, a range gets its summary, a copied URL reopens the same view, and several ranks line up
(Distributed links land there)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from .support import (
    BARS,
    TRACE_HOOK,
    Server,
    canvas_box,
    corpus_path,
    get_json,
    query_of,
    screenshot,
    scroll_to_track,
    start_server,
    wait_for_plot,
)

pytestmark = pytest.mark.browser

RESNET = "run=resnet50_num_workers_0&worker=worker0&span=1623143089861"
HOOK = TRACE_HOOK
B200 = "traces/AMD-AGI_TraceLens/tests/traces/b200"  # NCCL rank 0 of 8 on a B200, kernels overlapping on a stream


STILL_FOR_TWO_FRAMES = f"""() => new Promise((resolve) => {{
  const before = JSON.stringify({HOOK}.view);
  requestAnimationFrame(() => requestAnimationFrame(() => resolve(JSON.stringify({HOOK}.view) === before)));
}})"""


def wait_drawn(page, timeout_ms: int = 20_000) -> dict:
    """Wait until the view stopped moving (a held key animates it), every rank has its window answer,
    nothing is in flight, and a frame was drawn after the last answer."""
    for _ in range(50):
        page.wait_for_function(
            f"() => {HOOK} && {HOOK}.idle && {HOOK}.sections.every((s) => s.answered) && {HOOK}.answerDrawn",
            timeout=timeout_ms,
        )
        if page.evaluate(STILL_FOR_TWO_FRAMES) and page.evaluate(f"() => {HOOK}.idle && {HOOK}.answerDrawn"):
            break
    else:
        raise AssertionError("the timeline kept moving")
    return page.evaluate(f"() => ({{view: {HOOK}.view, stats: {HOOK}.stats, sections: {HOOK}.sections}})")


def settled(page, previous_view: dict) -> dict:
    """After an interaction: the window moved; wait for its answer to be drawn."""
    page.wait_for_function(
        f"([s, e]) => {HOOK}.view.start !== s || {HOOK}.view.end !== e",
        arg=[previous_view["start"], previous_view["end"]],
    )
    return wait_drawn(page)


def url_has(page, key: str, value: str) -> None:
    """Wait until the page's URL has ``key=value`` (the page writes its state there after a short debounce)."""
    page.wait_for_function("([k, v]) => new URLSearchParams(location.search).get(k) === v", arg=[key, value])


def wait_text(page, testid: str, text: str) -> None:
    page.wait_for_function(
        "([id, text]) => document.querySelector(`[data-testid=${id}]`)?.textContent === text", arg=[testid, text]
    )


def wait_selected(page, slice_id: int) -> None:
    page.wait_for_function(f"(id) => {HOOK}.selected && {HOOK}.selected.id === id", arg=slice_id)


def track_id(page, section: int, predicate) -> str:
    tracks = page.evaluate(f"(i) => {HOOK}.tracks(i)", section)
    return next(t["id"] for t in tracks if predicate(t))


def drawn(page, section: int, track: str) -> list[dict]:
    return page.evaluate(f"([i, t]) => {HOOK}.drawnSlices(i, t)", [section, track])


def inked_fraction(page) -> float:
    """Share of the canvas's time area that is not background: the drawing really happened."""
    return page.evaluate(
        """() => {
          const canvas = document.querySelector('[data-testid="timeline"]');
          const ctx = canvas.getContext('2d');
          const ratio = window.devicePixelRatio || 1;
          const x0 = Math.round(240 * ratio);
          const y0 = Math.round(30 * ratio);
          const data = ctx.getImageData(x0, y0, canvas.width - x0, canvas.height - y0).data;
          let inked = 0;
          for (let i = 0; i < data.length; i += 4) {
            if (data[i] < 235 || data[i + 1] < 235 || data[i + 2] < 235) inked += 1;
          }
          return inked / (data.length / 4);
        }"""
    )


def test_zoom_pan_flow_search_range_and_reload(page, server) -> None:
    page.goto(f"{server.url}/trace?{RESNET}")
    first = wait_drawn(page)
    _, tracks_api = get_json(f"{server.url}/api/timeline/tracks?{RESNET}")
    assert first["view"] == {"start": 0, "end": tracks_api["duration_us"]}
    assert first["stats"]["slices"] > 0 and first["stats"]["merged"] > 0 and first["stats"]["points"] > 0
    assert inked_fraction(page) > 0.1
    # hovering a counter track tells its value in its unit
    box = canvas_box(page)
    top = page.evaluate(f"() => {HOOK}.rowTop(0, 'c0')")
    page.mouse.move(box["x"] + 230 + (box["width"] - 230) / 2, box["y"] + top + 20)
    tooltip = page.get_by_test_id("tooltip")
    tooltip.wait_for()
    assert tooltip.inner_text().startswith("GPU 0 utilization\n") and "%" in tooltip.inner_text()
    screenshot(page, "trace-whole")

    # ctrl + wheel zooms in at the cursor (where the GPU is busy): the time under the cursor stays put
    _, busy = get_json(f"{server.url}/api/timeline/search?{RESNET}&q=sgemm")
    before = first["view"]
    x = box["x"] + 230 + (box["width"] - 230) * busy["match"]["start_us"] / before["end"]
    y = box["y"] + 60
    page.mouse.move(x, y)
    anchor = before["start"] + (before["end"] - before["start"]) * ((x - box["x"] - 230) / (box["width"] - 230))
    page.keyboard.down("Control")
    page.mouse.wheel(0, -1200)
    page.keyboard.up("Control")
    zoomed = settled(page, before)
    span = zoomed["view"]["end"] - zoomed["view"]["start"]
    assert span < (before["end"] - before["start"]) / 2
    anchor_after = zoomed["view"]["start"] + span * ((x - box["x"] - 230) / (box["width"] - 230))
    before_px_us = (before["end"] - before["start"]) / (box["width"] - 230)
    assert anchor_after == pytest.approx(anchor, abs=before_px_us)  # pointer events land on whole pixels
    assert zoomed["stats"]["requests"] > first["stats"]["requests"]

    # drag pans: 200 px to the left moves the window later by 200 px worth of time
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 100, y)
    page.mouse.move(x - 200, y)
    page.mouse.up()
    panned = settled(page, zoomed["view"])
    px_us = span / (box["width"] - 230)
    assert panned["view"]["start"] - zoomed["view"]["start"] == pytest.approx(200 * px_us, rel=0.05)

    # W zooms in, D pans right (Perfetto's keys)
    page.keyboard.press("w")
    keyed = settled(page, panned["view"])
    assert keyed["view"]["end"] - keyed["view"]["start"] < span
    page.keyboard.press("d")
    moved = settled(page, keyed["view"])
    assert moved["view"]["start"] > keyed["view"]["start"]

    # click a kernel on the GPU stream: its details, and a flow arrow from its launch
    stream = track_id(page, 0, lambda t: t["name"].startswith("stream"))
    inside = lambda s: s["x"] > 232 and s["x"] + s["w"] < box["width"]  # noqa: E731 - wholly in the time area
    kernels = [s for s in drawn(page, 0, stream) if s["kind"] == "kernel" and s["w"] > 4 and inside(s)]
    assert kernels, "no kernel wide enough to click in this window"
    kernel = max(kernels, key=lambda s: s["w"])
    page.mouse.click(box["x"] + kernel["x"] + min(kernel["w"], 40) / 2, box["y"] + kernel["y"])
    details = page.get_by_test_id("details")
    details.wait_for()
    assert page.get_by_test_id("slice-name").inner_text() == kernel["name"]
    url_has(page, "slice", str(kernel["id"]))
    page.wait_for_function(f"() => {HOOK}.stats.flows >= 1")
    screenshot(page, "trace-kernel-selected")

    # follow the flow to the launching operator: it becomes the selection and is drawn on screen
    _, kernel_api = get_json(f"{server.url}/api/timeline/slice?{RESNET}&id={kernel['id']}")
    op = next(r for r in kernel_api["related"] if r["relation"] == "launched by operator")
    page.locator(f'[data-testid="related-link"][data-id="{op["id"]}"]').click()
    wait_selected(page, op["id"])
    wait_text(page, "slice-name", op["name"])
    wait_drawn(page)
    assert op["id"] in [s["id"] for s in drawn(page, 0, op["track"])]
    launches = page.locator('[data-testid="related-link"][data-relation="kernels"]')
    assert str(kernel["id"]) in [launches.nth(i).get_attribute("data-id") for i in range(launches.count())]
    screenshot(page, "trace-launching-op")

    # search: "k of N", next and previous wrap around, the match is selected
    _, found = get_json(f"{server.url}/api/timeline/search?{RESNET}&q=sgemm")
    count = page.get_by_test_id("search-count")
    page.locator("#trace-search").fill("sgemm")
    wait_text(page, "search-count", f"1 of {found['count']}")
    wait_selected(page, found["match"]["id"])
    page.get_by_test_id("search-next").click()
    wait_text(page, "search-count", f"2 of {found['count']}")
    _, second = get_json(f"{server.url}/api/timeline/search?{RESNET}&q=sgemm&index=1")
    wait_selected(page, second["match"]["id"])
    page.get_by_test_id("search-prev").click()
    page.get_by_test_id("search-prev").click()
    wait_text(page, "search-count", f"{found['count']} of {found['count']}")
    _, last = get_json(f"{server.url}/api/timeline/search?{RESNET}&q=sgemm&index={found['count'] - 1}")
    wait_selected(page, last["match"]["id"])
    assert "sgemm" in page.get_by_test_id("slice-name").inner_text()
    searched = wait_drawn(page)  # the view jumped to the match
    assert searched["view"]["start"] <= last["match"]["start_us"]
    assert last["match"]["start_us"] + last["match"]["dur_us"] <= searched["view"]["end"]

    # shift + drag selects a range: its summary table, with the API's numbers
    page.keyboard.down("Shift")
    page.mouse.move(box["x"] + 400, box["y"] + 80)
    page.mouse.down()
    page.mouse.move(box["x"] + 600, box["y"] + 80)
    page.mouse.move(box["x"] + 800, box["y"] + 80)
    page.mouse.up()
    page.keyboard.up("Shift")
    summary = page.get_by_test_id("range-summary")
    summary.wait_for()
    rows = summary.get_by_test_id("range-by-name").locator("tbody tr")
    assert rows.count() > 0
    page.wait_for_function("() => new URLSearchParams(location.search).has('range')")
    params = query_of(page.url)
    start_range, end_range = (float(v) for v in params["range"].split(","))
    _, summary_api = get_json(f"{server.url}/api/timeline/summary?{RESNET}&start_us={start_range}&end_us={end_range}")
    assert rows.first.locator("td").first.inner_text() == summary_api["by_name"][0]["name"]
    screenshot(page, "trace-range")

    # the URL carries it all: a new page at the copied URL shows the same view
    page.wait_for_function(  # the URL is written shortly after the last change
        f"() => Number(new URLSearchParams(location.search).get('start_us')) === Number({HOOK}.view.start.toFixed(3))"
    )
    url = page.url
    state = page.evaluate(f"() => ({{view: {HOOK}.view, selected: {HOOK}.selected}})")
    name = page.get_by_test_id("slice-name").inner_text()
    counted = count.inner_text()
    assert {"start_us", "end_us", "slice", "q", "match", "range"} <= set(query_of(url))
    page.goto("about:blank")
    page.goto(url)
    again = wait_drawn(page)
    assert again["view"]["start"] == pytest.approx(state["view"]["start"], abs=2e-3)
    assert again["view"]["end"] == pytest.approx(state["view"]["end"], abs=2e-3)
    assert page.evaluate(f"() => {HOOK}.selected") == state["selected"]
    wait_text(page, "slice-name", name)
    wait_text(page, "search-count", counted)
    page.get_by_test_id("range-summary").wait_for()
    assert page.locator("#trace-search").input_value() == "sgemm"
    screenshot(page, "trace-reloaded")


def test_overview_step_link_opens_the_step_window(page, server) -> None:
    _, overview = get_json(f"{server.url}/api/overview?{RESNET}")
    step = overview["steps"][2]
    page.goto(f"{server.url}/overview?{RESNET}")
    wait_for_plot(page, "#step-chart", BARS)
    bar = page.locator(f"#step-chart {BARS}").nth(2).bounding_box()  # the first category's bar of the third step
    page.mouse.move(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2)
    page.mouse.click(bar["x"] + bar["width"] / 2, bar["y"] + bar["height"] / 2)
    page.wait_for_url("**/trace?**")
    shown = wait_drawn(page)
    assert shown["view"]["start"] == pytest.approx(step["start_us"], abs=1e-3)
    assert shown["view"]["end"] == pytest.approx(step["start_us"] + step["total_us"], abs=1e-3)
    steps = drawn(page, 0, "steps")
    assert any(s["name"] == f"ProfilerStep#{step['step']}" for s in steps)


def test_two_ranks_side_by_side_with_offsets(page, server) -> None:
    workers = ["sampled_rank-1", "sampled_rank-0"]
    shown_workers = quote(",".join(workers))
    page.goto(
        f"{server.url}/trace?run=trace_filter&span=default&workers={shown_workers}&start_us=1000000&end_us=1400000"
        "&compact=0"  # every track: the Python threads are what this test draws
    )
    shown = wait_drawn(page)
    tracks_url = f"{server.url}/api/timeline/tracks?run=trace_filter&worker="
    walls = [get_json(tracks_url + w)[1]["wall_start_us"] for w in workers]
    assert [s["worker"] for s in shown["sections"]] == workers
    assert shown["sections"][1]["shift"] == pytest.approx(walls[1] - walls[0], abs=1e-3)
    assert shown["view"] == {"start": 1000000, "end": 1400000}
    python_thread = lambda t: t["name"].startswith("thread") and "python" in t["name"]  # noqa: E731
    assert drawn(page, 0, track_id(page, 0, python_thread))
    assert query_of(page.url)["worker"] == workers[0]
    screenshot(page, "trace-two-ranks")

    # fold the first rank (click its header): the second one's tracks come up into view
    box = canvas_box(page)
    page.mouse.click(box["x"] + 60, box["y"] + 26 + 13)
    url_has(page, "collapsed", "0")
    wait_drawn(page)
    assert drawn(page, 1, track_id(page, 1, python_thread)), f"nothing drawn for {workers[1]}"
    screenshot(page, "trace-two-ranks-first-folded")

    offset = page.locator('[data-testid="offset-input"][data-worker="sampled_rank-0"]')
    offset.fill("2500")
    offset.press("Enter")
    page.wait_for_function(
        f"(shift) => Math.abs({HOOK}.sections[1].shift - shift) < 1e-3", arg=walls[1] - walls[0] + 2500
    )
    url_has(page, "offsets", "0,2500")
    page.reload()
    again = wait_drawn(page)
    assert again["sections"][1]["shift"] == pytest.approx(walls[1] - walls[0] + 2500, abs=1e-3)

    page.locator("#align").select_option("start")
    page.wait_for_function(f"() => Math.abs({HOOK}.sections[1].shift - 2500) < 1e-3")

    # the worker picker: remove a rank, add it back (its fold state follows it)
    page.locator('.tl-rank[data-worker="sampled_rank-1"] .tl-remove').click()
    page.wait_for_url("**/trace?**")
    alone = wait_drawn(page)
    assert [s["worker"] for s in alone["sections"]] == ["sampled_rank-0"]
    assert "workers" not in query_of(page.url) and query_of(page.url)["worker"] == "sampled_rank-0"
    page.get_by_test_id("add-worker").select_option("sampled_rank-1")
    page.wait_for_url("**workers=**")
    both = wait_drawn(page)
    assert [s["worker"] for s in both["sections"]] == ["sampled_rank-0", "sampled_rank-1"]


def test_distributed_slowest_rank_lands_beside_the_others(page, server) -> None:
    _, api = get_json(f"{server.url}/api/distributed?run=trace_filter")
    slowest = next(s for s in api["stragglers"] if s["slowest"])
    page.goto(f"{server.url}/distributed?run=trace_filter")
    wait_for_plot(page, "#straggler-chart", BARS)
    page.get_by_test_id("slowest-link").click()
    page.wait_for_url("**/trace?**")
    shown = wait_drawn(page)
    window = slowest["worst"]["trace"]
    assert [s["worker"] for s in shown["sections"]] == window["workers"]
    assert shown["view"]["start"] == pytest.approx(window["start_us"], abs=1e-3)
    assert shown["view"]["end"] == pytest.approx(window["end_us"], abs=1e-3)
    screenshot(page, "trace-from-distributed")
    # the collective's kernel on every rank, each as long as the Distributed page said: scroll to its stream
    for section, worker in enumerate(window["workers"]):
        arrival = next(a for a in slowest["worst"]["arrivals"] if a["worker"] == worker)
        found = []
        tracks = page.evaluate(f"(i) => {HOOK}.tracks(i)", section)
        for track in [t for t in tracks if t["name"].startswith("stream") and t["kind"] == "slices"]:
            scroll_to_track(page, section, track["id"])
            found += [s for s in drawn(page, section, track["id"]) if s["name"].startswith("ncclKernel")]
        assert any(s["dur_us"] == pytest.approx(arrival["duration_us"]) for s in found), worker
    screenshot(page, "trace-from-distributed-kernels")


# Stands in for ui.perfetto.dev (unreachable here): answers PING with PONG as Perfetto does and keeps
# what it is sent, so the test can check the posted trace. The page's own CSP is untouched by this.
FAKE_PERFETTO = """<!doctype html><title>fake Perfetto</title><script>
window.received = null;
window.addEventListener("message", (event) => {
  if (event.data === "PING") { event.source.postMessage("PONG", event.origin); return; }
  const p = event.data && event.data.perfetto;
  if (p) window.received = {title: p.title, fileName: p.fileName, text: new TextDecoder().decode(p.buffer)};
});
</script>"""


def test_open_in_perfetto_posts_the_visible_window(page, server) -> None:
    page.context.route(
        "https://ui.perfetto.dev/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body=FAKE_PERFETTO),
    )
    page.goto(f"{server.url}/trace?{RESNET}&start_us=80000&end_us=90000")
    wait_drawn(page)
    with page.context.expect_page() as opened:
        page.get_by_test_id("open-perfetto").click()
    perfetto = opened.value
    wait_text(page, "perfetto-note", "Sent to ui.perfetto.dev.")
    received = perfetto.evaluate("() => window.received")
    assert received["title"] == "resnet50_num_workers_0 \u00b7 worker0"
    trace = json.loads(received["text"])
    assert trace["profscope"]["window_us"] == [80000.0, 90000.0]
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert slices and trace["profscope"]["slices"] == len(slices)
    href = page.get_by_test_id("download-window").get_attribute("href")
    assert query_of(href)["start_us"] == "80000.000" and query_of(href)["end_us"] == "90000.000"


HOSTILE = '<img src=x onerror="window.pwned=1">&<script>window.pwned=2</script>'


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The tinygpt_cpu trace with its user annotations renamed to markup, in a worker named like markup."""
    work = tmp_path_factory.mktemp("hostile")
    source = sorted(corpus_path("generated/tinygpt_cpu").glob("*.pt.trace.json.gz"))[0]
    trace = json.loads(gzip.decompress(source.read_bytes()))
    for event in trace["traceEvents"]:
        if event.get("name") == "train_step_user_annotation":
            event["name"] = HOSTILE
    (work / "run").mkdir()
    target = work / "run" / "<img src=y onerror=window.pwned=3>.1.pt.trace.json.gz"
    target.write_bytes(gzip.compress(json.dumps(trace).encode()))
    server = start_server([work / "run"], work / "cache", work / "server.log")
    try:
        server.wait_parsed()
        yield server
    finally:
        server.stop()


def test_hostile_names_stay_text(page, hostile_server: Server) -> None:
    _, runs = get_json(f"{hostile_server.url}/api/runs")
    worker = runs["runs"][0]["workers"][0]["worker"]
    page.goto(f"{hostile_server.url}/trace?run=run&worker={quote(worker)}")
    wait_drawn(page)
    page.locator("#trace-search").fill("onerror")
    wait_text(page, "slice-name", HOSTILE)
    page.get_by_test_id("search-count").wait_for()
    assert page.locator("[data-testid=details] img, [data-testid=details] script").count() == 0
    assert page.evaluate("() => window.pwned") is None
    screenshot(page, "trace-hostile")


@pytest.fixture(scope="module")
def b200_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A B200 trace whose kernels overlap on one stream (programmatic dependent launch)."""
    work = tmp_path_factory.mktemp("b200")
    server = start_server([corpus_path(B200)], work / "cache", work / "server.log")
    try:
        server.wait_parsed()
        yield server
    finally:
        server.stop()


def test_overlapping_kernels_on_a_stream_are_stacked_not_dropped(page, b200_server: Server) -> None:
    query = "run=b200&start_us=16850&end_us=16950"  # a bmm kernel overlapping the kernel before it
    _, tracks = get_json(f"{b200_server.url}/api/timeline/tracks?run=b200")
    stream = next(t for t in tracks["tracks"] if t["name"] == "stream 7")
    assert stream["max_depth"] >= 1
    _, window = get_json(f"{b200_server.url}/api/timeline?{query}&width_px=4000&tracks={stream['id']}")
    page.goto(f"{b200_server.url}/trace?{query}")
    wait_drawn(page)
    scroll_to_track(page, 0, stream["id"])
    shown = drawn(page, 0, stream["id"])
    box = canvas_box(page)
    px_us = 100 / (box["width"] - 230)
    # every kernel of the window at least two pixels wide is drawn as itself: none merged away or dropped
    expected = {s["id"] for s in window["tracks"][0]["slices"] if s["dur_us"] >= 2 * px_us}
    assert len(expected) >= 4 and expected <= {s["id"] for s in shown}
    kernels = [s for s in shown if s["kind"] == "kernel"]
    overlaps = [
        (a, b)
        for a in kernels
        for b in kernels
        if a["depth"] < b["depth"] and a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
    ]
    assert overlaps, "no two kernels drawn over the same time on the stream"
    screenshot(page, "trace-overlapping-kernels")
