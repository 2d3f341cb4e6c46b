// The pages' charts: donuts with their legends, bars of time per step, time axes (drawn by web/static/js/chart/,
// SVG made in the page: no charting library, no CDN).

import { drawBars } from "./chart/bars.js";
import { linearTicks } from "./chart/core.js";
import { drawDonut } from "./chart/pie.js";
import { OTHER_COLOR, PALETTE } from "./chart/palette.js";
import { clear, el } from "./dom.js";
import { middleEllipsis } from "./ellipsis.js";
import { fmtPctSign, fmtUs, timeUnit } from "./format.js";

/**
 * A donut with an HTML legend (names stay text nodes, long names are cut in the middle, with a tooltip).
 * slices: [{label, value, color?, key?}]; onSelect(slice) when a named slice is clicked.
 */
export function renderPie(
  container,
  { slices, onSelect = null, emptyText = "Nothing to show", unit = "\u00b5s", legend: withLegend = true },
) {
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
  drawDonut(chart, {
    slices: shown.map((slice, i) => ({
      value: slice.value,
      color: colors[i],
      clickable: Boolean(onSelect) && slice.key !== undefined,
      hover: [slice.label, `${fmtUs(slice.value)} ${unit} \u00b7 ${fmtPctSign((100 * slice.value) / total)}`],
    })),
    onClick: onSelect ? (index) => onSelect(shown[index]) : null,
    label: `Shares of ${fmtUs(total)} ${unit}`,
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
 * A time axis over µs data (for drawXY's x.axis): ticks read in the unit the range calls for ("606.5 ms",
 * "12 s", never "12M µs" or "606500 µs"), about six on round values of that unit; the unit in the title.
 */
export function timeAxis(title) {
  return (lowUs, highUs) => {
    const unit = timeUnit(Math.max(Math.abs(lowUs), Math.abs(highUs)));
    return { title: `${title} (${unit.label})`, ticks: linearTicks(lowUs, highUs, 6, { divisor: unit.divisor }) };
  };
}

/**
 * Stacked bars of time per step: one bar per step, one segment per category.
 * categories: [{key, label, color}] (keys of the step rows, in µs); totalKey: the step's whole time, for the
 * hover's share; onSelect(step) when a bar is clicked.
 */
export function renderStepBars(target, { steps, categories, totalKey, yLabel = "Time", onSelect = null }) {
  const unit = timeUnit(Math.max(...steps.map((s) => s[totalKey]), 0));
  drawBars(target, {
    categories: steps.map((s) => String(s.step)),
    series: categories.map((c) => ({
      name: c.label,
      color: c.color,
      values: steps.map((s) => (s[c.key] || 0) / unit.divisor),
      hover: (i) => [`${c.label}: ${fmtUs(steps[i][c.key] || 0)} \u00b5s (${fmtPctSign((100 * (steps[i][c.key] || 0)) / (steps[i][totalKey] || 1))})`],
      note: (i) => `step ${steps[i].step}`,
    })),
    valueTitle: `${yLabel} (${unit.label})`,
    categoryTitle: "Step",
    gap: steps.length < 4 ? 0.6 : 0.25,
    onClick: onSelect ? (index) => onSelect(steps[index]) : null,
    label: `${yLabel} per step, by category`,
  });
}
