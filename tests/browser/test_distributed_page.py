"""The Distributed page in Chromium: every rank side by side, the slowest rank's link into the Trace view,
warnings for what does not match, trace strings shown as text."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .support import BARS, Server, corpus_path, get_json, parsed_server, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

GLOO = "generated/tinygpt_ddp4_gloo"
HOSTILE = "<img src=x onerror=alert(1)>"
FIRST_SPAN = ["rank0.1795315503706026973", "rank1.1795315503666467455", "rank2.1795315503654737161"]


@pytest.fixture(scope="module")
def distributed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("distributed")
    roots = work / "roots"
    shutil.copytree(corpus_path(GLOO), roots / "ddp")
    shutil.copytree(corpus_path("hta/trace_filter"), roots / "nccl")
    (roots / "partial").mkdir()
    for name in FIRST_SPAN[:2]:
        shutil.copy(corpus_path(f"{GLOO}/{name}.pt.trace.json.gz"), roots / "partial")
    shutil.copy(
        corpus_path(f"{GLOO}/{FIRST_SPAN[2]}.pt.trace.json.gz"), roots / "partial" / f"{HOSTILE}.1.pt.trace.json.gz"
    )
    with parsed_server([roots], work) as server:
        yield server


def test_slowest_rank_opens_the_trace_view_beside_the_others(page, distributed_server: Server) -> None:
    # the Trace page is being built on another branch: where the link lands (its URL) is what counts here
    page.route("**/trace?**", lambda route: route.fulfill(status=200, content_type="text/html", body="trace"))
    page.goto(f"{distributed_server.url}/distributed?run=ddp")
    wait_for_plot(page, "#overlap-chart", BARS)
    wait_for_plot(page, "#straggler-chart", BARS)
    assert page.locator('[data-testid="ranks-table"] tbody tr').count() == 4
    assert page.get_by_test_id("warnings").count() == 0
    screenshot(page, "distributed-gloo")
    _, api = get_json(f"{distributed_server.url}/api/distributed?run=ddp")
    slowest = next(s for s in api["stragglers"] if s["slowest"])
    assert f"rank {slowest['rank']}" in page.get_by_test_id("slowest-rank").inner_text()
    page.get_by_test_id("slowest-link").click()
    page.wait_for_url("**/trace?**")
    query = query_of(page.url)
    workers = query["workers"].split(",")
    assert workers[0] == slowest["worker"] and sorted(workers) == ["rank0", "rank1", "rank2", "rank3"]
    lead = next(r for r in api["ranks"] if r["worker"] == workers[0])
    assert query["run"] == "ddp" and query["span"] == lead["span"]
    window = slowest["worst"]["trace"]
    assert float(query["start_us"]) == pytest.approx(window["start_us"], abs=1e-3)
    assert float(query["end_us"]) == pytest.approx(window["end_us"], abs=1e-3)


def test_a_straggler_bar_opens_its_worst_collective(page, distributed_server: Server) -> None:
    page.route("**/trace?**", lambda route: route.fulfill(status=200, content_type="text/html", body="trace"))
    _, api = get_json(f"{distributed_server.url}/api/distributed?run=ddp&span=%232")
    page.goto(f"{distributed_server.url}/distributed?run=ddp&worker=rank0&span={api['span']}")
    wait_for_plot(page, "#straggler-chart", BARS)
    late = [i for i, s in enumerate(api["stragglers"]) if s["worst"]]
    assert late
    bar = page.locator(f"#straggler-chart {BARS}").nth(late[0])
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url("**/trace?**")
    assert query_of(page.url)["workers"].split(",")[0] == api["stragglers"][late[0]]["worker"]


def test_step_choice_lives_in_the_url(page, distributed_server: Server) -> None:
    page.goto(f"{distributed_server.url}/distributed?run=ddp")
    wait_for_plot(page, "#wait-chart", BARS)
    page.select_option("#step", "3")
    assert query_of(page.url)["step"] == "3"
    page.reload()
    wait_for_plot(page, "#wait-chart", BARS)
    assert page.locator("#step").input_value() == "3"
    # the synchronizing bar of rank 1 in step 3 is what the API says
    _, api = get_json(f"{distributed_server.url}/api/distributed?run=ddp")
    rank1 = next(r for r in api["ranks"] if r["rank"] == 1)
    step3 = next(s for s in rank1["steps"] if s["step"] == "3")
    names = page.locator("#wait-chart .chart-legend .legend-label").all_text_contents()
    bar = page.locator(f'#wait-chart rect.bar[data-series="{names.index("Synchronizing")}"][data-index="1"]')
    bar.hover()
    tooltip = page.locator("#wait-chart .chart-tooltip")
    tooltip.wait_for(state="visible")
    shown = tooltip.locator("strong").text_content()  # "Synchronizing: 522,442 µs" (fmtUs: whole µs from 1,000)
    assert shown.startswith("Synchronizing: ") and shown.endswith(" \u00b5s")
    value = float(shown.split(": ")[1].split(" ")[0].replace(",", ""))
    assert value == pytest.approx(step3["synchronizing_us"], abs=0.5)
    assert "rank 1" in tooltip.inner_text()


def test_missing_rank_and_hostile_names_are_shown_as_text(page, distributed_server: Server) -> None:
    page.goto(f"{distributed_server.url}/distributed?run=partial")
    wait_for_plot(page, "#overlap-chart", BARS)
    table = page.get_by_test_id("ranks-table")
    assert HOSTILE in table.inner_text()
    assert page.locator("img[src=x]").count() == 0
    screenshot(page, "distributed-hostile-name")
    assert page.locator('[data-testid="ranks-table"] tbody tr').count() == 3  # rank 2 is the oddly named file
    assert "missing: 3" in page.get_by_test_id("warnings").inner_text()


def test_gpu_ranks_show_the_hta_panels_and_what_does_not_match(page, distributed_server: Server) -> None:
    page.goto(f"{distributed_server.url}/distributed?run=nccl")
    for chart in ("#temporal-chart", "#idle-chart", "#kernel-type-chart", "#overlap-ratio-chart"):
        wait_for_plot(page, chart, BARS)
    warnings = page.get_by_test_id("warnings").inner_text()
    assert "2 of 128 ranks" in warnings
    assert page.locator('[data-testid="colls-table"] tbody tr').count() == 10
    screenshot(page, "distributed-nccl")
