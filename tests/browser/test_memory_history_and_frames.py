"""The Memory page (issue 20, items 7 and 2): its own state changes (device, window, moment, allocation,
sort) add history entries, so Back undoes them; frames whose names and paths have no break points
(C++ symbols, deep paths) wrap or are cut in the middle with the full text on hover, and the page never
scrolls sideways at 1280 px."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import POLYGONS, Server, corpus_path, parsed_server, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

SNAPSHOT = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # a training loop's history, 1 device
LONG_DIR = "/home/researcher/" + "a_checkout_directory_whose_name_goes_on_without_a_single_place_to_break_it"
LONG_SUFFIX = "_with_a_generated_suffix_that_has_no_break_point_at_all"


def _long_frame(frame: dict) -> dict:
    """The frame with a deep path and a C++-style symbol, neither with a space or a slash to break at
    in its last parts."""
    parts = frame["filename"].replace("\\", "/").split("/")
    return {
        "name": f"torch::autograd::generated::{frame['name']}Backward0::apply_with_saved_variables{LONG_SUFFIX}",
        "filename": f"{LONG_DIR}/{'_'.join(parts[-3:-1])}{LONG_SUFFIX}/{parts[-1]}",
        "line": frame["line"],
    }


def _long_frames_snapshot(run: Path) -> None:
    with open(corpus_path(SNAPSHOT), "rb") as f:
        snapshot = pickle.load(f)  # the corpus is trusted: the plain unpickler writes the test's own pickle
    made: dict[int, dict] = {}  # the pickle shares a frame between the stacks holding it: so does this one
    for trace in snapshot["device_traces"]:
        for entry in trace:
            entry["frames"] = [made.setdefault(id(frame), _long_frame(frame)) for frame in entry["frames"]]
    run.mkdir(parents=True)
    (run / "memory_snapshot.pickle").write_bytes(pickle.dumps(snapshot, protocol=4))


@pytest.fixture(scope="module")
def long_frames(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("long-frames")
    _long_frames_snapshot(work / "long_frames")
    with parsed_server([work / "long_frames"], work) as server:
        yield server


def _no_sideways_scroll(page) -> None:
    """Neither the page nor a table in it scrolls sideways."""
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page is {width[0]} px wide in a {width[1]} px window"
    tables = page.locator(".table-scroll").evaluate_all("(boxes) => boxes.map((b) => [b.scrollWidth, b.clientWidth])")
    assert tables and all(scroll <= client for scroll, client in tables), tables


def test_long_frames_never_widen_the_page(page, long_frames: Server) -> None:
    page.goto(f"{long_frames.url}/memory?run=long_frames")
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    page.get_by_test_id("top-table").locator("tbody tr").first.wait_for()
    _no_sideways_scroll(page)
    where = page.get_by_test_id("top-table").locator("td.frames .mid-ellipsis").first
    assert LONG_SUFFIX in where.get_attribute("title")  # the whole frame is one hover away
    assert where.get_attribute("title").endswith(".py:168)")  # adam_forward.py:168, its tail always drawn
    page.get_by_test_id("top-table").locator("tbody tr").first.click()  # pins it: its whole stack below
    frames = page.get_by_test_id("allocation-frames")
    frames.wait_for()
    _no_sideways_scroll(page)
    link = frames.locator("li").first.locator(".frame-path")
    assert link.get_attribute("title").startswith(LONG_DIR)  # cut in the middle, whole on hover
    assert link.inner_text().endswith(".py:" + link.get_attribute("title").rsplit(":", 1)[1])  # the file and line show
    screenshot(page, "memory-long-frames")


def _back_to(page, url: str) -> None:
    page.go_back()
    page.wait_for_url(url)


def test_back_undoes_the_memory_pages_own_changes(page, long_frames: Server) -> None:
    page.goto(f"{long_frames.url}/memory?run=long_frames")
    page.get_by_test_id("top-table").locator("tbody tr").first.wait_for()
    opened = page.url
    page.get_by_role("button", name="at snapshot time").click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('moment') === 'end'")
    at_end = page.url
    page.get_by_test_id("top-table").locator("tbody tr").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).has('allocation')")
    pinned = page.url
    page.get_by_test_id("allocation-detail").get_by_role("button", name="close").click()
    page.wait_for_function("() => !new URLSearchParams(location.search).has('allocation')")

    _back_to(page, pinned)
    page.get_by_test_id("allocation-frames").wait_for()  # the reloaded page pins the allocation again
    _back_to(page, at_end)
    page.get_by_test_id("top-table").locator("tbody tr").first.wait_for()
    assert page.get_by_role("button", name="at snapshot time").get_attribute("aria-pressed") == "true"
    assert "allocation" not in query_of(page.url)
    _back_to(page, opened)
    page.get_by_test_id("top-table").locator("tbody tr").first.wait_for()
    assert page.get_by_role("button", name="at the peak").get_attribute("aria-pressed") == "true"
    assert page.url.startswith(long_frames.url)  # Back stayed on the page


def test_back_undoes_a_sort_of_the_profiler_memory_tables(page, server: Server) -> None:
    page.goto(f"{server.url}/memory?run=resnet50_num_workers_0")
    table = page.get_by_test_id("stats-table")
    table.locator("tbody tr").first.wait_for()
    opened = page.url
    table.locator("th", has_text="Calls").click()
    page.wait_for_function("() => new URLSearchParams(location.search).has('stats_sort')")
    _back_to(page, opened)
    table.locator("tbody tr").first.wait_for()
    assert "stats_sort" not in query_of(page.url) and page.url.startswith(server.url)
