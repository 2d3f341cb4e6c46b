"""Overview: environment and GPU cards, step time breakdown, averages, recommendations."""

from __future__ import annotations

import re

import pytest

from .support import BARS, PIE_SLICES, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

CATEGORIES = ["Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other"]


@pytest.mark.parametrize(
    ("run", "gpus", "steps"),
    [("resnet50_num_workers_0", 1, 6), ("tinygpt_cpu", 0, 3), ("trace_filter", 1, 2)],
)
def test_overview_draws_cards_and_charts(page, server, run, gpus, steps):
    page.goto(f"{server.url}/overview?run={run}")
    bars = wait_for_plot(page, "#step-chart", BARS)
    assert bars >= steps
    assert wait_for_plot(page, "#average-pie", PIE_SLICES) >= 1
    assert page.get_by_test_id("gpu-card").count() == gpus
    environment = page.get_by_test_id("environment").inner_text()
    assert "Number of Worker(s)" in environment
    assert ("GPU" if gpus else "CPU") in environment
    averages = page.get_by_test_id("averages")
    labels = [row.inner_text().split("\t")[0].strip() for row in averages.locator("tbody tr").all()]
    assert labels == [*CATEGORIES, "Total"]
    # the selector bar wrote the first worker and span into the URL
    params = query_of(page.url)
    assert params["run"] == run and params["worker"] and params["span"]
    assert page.locator("#sel-worker").input_value() == params["worker"]
    screenshot(page, f"overview-{run}")


def test_overview_legend_keeps_category_order(page, server):
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    wait_for_plot(page, "#step-chart", BARS)
    legend = [t.text_content() for t in page.locator("#step-chart .chart-legend .legend-label").all()]
    assert legend == [c for c in CATEGORIES if c in legend]
    assert legend[0] == "Kernel" and "DataLoader" in legend


def test_overview_gpu_card_shows_dash_for_unknown_properties(page, server):
    page.goto(f"{server.url}/overview?run=trace_filter")
    card = page.get_by_test_id("gpu-card").first
    card.wait_for()
    text = card.inner_text()
    assert "\u2014" in text  # this trace has no deviceProperties: name / memory unknown
    assert re.search(r"GPU Utilization\s+\d+\.\d\d%", text)
    assert card.locator("dt[title]").count() >= 4  # definitions as tooltips


def test_overview_recommendations_listed(page, server):
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    recommendations = page.get_by_test_id("recommendations")
    recommendations.wait_for()
    assert "DataLoader" in recommendations.inner_text()


def test_clicking_a_step_bar_opens_the_trace_window(page, server):
    page.route("**/trace?**", lambda route: route.fulfill(status=200, content_type="text/html", body="trace"))
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    wait_for_plot(page, "#step-chart", BARS)
    box = page.locator(f"#step-chart {BARS}").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url("**/trace?**")
    params = query_of(page.url)
    assert params["run"] == "resnet50_num_workers_0" and params["worker"] == "worker0"
    assert float(params["end_us"]) > float(params["start_us"])


@pytest.mark.allow_console(r"status of 422")
def test_unreadable_trace_shows_the_parser_message(page, server):
    page.goto(f"{server.url}/overview?run=memory_analysis")
    error = page.get_by_test_id("error")
    error.wait_for()
    text = error.inner_text()
    # while the file is still listed it answers 422 ("could not be read"); once parsed, a run whose only
    # file failed has no readable trace: both say which file and why
    assert "could not be read" in text or "no readable trace" in text
    assert "memory_timeline.raw.gz" in text and "not a Chrome trace" in text
    # the rest of the app keeps working
    page.locator("#sel-run").select_option("tinygpt_cpu")
    page.wait_for_url("**run=tinygpt_cpu**")
    wait_for_plot(page, "#step-chart", BARS)


def test_missing_run_worker_span_are_filled_in(page, server):
    page.goto(f"{server.url}/overview")
    page.get_by_test_id("environment").wait_for()
    params = query_of(page.url)
    assert params["run"] == page.locator("#sel-run").input_value()
    assert params["worker"] and params["span"]


def test_unknown_run_is_reported(page, server):
    page.goto(f"{server.url}/overview?run=no-such-run")
    assert "no-such-run" in page.get_by_test_id("error").inner_text()


def test_worker_selector_keeps_the_page(page, server):
    page.goto(f"{server.url}/operators?run=trace_filter&search=aten")
    page.get_by_test_id("operators-table").wait_for()
    page.locator("#sel-worker").select_option("sampled_rank-1")
    page.wait_for_url("**/operators?**worker=sampled_rank-1**")
    assert query_of(page.url)["search"] == "aten"
    page.get_by_test_id("operators-table").wait_for()


def test_the_steps_picker_stays_inside_its_card(page, server):
    """tinygpt_cpu's repeated ranges have long names (``enumerate(DataLoader)#_SingleProcessDataLoaderIter...``):
    the picker that offers them shrinks to its card instead of running past its edge."""
    page.goto(f"{server.url}/overview?run=tinygpt_cpu")
    picker = page.get_by_test_id("step-range")
    picker.wait_for()
    assert any(len(text) > 40 for text in picker.locator("option").all_text_contents())
    card = page.get_by_test_id("environment").bounding_box()
    box = picker.bounding_box()
    assert card["x"] <= box["x"] and box["x"] + box["width"] <= card["x"] + card["width"]
