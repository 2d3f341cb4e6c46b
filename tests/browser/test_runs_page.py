"""The Runs page: every run, its state, workers x spans, file errors, and links into the Overview."""

from __future__ import annotations

import pytest

from .support import screenshot, start_server

pytestmark = pytest.mark.browser


def test_runs_lists_every_run_with_links(page, server):
    page.goto(server.url + "/")
    table = page.get_by_test_id("runs-table")
    table.wait_for()
    for run in ("resnet50_num_workers_0", "tinygpt_cpu", "trace_filter", "memory_analysis", "execution_trace"):
        assert page.locator(f'tr[data-run="{run}"]').count() == 1, run
    resnet = page.locator('tr[data-run="resnet50_num_workers_0"]')
    assert resnet.locator(".badge").inner_text().lower() == "ready"
    assert resnet.get_by_test_id("span-link").count() == 2
    assert "1623143089861" in resnet.get_by_test_id("span-link").first.inner_text()
    hta = page.locator('tr[data-run="trace_filter"]')
    assert hta.get_by_test_id("span-link").count() == 2  # two ranks, one span each
    screenshot(page, "runs")

    hta.get_by_test_id("span-link").nth(1).click()
    page.wait_for_url("**/overview?**")
    assert "worker=sampled_rank-1" in page.url
    page.locator("#step-chart .main-svg").first.wait_for()


def test_runs_show_file_errors_and_failed_runs(page, server):
    page.goto(server.url + "/")
    page.get_by_test_id("runs-table").wait_for()
    failed = page.locator('tr[data-run="memory_analysis"]')
    assert failed.locator(".badge").inner_text().lower() == "error"
    errors = page.get_by_test_id("file-errors")
    text = " ".join(errors.all_inner_texts())
    assert "memory_timeline.raw.gz" in text
    assert "benchmark_simple_add_et.json.gz" in text
    assert "execution trace" in text  # the server's reason, shown as is


def test_runs_filter_lives_in_the_url(page, server):
    page.goto(server.url + "/?q=tiny")
    page.get_by_test_id("runs-table").wait_for()
    assert page.locator("tr[data-run]").count() == 1
    assert page.locator("#run-filter").input_value() == "tiny"
    page.locator("#run-filter").fill("resnet")
    page.wait_for_url("**q=resnet**")
    assert page.locator("tr[data-run]").all() and page.locator('tr[data-run="resnet50_num_workers_0"]').count() == 1


def test_runs_empty_state_names_the_roots(page, tmp_path):
    empty = tmp_path / "no-traces-here"
    empty.mkdir()
    other = start_server([empty], tmp_path / "cache", tmp_path / "server.log")
    try:
        page.goto(other.url + "/")
        state = page.get_by_test_id("empty-state")
        state.wait_for()
        assert f"No traces found under {empty}" in state.inner_text()
        page.goto(other.url + "/overview")  # a view page without runs says the same, not a blank page
        assert "No traces found" in page.get_by_test_id("empty-state").inner_text()
        screenshot(page, "runs-empty")
    finally:
        other.stop()
