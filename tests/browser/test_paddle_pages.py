"""Every page on real PaddlePaddle recordings (tests/data/paddle), in Chromium; screenshots in artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from profscope.pages import RUN_VIEWS

from .support import Server, screenshot, start_server, who_asked

pytestmark = pytest.mark.browser

PADDLE_DATA = Path(__file__).resolve().parents[1] / "data" / "paddle"


@pytest.fixture(scope="module")
def paddle_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("paddle-server")
    started = start_server([PADDLE_DATA], work / "cache", work / "server.log")
    try:
        started.wait_parsed()
        yield started
    finally:
        started.stop()


@pytest.mark.parametrize(
    ("run", "view", "ready"),
    [
        ("transformer", "overview", "#main svg"),
        ("transformer", "operators", "[data-testid=operators-table] tbody tr"),
        ("transformer", "memory", "#main svg"),
        ("transformer", "trace", "canvas"),
        ("transformer", "paddle", "[data-testid=paddle-operators] tbody tr"),
        ("gpu", "kernels", "[data-testid=kernels-table] tbody tr"),  # the hand-written two-rank GPU traces
        ("gpu", "distributed", "[data-testid=ranks-table] tbody tr"),
        ("gpu", "paddle", "[data-testid=paddle-operators] tbody tr"),
    ],
)
def test_each_view_opens_on_a_paddle_run(page, paddle_server, run: str, view: str, ready: str) -> None:
    page.goto(f"{paddle_server.url}/{view}?run={run}")
    page.locator(ready).first.wait_for()
    assert page.locator(".error-box").count() == 0
    screenshot(page, f"paddle-{view}-{run}")
    first = RUN_VIEWS[view].first_request.partition("?")[0]  # asked once: the answer preloaded with the page
    assert who_asked(page, first) == ["link"]


def test_the_paddle_summary_switches_its_time_unit(page, paddle_server) -> None:
    page.goto(f"{paddle_server.url}/paddle?run=mlp&unit=ms")
    table = page.get_by_test_id("paddle-overview-cpu")
    table.wait_for()
    step_ms = float(table.locator("tbody tr").first.locator("td").nth(2).inner_text())
    page.select_option("#unit", "us")
    page.wait_for_url("**unit=us**")
    step_us = float(table.locator("tbody tr").first.locator("td").nth(2).inner_text())
    assert step_us == pytest.approx(step_ms * 1000, abs=10)  # ms shows two decimals: 10 µs of rounding
    rows = page.get_by_test_id("paddle-operators").locator("tbody tr")
    assert rows.filter(has_text="matmul infer_meta").count() == 1  # the nested rows are there
    screenshot(page, "paddle-summary-mlp-us")


def test_a_launched_job_with_default_names_opens_in_distributed(page, paddle_server) -> None:
    """two_ranks: Paddle's default file names, no rank recorded; the ranks are inferred and the page says so."""
    page.goto(f"{paddle_server.url}/distributed?run=two_ranks")
    rows = page.locator("[data-testid=ranks-table] tbody tr")
    rows.first.wait_for()
    assert rows.count() == 2 and page.locator(".error-box").count() == 0
    assert [rows.nth(i).locator("td").nth(0).inner_text() for i in range(2)] == ["0", "1"]
    assert "inferred" in rows.first.inner_text()  # the Rank from column
    # the workers differ only in their last digits (the pid): those stay drawn however narrow the column
    tails = [rows.nth(i).locator(".mid-ellipsis").first.evaluate("n => n.lastChild.textContent") for i in range(2)]
    assert tails[0] != tails[1] and all(tail.endswith(("15466", "15467")) for tail in tails), tails
    assert "numbered by host name and process id" in page.get_by_test_id("warnings").inner_text()
    labels = page.locator("#sel-worker option").all_inner_texts()
    assert [label.split(" · ")[0] for label in labels] == ["rank 0 (inferred)", "rank 1 (inferred)"]
    screenshot(page, "paddle-distributed-two_ranks")
