"""The Memory page in Chromium: a snapshot's timeline (hover, pin, jump to source), the profiler curve and an
InternLM memory.log (curve by category, layer sunbursts)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import (
    AREAS,
    BARS,
    LINES,
    NODES,
    PLOT_AREA,
    POLYGONS,
    Server,
    corpus_path,
    get_json,
    point_on,
    query_of,
    screenshot,
    start_server,
    wait_for_plot,
)

pytestmark = pytest.mark.browser

SNAPSHOT_SOURCE = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # a training loop's history, 61 segments
SNAPSHOT_RUN = "DeComFL"
SCRIPT = "decomfl_main.py"  # the profiled script the snapshot's stacks point at
INTERNLM = Path(__file__).resolve().parents[1] / "data" / "internlm"  # written by make_memory_logs.py
# runs of the root tests/data/internlm, named by their folder in it (no root prefix: docs/definitions.md, "Run names")
LOG_RUN = "memory_trace"  # the profiler's own example (see tests/test_memory_log.py)
PIPELINE_RUN = "RUN/internlm_tiny/05-01-10-00-00/memory_trace"  # two ranks, two model chunks


def _stand_in_sources(work: Path) -> Path:
    """A source root holding a stand-in for the script the snapshot's stacks point at."""
    sources = work / "sources"
    sources.mkdir(parents=True)
    (sources / SCRIPT).write_text("".join(f"# line {n} of a stand-in for the training script\n" for n in range(1, 300)))
    return sources


def _posix_snapshot() -> dict:
    """The corpus snapshot with its Windows frame paths (``C:\\research\\DeComFL\\...``) written as the POSIX
    paths of a Linux checkout, so the source viewer finds their tails under a source root here."""
    import pickle

    with open(corpus_path(SNAPSHOT_SOURCE), "rb") as f:
        snapshot = pickle.load(f)  # the corpus is trusted: the plain unpickler writes the test's own pickle
    frames = [f for trace in snapshot["device_traces"] for e in trace for f in e["frames"]]
    frames += [f for segment in snapshot["segments"] for block in segment["blocks"] for f in block.get("frames", [])]
    for frame in {id(f): f for f in frames}.values():  # the pickle shares a frame between the stacks holding it
        frame["filename"] = "/" + frame["filename"].removeprefix("C:\\").replace("\\", "/")
    return snapshot


def _snapshot_run(work: Path) -> Path:
    """A run with two snapshots: the training history, and one recorded without history (segments only)."""
    import pickle

    run = work / SNAPSHOT_RUN
    run.mkdir(parents=True)
    (run / "memory_snapshot.pickle").write_bytes(pickle.dumps(_posix_snapshot(), protocol=4))
    shutil.copy(corpus_path("memory-snapshots/ZijianDu_Attention/memory.pickle"), run / "segments_only.pickle")
    return run


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("memory-server")
    sources = _stand_in_sources(work)
    roots = [_snapshot_run(work), corpus_path("generated/tinygpt_cpu"), INTERNLM]
    started = start_server(roots, work / "cache", work / "server.log", "--source-root", str(sources))
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


def _band_point(page) -> dict:
    """Pixel position (in the page) of the middle of the largest drawn band, and what it is."""
    return page.evaluate(
        """() => {
          const frame = document.querySelector('#snapshot-timeline .chart-frame');
          const url = new URL(document.getElementById('json-link').href);
          return fetch(url).then((r) => r.json()).then((data) => {
            const band = data.bands.reduce((a, b) => (b.size > a.size ? b : a));
            const i = Math.floor(band.x.length / 2);
            const x = (band.x[i] + (band.x[i + 1] ?? band.x_end)) / 2;
            const y = (band.y[i] + band.size / 2) / (1024 * 1024);
            return { ...frame.toClient(x, y), addr: band.addr, id: band.id };
          });
        }"""
    )


def test_snapshot_timeline_hover_pin_and_jump_to_source(page, memory_server: Server) -> None:
    page.goto(f"{memory_server.url}/memory?run={SNAPSHOT_RUN}&snapshot=memory_snapshot")
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    page.get_by_test_id("segments-chart").locator(BARS).first.wait_for()
    note = page.locator(".timeline-note").inner_text()
    assert "allocations drawn one by one" in note and "summarized" in note

    point = _band_point(page)
    page.mouse.move(point["left"], point["top"])
    tooltip = page.get_by_test_id("band-tooltip")
    tooltip.wait_for(state="visible")
    assert point["addr"] in tooltip.inner_text()
    assert "MiB at 0x" in tooltip.inner_text()
    screenshot(page, "memory-snapshot-hover")

    page.mouse.click(point["left"], point["top"])
    detail = page.get_by_test_id("allocation-detail")
    frames = detail.get_by_test_id("allocation-frames")
    frames.wait_for()
    assert query_of(page.url)["allocation"] == str(point["id"])
    link = frames.locator("a.frame-link", has_text=SCRIPT).first
    target_line = int(link.inner_text().rsplit(":", 1)[1])
    screenshot(page, "memory-snapshot-pinned")
    link.click()
    page.wait_for_url("**/source?**")
    row = page.locator("tr.target")
    row.wait_for()
    assert row.get_attribute("data-line") == str(target_line)
    assert "stand-in for the training script" in row.inner_text()


def test_profiler_curve_range_selection_filters_both_tables(page, memory_server: Server) -> None:
    page.goto(f"{memory_server.url}/memory?run=tinygpt_cpu")
    wait_for_plot(page, "#memory-curve", LINES)
    events_count = page.get_by_test_id("events-table").locator("tbody tr").count()
    assert events_count > 100
    _, full = get_json(f"{memory_server.url}/api/memory?run=tinygpt_cpu")
    plot = page.locator(f"#memory-curve {PLOT_AREA}").first.bounding_box()
    y = plot["y"] + plot["height"] / 2
    page.mouse.move(plot["x"] + plot["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(plot["x"] + plot["width"] * 0.35, y, steps=8)
    page.mouse.up()
    page.get_by_test_id("range").wait_for()
    params = query_of(page.url)
    start, end = float(params["start_us"]), float(params["end_us"])
    assert 0 < start < end
    _, windowed = get_json(
        f"{memory_server.url}/api/memory?run=tinygpt_cpu&start_us={params['start_us']}&end_us={params['end_us']}"
    )
    assert 0 < len(windowed["events"]) < len(full["events"])
    assert 0 < len(windowed["stats"]) <= len(full["stats"])
    for row in windowed["events"]:
        times = [t for t in (row["alloc_time_us"], row["release_time_us"]) if t is not None]
        assert all(start <= t <= end for t in times)
    page.wait_for_function(
        "(n) => document.querySelectorAll('[data-testid=events-table] tbody tr').length === n",
        arg=min(len(windowed["events"]), 1000),
    )
    counts = page.get_by_test_id("memory-events").locator("h2").inner_text()
    assert f"{len(windowed['events']):,} rows" in counts
    screenshot(page, "memory-profiler-range")
    page.get_by_role("button", name="Reset range").click()
    page.wait_for_function("() => !new URL(location.href).searchParams.has('start_us')")


def test_runs_page_links_a_snapshot_to_the_memory_page(page, memory_server: Server) -> None:
    page.goto(memory_server.url)
    links = page.get_by_test_id("snapshot-link")
    links.first.wait_for()
    assert sorted(links.all_inner_texts()) == [
        "memory snapshot memory_snapshot",
        "memory snapshot segments_only",
    ]
    link = page.get_by_test_id("snapshot-link").filter(has_text="memory_snapshot")
    link.click()
    page.wait_for_url("**/memory?**")
    assert query_of(page.url)["snapshot"] == "memory_snapshot"
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    screenshot(page, "memory-from-runs")


def test_memory_log_curve_by_category_and_layer_sunbursts(page, memory_server: Server) -> None:
    page.goto(f"{memory_server.url}/memory?run={LOG_RUN}")
    wait_for_plot(page, "#log-curve", AREAS)  # the stacked categories
    stats = {
        label: value
        for label, value in zip(
            page.locator(".mem-stat .label").all_inner_texts(),
            page.locator(".mem-stat .value").all_inner_texts(),
            strict=True,
        )
    }
    # 2000.20 MiB, 400.04 MiB, 400.04 + 800.08 MiB, 20.00 MiB as logged
    assert stats["Peak total"] == "2.0 GiB" and stats["Parameters"] == "400 MiB"
    assert stats["Optimizer"] == "1.2 GiB" and stats["Peak activations"] == "20.0 MiB"
    assert "peak 2.0 GiB" in page.locator("#log-curve").inner_text()
    assert query_of(page.url)["log"] == "memory.log" and query_of(page.url)["worker"] == "rank0_dp0_tp0"
    source = page.get_by_label("Trace, snapshot or memory.log")
    assert source.locator("option:checked").inner_text() == "memory.log \u00b7 rank0_dp0_tp0"

    wait_for_plot(page, "#layer-sunburst", NODES)
    assert "layer2" in page.locator("#layer-sunburst").inner_text()
    page.get_by_role("button", name="optimizer", exact=True).click()
    page.wait_for_function("() => document.querySelector('#layer-sunburst').textContent.includes('os_state_mem')")
    assert query_of(page.url)["category"] == "optimizer"
    assert page.get_by_role("button", name="optimizer", exact=True).get_attribute("aria-pressed") == "true"
    screenshot(page, "memory-log-optimizer")

    plot = page.locator(f"#log-curve {PLOT_AREA}").first.bounding_box()
    y = plot["y"] + plot["height"] / 2
    page.mouse.move(plot["x"] + plot["width"] * 0.05, y)
    page.mouse.down()
    page.mouse.move(plot["x"] + plot["width"] * 0.5, y, steps=8)
    page.mouse.up()
    page.get_by_test_id("range").wait_for()
    start, end = float(query_of(page.url)["start_us"]), float(query_of(page.url)["end_us"])
    _, windowed = get_json(
        f"{memory_server.url}/api/memory/log?run={LOG_RUN}&start_us={start}&end_us={end}&width_px=1500"
    )
    assert 0 < windowed["points_in_window"] < 6
    page.wait_for_function(
        "(n) => [...document.querySelectorAll('.mem-stat')].some((s) => s.textContent === 'Points in range' + n)",
        arg=str(windowed["points_in_window"]),
    )


def test_memory_log_of_another_rank_from_the_source_selector(page, memory_server: Server) -> None:
    page.goto(f"{memory_server.url}/memory?run={PIPELINE_RUN}&category=activations")
    wait_for_plot(page, "#layer-sunburst", NODES)
    text = page.locator("#layer-sunburst").inner_text()
    assert "activations_0" in text and "activations_1" in text  # one tree per model chunk
    source = page.get_by_label("Trace, snapshot or memory.log")
    assert source.locator("option").all_inner_texts() == [
        "memory.log \u00b7 rank0_dp0_wp0_tp0",
        "memory.log \u00b7 rank1_dp1_wp0_tp0",
    ]
    screenshot(page, "memory-log-pipeline-activations")
    source.select_option(label="memory.log \u00b7 rank1_dp1_wp0_tp0")
    page.wait_for_url("**worker=rank1_dp1_wp0_tp0**")
    wait_for_plot(page, "#log-curve", AREAS)
    assert "rank1_dp1_wp0_tp0" in page.locator(".page-head").inner_text()


def test_runs_page_links_a_memory_log_to_the_memory_page(page, memory_server: Server) -> None:
    page.goto(memory_server.url)
    links = page.get_by_test_id("memory-log-link")
    links.first.wait_for()
    assert links.count() == 3
    page.locator(f"[data-run='{LOG_RUN}']").get_by_test_id("memory-log-link").click()
    page.wait_for_url("**/memory?**")
    assert query_of(page.url)["log"] == "memory.log"
    wait_for_plot(page, "#log-curve", AREAS)


def test_old_trace_without_totals_draws_the_running_sum_of_bytes(page, server: Server) -> None:
    """torch-tb-profiler's V100 samples (PyTorch 1.9): [memory] events with Bytes only. The curve is the
    running sum of their Bytes since the trace started (what the Trace view draws as "GPU 0 memory
    allocated"), said so above it; no reserved curve, no peak that was not recorded."""
    page.goto(f"{server.url}/memory?run=resnet50_num_workers_0")
    wait_for_plot(page, "#memory-curve", LINES)
    note = page.get_by_test_id("curve-note").inner_text()
    assert "running sum of their 'Bytes' since the trace started" in note
    legend = page.locator("#memory-curve .chart-legend").text_content()
    assert "Allocated since the trace started" in legend and "Reserved" not in legend
    stat_labels = page.locator(".mem-stat .label").all_inner_texts()
    assert "Peak reserved" not in stat_labels and "Peak allocated" not in stat_labels
    ticks = page.locator("#memory-curve .x-axis text.tick").all_text_contents()
    assert ticks and not any("M" in t for t in ticks)  # ms / s, not "12M µs"
    title = page.locator("#memory-curve .x-axis text.axis-title").text_content()
    assert title.endswith("(s)")  # the trace lasts 1.03 s
    assert page.get_by_test_id("stats-table").locator("tbody tr").count() > 10
    _, body = get_json(f"{server.url}/api/memory?run=resnet50_num_workers_0")
    assert body["device"] == "GPU0" and body["curve_kind"] == "bytes_running_sum"
    assert body["peak_allocated_bytes"] is None and all(p[2] is None for p in body["curve"])
    assert "before PyTorch 1.10" in body["curve_reason"]
    screenshot(page, "memory-profiler-no-totals")


def test_every_drawn_segment_has_its_row_inside_the_panel(page, memory_server: Server) -> None:
    """The allocator-state chart grows with its segments: each one labelled, none squeezed out or drawn
    past the bottom of its panel."""
    page.goto(f"{memory_server.url}/memory?run={SNAPSHOT_RUN}&snapshot=memory_snapshot")
    chart = page.get_by_test_id("segments-chart")
    wait_for_plot(page, '[data-testid="segments-chart"]', BARS)
    _, state = get_json(
        f"{memory_server.url}/api/memory/snapshot/segments?run={SNAPSHOT_RUN}&snapshot=memory_snapshot&device=0"
    )
    drawn = min(80, len(state["segments"]))
    assert drawn > 20
    assert chart.locator(".y-axis text.category").count() == drawn  # each segment labelled
    panel = page.locator("section.panel", has=chart).bounding_box()
    box = chart.bounding_box()
    assert box["height"] >= 22 * drawn and box["y"] + box["height"] <= panel["y"] + panel["height"]
    screenshot(page, "memory-snapshot-segments")


def test_oom_moment_with_its_request_and_stack_linked_to_source(page, tmp_path: Path) -> None:
    """A real snapshot with an ``oom`` entry appended (as the allocator records one: the request's size, what the
    driver had free, the frames of the failing call): the page shows the moment on the timeline's axis, and its
    frames link to the source viewer."""
    import pickle

    snapshot = _posix_snapshot()
    trace = snapshot["device_traces"][0]
    failing = next(e for e in reversed(trace) if any(SCRIPT in frame["filename"] for frame in e["frames"]))
    trace.append({"action": "oom", "addr": 0, "size": 6 << 30, "stream": 0, "device_free": 123 << 20,
                  "time_us": trace[-1]["time_us"] + 10, "frames": failing["frames"]})  # fmt: skip
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "oom_rank-0_host_1.pickle").write_bytes(pickle.dumps(snapshot, protocol=4))
    source_root = str(_stand_in_sources(tmp_path))
    server = start_server([tmp_path / "job"], tmp_path / "cache", tmp_path / "server.log", "--source-root", source_root)
    try:
        server.wait_parsed()
        page.goto(f"{server.url}/memory?run=job")
        moment = page.get_by_test_id("oom-moment")
        moment.wait_for()
        _, body = get_json(f"{server.url}/api/memory/snapshot/oom?run=job&device=0")
        (oom,) = body["ooms"]
        assert oom["requested_bytes"] == 6 << 30 and oom["device_free_bytes"] == 123 << 20
        assert oom["at_us"] == trace[-1]["time_us"] - min(e["time_us"] for e in trace)
        text = moment.inner_text()
        assert f"at {oom['at_us']:,} \u00b5s on the timeline" in text
        assert "6.0 GiB" in text and "123 MiB" in text
        screenshot(page, "memory-snapshot-oom")
        link = moment.get_by_test_id("oom-frames").locator("a.frame-link", has_text=SCRIPT).first
        target_line = int(link.inner_text().rsplit(":", 1)[1])
        link.click()
        page.wait_for_url("**/source?**")
        assert page.locator("tr.target").get_attribute("data-line") == str(target_line)
    finally:
        server.stop()


def test_call_stack_sunburst_names_each_sector_by_its_function(page, memory_server: Server) -> None:
    """Sectors show the function alone (``file.py:line`` made every label too long to read); the whole frame
    is in the hover. The largest stack's outermost frame is written in the chart."""
    page.goto(f"{memory_server.url}/memory?run={SNAPSHOT_RUN}&snapshot=memory_snapshot")
    wait_for_plot(page, "#stack-sunburst", NODES)
    _, tree = get_json(
        f"{memory_server.url}/api/memory/snapshot/stacks?run={SNAPSHOT_RUN}&snapshot=memory_snapshot&device=0"
    )
    outer = [i for i, parent in enumerate(tree["parents"]) if parent == "all" and tree["ids"][i].endswith(")")]
    largest = max(outer, key=lambda i: tree["values"][i])
    function = tree["labels"][largest].split(" (")[0]
    texts = page.locator("#stack-sunburst text.node-text").evaluate_all("(texts) => texts.map((t) => t.textContent)")
    assert function in texts and "all live memory" in texts
    assert not any(".py:" in text for text in texts)
    at = point_on(page, f'#stack-sunburst g.node[data-node="{largest}"]')  # the hover keeps the whole frame
    page.mouse.move(at["x"], at["y"])
    tooltip = page.locator("#stack-sunburst .chart-tooltip")
    tooltip.wait_for(state="visible")
    assert tooltip.locator("strong").text_content() == tree["labels"][largest]
    assert ".py:" in tree["labels"][largest]
