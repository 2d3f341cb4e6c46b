"""The source viewer and the API reference page."""

from __future__ import annotations

import pytest

from .support import SOURCE_FILE, SOURCE_TARGET_LINE, screenshot

pytestmark = pytest.mark.browser


def test_source_highlights_and_scrolls_to_the_line(page, server):
    page.goto(f"{server.url}/source?path={SOURCE_FILE}&line={SOURCE_TARGET_LINE}")
    target = page.locator("tr.target")
    target.wait_for()
    assert target.get_attribute("data-line") == str(SOURCE_TARGET_LINE)
    assert page.locator("tr[data-line]").count() > 60
    box = target.bounding_box()
    scroller = page.locator(".source-scroll").bounding_box()
    assert scroller["y"] <= box["y"] <= scroller["y"] + scroller["height"]  # scrolled into view
    screenshot(page, "source")


@pytest.mark.allow_console(r"status of 404")
def test_source_shows_the_server_refusal(page, server):
    page.goto(f"{server.url}/source?path=/etc/passwd&line=1")
    error = page.get_by_test_id("error")
    error.wait_for()
    assert "not a readable file under the configured source roots" in error.inner_text()


def test_api_docs_lists_paths_parameters_and_codes(page, server):
    page.goto(f"{server.url}/api-docs")
    endpoints = page.get_by_test_id("endpoint")
    endpoints.first.wait_for()
    assert endpoints.count() >= 8
    text = page.locator("#api-docs").inner_text()
    paths = ("/api/runs", "/api/overview", "/api/operators", "/api/operators/stacks", "/api/kernels", "/api/source")
    for path in paths:
        assert path in text
    overview = page.locator("#get-api-overview")
    overview_text = overview.inner_text()
    assert "Step time breakdown" in overview_text
    assert "Run name, as listed by /api/runs" in overview_text
    assert "202" in overview_text and "422" in overview_text
    assert "required" in overview_text
    screenshot(page, "api-docs")
