// Paddle's summary table layout: "Total / Avg / Max / Min / Ratio(%)" per row, times in a chosen unit. The Paddle
// Summary page draws all its tables with it, and the Module page draws the Model Summary of a PyTorch trace with
// the same modelSummaryTable (docs/definitions.md §13, §14.4).

import { el } from "./dom.js";
import { DASH, fmtInt } from "./format.js";

export const UNITS = { s: 1e9, ms: 1e6, us: 1e3, ns: 1 };
export const UNIT_LABELS = { s: "s", ms: "ms", us: "\u00b5s", ns: "ns" };
export const STATS_HEADERS = ["CPU Total / Avg / Max / Min / Ratio(%)", "GPU Total / Avg / Max / Min / Ratio(%)"];

/** The unit a page's `unit` URL parameter names, "ms" by default. */
export const unitOf = (value) => (value in UNITS ? value : "ms");

export const timeIn = (ns, unit) => (ns === null || ns === undefined ? DASH : (ns / UNITS[unit]).toFixed(2));
export const ratio = (pct) => (pct === null || pct === undefined ? DASH : pct.toFixed(2));

/** "Total / Avg / Max / Min / Ratio(%)", as Paddle prints it; rows without that side show dashes. */
export function stats(s, unit) {
  if (!s) return "- / - / - / - / -";
  return [timeIn(s.total_ns, unit), timeIn(s.avg_ns, unit), timeIn(s.max_ns, unit), timeIn(s.min_ns, unit), ratio(s.ratio_pct)].join(" / ");
}

/** A table whose first column is a name indented by `depth`, the others numbers. */
export function summaryTable(testid, headers, rows) {
  return el(
    "table",
    { class: "data", "data-testid": testid },
    el("thead", {}, el("tr", {}, ...headers.map((h, i) => el("th", { class: i ? "num" : "", scope: "col", text: h })))),
    el(
      "tbody",
      {},
      ...rows.map(({ depth = 0, cells }) =>
        el("tr", {}, ...cells.map((c, i) => el("td", { class: i ? "num" : "name", style: i ? null : `padding-left: ${8 + depth * 18}px`, text: String(c) }))),
      ),
    ),
  );
}

/** Paddle's Model Summary: ProfileStep, its phases indented, and Others (total and ratio only). */
export function modelSummaryTable(model, unit, testid) {
  const rows = model.map((r) => ({
    depth: r.name === "ProfileStep" ? 0 : 1,
    cells: r.name === "Others"
      ? [r.name, "-", `${timeIn(r.cpu.total_ns, unit)} / - / - / - / ${ratio(r.cpu.ratio_pct)}`, `${timeIn(r.gpu.total_ns, unit)} / - / - / - / ${ratio(r.gpu.ratio_pct)}`]
      : [r.name, fmtInt(r.calls), stats(r.cpu, unit), stats(r.gpu, unit)],
  }));
  return summaryTable(testid, ["Name", "Calls", ...STATS_HEADERS], rows);
}

/** The "Time unit" select (s, ms, µs, ns). */
export function unitSelect(unit, onChange, testid) {
  const select = el("select", { "data-testid": testid, onchange: () => onChange(select.value) },
    Object.keys(UNITS).map((u) => el("option", { value: u, text: UNIT_LABELS[u] })));
  select.value = unit;
  return el("label", {}, "Time unit ", select);
}
