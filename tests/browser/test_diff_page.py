"""Diff page in Chromium: opened from the Overview's "Compare with…", a baseline picked, the call tree walked down
two levels, the URL reloaded to the same view; sorting and search of the comparison tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .support import Server, corpus_path, query_of, screenshot, start_server

pytestmark = pytest.mark.browser

TARGET = "resnet50_num_workers_4"
BASE = "resnet50_num_workers_0"
WATERFALL_BARS = "#diff-waterfall rect.bar"


@pytest.fixture(scope="module")
def diff_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("diff-server")
    roots = [corpus_path(f"kineto-tb_plugin/samples/{run}") for run in (BASE, TARGET)]
    started = start_server(roots, work / "cache", work / "server.log")
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


def _tree_rows(page) -> list[str]:  # type: ignore[no-untyped-def]
    table = page.get_by_test_id("diff-tree-table")
    table.wait_for()
    return [cell.inner_text() for cell in table.locator("tbody tr td:first-child").all()]


def test_compare_with_from_overview_walk_the_tree_and_reload(page, diff_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{diff_server.url}/overview?run={TARGET}")
    page.locator("#compare-link").click()
    page.wait_for_url("**/diff?**")
    target = query_of(page.url)
    assert target["run"] == TARGET and target["worker"] and target["span"]
    # the page draws after its runs arrive
    page.get_by_test_id("diff").get_by_text("Choose a baseline").wait_for()

    page.locator("#base-run").select_option(BASE)
    page.wait_for_selector(WATERFALL_BARS)
    params = query_of(page.url)
    assert params["base_run"] == BASE and params["base_worker"] and params["base_span"]
    steps = page.get_by_test_id("diff-steps-table").inner_text()
    assert "DataLoader" in steps and "6 steps" in steps
    table_rows = page.get_by_test_id("diff-steps-table").locator("tbody tr").all()
    rows = [row.locator("td").all_inner_texts() for row in table_rows]
    dataloader = next(cells for cells in rows if cells[0].strip().startswith("DataLoader"))  # a name cell is a block
    assert dataloader[-1].strip().startswith("-")  # the DataLoader time drops with num_workers=4
    screenshot(page, "diff-resnet50-top")

    assert "ProfilerStep#*" in _tree_rows(page)
    page.get_by_test_id("diff-tree-table").locator("a.drill", has_text="ProfilerStep#*").click()
    page.get_by_test_id("tree-node").filter(has_text="ProfilerStep#*").wait_for()
    level1 = _tree_rows(page)
    assert any(name.startswith("enumerate(DataLoader)") for name in level1)
    second = page.get_by_test_id("diff-tree-table").locator("a.drill").first
    second_name = second.inner_text()
    second.click()
    page.get_by_test_id("tree-node").filter(has_text=second_name).wait_for()
    level2 = _tree_rows(page)
    assert level2
    crumbs = page.get_by_test_id("tree-path").inner_text()
    assert "ProfilerStep#*" in crumbs and second_name in crumbs
    assert page.url.count("tree_path=") == 2
    screenshot(page, "diff-resnet50-tree-level2")

    page.reload()
    page.get_by_test_id("tree-node").filter(has_text=second_name).wait_for()
    assert _tree_rows(page) == level2
    assert page.get_by_test_id("tree-path").inner_text() == crumbs
    assert page.locator("#base-run").input_value() == BASE

    page.go_back()  # one level up: history holds the levels
    page.get_by_test_id("tree-node").filter(has_text="ProfilerStep#*").wait_for()
    assert page.url.count("tree_path=") == 1


def test_comparison_tables_search_and_sort(page, diff_server) -> None:  # type: ignore[no-untyped-def]
    page.goto(f"{diff_server.url}/diff?run={TARGET}&base_run={BASE}")
    operators = page.get_by_test_id("diff-operators-table")
    operators.wait_for()
    page.locator("#search").fill("conv")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=diff-operators-table] tbody tr td:first-child')]"
        ".every((td) => td.textContent.toLowerCase().includes('conv'))"
    )
    assert query_of(page.url)["search"] == "conv"
    operators.locator("th[data-key=target_calls]").click()
    assert query_of(page.url)["sort"] == "-target_calls"
    calls = [
        float(td.inner_text().replace(",", ""))
        for td in operators.locator("tbody tr td:nth-child(3)").all()  # Target Calls
    ]
    assert calls and calls == sorted(calls, reverse=True)
    screenshot(page, "diff-resnet50-operators-search")
