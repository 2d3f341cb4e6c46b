"""Kernel view: pies, table in both groupings, URL state, and the CPU-only empty state."""

from __future__ import annotations

import re

import pytest

from .support import PIE_SLICES, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("run", ["resnet50_num_workers_0", "trace_filter"])
def test_kernels_draws_pies_and_table(page, server, run):
    page.goto(f"{server.url}/kernels?run={run}")
    table = page.get_by_test_id("kernels-table")
    table.wait_for()
    assert table.locator("tbody tr").count() > 5
    assert wait_for_plot(page, "#pie-kernels", PIE_SLICES) >= 2
    assert wait_for_plot(page, "#pie-tc", PIE_SLICES) >= 1
    assert page.locator('thead th[aria-sort="descending"]').get_attribute("data-key") == "total_us"
    screenshot(page, f"kernels-{run}")


def test_kernels_cpu_only_trace_explains_why_it_is_empty(page, server):
    page.goto(f"{server.url}/kernels?run=tinygpt_cpu")
    empty = page.get_by_test_id("empty-state")
    empty.wait_for()
    assert "this trace has no gpu kernels (cpu-only profile)" in empty.inner_text().lower()
    assert page.locator("#table-panel").is_hidden()
    screenshot(page, "kernels-tinygpt_cpu")


def test_kernel_properties_grouping_formats_grid_and_block(page, server):
    page.goto(f"{server.url}/kernels?run=resnet50_num_workers_0&group_by=kernel_op")
    table = page.get_by_test_id("kernels-table")
    table.wait_for()
    headers = table.locator("thead th").all_inner_texts()
    for label in ("Operator", "Grid", "Block", "Registers / Thread", "Shared Mem (B)", "Op TC Eligible"):
        assert any(label in h.replace("\n", " ") for h in headers), label
    keys = [k for k in table.locator("thead th").evaluate_all("ths => ths.map(th => th.dataset.key)")]
    grid = table.locator("tbody tr").first.locator("td").nth(keys.index("grid")).inner_text()
    assert re.fullmatch(r"\d+,\d+,\d+", grid)
    screenshot(page, "kernels-kernel_op")


def test_kernel_names_are_text_not_markup(page, server):
    page.goto(f"{server.url}/kernels?run=resnet50_num_workers_0&search=dgrad_engine")
    table = page.get_by_test_id("kernels-table")
    table.wait_for()
    name = table.locator("tbody td.name").first
    assert "dgrad_engine<float, 512" in name.inner_text()
    assert page.locator("float").count() == 0  # "<float, ...>" did not become an element
    legend = page.locator("#pie-kernels .legend .label").first.inner_text()
    assert legend.startswith("void cudnn::detail::dgrad_engine<float")


def test_kernels_url_state_round_trips(page, server):
    page.goto(f"{server.url}/kernels?run=resnet50_num_workers_0")
    page.get_by_test_id("kernels-table").wait_for()
    page.get_by_role("button", name="Kernel Properties + Operator").click()
    page.wait_for_selector('[data-testid=kernels-table] th[data-key="grid"]')
    page.locator("#search").fill("sgemm")
    page.wait_for_url("**search=sgemm**")
    page.locator('thead th[data-key="calls"]').click()
    page.locator('thead th[data-key="calls"]').click()
    page.locator("#top").select_option("5")
    params = query_of(page.url)
    assert (params["group_by"], params["search"], params["sort"], params["pie_top"]) == (
        "kernel_op",
        "sgemm",
        "calls",
        "5",
    )
    rows = page.get_by_test_id("kernels-table").locator("tbody tr").all_inner_texts()

    again = page.context.new_page()
    again.goto(page.url)
    again.get_by_test_id("kernels-table").wait_for()
    assert again.locator('#group-by button[aria-pressed="true"]').inner_text() == "Kernel Properties + Operator"
    assert again.locator("#search").input_value() == "sgemm"
    assert again.locator("#top").input_value() == "5"
    assert again.locator('thead th[aria-sort="ascending"]').get_attribute("data-key") == "calls"
    assert again.get_by_test_id("kernels-table").locator("tbody tr").all_inner_texts() == rows
    assert query_of(again.url) == params
