"""Operator view: pies, sortable table, URL state, and call stacks with jump-to-source links."""

from __future__ import annotations

import re

import pytest

from .support import PIE_SLICES, SOURCE_TARGET_LINE, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

DEVICE_PIES = ["device_self_us", "device_total_us"]
HOST_PIES = ["host_self_us", "host_total_us"]


def table_names(target, limit: int = 10) -> list[str]:
    rows = target.get_by_test_id("operators-table").locator("tbody tr[data-key]")
    return [rows.nth(i).locator("td.name").inner_text() for i in range(min(limit, rows.count()))]


def sorted_column(target) -> tuple[str, str]:
    header = target.locator('thead th[aria-sort]:not([aria-sort="none"])')
    return header.get_attribute("data-key"), header.get_attribute("aria-sort")


@pytest.mark.parametrize(
    ("run", "device"),
    [("resnet50_num_workers_0", True), ("tinygpt_cpu", False), ("trace_filter", True)],
)
def test_operators_draws_pies_and_table(page, server, run, device):
    page.goto(f"{server.url}/operators?run={run}")
    table = page.get_by_test_id("operators-table")
    table.wait_for()
    assert table.locator("tbody tr[data-key]").count() > 5
    pies = (DEVICE_PIES if device else []) + HOST_PIES
    for key in pies:
        assert wait_for_plot(page, f"#pie-{key}", PIE_SLICES) >= 1, key
    assert page.locator(".pie.chart-drawn").count() == len(pies)  # device pies hidden on a CPU-only trace
    assert sorted_column(page) == ("device_self_us" if device else "host_self_us", "descending")
    # µs with thousands separators, right-aligned
    first = table.locator("tbody tr[data-key]").first
    cells = first.locator("td.num").all_inner_texts()
    assert any(re.fullmatch(r"\d{1,3}(,\d{3})+", c) for c in cells) or run == "tinygpt_cpu"
    assert re.fullmatch(r"\d+\.\d\d", cells[-1])  # Tensor Cores total (%) with 2 decimals
    screenshot(page, f"operators-{run}")


def test_operators_url_state_round_trips(page, server):
    page.goto(f"{server.url}/operators?run=tinygpt_cpu")
    page.get_by_test_id("operators-table").wait_for()
    page.get_by_role("button", name="Operator + Input Shape").click()
    page.wait_for_selector('[data-testid=operators-table] th[data-key="input_shape"]')
    page.locator("#search").fill("mm")
    page.wait_for_url("**search=mm**")
    page.locator('thead th[data-key="calls"]').click()
    page.locator("#top").select_option("5")
    first = page.get_by_test_id("operators-table").locator("tbody tr[data-key]").first
    first.click()
    page.get_by_test_id("operators-table").locator("tr.detail").wait_for()
    params = query_of(page.url)
    assert params["group_by"] == "operator_input_shape"
    assert params["search"] == "mm"
    assert params["sort"] == "-calls"
    assert params["pie_top"] == "5"  # the pies' size; the API's `top` cuts rows
    assert params["stack"] and params["input_shape"].startswith("[")  # expanded row: name and input shape
    names = table_names(page)
    slices = page.locator(f"#pie-host_self_us {PIE_SLICES}").count()
    screenshot(page, "operators-state-before-reload")

    again = page.context.new_page()
    again.goto(page.url)
    again.get_by_test_id("operators-table").wait_for()
    assert again.locator('#group-by button[aria-pressed="true"]').inner_text() == "Operator + Input Shape"
    assert again.locator("#search").input_value() == "mm"
    assert again.locator("#top").input_value() == "5"
    assert sorted_column(again) == ("calls", "descending")
    assert table_names(again) == names
    assert again.locator("tr.expanded").count() == 1
    again.locator("tr.detail").wait_for()
    assert wait_for_plot(again, "#pie-host_self_us", PIE_SLICES) == slices
    assert query_of(again.url) == query_of(page.url)
    screenshot(again, "operators-state-after-reload")


def test_sorting_toggles_direction(page, server):
    page.goto(f"{server.url}/operators?run=resnet50_num_workers_0")
    page.get_by_test_id("operators-table").wait_for()
    page.locator('thead th[data-key="name"]').click()
    assert sorted_column(page) == ("name", "ascending")
    names = table_names(page, 20)
    assert names == sorted(names, key=str.lower) or names == sorted(names)
    page.locator('thead th[data-key="name"]').click()
    assert sorted_column(page) == ("name", "descending")
    assert query_of(page.url)["sort"] == "-name"


def test_call_stacks_link_to_source(page, server):
    page.goto(f"{server.url}/operators?run=tinygpt_cpu&stack=aten::mm")
    stacks = page.get_by_test_id("stacks")
    stacks.wait_for()
    assert stacks.locator("details.stack").count() >= 2
    link = stacks.locator("a", has_text=f"gen_cpu_traces.py({SOURCE_TARGET_LINE}): train").first
    href = link.get_attribute("href")
    assert href.startswith(f"/source?path=gen_cpu_traces.py&line={SOURCE_TARGET_LINE}&run=tinygpt_cpu&worker=")
    screenshot(page, "operators-stacks")
    link.click()
    page.wait_for_url("**/source?**")
    target = page.locator("tr.target")
    target.wait_for()
    assert target.get_attribute("data-line") == str(SOURCE_TARGET_LINE)
    back = page.locator("a[data-nav=operators]").get_attribute("href")  # the nav leads back to the run
    assert query_of(back)["run"] == "tinygpt_cpu" and query_of(back)["worker"] == query_of(href)["worker"]
    assert "loss.backward()" in target.inner_text()


def test_operator_without_stack_says_so(page, server):
    page.goto(f"{server.url}/operators?run=resnet50_num_workers_0&stack=aten::cudnn_convolution_backward_weight")
    message = page.get_by_test_id("no-stack")
    message.wait_for()
    assert "with_stack=True" in message.inner_text()


def test_clicking_a_pie_legend_entry_expands_its_row(page, server):
    page.goto(f"{server.url}/operators?run=tinygpt_cpu")
    wait_for_plot(page, "#pie-host_self_us", PIE_SLICES)
    entry = page.locator("#pie-host_self_us .legend li.clickable").nth(1)
    name = entry.locator(".label").inner_text()
    entry.click()
    assert page.locator("tr.expanded td.name").inner_text() == name
    assert query_of(page.url)["stack"] == name


def test_the_page_shows_how_the_self_times_add_up(page, server):
    """Issue 17: host self + runtime = time inside operators; device self + unattributed = all device time."""
    api = page.request.get(f"{server.url}/api/operators?run=trace_filter").json()
    page.goto(f"{server.url}/operators?run=trace_filter")
    page.locator("#accounting summary").click()
    host = page.get_by_test_id("accounting-host").inner_text()
    device = page.get_by_test_id("accounting-device").inner_text()
    accounting = api["accounting"]
    assert f"{accounting['host_in_operators_us']:,.0f} µs" in host
    assert f"{accounting['device_unattributed_us']:,.0f} µs" in device
    assert sum(r["device_self_us"] for r in api["rows"]) + accounting["device_unattributed_us"] == pytest.approx(
        accounting["device_total_us"], abs=1e-3
    )
