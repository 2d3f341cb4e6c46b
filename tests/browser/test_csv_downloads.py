"""Tables leave the page: every table's CSV button downloads the rows, order and columns shown (after search
and sort), the JSON twin's ``format=csv`` gives the same rows in the same order, and every chart's modebar
saves it as PNG or SVG."""

from __future__ import annotations

import csv
import io
import re
import urllib.request
from pathlib import Path

from .support import BARS, Server, screenshot, wait_for_plot

KERNELS = "/kernels?run=resnet50_num_workers_0&group_by=kernel_op&search=conv&sort=-calls"


def download_text(page, trigger) -> tuple[str, str]:
    """(suggested file name, text) of the download that ``trigger()`` starts."""
    with page.expect_download() as info:
        trigger()
    download = info.value
    return download.suggested_filename, Path(download.path()).read_text(encoding="utf-8")


def parse(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_kernel_table_csv_is_what_the_table_shows(page, server: Server) -> None:
    page.goto(server.url + KERNELS)
    table = page.get_by_test_id("kernels-table")
    table.locator("tbody tr").first.wait_for()
    headers = table.locator("thead th").all_text_contents()
    names = table.locator("tbody td.name").all_text_contents()
    operators = table.locator("tbody td.op").all_text_contents()
    name, text = download_text(page, lambda: page.locator("#table .csv-download").click())
    assert name == "kernels-kernels-table.csv"
    header, *rows = parse(text)
    assert [h.rstrip("\u25b2\u25bc") for h in headers] == header  # column labels, sort arrows aside
    assert header[:2] == ["Name", "Operator"]
    assert [r[0] for r in rows] == names and [r[1] for r in rows] == operators
    calls = [int(r[header.index("Calls")]) for r in rows]
    assert calls == sorted(calls, reverse=True) and len(rows) > 5
    assert all("conv" in (r[0] + r[1]).lower() for r in rows)
    screenshot(page, "kernels-csv-button")


def test_the_json_twin_answers_the_same_rows_as_csv(page, server: Server) -> None:
    page.goto(server.url + KERNELS)
    page.get_by_test_id("kernels-table").locator("tbody tr").first.wait_for()
    _, text = download_text(page, lambda: page.locator("#table .csv-download").click())
    page_header, *page_rows = parse(text)
    url = f"{server.url}/api/kernels?run=resnet50_num_workers_0&group_by=kernel_op&search=conv&sort=-calls&format=csv"
    with urllib.request.urlopen(url) as response:
        assert response.headers["Content-Type"].startswith("text/csv")
        assert "attachment" in response.headers["Content-Disposition"]
        api_header, *api_rows = parse(response.read().decode())
    name, operator, calls = (api_header.index(c) for c in ("name", "operator", "calls"))
    assert [(r[name], r[operator] or "\u2014") for r in api_rows] == [(r[0], r[1]) for r in page_rows]
    assert [r[calls] for r in api_rows] == [r[page_header.index("Calls")] for r in page_rows]


def test_overview_step_table_csv_has_every_step(page, server: Server) -> None:
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    steps = page.get_by_test_id("steps")
    steps.locator("xpath=ancestor::details").locator("summary").click()
    name, text = download_text(page, lambda: page.locator(".steps-details .csv-download").click())
    header, *rows = parse(text)
    assert name == "overview-steps.csv" and header[:3] == ["Step", "Start (\u00b5s)", "Total (\u00b5s)"]
    assert [r[0] for r in rows] == [t.strip() for t in steps.locator("tbody tr td:first-child").all_text_contents()]
    for row in rows:  # the categories add up to the step's total
        assert abs(sum(float(v) for v in row[3:]) - float(row[2])) < 1.0


def test_charts_save_as_png_and_svg(page, server: Server) -> None:
    page.goto(f"{server.url}/overview?run=resnet50_num_workers_0")
    wait_for_plot(page, "#step-chart", BARS)
    page.locator("#step-chart").hover()
    tools = page.locator("#step-chart .chart-tools")
    name, text = download_text(page, lambda: tools.get_by_role("button", name="SVG").click())
    assert name == "profscope-overview.svg" and text.lstrip().startswith("<svg")
    assert len(re.findall(r'<rect class="bar[ "]', text)) == page.locator(f"#step-chart {BARS}").count()  # as drawn
    with page.expect_download() as info:
        tools.get_by_role("button", name="PNG").click()
    assert info.value.suggested_filename == "profscope-overview.png"
    assert tools.locator("button").count() == 2  # downloads only: nothing leaves the machine
    pie = page.locator("#average-pie .chart")
    pie.hover()
    assert pie.locator(".chart-tools").get_by_role("button", name="SVG").count() == 1
