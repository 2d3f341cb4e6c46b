"""The chart modules (web/static/js/chart/) in Chromium, imported by a page of the server as the pages import them:
their arithmetic (ticks, stacked bars, hierarchies) against values computed here, and what a user does with a chart
(hover, click, drag to zoom, double click back, the legend, a resize, the downloads) on charts drawn into the page."""

from __future__ import annotations

import math
import random
from itertools import pairwise
from pathlib import Path

import pytest

from .support import Server

pytestmark = pytest.mark.browser

# Imports the chart modules into the page once: window.charts = {core, pie, bars, xy, partition}.
IMPORT = """async () => {
  const names = ["core", "pie", "bars", "xy", "partition"];
  const loaded = await Promise.all(names.map((n) => import(`/static/js/chart/${n}.js`)));
  window.charts = Object.fromEntries(names.map((n, i) => [n, loaded[i]]));
  window.box = (width = 600, height = 300) => {
    const box = document.createElement("div");
    box.className = "chart";
    box.style.cssText = `width:${width}px;height:${height}px;position:fixed;left:20px;top:20px;z-index:100`;
    document.body.append(box);
    return box;
  };
}"""


@pytest.fixture
def charts(page, server: Server):  # type: ignore[no-untyped-def]
    page.goto(f"{server.url}/api-docs")
    page.evaluate(IMPORT)
    return page


def test_ticks_are_round_values_inside_the_range(charts) -> None:
    rng = random.Random(20261207)
    ranges = []
    for _ in range(300):
        low = rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-6, 3)
        ranges.append([low, low + abs(rng.gauss(0, 1)) * 10 ** rng.randint(-6, 9) + 1e-9])
    ranges += [[1e9, 1e9 + 1e-6], [5.0, 5.0], [-3.0, -3.0 + 1e-12]]  # too narrow for their magnitude: one tick
    results = charts.evaluate(
        "(ranges) => ranges.map(([lo, hi]) => charts.core.linearTicks(lo, hi, 6).map((t) => t.value))", ranges
    )
    for (low, high), values in zip(ranges, results, strict=True):
        if high - low < 1e-9 * max(abs(low), abs(high)):
            assert values == [low]
            continue
        assert 2 <= len(values) <= 13, (low, high, values)
        assert all(low - 1e-9 * abs(low) <= v <= high + 1e-9 * abs(high) for v in values), (low, high, values)
        step = values[1] - values[0]
        noise = 4 * 2.0**-52 * max(abs(v) for v in values)  # a decimal's float error, at the values' magnitude
        for a, b in pairwise(values):  # evenly spaced
            assert abs((b - a) - step) <= 1e-9 * abs(step) + noise, (low, high, values)
        mantissa = step / 10 ** int(f"{step:e}".split("e")[1])
        assert min(abs(mantissa - m) for m in (1, 2, 2.5, 5, 10)) < 1e-6 + 10 * noise / step, (low, high, step)


def test_ticks_read_in_the_axis_unit(charts) -> None:
    ticks = charts.evaluate("() => charts.core.linearTicks(0, 2500000, 5, { divisor: 1e6 })")
    assert [t["text"] for t in ticks] == ["0", "0.5", "1", "1.5", "2", "2.5"]
    assert [t["value"] for t in ticks] == [0, 500000, 1000000, 1500000, 2000000, 2500000]
    ticks = charts.evaluate("() => charts.core.linearTicks(0, 12, 5, { integer: true })")
    assert all(float(t["text"]).is_integer() for t in ticks)


def test_stacked_bars_start_where_the_series_before_ended(charts) -> None:
    rng = random.Random(7)
    series = [[rng.choice([None, 0, rng.uniform(-5, 10)]) for _ in range(6)] for _ in range(4)]
    spans = charts.evaluate(
        "(series) => charts.bars.barSpans(series.map((values) => ({ values })), 6, 'stack')", series
    )
    up, down = [0.0] * 6, [0.0] * 6
    expected = []
    for s, values in enumerate(series):
        for i, value in enumerate(values):
            if value is None:
                continue
            start = up[i] if value >= 0 else down[i]
            expected.append({"series": s, "index": i, "from": start, "to": start + value})
            if value >= 0:
                up[i] += value
            else:
                down[i] += value
    assert spans == pytest.approx(expected)
    overlay = charts.evaluate("() => charts.bars.barSpans([{ values: [3, -2], bases: [10, 5] }], 2, 'overlay')")
    assert overlay == [{"series": 0, "index": 0, "from": 10, "to": 13}, {"series": 0, "index": 1, "from": 5, "to": 3}]


def _random_tree(rng: random.Random, size: int) -> dict:
    ids = [f"n{i}" for i in range(size)]
    parents = [""] + [ids[rng.randrange(i)] for i in range(1, size)]
    return {"ids": ids, "parents": parents, "values": [rng.randint(0, 100) for _ in range(size)]}


def test_a_hierarchy_s_shares_nest_inside_their_parents(charts) -> None:
    rng = random.Random(20261207)
    for _ in range(20):
        tree = _random_tree(rng, rng.randint(2, 60))
        out = charts.evaluate(
            """(nodes) => {
              const tree = charts.partition.hierarchy({ ...nodes, branchvalues: "remainder" });
              return { tree, placed: charts.partition.layoutShares(tree, null, 100) };
            }""",
            tree,
        )
        children = out["tree"]["children"]
        totals = out["tree"]["totals"]
        for node, kids in enumerate(children):  # "remainder": a node is its own value and its children's totals
            assert totals[node] == tree["values"][node] + sum(totals[k] for k in kids)
        placed = {p["node"]: p for p in out["placed"]}
        root = placed[0]
        assert (root["start"], root["end"], root["depth"]) == (0, 1, 0)
        for node, kids in enumerate(children):
            if node not in placed or not kids or totals[node] == 0:
                continue
            parent = placed[node]
            at = parent["start"]
            for kid in kids:  # contiguous, in order of size, each its share of the parent's
                share = (parent["end"] - parent["start"]) * totals[kid] / totals[node]
                assert placed[kid]["start"] == pytest.approx(at) and placed[kid]["depth"] == parent["depth"] + 1
                assert placed[kid]["end"] - placed[kid]["start"] == pytest.approx(share)
                at += share
            assert [totals[k] for k in kids] == sorted((totals[k] for k in kids), reverse=True)


def test_each_donut_slice_covers_its_share_of_the_circle(charts) -> None:
    values = [1, 2, 3, 4]
    inside = charts.evaluate(
        """async (values) => {
          const box = window.box(220, 220);
          const colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2"];
          const drawn = values.map((value, i) => ({ value, color: colors[i], hover: [String(i)] }));
          charts.pie.drawDonut(box, { slices: drawn });
          await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
          const svg = box.querySelector("svg.chart-svg");
          const slices = [...svg.querySelectorAll("path.slice")];
          const total = values.reduce((a, b) => a + b, 0);
          const cx = svg.width.baseVal.value / 2, cy = svg.height.baseVal.value / 2;
          const outer = Math.min(cx, cy) - 2, radius = outer * (1 + 0.45) / 2;
          let start = 0;
          return values.map((v) => {
            const mid = (start + v / 2) / total * 2 * Math.PI;
            start += v;
            const point = new DOMPoint(cx + radius * Math.sin(mid), cy - radius * Math.cos(mid));
            return slices.map((s) => s.isPointInFill(point));
          }).concat([[...svg.querySelectorAll("text.slice-text")].map((t) => t.textContent)]);
        }""",
        values,
    )
    *hits, texts = inside
    for i, row in enumerate(hits):  # the middle of share i lies in slice i and in no other
        assert row == [j == i for j in range(len(values))], (i, row)
    assert texts == ["10.0%", "20.0%", "30.0%", "40.0%"]


def test_a_tooltip_shows_a_name_as_typed(charts) -> None:
    name = '<img src=x onerror="window.__pwned=1"><b>bold</b>'
    charts.evaluate(
        """(name) => charts.pie.drawDonut(window.box(220, 220), { slices: [
          { value: 3, color: "#4e79a7", hover: [name, "3 us"] },
          { value: 1, color: "#f28e2b", hover: ["other"] }] })""",
        name,
    )
    charts.locator("path.slice").first.wait_for()
    # the first slice's middle (3/4 of the circle from twelve o'clock: at 135 degrees), in the 220 px box at (20, 20)
    radius = 108 * (1 + 0.45) / 2
    charts.mouse.move(130 + radius * math.sin(math.radians(135)), 130 - radius * math.cos(math.radians(135)))
    tooltip = charts.locator(".chart-tooltip")
    tooltip.wait_for(state="visible")
    assert tooltip.locator("strong").text_content() == name
    assert tooltip.locator("img, b").count() == 0
    assert charts.evaluate("window.__pwned") is None
    charts.mouse.move(1, 599)
    tooltip.wait_for(state="hidden")


XY = """(range) => {
  window.zooms = [];
  const box = window.box(700, 320);
  const x = Array.from({ length: 101 }, (_, i) => i * 10);
  window.frame = charts.xy.drawXY(box, {
    series: [{ type: "line", name: "a", x, y: x.map((v) => Math.sin(v / 100) + 1), color: "#4e79a7",
               hover: (i) => [`a ${i}`] }],
    x: { range }, y: { title: "value" }, onZoom: (zoomed) => window.zooms.push(zoomed),
  });
}"""
X_TICKS = "() => [...document.querySelectorAll('.x-axis text.tick')]"
X_TICKS += ".map((t) => Number(t.textContent.replace(/,/g, '')))"


def test_a_drag_zooms_into_its_range_and_a_double_click_goes_back(charts) -> None:
    charts.evaluate(XY, [0, 1000])
    area = charts.locator("rect.plot-area")
    area.wait_for()
    box = area.bounding_box()
    y = box["y"] + box["height"] / 2
    charts.mouse.move(box["x"] + box["width"] * 0.25, y)
    charts.mouse.down()
    charts.mouse.move(box["x"] + box["width"] * 0.75, y, steps=6)
    charts.mouse.up()
    zooms = charts.evaluate("window.zooms")
    assert len(zooms) == 1
    assert zooms[0] == pytest.approx([250, 750], abs=1000 / box["width"] * 2)  # within two pixels
    charts.wait_for_function(f"() => ({X_TICKS})()[0] >= 250")  # the axis shows the zoomed range at once
    ticks = charts.evaluate(X_TICKS)
    assert zooms[0][0] <= ticks[0] and ticks[-1] <= zooms[0][1]
    charts.locator("rect.plot-area").dblclick(position={"x": box["width"] / 2, "y": box["height"] / 2})
    assert charts.evaluate("window.zooms")[1] is None
    charts.wait_for_function(f"() => ({X_TICKS})().at(-1) === 1000")
    assert charts.evaluate(X_TICKS)[0] == 0


def test_a_click_is_not_a_zoom(charts) -> None:
    charts.evaluate(XY, [0, 1000])
    area = charts.locator("rect.plot-area")
    area.wait_for()
    area.click(position={"x": 100, "y": 50})
    assert charts.evaluate("window.zooms") == []


def test_hovering_the_plot_points_at_the_nearest_point(charts) -> None:
    charts.evaluate(XY, [0, 1000])
    area = charts.locator("rect.plot-area")
    area.wait_for()
    at = charts.evaluate("() => window.frame.toClient(500, Math.sin(5) + 1)")
    charts.mouse.move(at["left"] + 2, at["top"])
    tooltip = charts.locator(".chart-tooltip")
    tooltip.wait_for(state="visible")
    assert tooltip.text_content() == "a 50"
    assert charts.locator("g.hover-mark circle").count() == 1


BARS = """() => {
  const box = window.box(600, 300);
  charts.bars.drawBars(box, { categories: ["a", "b", "c"], series: [
    { name: "first", color: "#4e79a7", values: [1, 2, 3] }, { name: "second", color: "#f28e2b", values: [3, 2, 1] }] });
}"""


def test_the_legend_hides_and_shows_a_series(charts) -> None:
    charts.evaluate(BARS)
    bars = charts.locator("rect.bar")
    bars.first.wait_for()
    assert bars.count() == 6
    second = charts.locator(".chart-legend button").nth(1)
    second.click()
    charts.wait_for_function("() => document.querySelectorAll('rect.bar').length === 3")
    assert second.get_attribute("aria-pressed") == "false"
    assert {bars.nth(i).get_attribute("data-series") for i in range(3)} == {"0"}
    second.click()
    charts.wait_for_function("() => document.querySelectorAll('rect.bar').length === 6")
    assert second.get_attribute("aria-pressed") == "true"


def test_stacked_bars_are_as_tall_as_their_values(charts) -> None:
    charts.evaluate(BARS)
    charts.locator("rect.bar").first.wait_for()
    heights = charts.evaluate("() => [...document.querySelectorAll('rect.bar')].map((r) => r.height.baseVal.value)")
    unit = heights[0]  # the first bar's value is 1
    assert heights == pytest.approx([unit * v for v in (1, 2, 3, 3, 2, 1)], abs=0.01)
    tops = charts.evaluate("() => [...document.querySelectorAll('rect.bar')].map((r) => r.y.baseVal.value)")
    for i in range(3):  # each category's second bar stands on its first
        assert tops[i + 3] + heights[i + 3] == pytest.approx(tops[i], abs=0.01)


def test_a_chart_follows_its_container_s_width(charts) -> None:
    charts.evaluate(BARS)
    charts.locator("svg.chart-svg").wait_for()
    assert charts.evaluate("() => document.querySelector('svg.chart-svg').getAttribute('width')") == "600"
    charts.evaluate("() => { document.querySelector('.chart').style.width = '900px'; }")
    charts.wait_for_function("() => document.querySelector('svg.chart-svg').getAttribute('width') === '900'")


def test_a_chart_downloads_as_svg_and_as_png(charts) -> None:
    charts.evaluate(BARS)
    charts.locator("svg.chart-svg").wait_for()
    charts.locator(".chart-frame").hover()
    with charts.expect_download() as svg_download:
        charts.get_by_role("button", name="SVG").click()
    assert svg_download.value.suggested_filename.endswith(".svg")
    text = Path(svg_download.value.path()).read_text(encoding="utf-8")
    parsed = charts.evaluate(
        """(text) => { const doc = new DOMParser().parseFromString(text, "image/svg+xml");
             return { error: doc.querySelector("parsererror") !== null,
                      bars: doc.querySelectorAll("rect.bar").length }; }""",
        text,
    )
    assert parsed == {"error": False, "bars": 6}
    with charts.expect_download() as png_download:
        charts.get_by_role("button", name="PNG").click()
    assert png_download.value.suggested_filename.endswith(".png")
    assert Path(png_download.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


SUNBURST = """() => charts.partition.drawPartition(window.box(400, 400), {
  kind: "sunburst", maxdepth: 2,
  nodes: { ids: ["r", "a", "b", "a1", "a2"], parents: ["", "r", "r", "a", "a"],
           labels: ["root", "A", "B", "A one", "A two"], values: [10, 6, 4, 4, 2] },
})"""
CENTRE = "() => document.querySelector('g.node').querySelector('text').textContent"


def test_a_click_on_a_sector_zooms_into_it_and_the_centre_goes_back(charts) -> None:
    charts.evaluate(SUNBURST)
    charts.locator("g.node").first.wait_for()
    assert charts.evaluate(CENTRE) == "root"
    assert charts.locator("g.node").count() == 3  # the root and its two children: two rings at a time
    # A is the first 6/10 of the ring from twelve o'clock: its middle at 108 degrees, in the ring 98..196 px out
    # from the centre of the 400 px box at (20, 20)
    charts.mouse.click(220 + 147 * math.sin(math.radians(108)), 220 - 147 * math.cos(math.radians(108)))
    charts.wait_for_function(f"() => ({CENTRE})() === 'A'")
    assert charts.locator("g.node").count() == 3  # A and its two children
    charts.mouse.move(222, 222)
    assert charts.locator(".chart-tooltip .muted").text_content() == "click to go back up"
    charts.mouse.click(220, 220)  # the centre: one level up
    charts.wait_for_function(f"() => ({CENTRE})() === 'root'")
