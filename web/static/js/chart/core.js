// What every chart shares: SVG nodes, scales and ticks, the plot's box, its tooltip, legend and downloads.
// The charts are SVG drawn by these modules (no charting library): a page's charts draw in the frame its
// numbers do, where plotly.js took 0.5-0.8 s to load and run on a 2-core machine (bench/RESULTS.md, run 26).
// Every text from a trace goes in as a text node (textContent), so a name shows as typed, markup included.

import { el } from "../dom.js";
import { decimalFormat } from "../format.js";

export const SVG_NS = "http://www.w3.org/2000/svg";

export const FONT_FAMILY = 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans", Arial, sans-serif';
export const FONT_SIZE = 12;
export const TEXT_COLOR = "#1d232b";
export const MUTED_COLOR = "#5b6573";
export const GRID_COLOR = "#eceef1";
export const AXIS_COLOR = "#1d232b";

/** svg("path", {d, class, fill}, ...children): an SVG node; attributes null/undefined/false are left out. */
export function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
  return node;
}

const measureContext = { canvas: null };

/** The width in px of `text` in the charts' font at `size` px (a canvas measures it; no layout). */
export function textWidth(text, size = FONT_SIZE) {
  if (!measureContext.canvas) measureContext.canvas = document.createElement("canvas").getContext("2d");
  const context = measureContext.canvas;
  context.font = `${size}px ${FONT_FAMILY}`;
  return context.measureText(String(text)).width;
}

/** `text` cut at its end with "…" so that it is at most `width` px wide (whole when it fits). */
export function fitText(text, width, size = FONT_SIZE) {
  const value = String(text);
  if (textWidth(value, size) <= width) return value;
  let low = 0;
  let high = value.length;
  while (low < high) {
    const middle = (low + high + 1) >> 1;
    if (textWidth(`${value.slice(0, middle)}\u2026`, size) <= width) low = middle;
    else high = middle - 1;
  }
  return low ? `${value.slice(0, low)}\u2026` : "";
}

/** A linear map from [d0, d1] to [r0, r1], with its inverse (`.invert`). */
export function linearScale([d0, d1], [r0, r1]) {
  const span = d1 - d0 || 1;
  const map = (value) => r0 + ((value - d0) / span) * (r1 - r0);
  map.invert = (position) => d0 + ((position - r0) / (r1 - r0 || 1)) * span;
  map.domain = [d0, d1];
  return map;
}

/** A round step (1, 2, 2.5 or 5 times a power of ten) that cuts `span` into about `count` parts. */
export function niceStep(span, count = 6) {
  const rough = Math.max(Math.abs(span), 1e-12) / count;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((candidate) => candidate >= rough * (1 - 1e-9));
}

/** The decimals a step's ticks need (2.5 needs one more than its power of ten). */
export function stepDigits(step) {
  const magnitude = 10 ** Math.floor(Math.log10(step));
  return Math.max(0, -Math.floor(Math.log10(step)) + (Math.abs(step / magnitude - 2.5) < 1e-9 ? 1 : 0));
}

/**
 * Ticks on round values within [low, high]: [{value, text}], text with thousands separators. A range too narrow
 * for its magnitude (under a billionth of it, where round steps stop being exact) gets one tick.
 */
export function linearTicks(low, high, count = 6, { integer = false, divisor = 1 } = {}) {
  if (!(high > low) || high - low < 1e-9 * Math.max(Math.abs(low), Math.abs(high))) {
    return [{ value: low, text: decimalFormat(0, 2).format(low / divisor) }];
  }
  let step = niceStep((high - low) / divisor, count);
  if (integer) step = Math.max(1, Math.round(step));
  const digits = integer ? 0 : stepDigits(step);
  const format = decimalFormat(0, digits);
  const ticks = [];
  for (let i = Math.ceil(low / divisor / step - 1e-9); i * step <= high / divisor + step * 1e-9; i += 1) {
    const value = Number((i * step).toFixed(Math.min(100, digits + 2))); // i * step without its float noise
    ticks.push({ value: value * divisor, text: format.format(value) });
  }
  return ticks;
}

/** [low, high] of a value axis that starts at zero (or below, for negative values) and ends on a round tick. */
export function valueExtent(values, { fromZero = true, pad = 0 } = {}) {
  let low = fromZero ? 0 : Infinity;
  let high = fromZero ? 0 : -Infinity;
  for (const value of values) {
    if (value === null || value === undefined || !Number.isFinite(value)) continue;
    if (value < low) low = value;
    if (value > high) high = value;
  }
  if (!Number.isFinite(low) || !Number.isFinite(high)) return [0, 1];
  if (high === low) return low === 0 ? [0, 1] : low > 0 ? [0, low * 1.1] : [low * 1.1, 0];
  const span = high - low;
  return [low < 0 ? low - span * pad : low, high > 0 ? high + span * pad : high];
}

/** A plot's box inside a width x height chart, given its margins. */
export function plotBox(width, height, margin) {
  return {
    left: margin.l,
    top: margin.t,
    width: Math.max(10, width - margin.l - margin.r),
    height: Math.max(10, height - margin.t - margin.b),
  };
}

/**
 * A horizontal value axis (gridlines across the plot, labels on the left) for ticks [{value, text}],
 * placed by `scale`; `title` turned along the axis.
 */
export function leftAxis(box, scale, ticks, title) {
  return svg("g", { class: "axis y-axis" },
    ticks.map((tick) => {
      const y = scale(tick.value);
      return svg("g", { class: "tick" },
        svg("line", { x1: box.left, x2: box.left + box.width, y1: y, y2: y, stroke: GRID_COLOR }),
        svg("text", { x: box.left - 6, y, "text-anchor": "end", "dominant-baseline": "middle", fill: TEXT_COLOR, text: tick.text }));
    }),
    title ? svg("text", { class: "axis-title", transform: `translate(14 ${box.top + box.height / 2}) rotate(-90)`, "text-anchor": "middle",
      "dominant-baseline": "middle", fill: TEXT_COLOR, "font-size": 13, text: title }) : null);
}

/** A bottom axis: its line, ticks [{value, text}] placed by `scale` (their text thinned to fit), the title below. */
export function bottomAxis(box, scale, ticks, title, { grid = true } = {}) {
  const bottom = box.top + box.height;
  const shown = thinned(ticks.map((tick) => ({ ...tick, x: scale(tick.value) })));
  return svg("g", { class: "axis x-axis" },
    svg("line", { x1: box.left, x2: box.left + box.width, y1: bottom, y2: bottom, stroke: AXIS_COLOR }),
    ticks.map((tick) => {
      const x = scale(tick.value);
      return grid ? svg("line", { class: "grid", x1: x, x2: x, y1: box.top, y2: bottom, stroke: GRID_COLOR }) : null;
    }),
    shown.map((tick) => svg("text", { class: "tick", x: tick.x, y: bottom + 15, "text-anchor": "middle", fill: TEXT_COLOR, text: tick.text })),
    title ? svg("text", { class: "axis-title", x: box.left + box.width / 2, y: bottom + 36, "text-anchor": "middle", fill: TEXT_COLOR,
      "font-size": 13, text: title }) : null);
}

/** Every k-th of the labels (k as small as keeps 6 px between neighbours), so that none overlaps the next. */
export function thinned(labels, size = FONT_SIZE) {
  if (labels.length < 2) return labels;
  const widths = labels.map((label) => textWidth(label.text, size));
  for (let every = 1; every <= labels.length; every += 1) {
    let fits = true;
    for (let i = every; i < labels.length && fits; i += every) {
      fits = Math.abs(labels[i].x - labels[i - every].x) >= (widths[i] + widths[i - every]) / 2 + 6;
    }
    if (fits) return labels.filter((_, i) => i % every === 0);
  }
  return labels.slice(0, 1);
}

/** A readable text colour on a fill: white on dark colours, the text colour on light ones. */
export function textOn(fill) {
  const match = /^#([0-9a-f]{6})$/i.exec(fill || "");
  if (!match) return TEXT_COLOR;
  const value = Number.parseInt(match[1], 16);
  const [r, g, b] = [value >> 16, (value >> 8) & 255, value & 255];
  return 0.299 * r + 0.587 * g + 0.114 * b < 150 ? "#fff" : TEXT_COLOR;
}

/** A colour mixed towards white by `amount` (0..1): a child sector's shade of its parent's colour. */
export function lighter(color, amount) {
  const match = /^#([0-9a-f]{6})$/i.exec(color || "");
  if (!match) return color;
  const value = Number.parseInt(match[1], 16);
  const mix = (channel) => Math.round(channel + (255 - channel) * amount).toString(16).padStart(2, "0");
  return `#${mix(value >> 16)}${mix((value >> 8) & 255)}${mix(value & 255)}`;
}

/**
 * A chart's frame inside `container`: an optional HTML legend above, the plot's host below (its size is the
 * container's, less the legend), a tooltip and the download buttons. `draw(host, width, height)` is called
 * with the host's size when it is first laid out and again whenever its width or height changes (a
 * ResizeObserver: the chart is drawn before the frame that first shows it is painted). Returns the frame.
 */
export function mountChart(container, draw, { kind, legend = null, downloads = true, label = "" } = {}) {
  const host = el("div", { class: "chart-host" });
  const tooltip = el("div", { class: "chart-tooltip", role: "tooltip", hidden: true });
  const frame = el("div", { class: "chart-frame", "data-chart": kind, role: "figure", "aria-label": label || null },
    legend, host, tooltip, downloads ? downloadButtons(host) : null);
  container.replaceChildren(frame);
  container.classList.add("chart-drawn");
  let drawn = "";
  const redraw = () => {
    const width = host.clientWidth;
    const height = host.clientHeight;
    if (!width || !height || !host.isConnected) return;
    const size = `${width}x${height}`;
    if (size === drawn) return;
    drawn = size;
    hideTooltip(tooltip);
    draw(host, width, height);
  };
  sizes.observe(host, redraw);
  frame.tooltip = tooltip;
  frame.redraw = () => {
    drawn = "";
    redraw();
  };
  return frame;
}

/** One ResizeObserver for every chart host, each with its own callback. */
class SizeWatch {
  constructor() {
    this.callbacks = new WeakMap();
    this.observer = null;
  }

  observe(node, callback) {
    if (!this.observer) {
      this.observer = new ResizeObserver((entries) => {
        for (const entry of entries) this.callbacks.get(entry.target)?.();
      });
    }
    this.callbacks.set(node, callback);
    this.observer.observe(node);
  }
}

const sizes = new SizeWatch();

/** An <svg> of the host's size, in place of what the host held. */
export function svgRoot(host, width, height, label) {
  const root = svg("svg", { class: "chart-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": label || null, "font-family": FONT_FAMILY, "font-size": FONT_SIZE });
  host.replaceChildren(root);
  return root;
}

/** A clip path for the plot's box, with an id unique in the page; returns its url(#id). */
export function clipTo(root, box) {
  clipTo.count = (clipTo.count || 0) + 1;
  const id = `chart-clip-${clipTo.count}`;
  root.append(svg("defs", {}, svg("clipPath", { id }, svg("rect", { x: box.left, y: box.top, width: box.width, height: box.height }))));
  return `url(#${id})`;
}

/**
 * Show the tooltip of a chart's frame near the pointer: `lines` is [title, ...rows] (strings; the title bold),
 * `note` a muted last line. Placed inside the frame, away from its right and bottom edges.
 */
export function showTooltip(tooltip, event, lines, note = null) {
  if (!lines || !lines.length) {
    hideTooltip(tooltip);
    return;
  }
  const [title, ...rows] = lines;
  const shown = [el("strong", { text: title }), ...rows.map((row) => el("div", { text: row }))];
  if (note) shown.push(el("div", { class: "muted", text: note }));
  tooltip.replaceChildren(...shown);
  tooltip.hidden = false;
  const frame = tooltip.parentElement.getBoundingClientRect();
  const x = event.clientX - frame.left;
  const y = event.clientY - frame.top;
  const width = tooltip.offsetWidth;
  const height = tooltip.offsetHeight;
  const left = x + 14 + width > frame.width ? Math.max(0, x - 14 - width) : x + 14;
  const top = y + 14 + height > frame.height ? Math.max(0, y - 14 - height) : y + 14;
  tooltip.style.left = `${left}px`;
  tooltip.style.top = `${top}px`;
}

export function hideTooltip(tooltip) {
  tooltip.hidden = true;
}

/**
 * An HTML legend: one item per entry ({label, color, line?, dash?, key}). With `hidden` (a Set of keys), each item
 * is a button that hides or shows its series: it adds or removes its key, shows the state (aria-pressed false when
 * hidden) and calls onChange(). Returns the <ul>.
 */
export function chartLegend(entries, { hidden = null, onChange = () => {} } = {}) {
  return el("ul", { class: "chart-legend" }, entries.map((entry) => {
    const swatch = el("span", { class: `swatch${entry.line ? " line" : ""}`, style: entry.line
      ? { borderTopColor: entry.color, borderTopStyle: entry.dash ? "dotted" : "solid" }
      : { background: entry.color } });
    const label = el("span", { class: "legend-label", text: entry.label });
    if (!hidden) return el("li", {}, swatch, label);
    const button = el("button", { type: "button", class: "legend-toggle", "aria-pressed": String(!hidden.has(entry.key)),
      title: "Show or hide this series" }, swatch, label);
    button.addEventListener("click", () => {
      if (hidden.has(entry.key)) hidden.delete(entry.key);
      else hidden.add(entry.key);
      button.setAttribute("aria-pressed", String(!hidden.has(entry.key)));
      onChange();
    });
    return el("li", {}, button);
  }));
}

/** The SVG and PNG download buttons of a chart (shown when the pointer is over it or they have focus). */
function downloadButtons(host) {
  const save = (format) => {
    const root = host.querySelector("svg.chart-svg");
    if (root) downloadChart(root, format);
  };
  return el("div", { class: "chart-tools" },
    el("button", { type: "button", title: "Download this chart as SVG", onclick: () => save("svg") }, "SVG"),
    el("button", { type: "button", title: "Download this chart as PNG", onclick: () => save("png") }, "PNG"));
}

function imageName(format) {
  return `profscope-${document.body.dataset.page || "chart"}.${format}`;
}

/** The chart as a standalone SVG document (its fonts and a white background written in). */
export function standaloneSvg(root) {
  const copy = root.cloneNode(true);
  copy.setAttribute("xmlns", SVG_NS);
  copy.insertBefore(svg("rect", { width: "100%", height: "100%", fill: "#fff" }), copy.firstChild);
  return new XMLSerializer().serializeToString(copy);
}

function downloadChart(root, format) {
  const text = standaloneSvg(root);
  const svgBlob = new Blob([text], { type: "image/svg+xml" });
  if (format === "svg") {
    saveBlob(svgBlob, imageName("svg"));
    return;
  }
  const width = Number(root.getAttribute("width"));
  const height = Number(root.getAttribute("height"));
  const image = new Image();
  const url = URL.createObjectURL(svgBlob);
  image.onload = () => {
    const canvas = document.createElement("canvas");
    canvas.width = width * 2;
    canvas.height = height * 2;
    const context = canvas.getContext("2d");
    context.scale(2, 2);
    context.drawImage(image, 0, 0, width, height);
    URL.revokeObjectURL(url);
    canvas.toBlob((blob) => saveBlob(blob, imageName("png")), "image/png");
  };
  image.src = url;
}

function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a"); // a blob: URL, which el()'s href check would make inert
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** "M x y L x y ..." for points [[x, y], ...] (rounded to 0.1 px). */
export function pathOf(points) {
  let d = "";
  for (let i = 0; i < points.length; i += 1) d += `${i ? "L" : "M"}${round1(points[i][0])} ${round1(points[i][1])}`;
  return d;
}

export function round1(value) {
  return Math.round(value * 10) / 10;
}

/** The index of the last x <= value in sorted `xs` (-1 when every x is greater). */
export function lastAtOrBefore(xs, value) {
  let low = 0;
  let high = xs.length - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (xs[middle] <= value) {
      found = middle;
      low = middle + 1;
    } else high = middle - 1;
  }
  return found;
}
