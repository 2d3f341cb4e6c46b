"""Old links keep working after the page parameters were renamed to the API's names (docs/ARCHITECTURE.md,
"Parameter names"): in Chromium, a link with the old names shows the same state as one with the new names,
and the page rewrites its URL to the new names."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .support import POLYGONS, Server, corpus_path, get_json, parsed_server, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

SNAPSHOT = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"  # a training loop's history, with times


@pytest.fixture(scope="module")
def names_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("names")
    roots = work / "roots"
    shutil.copytree(corpus_path("generated/tinygpt_ddp4_gloo"), roots / "ddp")
    shutil.copytree(corpus_path("generated/tinygpt_cpu"), roots / "cpu")
    (roots / "snaps").mkdir()
    shutil.copy(corpus_path(SNAPSHOT), roots / "snaps" / "memory_snapshot.pickle")
    with parsed_server([roots], work) as server:
        yield server


def _opened(page, url: str, ready: str) -> dict[str, str]:
    """Open ``url``, wait for ``ready`` (a selector), and return the URL's parameters then."""
    page.goto(url)
    page.locator(ready).first.wait_for()
    return query_of(page.url)


def test_an_old_distributed_link_sorts_its_tables_as_before(page, names_server: Server) -> None:
    rows = '[data-testid="ranks-table"] tbody tr'
    old = _opened(page, f"{names_server.url}/distributed?run=ddp&rsort=-rank&osort=calls", rows)
    assert old.get("ranks_sort") == "-rank" and old.get("op_stats_sort") == "calls"
    assert not {"rsort", "osort"} & set(old)
    shown = page.locator(rows).all_inner_texts()
    header = page.locator('[data-testid="ranks-table"] th[aria-sort="descending"]').inner_text()
    screenshot(page, "names-distributed-old-link")

    new = _opened(page, f"{names_server.url}/distributed?run=ddp&ranks_sort=-rank&op_stats_sort=calls", rows)
    assert page.locator(rows).all_inner_texts() == shown and len(shown) == 4
    assert "Rank" in header and new == old
    assert [row.split()[0] for row in shown] == ["3", "2", "1", "0"]  # ranks, highest first


def test_an_old_operators_link_keeps_its_pie_size_and_input_shape(page, names_server: Server) -> None:
    old = _opened(page, f"{names_server.url}/operators?run=cpu&top=5", '[data-testid="operators-table"]')
    assert old.get("pie_top") == "5" and "top" not in old
    assert page.locator("#top").input_value() == "5"
    assert "top 5" in page.locator("h2 .sub").first.inner_text()


def test_an_old_snapshot_link_opens_the_same_window_under_its_axis_names(page, names_server: Server) -> None:
    _, whole = get_json(f"{names_server.url}/api/memory/snapshot/timeline?run=snaps&snapshot=memory_snapshot")
    low, high = whole["x_range"]
    start, end = int(low + (high - low) * 0.25), int(low + (high - low) * 0.75)
    page.goto(f"{names_server.url}/memory?run=snaps&snapshot=memory_snapshot&start={start}&end={end}")
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    page.wait_for_function("() => new URLSearchParams(location.search).has('start_us')")
    params = query_of(page.url)
    assert (float(params["start_us"]), float(params["end_us"])) == (start, end)
    assert not {"start", "end", "start_entry", "end_entry"} & set(params)
    drawn = page.evaluate("() => fetch(document.getElementById('json-link').href).then((r) => r.json())")
    assert drawn["axis"] == "time_us" and drawn["window"] == [start, end]
    screenshot(page, "names-snapshot-old-link")

    page.reload()  # the rewritten link opens the same window
    wait_for_plot(page, "#snapshot-timeline", POLYGONS)
    again = page.evaluate("() => fetch(document.getElementById('json-link').href).then((r) => r.json())")
    assert again["window"] == [start, end] and query_of(page.url) == params


def test_an_old_runs_filter_link_filters_the_same_runs(page, names_server: Server) -> None:
    old = _opened(page, f"{names_server.url}/?q=snap", '[data-testid="runs-table"]')
    assert old.get("search") == "snap" and "q" not in old
    assert page.locator("#run-filter").input_value() == "snap"
    assert page.locator('[data-testid="runs-table"] tbody').inner_text().count("snaps") >= 1
    assert "ddp" not in page.locator('[data-testid="runs-table"] tbody').inner_text()
