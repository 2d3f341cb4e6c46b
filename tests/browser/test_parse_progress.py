"""While a trace is parsed the view endpoints answer 202: the page shows progress, then the view."""

from __future__ import annotations

import json
import re

import pytest

from .support import BARS, PIE_SLICES, corpus_path, screenshot, start_server, wait_for_plot

pytestmark = pytest.mark.browser

LARGE_TRACE = "traces/AMD-AGI_TraceLens/tests/traces/h100"  # owlv2: 56 MB of JSON, a few seconds to parse


def test_progress_bar_then_view(page, server):
    answers = {"count": 0}

    def parsing_twice(route):
        answers["count"] += 1
        if answers["count"] > 2:
            route.continue_()
            return
        body = {
            "state": "parsing",
            "progress": 0.4,
            "bytes_done": 4 << 20,
            "bytes_total": 10 << 20,
            "file": "resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
            "message": None,
        }
        route.fulfill(status=202, content_type="application/json", body=json.dumps(body))

    page.route(re.compile(r"/api/overview\?"), parsing_twice)
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    progress = page.get_by_test_id("parse-progress")
    progress.wait_for()
    assert "4.0 MiB of 10.0 MiB" in progress.inner_text()
    assert progress.locator('[role="progressbar"]').get_attribute("aria-valuenow") == "40"
    screenshot(page, "progress-mocked")
    wait_for_plot(page, "#step-chart", BARS)
    assert progress.count() == 0
    assert answers["count"] >= 3


def test_fresh_cache_shows_progress_or_ends_loaded(page, tmp_path):
    root = corpus_path(LARGE_TRACE)
    fresh = start_server([root], tmp_path / "cache", tmp_path / "server.log", "--workers", "1")
    try:
        page.goto(fresh.url + "/")
        run = page.locator('tr[data-run="h100"]')
        run.wait_for()
        state = run.locator(".badge").inner_text().lower()
        assert state in ("parsing", "ready")
        if state == "parsing":
            assert run.locator('[role="progressbar"]').count() == 1
            screenshot(page, "progress-runs-page")
        page.goto(f"{fresh.url}/operators?run=h100&worker=google_owlv2-large-patch14-ensemble__1016001")
        saw_progress = False
        for _ in range(200):
            if page.get_by_test_id("parse-progress").count():
                saw_progress = True
                screenshot(page, "progress-fresh-cache")
            if page.locator("#pie-host_self_us svg.chart-svg").count():
                break
            page.wait_for_timeout(100)
        assert wait_for_plot(page, "#pie-host_self_us", PIE_SLICES) >= 1
        assert page.get_by_test_id("operators-table").locator("tbody tr").count() > 0
        print(f"progress bar seen: {saw_progress}")
    finally:
        fresh.stop()
