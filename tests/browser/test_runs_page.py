"""The Runs page: every run, its state, workers x spans, file errors, and links into the Overview."""

from __future__ import annotations

import shutil

import pytest

from .support import corpus_path, screenshot, start_server

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
    page.locator("#step-chart svg.chart-svg").first.wait_for()


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
    page.goto(server.url + "/?search=tiny")
    page.get_by_test_id("runs-table").wait_for()
    assert page.locator("tr[data-run]").count() == 1
    assert page.locator("#run-filter").input_value() == "tiny"
    page.locator("#run-filter").fill("resnet")
    page.wait_for_url("**search=resnet**")
    assert page.locator("tr[data-run]").all() and page.locator('tr[data-run="resnet50_num_workers_0"]').count() == 1


def test_runs_empty_state_names_the_roots(page, tmp_path):
    empty = tmp_path / "no-traces-here"
    empty.mkdir()
    other = start_server([empty], tmp_path / "cache", tmp_path / "server.log")
    try:
        page.goto(other.url + "/")
        state = page.get_by_test_id("empty-state")
        state.wait_for()
        assert f"No traces found under {empty.name}" in state.inner_text() and str(empty) not in state.inner_text()
        page.goto(other.url + "/overview")  # a view page without runs says the same, not a blank page
        assert "No traces found" in page.get_by_test_id("empty-state").inner_text()
        screenshot(page, "runs-empty")
    finally:
        other.stop()


def test_an_empty_root_beside_others_says_it_is_listed_again(page, tmp_path):
    """A root with no file yet (a bucket prefix before training writes, an empty folder) beside a root with
    runs: a neutral note names it, instead of silence."""
    empty = tmp_path / "later"
    empty.mkdir()
    with_runs = tmp_path / "runs" / "job"
    with_runs.mkdir(parents=True)
    trace = '{"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2}]}'
    (with_runs / "worker0.1.pt.trace.json").write_text(trace)
    other = start_server([tmp_path / "runs", empty], tmp_path / "cache", tmp_path / "server.log")
    try:
        page.goto(other.url + "/")
        page.get_by_test_id("runs-table").wait_for()
        note = page.get_by_test_id("root-empty")
        note.wait_for()
        assert f"Nothing under {empty.name} yet" in note.inner_text() and str(empty) not in note.inner_text()
        assert page.get_by_test_id("root-empty").count() == 1  # the root with runs has no note
        screenshot(page, "runs-empty-root")
    finally:
        other.stop()


def test_view_links_carry_the_registry_labels(page, server):
    """Each run's view links read as the nav's tabs (both from views/registry.py), never a bare view name."""
    page.goto(server.url + "/")
    page.get_by_test_id("runs-table").wait_for()
    nav = {a.get_attribute("data-nav"): a.inner_text().strip() for a in page.locator("a[data-nav]").all()}
    links = page.locator('tr[data-run="resnet50_num_workers_0"] .view-links a')
    shown = [(link.get_attribute("href").split("?")[0].lstrip("/"), link.inner_text()) for link in links.all()]
    assert shown and all(text == nav[view] for view, text in shown), shown
    assert ("modules", "Module") in shown


def test_a_view_link_says_computing_until_its_results_are_there(page, tmp_path, monkeypatch):
    """The worker is held before its slower queries (PROFSCOPE_TEST_HOLD_QUERIES): the Overview's link is live
    while the Operator view's is greyed with "computing…"; released, every link is live."""
    gate = tmp_path / "release"
    monkeypatch.setenv("PROFSCOPE_TEST_HOLD_QUERIES", str(gate))
    root = tmp_path / "roots"
    shutil.copytree(corpus_path("hta/trace_filter"), root / "trace_filter")
    held = start_server([root], tmp_path / "cache", tmp_path / "server.log")
    try:
        page.goto(held.url + "/")
        run = page.locator('tr[data-run="trace_filter"]')
        run.locator('a[data-view="overview"][data-state="ready"]').wait_for(timeout=180_000)
        operators = run.locator('a[data-view="operators"]')
        assert operators.get_attribute("data-state") == "computing"
        assert "computing\u2026" in operators.inner_text()
        assert run.locator(".badge").inner_text().lower() == "parsing"
        screenshot(page, "runs-views-computing")
        gate.touch()
        run.locator(".badge.ready").wait_for(timeout=120_000)
        assert run.locator('a[data-state="computing"]').count() == 0
        assert run.locator('a[data-view="operators"][data-state="ready"]').count() == 1
    finally:
        gate.touch()
        held.stop()
