"""The Trace view (issue 20, items 3 and 7): its ruler reads in the unit the window's times call for
("606.5 ms", never "606500 µs"), and Back / Forward between zoom states show the earlier window without
reloading the page."""

from __future__ import annotations

import re

import pytest

from .support import Server, query_of, screenshot
from .test_trace_page import HOOK, RESNET, settled, wait_drawn

pytestmark = pytest.mark.browser

UNIT_US = {"\u00b5s": 1, "ms": 1e3, "s": 1e6}
LABEL = re.compile(r"^(-?[\d,]+(?:\.\d+)?) (\u00b5s|ms|s)$")


def _ruler(page) -> list[tuple[float, str, float]]:
    """The ruler's ticks: (time in µs, label, the label read back in µs)."""
    ticks = page.evaluate(f"() => {HOOK}.ruler()")
    read = []
    for tick in ticks:
        number, unit = LABEL.match(tick["label"]).groups()
        read.append((tick["t"], tick["label"], float(number.replace(",", "")) * UNIT_US[unit]))
    return read


@pytest.mark.parametrize(
    ("window", "unit", "expected"),
    [
        ((605_000, 608_000), "ms", "606.5 ms"),  # 3 ms, 0.6 s into the trace
        ((100, 130), "\u00b5s", "105 \u00b5s"),  # 30 µs at the start
        (None, "s", "0.2 s"),  # the whole trace, about a second
    ],
)
def test_ruler_ticks_read_in_the_unit_of_the_window(page, server: Server, window, unit, expected) -> None:
    where = f"&start_us={window[0]}&end_us={window[1]}" if window else ""
    page.goto(f"{server.url}/trace?{RESNET}{where}")
    wait_drawn(page)
    ticks = _ruler(page)
    assert len(ticks) >= 4
    assert expected in [label for _, label, _ in ticks]
    assert all(label.endswith(f" {unit}") for _, label, _ in ticks)
    for time_us, label, read_us in ticks:  # every label says its tick's time, to the precision of the step
        assert read_us == pytest.approx(time_us, abs=1e-6), label
    if window == (605_000, 608_000):
        screenshot(page, "trace-ruler-ms")


def zoom_in(page, previous: dict) -> dict:
    """Ctrl + wheel over the timeline; the new window once drawn and in the URL (its history entry)."""
    box = page.get_by_test_id("timeline").bounding_box()
    page.mouse.move(box["x"] + 700, box["y"] + 200)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -400)
    page.keyboard.up("Control")
    view = settled(page, previous)["view"]
    page.wait_for_function(  # the settled gesture's history entry
        "(end) => Math.abs(Number(new URLSearchParams(location.search).get('end_us')) - end) < 1e-3", arg=view["end"]
    )
    return view


def _shows(page, view: dict) -> None:
    page.wait_for_function(
        f"([s, e]) => Math.abs({HOOK}.view.start - s) < 1e-3 && Math.abs({HOOK}.view.end - e) < 1e-3",
        arg=[view["start"], view["end"]],
    )
    wait_drawn(page)


def test_back_and_forward_restore_a_zoom_without_a_reload(page, server: Server) -> None:
    page.goto(f"{server.url}/trace?{RESNET}")
    opened = wait_drawn(page)["view"]
    page.wait_for_function("() => new URLSearchParams(location.search).has('start_us')")
    page.evaluate("() => { window.__sameDocument = true; }")
    first = zoom_in(page, opened)
    second = zoom_in(page, first)
    assert second["end"] - second["start"] < first["end"] - first["start"] < opened["end"] - opened["start"]

    page.go_back()
    _shows(page, first)
    assert float(query_of(page.url)["end_us"]) == pytest.approx(first["end"], abs=1e-3)
    page.go_back()
    _shows(page, opened)
    page.go_forward()
    _shows(page, first)
    assert float(query_of(page.url)["start_us"]) == pytest.approx(first["start"], abs=1e-3)
    # the same document all along: no reload, one navigation, the marker still there
    assert page.evaluate("() => window.__sameDocument === true")
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1
    page.go_forward()  # showing an entry pushed none: Forward still leads to the second zoom
    _shows(page, second)
    screenshot(page, "trace-forward-to-second-zoom")
