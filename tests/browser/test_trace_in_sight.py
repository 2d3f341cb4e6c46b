"""Issue 20, items 1 and 10 in Chromium: the Trace view opens with every GPU stream inside the canvas
(GPU groups first, deep CPU / Python stacks folded, compact ranks), a stack unfolds from its label,
the Distributed page's straggler link lands with the collective selected and every rank in view, and
a shared link scrolls its selected slice into view."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from .support import BARS, Server, corpus_path, get_json, parsed_server, query_of, screenshot, wait_for_plot
from .test_trace_page import HOOK, url_has, wait_drawn, wait_selected

pytestmark = pytest.mark.browser

OWLV2 = "traces/AMD-AGI_TraceLens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"
B200 = "traces/AMD-AGI_TraceLens/tests/traces/b200/eager_trace.json.gz"
GLOO = "generated/tinygpt_ddp4_gloo"  # 4 CPU ranks (gloo), two spans each
NCCL = "hta/trace_filter"  # 2 GPU ranks of a 128-rank NCCL job
RULER_PX = 26


@pytest.fixture(scope="module")
def sight_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("sight")
    roots = work / "roots"
    for run, file in (("owlv2", OWLV2), ("b200", B200)):
        (roots / run).mkdir(parents=True)
        shutil.copy(corpus_path(file), roots / run)
    shutil.copytree(corpus_path(GLOO), roots / "ddp")
    shutil.copytree(corpus_path(NCCL), roots / "nccl")
    with parsed_server([roots], work) as server:
        yield server


def rows(page) -> list[dict]:
    return page.evaluate(f"() => {HOOK}.rows()")


def inside(page, row: dict) -> bool:
    """The whole row lies between the ruler and the bottom of the canvas."""
    return row["top"] >= RULER_PX and row["top"] + row["h"] <= page.evaluate(f"() => {HOOK}.height")


def gpu_streams(page) -> list[dict]:
    return [r for r in rows(page) if r["type"] == "track" and r["group"] == "gpu" and r["track"].startswith("t")]


@pytest.mark.parametrize("run", ["owlv2", "b200"])
def test_single_rank_opens_with_every_gpu_stream_in_the_canvas(page, sight_server: Server, run: str) -> None:
    page.goto(f"{sight_server.url}/trace?run={run}")
    wait_drawn(page)
    streams = gpu_streams(page)
    assert streams, "no GPU stream laid out"
    outside = [r["track"] for r in streams if not inside(page, r)]
    assert not outside, f"GPU streams below the canvas: {outside}"
    # the deep Python stack is folded to a few lanes, so the GPU group sits above it
    python = [r for r in rows(page) if r["type"] == "track" and r["folded"]]
    assert python and all(r["lanes"] == 5 for r in python)
    assert max(r["top"] for r in streams) < min(r["top"] for r in python)
    screenshot(page, f"trace-in-sight-{run}")


def test_a_stack_unfolds_from_its_label_and_all_from_the_toolbar(page, sight_server: Server) -> None:
    page.goto(f"{sight_server.url}/trace?run=owlv2")
    wait_drawn(page)
    folded = next(r for r in rows(page) if r["folded"])
    box = page.get_by_test_id("timeline").bounding_box()
    page.mouse.click(box["x"] + 60, box["y"] + folded["top"] + 8)  # the track's label, in the gutter
    url_has(page, "unfolded", folded["key"])
    again = next(r for r in rows(page) if r["key"] == folded["key"])
    assert not again["folded"] and again["lanes"] > 5 and again["h"] > folded["h"]
    page.get_by_test_id("stacks-toggle").click()
    url_has(page, "stacks", "full")
    assert not any(r["folded"] for r in rows(page))
    assert "unfolded" not in query_of(page.url)
    page.reload()
    wait_drawn(page)
    assert not any(r["folded"] for r in rows(page))
    assert page.get_by_test_id("stacks-toggle").inner_text() == "Fold stacks"


@pytest.mark.parametrize(("run", "workers"), [("ddp", ["rank0", "rank1", "rank2", "rank3"]),
                                              ("nccl", ["sampled_rank-0", "sampled_rank-1"])])  # fmt: skip
def test_several_ranks_open_compact_with_every_rank_in_the_canvas(page, sight_server: Server, run, workers) -> None:
    page.goto(f"{sight_server.url}/trace?run={run}&workers={quote(','.join(workers))}")
    wait_drawn(page)
    laid = rows(page)
    headers = [r for r in laid if r["type"] == "section"]
    assert len(headers) == len(workers)
    assert all(inside(page, r) for r in headers), "a rank's header is below the canvas"
    for section in range(len(workers)):
        tracks = [r for r in laid if r["type"] == "track" and r["section"] == section and r["group"] != "steps"]
        assert tracks and all(inside(page, r) for r in tracks), f"rank {section}: tracks below the canvas"
        if run == "nccl":  # GPU ranks: exactly their streams
            assert {r["group"] for r in tracks} == {"gpu"}
    screenshot(page, f"trace-compact-{run}")
    # every track comes back when compact is unticked, and the URL says so
    page.get_by_test_id("compact-toggle").uncheck()
    url_has(page, "compact", "0")
    assert len(rows(page)) > len(laid)


def test_straggler_link_selects_the_collective_with_every_rank_in_view(page, sight_server: Server) -> None:
    _, api = get_json(f"{sight_server.url}/api/distributed?run=ddp")
    worst = next(s for s in api["stragglers"] if s["slowest"])["worst"]
    page.goto(f"{sight_server.url}/distributed?run=ddp")
    wait_for_plot(page, "#straggler-chart", BARS)
    page.get_by_test_id("slowest-link").click()
    page.wait_for_url("**/trace?**")
    wait_drawn(page)
    wait_selected(page, worst["trace"]["event"])
    wait_drawn(page)
    details = page.get_by_test_id("details")
    assert worst["name"] in details.inner_text()
    assert page.evaluate(f"() => {HOOK}.selected.worker") == worst["last_worker"]
    laid = rows(page)
    assert {r["section"] for r in laid if r["type"] == "section"} == {0, 1, 2, 3}
    assert [r["key"] for r in laid if not inside(page, r)] == [], "a rank's rows are out of sight"
    track = get_json(
        f"{sight_server.url}/api/timeline/slice?run=ddp&worker={worst['last_worker']}&id={worst['trace']['event']}"
    )[1]["track"]
    row = next(r for r in laid if r["section"] == 0 and r["track"] == track)
    assert inside(page, row), "the selected collective's track is out of sight"
    screenshot(page, "trace-straggler-selected")


def test_a_shared_link_scrolls_its_selected_slice_into_view(page, sight_server: Server) -> None:
    # a slice on the second Python thread, far below once every stack is unfolded
    _, found = get_json(f"{sight_server.url}/api/timeline/search?run=owlv2&q=threading.py(1032)")
    match = found["match"]
    worker = found["worker"]
    page.goto(
        f"{sight_server.url}/trace?run=owlv2&stacks=full&slice={match['id']}&slice_worker={quote(worker)}"
        f"&slice_span={found['span']}"
    )
    wait_drawn(page)
    wait_selected(page, match["id"])
    wait_drawn(page)
    row = next(r for r in rows(page) if r["track"] == match["track"])
    assert row["top"] + 9 + 18 * match["depth"] < page.evaluate(f"() => {HOOK}.height")
    assert row["top"] >= RULER_PX
    screenshot(page, "trace-shared-link-scrolled")
