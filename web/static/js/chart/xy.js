// Series over a numeric x axis: lines (straight or as steps), filled areas (stacked on a base), filled polygons and
// markers; a drag across the plot zooms into that x range, a double click goes back (onZoom tells the page).

import {
  bottomAxis, chartLegend, clipTo, hideTooltip, lastAtOrBefore, leftAxis, linearScale, linearTicks, mountChart,
  pathOf, plotBox, round1, showTooltip, svg, svgRoot, textWidth, valueExtent,
} from "./core.js";

const HOVER_REACH_PX = 40; // the nearest point further than this from the pointer (along x) shows no tooltip
const DRAG_PX = 4; // a press that moves less is a click

/** The points of series x, y as a polyline: straight between points, or held until the next x ("hv" steps). */
export function linePoints(xs, ys, shape, scaleX, scaleY) {
  const points = [];
  for (let i = 0; i < xs.length; i += 1) {
    if (ys[i] === null || ys[i] === undefined) continue;
    const px = scaleX(xs[i]);
    const py = scaleY(ys[i]);
    if (shape === "hv" && points.length) points.push([px, points[points.length - 1][1]]);
    points.push([px, py]);
  }
  return points;
}

/** An area between y and its base (a number or an array beside y), both drawn with the same shape. */
function areaPath(xs, ys, base, shape, scaleX, scaleY) {
  const top = linePoints(xs, ys, shape, scaleX, scaleY);
  const bottom = linePoints(xs, xs.map((_, i) => (Array.isArray(base) ? base[i] : base || 0)), shape, scaleX, scaleY);
  return top.length ? `${pathOf([...top, ...bottom.reverse()])}Z` : "";
}

/** Polygons from x, y with null between them (as plotly's fill "toself" took them). */
function polygonsPath(xs, ys, scaleX, scaleY) {
  let d = "";
  let open = false;
  for (let i = 0; i < xs.length; i += 1) {
    if (xs[i] === null || ys[i] === null) {
      if (open) d += "Z";
      open = false;
      continue;
    }
    d += `${open ? "L" : "M"}${round1(scaleX(xs[i]))} ${round1(scaleY(ys[i]))}`;
    open = true;
  }
  return open ? `${d}Z` : d;
}

function markerPath(symbol, x, y, size) {
  const r = size / 2;
  if (symbol === "diamond") return `M${x} ${y - r * 1.2}L${x + r} ${y}L${x} ${y + r * 1.2}L${x - r} ${y}Z`;
  return `M${x - r} ${y}A${r} ${r} 0 1 0 ${x + r} ${y}A${r} ${r} 0 1 0 ${x - r} ${y}Z`;
}

/** Every y a series reaches (its base too), for the y axis' extent. */
function seriesValues(s) {
  const values = s.y.filter((v) => v !== null && v !== undefined);
  if (Array.isArray(s.base)) values.push(...s.base);
  return values;
}

/** A linear axis: ticks on round values, the title as given. */
export function numberAxis(title) {
  return (low, high) => ({ title, ticks: linearTicks(low, high, 7) });
}

/**
 * Draw series into `container`. series: [{type: "line" | "area" | "polygons" | "markers", name, x, y, base?, color,
 * width?, dash?, shape?: "hv" | "linear", markers?: size, symbol?, opacity?, hover?(i) -> lines, legend?}].
 * x: {range: [low, high], axis(low, high) -> {title, ticks}}; y: {title}. hover: "closest" (the nearest point),
 * "x" (every series at the pointer's x, titled xLabel(x)) or "none". annotations: [{x, y, text, color}] (a label
 * above a point); vlines: [{x, text, color}]. onZoom([low, high] | null) after a drag across the plot, or a
 * double click; onClick({x, y}, event) for a click. The frame's `toData(event)` gives the pointer in data units,
 * `toClient(x, y)` a data point's position in the window.
 */
export function drawXY(container, {
  series, x, y = {}, hover = "closest", xLabel = null, annotations = [], vlines = [], onZoom = null, onClick = null,
  legend = series.some((s) => s.name && s.legend !== false), label = "",
}) {
  const hidden = new Set(); // the series hidden from the legend
  const view = { range: null }; // the zoomed x range, until the page draws again
  const entries = series.map((s, index) => ({ label: s.name, color: s.color, line: s.type === "line", dash: Boolean(s.dash), key: index }))
    .filter((_, index) => series[index].name && series[index].legend !== false);
  const legendNode = legend ? chartLegend(entries, { hidden, onChange: () => frame.redraw() }) : null;
  const frame = mountChart(container, (host, width, height) => {
    const root = svgRoot(host, width, height, label);
    const shown = series.filter((_, index) => !hidden.has(index));
    const [xLow, xHigh] = view.range || x.range;
    const axisX = (x.axis || numberAxis(""))(xLow, xHigh);
    const [yLow, yHigh] = valueExtent([...shown.flatMap(seriesValues), ...annotations.map((a) => a.y)], { pad: 0.04 });
    const yTicks = linearTicks(yLow, yHigh, Math.max(2, Math.round((height - 70) / 45)));
    const margin = { l: Math.max(...yTicks.map((t) => textWidth(t.text)), 0) + 12 + (y.title ? 24 : 0), r: 16,
      t: annotations.length || vlines.length ? 28 : 10, b: 24 + (axisX.title ? 22 : 0) };
    const box = plotBox(width, height, margin);
    const scaleX = linearScale([xLow, xHigh], [box.left, box.left + box.width]);
    const scaleY = linearScale([yLow, yHigh], [box.top + box.height, box.top]);
    root.append(leftAxis(box, scaleY, yTicks, y.title), bottomAxis(box, scaleX, axisX.ticks, axisX.title));
    const clip = clipTo(root, box);
    const plot = svg("g", { class: "series", "clip-path": clip });
    for (const s of shown) if (s.type !== "markers") plot.append(seriesNode(s, scaleX, scaleY));
    root.append(plot);
    for (const s of shown) if (s.type === "markers") root.append(seriesNode(s, scaleX, scaleY, [xLow, xHigh])); // whole at the plot's edge
    root.append(svg("g", { class: "vlines", "clip-path": clip }, vlines.map((v) =>
      svg("line", { x1: scaleX(v.x), x2: scaleX(v.x), y1: box.top, y2: box.top + box.height, stroke: v.color, "stroke-width": 2, "stroke-dasharray": "2 3" }))));
    for (const v of vlines) {
      if (v.x >= xLow && v.x <= xHigh) root.append(svg("text", { class: "vline-text", x: scaleX(v.x) - 3, y: box.top - 6, "text-anchor": "end", fill: v.color, "font-size": 11, text: v.text }));
    }
    for (const a of annotations) {
      if (a.x < xLow || a.x > xHigh) continue;
      const px = scaleX(a.x);
      const py = scaleY(a.y);
      const half = textWidth(a.text, 11) / 2;
      const textX = Math.min(Math.max(px, box.left + half), box.left + box.width - half);
      root.append(svg("g", { class: "annotation", "pointer-events": "none" },
        svg("line", { x1: px, x2: px, y1: py - 5, y2: py - 20, stroke: a.color, "stroke-width": 1 }),
        svg("text", { x: textX, y: py - 24, "text-anchor": "middle", fill: a.color, "font-size": 11, text: a.text })));
    }
    const focus = svg("g", { class: "hover-mark", "pointer-events": "none" });
    const selection = svg("rect", { class: "zoom-selection", x: 0, y: box.top, width: 0, height: box.height, fill: "rgba(78,121,167,0.15)",
      stroke: "#4e79a7", "stroke-width": 1, visibility: "hidden" });
    const overlay = svg("rect", { class: "plot-area", x: box.left, y: box.top, width: box.width, height: box.height, fill: "transparent",
      style: onZoom ? "cursor: crosshair" : null });
    root.append(focus, selection, overlay);
    const toData = (event) => {
      const bounds = root.getBoundingClientRect();
      const px = event.clientX - bounds.left;
      const py = event.clientY - bounds.top;
      if (px < box.left || px > box.left + box.width || py < box.top || py > box.top + box.height) return null;
      return { x: scaleX.invert(px), y: scaleY.invert(py), px, py };
    };
    frame.toData = toData;
    frame.toClient = (xv, yv) => { // a data point's position in the window (the inverse of toData)
      const bounds = root.getBoundingClientRect();
      return { left: bounds.left + scaleX(xv), top: bounds.top + scaleY(yv) };
    };
    const hovering = { series: shown.filter((s) => s.hover), mode: hover };
    bindPointer(overlay, { frame, toData, hovering, focus, selection, scaleX, scaleY, box, xLabel, onZoom, onClick,
      zoom: (range) => {
        view.range = range;
        frame.redraw();
      },
      reset: () => {
        view.range = null;
        frame.redraw();
      } });
  }, { kind: "xy", legend: legendNode, label });
  frame.toData = () => null;
  return frame;
}

function seriesNode(s, scaleX, scaleY, [low, high] = [-Infinity, Infinity]) {
  const shape = s.shape || "linear";
  if (s.type === "polygons") {
    return svg("path", { class: "polygons", d: polygonsPath(s.x, s.y, scaleX, scaleY), fill: s.color, stroke: s.color, "stroke-width": 0.5,
      "fill-opacity": s.opacity ?? 1 });
  }
  if (s.type === "markers") {
    return svg("g", { class: "markers" }, s.x.map((xv, i) => (xv < low || xv > high ? null
      : svg("path", { class: "marker", d: markerPath(s.symbol, scaleX(xv), scaleY(s.y[i]), s.size || 8), fill: s.color }))));
  }
  const group = svg("g", { class: `${s.type}-series` });
  if (s.type === "area") {
    group.append(svg("path", { class: "area", d: areaPath(s.x, s.y, s.base, shape, scaleX, scaleY), fill: s.color, "fill-opacity": s.opacity ?? 0.5, stroke: "none" }));
  }
  if (s.type === "line" || (s.type === "area" && s.width)) {
    group.append(svg("path", { class: "line", d: pathOf(linePoints(s.x, s.y, shape, scaleX, scaleY)), fill: "none", stroke: s.color,
      "stroke-width": s.width ?? 1.5, "stroke-dasharray": s.dash ? "2 3" : null, "stroke-linejoin": "round" }));
  }
  if (s.markers) {
    group.append(svg("g", { class: "markers" }, s.x.map((xv, i) => (s.y[i] === null ? null
      : svg("circle", { class: "marker", cx: round1(scaleX(xv)), cy: round1(scaleY(s.y[i])), r: s.markers / 2, fill: s.color })))));
  }
  return group;
}

/** The series' point nearest the pointer's x (the one before or after it): its index, or -1. */
function nearestIndex(xs, value) {
  const before = lastAtOrBefore(xs, value);
  if (before < 0) return xs.length ? 0 : -1;
  if (before + 1 < xs.length && xs[before + 1] - value < value - xs[before]) return before + 1;
  return before;
}

/** What the pointer does over the plot: the tooltip (hover), a drag to zoom, a double click back, a click. */
function bindPointer(overlay, o) {
  let pressed = null;
  const showAt = (event) => {
    const at = o.toData(event);
    o.focus.replaceChildren();
    if (!at || o.hovering.mode === "none" || !o.hovering.series.length) {
      hideTooltip(o.frame.tooltip);
      return;
    }
    if (o.hovering.mode === "x") {
      const rows = [];
      for (const s of o.hovering.series) {
        const index = lastAtOrBefore(s.x, at.x);
        if (index >= 0 && s.y[index] !== null) rows.push(...s.hover(index));
      }
      o.focus.append(svg("line", { x1: at.px, x2: at.px, y1: o.box.top, y2: o.box.top + o.box.height, stroke: "#8a94a3", "stroke-dasharray": "3 3" }));
      showTooltip(o.frame.tooltip, event, rows.length ? [o.xLabel ? o.xLabel(at.x) : String(at.x), ...rows] : null);
      return;
    }
    let best = null;
    for (const s of o.hovering.series) {
      const index = nearestIndex(s.x, at.x);
      if (index < 0 || s.y[index] === null) continue;
      const px = o.scaleX(s.x[index]);
      const py = o.scaleY(s.y[index]);
      if (Math.abs(px - at.px) > HOVER_REACH_PX) continue;
      const distance = Math.hypot(px - at.px, py - at.py);
      if (!best || distance < best.distance) best = { s, index, px, py, distance };
    }
    if (!best) {
      hideTooltip(o.frame.tooltip);
      return;
    }
    o.focus.append(svg("circle", { cx: best.px, cy: best.py, r: 4, fill: "none", stroke: best.s.color, "stroke-width": 2 }));
    showTooltip(o.frame.tooltip, event, best.s.hover(best.index));
  };
  overlay.addEventListener("pointermove", (event) => {
    if (pressed) {
      const at = o.toData(event);
      const px = Math.min(Math.max(event.clientX - overlay.ownerSVGElement.getBoundingClientRect().left, o.box.left), o.box.left + o.box.width);
      o.selection.setAttribute("x", Math.min(px, pressed.px));
      o.selection.setAttribute("width", Math.abs(px - pressed.px));
      o.selection.setAttribute("visibility", Math.abs(px - pressed.px) >= DRAG_PX ? "visible" : "hidden");
      if (at) pressed.last = at;
      return;
    }
    showAt(event);
  });
  overlay.addEventListener("pointerleave", () => {
    if (!pressed) {
      o.focus.replaceChildren();
      hideTooltip(o.frame.tooltip);
    }
  });
  overlay.addEventListener("pointerdown", (event) => {
    const at = o.toData(event);
    if (!at || event.button !== 0) return;
    pressed = { ...at, last: at };
    overlay.setPointerCapture?.(event.pointerId);
    hideTooltip(o.frame.tooltip);
  });
  overlay.addEventListener("pointerup", (event) => {
    if (!pressed) return;
    const start = pressed;
    pressed = null;
    o.selection.setAttribute("visibility", "hidden");
    const bounds = overlay.ownerSVGElement.getBoundingClientRect();
    const px = Math.min(Math.max(event.clientX - bounds.left, o.box.left), o.box.left + o.box.width);
    if (Math.abs(px - start.px) >= DRAG_PX && o.onZoom) {
      const range = [o.scaleX.invert(Math.min(px, start.px)), o.scaleX.invert(Math.max(px, start.px))];
      o.zoom(range);
      o.onZoom(range);
    } else if (Math.abs(px - start.px) < DRAG_PX && o.onClick) {
      o.onClick(start, event);
    }
  });
  overlay.addEventListener("dblclick", () => {
    if (!o.onZoom) return;
    o.reset();
    o.onZoom(null);
  });
}
