// Bars over categories: stacked (each series on top of the one before) or overlaid (each bar from its own base),
// standing (categories along the bottom) or lying (categories down the left, the first on top).

import {
  bottomAxis, chartLegend, FONT_SIZE, hideTooltip, leftAxis, linearScale, linearTicks, mountChart, plotBox,
  showTooltip, svg, svgRoot, TEXT_COLOR, textWidth, thinned, fitText, valueExtent, AXIS_COLOR,
} from "./core.js";

/** Each visible bar: {series, index, from, to} in value units (from < to or from > to for negative values). */
export function barSpans(series, count, mode, hidden = new Set()) {
  const spans = [];
  const up = new Array(count).fill(0);
  const down = new Array(count).fill(0);
  series.forEach((s, seriesIndex) => {
    if (hidden.has(seriesIndex)) return;
    if (s.bars) { // bars of their own: several in a category (blocks of a segment)
      s.bars.forEach((b, k) => spans.push({ series: seriesIndex, index: b.index, from: b.from, to: b.to, bar: k }));
      return;
    }
    for (let index = 0; index < count; index += 1) {
      const value = s.values[index];
      if (value === null || value === undefined || !Number.isFinite(value)) continue;
      if (mode === "stack") {
        const from = value >= 0 ? up[index] : down[index];
        const to = from + value;
        if (value >= 0) up[index] = to;
        else down[index] = to;
        spans.push({ series: seriesIndex, index, from, to });
      } else {
        const from = s.bases ? s.bases[index] : 0;
        spans.push({ series: seriesIndex, index, from, to: from + value });
      }
    }
  });
  return spans;
}

/**
 * Draw bars into `container`. series: [{name, color, colors?, values, bases?, hover(i) -> lines, note?(i), text?(i)}];
 * categories: their labels. mode "stack" | "overlay"; horizontal: categories down the left. onClick(index, series)
 * when a bar is clicked. connect: a line from each bar's end to the next bar (a waterfall). ticks: options of
 * linearTicks ({integer, divisor}) for the value axis. A series may give its bars instead of values: bars
 * [{index, from, to, hover}], several in one category (overlay). outline: a white edge on each bar.
 */
export function drawBars(container, {
  categories, series, mode = "stack", horizontal = false, valueTitle = "", categoryTitle = "", legend = series.length > 1,
  gap = 0.25, onClick = null, connect = false, ticks = {}, outline = false, label = "",
}) {
  const hidden = new Set(); // the series hidden from the legend
  const legendNode = legend
    ? chartLegend(series.map((s, index) => ({ label: s.name, color: s.color, key: index })), { hidden, onChange: () => frame.redraw() })
    : null;
  const frame = mountChart(container, (host, width, height) => {
    const root = svgRoot(host, width, height, label);
    const spans = barSpans(series, categories.length, mode, hidden);
    const [low, high] = valueExtent(spans.flatMap((s) => [s.from, s.to]));
    const withText = series.some((s) => s.text);
    const valueTicks = linearTicks(low, high, horizontal ? Math.max(2, Math.round(width / 110)) : Math.max(2, Math.round((height - 60) / 45)), ticks);
    const tickWidth = Math.max(0, ...valueTicks.map((t) => textWidth(t.text)));
    const draw = horizontal ? lyingBars : standingBars;
    draw(root, { width, height, categories, series, spans, low, high, valueTicks, tickWidth, withText, valueTitle, categoryTitle,
      gap, connect, frame, onClick, outline });
  }, { kind: "bars", legend: legendNode, label });
  return frame;
}

function bar(rect, span, s, frame, onClick, outline) {
  const fill = s.colors ? s.colors[span.index] : s.color;
  const node = svg("rect", { class: `bar${onClick ? " clickable" : ""}`, ...rect, fill, stroke: outline ? "#fff" : null, "stroke-width": outline ? 0.5 : null,
    "data-series": span.series, "data-index": span.index });
  const lines = () => (span.bar !== undefined ? s.bars[span.bar].hover : s.hover ? s.hover(span.index) : [s.name]);
  node.addEventListener("pointermove", (event) => showTooltip(frame.tooltip, event, lines(), s.note ? s.note(span.index) : null));
  node.addEventListener("pointerleave", () => hideTooltip(frame.tooltip));
  if (onClick) node.addEventListener("click", () => onClick(span.index, span.series));
  return node;
}

/** Every bar, each at rectOf(span) ({x, y, width, height}): the orientation is in rectOf alone. */
function barGroup(o, rectOf) {
  return svg("g", { class: "bars" }, o.spans.map((span) => bar(rectOf(span), span, o.series[span.series], o.frame, o.onClick, o.outline)));
}

function standingBars(root, o) {
  const margin = { l: o.tickWidth + 12 + (o.valueTitle ? 24 : 0), r: 8, t: o.withText ? 22 : 10, b: 24 + (o.categoryTitle ? 22 : 0) };
  const box = plotBox(o.width, o.height, margin);
  const y = linearScale([o.low, o.high], [box.top + box.height, box.top]);
  const band = box.width / Math.max(1, o.categories.length);
  const barWidth = Math.max(1, band * (1 - o.gap));
  const xOf = (index) => box.left + index * band + (band - barWidth) / 2;
  root.append(leftAxis(box, y, o.valueTicks, o.valueTitle));
  root.append(barGroup(o, (span) => {
    const top = y(Math.max(span.from, span.to));
    return { x: xOf(span.index), y: top, width: barWidth, height: Math.max(0, y(Math.min(span.from, span.to)) - top) };
  }));
  if (o.connect) root.append(connectors(o.spans, (span) => [xOf(span.index), xOf(span.index) + barWidth], y));
  root.append(barTexts(o.spans, o.series, (span, up) => [xOf(span.index) + barWidth / 2, y(span.to) + (up ? -9 : 9), "middle"]));
  const labels = o.categories.map((text, index) => ({ text: String(text), x: box.left + index * band + band / 2 }));
  const bottom = box.top + box.height;
  root.append(svg("g", { class: "axis x-axis" },
    svg("line", { x1: box.left, x2: box.left + box.width, y1: y(0), y2: y(0), stroke: AXIS_COLOR }),
    thinned(labels.map((l) => ({ ...l, text: fitText(l.text, Math.max(band * 3, 60)) }))).map((l) =>
      svg("text", { class: "tick category", x: l.x, y: bottom + 15, "text-anchor": "middle", fill: TEXT_COLOR, text: l.text })),
    o.categoryTitle ? svg("text", { class: "axis-title", x: box.left + box.width / 2, y: bottom + 38, "text-anchor": "middle", fill: TEXT_COLOR,
      "font-size": 13, text: o.categoryTitle }) : null));
}

function lyingBars(root, o) {
  const labelWidth = Math.min(220, Math.max(0, ...o.categories.map((c) => textWidth(String(c)))) + 10);
  const margin = { l: labelWidth + 4, r: o.withText ? 60 : 12, t: 8, b: 22 + (o.valueTitle ? 22 : 0) };
  const box = plotBox(o.width, o.height, margin);
  const x = linearScale([o.low, o.high], [box.left, box.left + box.width]);
  const band = box.height / Math.max(1, o.categories.length);
  const barHeight = Math.max(1, band * (1 - o.gap));
  const yOf = (index) => box.top + index * band + (band - barHeight) / 2;
  root.append(bottomAxis(box, x, o.valueTicks, o.valueTitle));
  root.append(barGroup(o, (span) => {
    const left = x(Math.min(span.from, span.to));
    return { x: left, y: yOf(span.index), width: Math.max(0, x(Math.max(span.from, span.to)) - left), height: barHeight };
  }));
  root.append(barTexts(o.spans, o.series, (span, up) => [x(span.to) + (up ? 4 : -4), yOf(span.index) + barHeight / 2, up ? "start" : "end"]));
  const every = Math.max(1, Math.ceil((FONT_SIZE + 2) / band));
  root.append(svg("g", { class: "axis y-axis" }, o.categories.map((text, index) => (index % every
    ? null
    : svg("text", { class: "tick category", x: box.left - 6, y: box.top + index * band + band / 2, "text-anchor": "end", "dominant-baseline": "middle",
        fill: TEXT_COLOR, text: fitText(String(text), labelWidth - 6) })))));
}

/** Each bar's text (series.text(i)) beyond its end, on the side its value points to: place(span, up) -> [x, y, anchor]. */
function barTexts(spans, series, place) {
  const group = svg("g", { class: "bar-texts", "pointer-events": "none" });
  for (const span of spans) {
    const text = series[span.series].text?.(span.index);
    if (!text) continue;
    const [x, y, anchor] = place(span, span.to >= span.from);
    group.append(svg("text", { class: "bar-text", x, y, "text-anchor": anchor, "dominant-baseline": "middle", fill: TEXT_COLOR, "font-size": 11, text }));
  }
  return group;
}

/** A waterfall's connectors: a line at each bar's end level, from its right edge to the next bar's left edge. */
function connectors(spans, edges, scale) {
  const group = svg("g", { class: "connectors" });
  const ordered = spans.slice().sort((a, b) => a.index - b.index);
  for (let i = 0; i + 1 < ordered.length; i += 1) {
    const level = scale(ordered[i].to);
    group.append(svg("line", { x1: edges(ordered[i])[1], x2: edges(ordered[i + 1])[0], y1: level, y2: level, stroke: "#bab0ac", "stroke-width": 1 }));
  }
  return group;
}
