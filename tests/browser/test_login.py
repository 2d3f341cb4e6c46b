"""A shared deployment with --auth-token in real Chromium: a pasted link shows the login form; the
token pasted once opens that link, and every page (and its API calls) works with the cookie."""

from __future__ import annotations

import pytest

from .support import ROOTS, corpus_path, screenshot, start_server

pytestmark = pytest.mark.browser
TOKEN = "team-token-0f9e8d7c6b5a"


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("locked")
    started = start_server([corpus_path(ROOTS["tinygpt_cpu"])], work / "cache", work / "server.log",
                           "--auth-token", TOKEN)  # fmt: skip
    try:
        yield started
    finally:
        started.stop()


@pytest.mark.allow_console("401")  # the first, refused page load is logged by Chromium
def test_paste_the_token_once_then_links_open(page, locked_server):  # type: ignore[no-untyped-def]
    link = f"{locked_server.url}/overview?run=tinygpt_cpu"
    page.goto(link)
    page.get_by_label("Access token").wait_for()
    screenshot(page, "login-form")
    page.get_by_label("Access token").fill("wrong")
    page.get_by_role("button", name="Open the dashboard").click()
    page.get_by_role("alert").wait_for()
    assert "not the one" in page.get_by_role("alert").inner_text()

    page.get_by_label("Access token").fill(TOKEN)
    page.get_by_role("button", name="Open the dashboard").click()
    page.wait_for_url("**/overview?run=tinygpt_cpu")
    page.locator("#step-chart svg.chart-svg").first.wait_for(timeout=60_000)  # the page's API calls got through
    screenshot(page, "login-then-overview")

    page.goto(f"{locked_server.url}/operators?run=tinygpt_cpu")  # another link: no second login
    page.get_by_test_id("operators-table").locator("tbody tr[data-key]").first.wait_for(timeout=30_000)
    assert "Access token" not in page.content()
