// plotly.js helpers (loaded on demand from /static/vendor/plotly.min.js as window.Plotly: a partial bundle of
// the trace types the pages draw, scripts/build_plotly_bundle.sh; no CDN).

import { clear, el } from "./dom.js";
import { middleEllipsis } from "./ellipsis.js";
import { decimalFormat, fmtPctSign, fmtUs, timeUnit } from "./format.js";

// Tableau 20: distinguishable, restrained.
export const PALETTE = [
  "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
  "#a0cbe8", "#ffbe7d", "#ff9d9a", "#86bcb6", "#8cd17d", "#f1ce63", "#d4a6c8", "#fabfd2", "#d7b5a6", "#79706e",
];
export const OTHER_COLOR = "#d5d9df";

export const FONT = {
  family: 'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "Noto Sans", Arial, sans-serif',
  size: 12,
  color: "#1d232b",
};

const PLOTLY_SRC = "/static/vendor/plotly.min.js";

/** A modebar button that saves the chart as SVG (plotly's own camera button saves PNG). */
const SVG_BUTTON = {
  name: "Download as SVG",
  icon: {
    width: 1000,
    height: 1000,
    path: "M500 50 L500 650 M300 450 L500 650 L700 450 M150 750 L150 900 L850 900 L850 750",
    transform: "matrix(1 0 0 1 0 0)",
  },
  click: (gd) => window.Plotly.downloadImage(gd, { format: "svg", filename: imageName() }),
};

function imageName() {
  return `profscope-${document.body.dataset.page || "chart"}`;
}

export const PLOT_CONFIG = {
  displaylogo: false,
  responsive: true,
  modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "toggleSpikelines", "sendChartToCloud"],
  modeBarButtonsToAdd: [SVG_BUTTON],
  toImageButtonOptions: { filename: imageName() },
};

/** For small charts (pies, sunbursts, bars without zoom): the modebar holds only the PNG and SVG downloads. */
export const SMALL_PLOT_CONFIG = {
  displaylogo: false,
  responsive: true,
  modeBarButtons: [["toImage", SVG_BUTTON]],
  toImageButtonOptions: { filename: imageName() },
};

/**
 * plotly.js (1.3 MB) is fetched and parsed only when the first chart is drawn, after the page's
 * numbers and tables are on screen; the script element is the single source of truth of the load.
 */
export function loadPlotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  let script = document.querySelector("script[data-plotly]");
  if (!script) {
    script = document.createElement("script");
    script.src = PLOTLY_SRC;
    script.async = true;
    script.dataset.plotly = "";
    afterNextPaint(() => document.head.append(script));
  }
  return new Promise((resolve, reject) => {
    script.addEventListener("load", () => resolve(window.Plotly), { once: true });
    script.addEventListener("error", () => reject(new Error(`plotly.js did not load (${PLOTLY_SRC})`)), { once: true });
  });
}

/**
 * Run `action` once the page has painted what it holds now: a page renders its numbers and tables, then
 * asks for its first chart in the same task; executing plotly.js (~0.2 s) right then would hold that
 * frame back, so the content would show no sooner than the charts. (A hidden tab paints no frame: the
 * timeout starts the load anyway.)
 */
function afterNextPaint(action) {
  let done = false;
  const once = () => {
    if (!done) {
      done = true;
      action();
    }
  };
  requestAnimationFrame(() => setTimeout(once, 0)); // after the frame the callback precedes is painted
  setTimeout(once, 1000);
}

/** Draw into `target` once plotly.js is loaded: draw(Plotly); skipped when the page replaced `target` meanwhile. */
export function drawChart(target, draw) {
  return loadPlotly().then(
    (Plotly) => {
      if (target.isConnected) draw(Plotly);
    },
    (error) => clear(target, el("div", { class: "pie-empty", role: "alert", text: error.message })),
  );
}

/** plotly renders a small HTML subset in text; entity-escape names so `<` `>` `&` show as typed. */
export function plotText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** Escaped, wrapped into short lines so the hover box fits a small chart. */
export function wrapForHover(text, width = 28, maxLines = 3) {
  const value = String(text);
  const lines = [];
  for (let i = 0; i < value.length && lines.length < maxLines; i += width) lines.push(value.slice(i, i + width));
  if (lines.join("").length < value.length) lines[lines.length - 1] = `${lines[lines.length - 1].slice(0, -1)}\u2026`;
  return lines.map(plotText).join("<br>");
}

export function purgeCharts(container) {
  if (!window.Plotly) return;
  for (const node of container.querySelectorAll(".js-plotly-plot")) window.Plotly.purge(node);
}

/**
 * A donut with an HTML legend (names stay text nodes, long names are cut in the middle, with a tooltip).
 * slices: [{label, value, color?, key?}]; onSelect(slice) when a named slice is clicked.
 */
export function renderPie(
  container,
  { slices, onSelect = null, emptyText = "Nothing to show", unit = "\u00b5s", legend: withLegend = true },
) {
  purgeCharts(container);
  const shown = slices.filter((s) => s.value > 0);
  if (!shown.length) {
    clear(container, el("div", { class: "pie-empty", "data-testid": "pie-empty", text: emptyText }));
    return;
  }
  const total = shown.reduce((sum, s) => sum + s.value, 0);
  const colors = shown.map((s, i) => s.color || PALETTE[i % PALETTE.length]);
  const chart = el("div", { class: withLegend ? "chart pie" : "chart pie wide" });
  const legend = withLegend && el(
    "ul",
    { class: "legend" },
    shown.map((slice, i) =>
      el(
        "li",
        {
          class: onSelect && slice.key !== undefined ? "clickable" : null,
          title: `${slice.label}\n${fmtUs(slice.value)} ${unit} (${fmtPctSign((100 * slice.value) / total)})`,
          onclick: onSelect && slice.key !== undefined ? () => onSelect(slice) : null,
        },
        el("span", { class: "swatch", style: { background: colors[i] } }),
        middleEllipsis(slice.label, { cls: "label" }),
        el("span", { class: "value", text: fmtUs(slice.value) }),
        el("span", { class: "share", text: fmtPctSign((100 * slice.value) / total) }),
      ),
    ),
  );
  clear(container, el("div", { class: "pie-body" }, chart, legend));
  const trace = {
    type: "pie",
    values: shown.map((s) => s.value),
    labels: shown.map((_, i) => String(i)), // unique ids: plotly would merge slices with equal labels
    customdata: shown.map((s) => wrapForHover(s.label)),
    marker: { colors, line: { color: "#fff", width: 1 } },
    sort: false,
    direction: "clockwise",
    hole: 0.45,
    textinfo: "percent",
    textposition: "inside",
    hovertemplate: `%{customdata}<br>%{value:,.0f} ${unit} \u00b7 %{percent}<extra></extra>`,
    showlegend: false,
  };
  const layout = {
    font: FONT,
    margin: { l: 4, r: 4, t: 4, b: 4 },
    paper_bgcolor: "rgba(0,0,0,0)",
    uniformtext: { minsize: 9, mode: "hide" },
    hoverlabel: { font: { family: FONT.family, size: 11 }, align: "left" },
  };
  drawChart(chart, (Plotly) => {
    Plotly.newPlot(chart, [trace], layout, SMALL_PLOT_CONFIG);
    if (onSelect) {
      chart.on("plotly_click", (event) => {
        const slice = shown[event.points?.[0]?.pointNumber];
        if (slice && slice.key !== undefined) onSelect(slice);
      });
    }
  });
}

/** Top `n` rows by `metric` as pie slices, plus one "Other" slice for the rest when `withOther`. */
export function topSlices(rows, metric, n, { label, key, withOther = false }) {
  const positive = rows.filter((r) => (r[metric] || 0) > 0).sort((a, b) => b[metric] - a[metric]);
  const slices = positive.slice(0, n).map((r) => ({ label: label(r), value: r[metric], key: key(r) }));
  const rest = positive.slice(n);
  if (withOther && rest.length) {
    slices.push({
      label: `Other (${rest.length})`,
      value: rest.reduce((sum, r) => sum + r[metric], 0),
      color: OTHER_COLOR,
    });
  }
  return slices;
}

/**
 * A plotly x axis over µs data whose ticks read in the unit the range calls for ("606.5 ms",
 * "12 s", never "12M µs" or "606500 µs"); about six ticks on round values of that unit.
 */
export function timeAxis([lowUs, highUs], title) {
  const unit = timeUnit(Math.max(Math.abs(lowUs), Math.abs(highUs)));
  const low = lowUs / unit.divisor;
  const high = highUs / unit.divisor;
  const rough = Math.max(high - low, 1e-9) / 6;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((candidate) => candidate >= rough);
  const digits = Math.max(0, -Math.floor(Math.log10(step)) + (step / magnitude === 2.5 ? 1 : 0));
  const format = decimalFormat(0, digits);
  const tickvals = [];
  const ticktext = [];
  for (let i = Math.ceil(low / step); i * step <= high + step * 1e-9; i += 1) {
    const value = Number((i * step).toPrecision(12));
    tickvals.push(value * unit.divisor);
    ticktext.push(format.format(value));
  }
  return { title: { text: `${title} (${unit.label})` }, tickmode: "array", tickvals, ticktext, zeroline: false };
}

/**
 * Stacked bars of time per step: one bar per step, one segment per category.
 * categories: [{key, label, color}] (keys of the step rows, in µs); totalKey: the step's whole time, for the
 * hover's share; onSelect(step) when a bar is clicked.
 */
export function renderStepBars(target, { steps, categories, totalKey, yLabel = "Time", onSelect = null }) {
  const unit = timeUnit(Math.max(...steps.map((s) => s[totalKey]), 0));
  const x = steps.map((s) => String(s.step));
  const traces = categories.map((c) => ({
    type: "bar",
    name: c.label,
    x,
    y: steps.map((s) => (s[c.key] || 0) / unit.divisor),
    customdata: steps.map((s) => [fmtUs(s[c.key] || 0), fmtPctSign((100 * (s[c.key] || 0)) / (s[totalKey] || 1))]),
    marker: { color: c.color },
    hovertemplate: `${plotText(c.label)}: %{customdata[0]} \u00b5s (%{customdata[1]})<extra>step %{x}</extra>`,
  }));
  const layout = {
    barmode: "stack",
    font: FONT,
    margin: { l: 56, r: 8, t: 8, b: 44 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    xaxis: { type: "category", title: { text: "Step" }, tickfont: { size: 11 } },
    yaxis: { title: { text: `${yLabel} (${unit.label})` }, gridcolor: "#eceef1", rangemode: "tozero", tickformat: ",~r" },
    legend: { orientation: "h", traceorder: "normal", y: 1.0, yanchor: "bottom", x: 0, font: { size: 11 } },
    hovermode: "closest",
    bargap: steps.length < 4 ? 0.6 : 0.25,
  };
  drawChart(target, (Plotly) => {
    Plotly.newPlot(target, traces, layout, PLOT_CONFIG);
    if (onSelect) {
      target.on("plotly_click", (event) => {
        const step = steps[event.points?.[0]?.pointIndex];
        if (step) onSelect(step);
      });
    }
  });
}
