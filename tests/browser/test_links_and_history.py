"""Issue 20, items 3, 4, 7 and 10 in Chromium: a run keeps its name (and its links) when a root is
added, a link to a moved run says where it went; Distributed on traces that are not ranks of one job
says why (page and JSON twin); Back undoes a sort / grouping / zoom; a snapshot-only run greys the
trace tabs and points to Memory; the source viewer's nav keeps the run; a step of another span is
dropped; a root that cannot be listed shows a banner on every page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import (
    BARS,
    SOURCE_FILE,
    Server,
    corpus_path,
    get_json,
    parsed_server,
    query_of,
    screenshot,
    wait_for_plot,
)
from .test_trace_page import HOOK, wait_drawn
from .test_trace_ruler_and_history import zoom_in

pytestmark = pytest.mark.browser

NCCL = "hta/trace_filter"  # 2 ranks, named sampled_rank-0 / -1
GLOO = "generated/tinygpt_ddp4_gloo"  # 4 ranks, two spans (steps 2-4 and 7-9)
UNRELATED = [  # two single-GPU inference traces of different models, no distributedInfo, no rank in their names
    "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/Falconsai_nsfw_image_detection__1016002.json.gz",
]
SNAPSHOT = "memory-snapshots/ZijianDu_Attention/memory.pickle"
TRACE_TABS = ["overview", "operators", "kernels", "distributed", "trace"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two roots: `first` (the runs nccl, ddp, unrelated, snapshot_only) and `second` (one more run nccl)."""
    base = tmp_path_factory.mktemp("roots")
    first, second = base / "first", base / "second"
    shutil.copytree(corpus_path(NCCL), first / "nccl")
    shutil.copytree(corpus_path(GLOO), first / "ddp")
    (first / "unrelated").mkdir()
    for file in UNRELATED:
        shutil.copy(corpus_path(file), first / "unrelated")
    (first / "snapshot_only").mkdir()
    shutil.copy(corpus_path(SNAPSHOT), first / "snapshot_only")
    shutil.copytree(corpus_path(NCCL), second / "nccl")
    return {"first": first, "second": second}


@pytest.fixture(scope="module")
def two_roots(roots: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, source_root: Path) -> Iterator[Server]:
    both = [roots["first"], roots["second"]]
    with parsed_server(both, tmp_path_factory.mktemp("two"), "--source-root", str(source_root)) as server:
        yield server


def test_a_link_still_resolves_after_a_root_is_added(page, roots, two_roots: Server, tmp_path: Path) -> None:
    with parsed_server([roots["first"]], tmp_path) as alone:
        names_alone = sorted(r["run"] for r in get_json(f"{alone.url}/api/runs")[1]["runs"])
    names = sorted(r["run"] for r in get_json(f"{two_roots.url}/api/runs")[1]["runs"])
    assert names_alone == ["ddp", "nccl", "snapshot_only", "unrelated"]
    assert names == sorted([*names_alone, "second/nccl"])  # only the later root's same-named run is told apart
    page.goto(f"{two_roots.url}/overview?run=nccl&worker=sampled_rank-1")  # a link pasted before the root came
    page.get_by_test_id("environment").wait_for()
    assert query_of(page.url)["run"] == "nccl" and page.get_by_test_id("error").count() == 0
    screenshot(page, "links-old-link-after-second-root")


def test_a_link_to_a_moved_run_says_where_it_went(page, two_roots: Server) -> None:
    # written while run names carried their root's label (before issue 20): first/ddp is now ddp
    page.goto(f"{two_roots.url}/operators?run=first/ddp&worker=rank1&sort=-calls")
    box = page.get_by_test_id("error")
    box.wait_for()
    assert "it is now \u201cddp\u201d" in box.inner_text()
    screenshot(page, "links-moved-run")
    page.get_by_test_id("moved-link").click()
    page.wait_for_url("**/operators?**run=ddp**")
    assert query_of(page.url) | {"run": "ddp"} == query_of(page.url) and query_of(page.url)["sort"] == "-calls"
    status, body = get_json(f"{two_roots.url}/api/operators?run=first/ddp")
    assert status == 404 and "it is now 'ddp'" in body["detail"]
    assert get_json(f"{two_roots.url}/api/runs/moved?run=first/ddp")[1] == {"run": "first/ddp", "moved_to": "ddp"}


def test_unrelated_traces_are_not_ranks_and_distributed_says_why(page, two_roots: Server) -> None:
    status, body = get_json(f"{two_roots.url}/api/distributed?run=unrelated")
    assert status == 200 and body["applies"] is False
    assert "no distributedInfo" in body["reason"] and "unrelated traces" in body["reason"]
    page.goto(f"{two_roots.url}/distributed?run=unrelated")
    empty = page.get_by_test_id("empty-state")
    empty.wait_for()
    assert "Not a distributed run" in empty.inner_text() and body["reason"] in empty.inner_text()
    assert page.locator(".chart").count() == 0  # no empty charts
    tab = page.locator("a[data-nav=distributed]")
    assert "unavailable" in tab.get_attribute("class")
    screenshot(page, "distributed-not-distributed")
    # ranks named rank0.. / sampled_rank-N are ranks of one job
    runs = {r["run"]: r for r in get_json(f"{two_roots.url}/api/runs")[1]["runs"]}
    assert "distributed" in runs["ddp"]["views"] and "distributed" in runs["nccl"]["views"]
    assert "distributed" not in runs["unrelated"]["views"]


def test_back_undoes_a_sort_and_a_grouping(page, two_roots: Server) -> None:
    page.goto(f"{two_roots.url}/operators?run=nccl")
    page.get_by_test_id("operators-table").wait_for()
    start = page.url
    page.locator('[data-testid="operators-table"] th', has_text="Calls").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).has('sort')")
    sorted_url = page.url
    page.locator('#group-by button[data-value="operator_input_shape"]').click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('group_by') === 'operator_input_shape'")
    page.go_back()
    page.wait_for_url(sorted_url)
    page.get_by_test_id("operators-table").wait_for()
    assert "group_by" not in query_of(page.url) and page.locator('[data-testid="operators-table"] th').count() > 0
    page.go_back()
    page.wait_for_url(start)
    page.get_by_test_id("operators-table").wait_for()
    assert "sort" not in query_of(page.url)
    assert page.url.startswith(two_roots.url)  # Back stayed on the page


def test_back_undoes_a_zoom_on_the_trace(page, two_roots: Server) -> None:
    page.goto(f"{two_roots.url}/trace?run=nccl")
    opened = wait_drawn(page)["view"]
    page.wait_for_function("() => new URLSearchParams(location.search).has('start_us')")
    zoomed = zoom_in(page, opened)
    assert zoomed["end"] - zoomed["start"] < opened["end"] - opened["start"]
    page.go_back()
    again = wait_drawn(page)["view"]
    assert again == pytest.approx(opened, abs=1e-3)
    assert page.evaluate(f"() => {HOOK}.view.end") == pytest.approx(opened["end"], abs=1e-3)


def test_a_snapshot_only_run_greys_the_trace_tabs_and_points_to_memory(page, two_roots: Server) -> None:
    page.goto(f"{two_roots.url}/overview?run=snapshot_only")
    empty = page.get_by_test_id("empty-state")
    empty.wait_for()
    assert "only memory snapshots" in empty.inner_text()
    assert page.get_by_test_id("error").count() == 0  # no red "No trace files."
    for name in TRACE_TABS:
        tab = page.locator(f"a[data-nav={name}]")
        assert "unavailable" in tab.get_attribute("class") and "Memory" in tab.get_attribute("title"), name
    memory = page.locator("a[data-nav=memory]")
    assert "unavailable" not in memory.get_attribute("class")
    screenshot(page, "snapshot-only-overview")
    page.get_by_test_id("memory-link").click()
    page.wait_for_url("**/memory?**run=snapshot_only**")


def test_the_source_viewer_nav_keeps_the_run(page, two_roots: Server) -> None:
    # the link a stack frame of the run `nccl` carries (tests/test_source_links.py: the APIs add run / worker / span)
    page.goto(f"{two_roots.url}/source?path={SOURCE_FILE}&line=3&run=nccl&worker=sampled_rank-1&span=default")
    page.get_by_test_id("source-view").wait_for()
    for name in ("overview", "operators", "trace"):
        href = page.locator(f"a[data-nav={name}]").get_attribute("href")
        assert query_of(href) == {"run": "nccl", "worker": "sampled_rank-1", "span": "default"}, name


def test_a_step_of_another_span_is_dropped(page, two_roots: Server) -> None:
    page.goto(f"{two_roots.url}/distributed?run=ddp")
    wait_for_plot(page, "#overlap-chart", BARS)
    page.locator("select#step").select_option("3")
    page.wait_for_function("() => new URLSearchParams(location.search).get('step') === '3'")
    page.locator("select#sel-span").select_option(index=1)  # span #2: steps 7-9
    page.wait_for_function(
        "() => new URLSearchParams(location.search).get('span') !== null && !location.search.includes('step=3')"
    )
    wait_for_plot(page, "#overlap-chart", BARS)
    assert page.locator("select#step").input_value() == ""
    assert "step" not in query_of(page.url)
    screenshot(page, "distributed-span-changed")


def test_a_root_that_cannot_be_listed_shows_a_banner_on_every_page(page, roots, tmp_path: Path) -> None:
    missing = tmp_path / "unmounted"  # a root that is not there (a storage outage for a local disk)
    with parsed_server([roots["first"], missing], tmp_path) as server:
        root = get_json(f"{server.url}/api/runs")[1]["roots"][1]
        assert root["error"]
        for path in ("/overview?run=nccl", "/trace?run=nccl", "/distributed?run=ddp", "/memory?run=snapshot_only"):
            page.goto(server.url + path)
            banner = page.get_by_test_id("storage-banner")
            banner.wait_for()
            assert missing.name in banner.inner_text() and str(missing) not in banner.inner_text(), path
        screenshot(page, "storage-banner-memory")
