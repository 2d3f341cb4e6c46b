// Module view: model phases per step, the nn.Module tree (sortable, expand / collapse), an icicle of the
// hierarchy by device or host time, and the selected module's operators, kernels, trace and source links.
// Page state in the URL: expanded (module ids), module (the selected one), sort, metric, unit (Model Summary).

import { isAbort, loadView } from "../api.js";
import { drawPartition } from "../chart/partition.js";
import { PALETTE } from "../chart/palette.js";
import { renderStepBars } from "../charts.js";
import { byId, clear, el } from "../dom.js";
import { DASH, fmtInt, fmtPctSign, fmtUs } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { emptyState } from "../status.js";
import { modelSummaryTable, unitOf, unitSelect } from "../summary_tables.js";
import { sortRows } from "../table.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const PHASES = [
  { key: "dataloader", label: "Data loading", color: "#e15759" },
  { key: "forward", label: "Forward", color: "#4e79a7" },
  { key: "backward", label: "Backward", color: "#f28e2b" },
  { key: "optimizer", label: "Optimizer", color: "#59a14f" },
  { key: "other", label: "Other", color: "#bab0ac" },
];

const COLUMNS = [
  { key: "name", label: "Module" },
  { key: "type", label: "Type" },
  { key: "occurrences", label: "Occurrences", num: true, format: fmtInt },
  { key: "operators", label: "Operators", num: true, format: fmtInt, title: "Operator calls in the module and its submodules" },
  { key: "host_total_us", label: "Host Total (\u00b5s)", num: true, format: fmtUs },
  { key: "host_self_us", label: "Host Self (\u00b5s)", num: true, format: fmtUs, title: "Host total minus the submodules' host totals" },
  { key: "device_total_us", label: "Device Total (\u00b5s)", num: true, format: fmtUs, title: "Device time of what the module and its submodules launched" },
  { key: "device_self_us", label: "Device Self (\u00b5s)", num: true, format: fmtUs, title: "Device time launched outside the submodules" },
  { key: "backward_host_us", label: "Backward Host (\u00b5s)", num: true, format: fmtUs, title: "Host time of the backward ops of the module's forward ops (fwdbwd flows), and of recomputed forwards" },
  { key: "backward_device_us", label: "Backward Device (\u00b5s)", num: true, format: fmtUs, title: "Device time launched by those backward ops" },
];

const TWISTY_STYLE = { border: "none", background: "none", padding: "0 2px", minWidth: "14px", height: "auto", cursor: "pointer", color: "#5b6573" };

const params = readParams();
const state = {
  expanded: new Set((params.expanded || "").split(",").filter(Boolean).map(Number)),
  module: params.module === undefined || params.module === "" ? null : Number(params.module),
  sort: params.sort || "-host_total_us",
  metric: params.metric === "host" || params.metric === "device" ? params.metric : null,
  unit: unitOf(params.unit),
};

let selection = null;
let data = null;
let byIdMap = new Map();

function apiQuery() {
  return { run: selection.run, worker: selection.worker, span: selection.span };
}

function saveState() {
  updateUrl({
    expanded: [...state.expanded].sort((a, b) => a - b).join(","),
    module: state.module,
    sort: state.sort === "-host_total_us" ? null : state.sort,
    metric: state.metric,
    unit: state.unit === "ms" ? null : state.unit,
  });
}

function indexModules(rows, depth = 0) {
  for (const row of rows) {
    row.depth = depth;
    byIdMap.set(row.id, row);
    indexModules(row.children, depth + 1);
  }
}

function ancestors(row) {
  const found = [];
  for (let at = byIdMap.get(row.parent); at; at = byIdMap.get(at.parent)) found.push(at);
  return found;
}

// ---- phases ------------------------------------------------------------------------------------
function phasesPanel(phases) {
  if (!phases.applies) {
    return el("section", { class: "panel", "data-testid": "phases" }, el("h2", { text: "Model phases" }), el("p", { class: "muted", text: phases.reason }));
  }
  const chart = el("div", { class: "chart", "data-testid": "phases-chart" });
  const panel = el(
    "section",
    { class: "panel", "data-testid": "phases" },
    el("h2", {}, "Model phases", el("span", { class: "sub", text: "host time of each step by phase (each \u00b5s counted once)" })),
    el("div", { class: "grid", style: { gridTemplateColumns: "minmax(0, 3fr) minmax(0, 2fr)" } }, chart, el("div", {}, phasesTable(phases), stepsDetails(phases))),
    modelSummary(phases.model_summary),
  );
  requestAnimationFrame(() => drawPhases(chart, phases));
  return panel;
}

function drawPhases(target, phases) {
  const categories = PHASES.map((p) => ({ key: `${p.key}_us`, label: p.label, color: p.color }));
  renderStepBars(target, { steps: phases.steps, categories, totalKey: "host_us", yLabel: "Host time" });
}

function phasesTable(phases) {
  const average = phases.average;
  const cell = (value, total) => [el("td", { class: "num", text: fmtUs(value) }), el("td", { class: "num faint", text: total ? fmtPctSign((100 * value) / total) : DASH })];
  return el(
    "table",
    { class: "data compact", "data-testid": "phases-table" },
    el("thead", {}, el("tr", {}, el("th", { text: "Phase (average of steps)" }), el("th", { class: "num", text: "Host (\u00b5s)" }), el("th", { class: "num", text: "%" }),
      el("th", { class: "num", text: "Device (\u00b5s)" }), el("th", { class: "num", text: "%" }))),
    el(
      "tbody",
      {},
      PHASES.map((p) =>
        el("tr", {}, el("td", {}, el("span", { class: "swatch-inline", style: { background: p.color } }), p.label),
          cell(average[`${p.key}_us`], average.host_us), cell(average[`device_${p.key}_us`], average.device_busy_us)),
      ),
      el("tr", { class: "total" }, el("td", { text: "Step (device: busy)" }), cell(average.host_us, average.host_us), cell(average.device_busy_us, average.device_busy_us)),
    ),
  );
}

/** Paddle's Model Summary of the steps, drawn as on the Paddle Summary page (docs/definitions.md §14.4). */
function modelSummary(rows) {
  if (!rows.length) return null;
  const holder = el("div", { class: "table-scroll" });
  const draw = () => clear(holder, modelSummaryTable(rows, state.unit, "model-summary"));
  draw();
  return el("div", { "data-testid": "model-summary-panel" },
    el("div", { class: "card-title" },
      el("h3", {}, "Model Summary", el("span", { class: "sub", style: { marginLeft: "8px" }, text: "the phases as Paddle's profiler prints them; ratios of the steps' host time (CPU) and device busy time (GPU)" })),
      unitSelect(state.unit, (unit) => { state.unit = unit; saveState(); draw(); }, "model-summary-unit")),
    holder);
}

function stepsDetails(phases) {
  const keys = [...PHASES.map((p) => [`${p.key}_us`, p.label]), ...PHASES.slice(1, 4).map((p) => [`device_${p.key}_us`, `Device ${p.label.toLowerCase()}`])];
  return el(
    "details",
    { class: "steps-details" },
    el("summary", { text: `Per-step numbers (${phases.steps.length} step${phases.steps.length === 1 ? "" : "s"}, \u00b5s)` }),
    el("div", { class: "table-scroll" }, el("table", { class: "data compact", "data-testid": "phases-steps" },
      el("thead", {}, el("tr", {}, el("th", { text: "Step" }), el("th", { class: "num", text: "Step" }), keys.map(([, label]) => el("th", { class: "num", text: label })))),
      el("tbody", {}, phases.steps.map((s) => el("tr", {}, el("td", { text: s.step }), el("td", { class: "num", text: fmtUs(s.host_us) }),
        keys.map(([key]) => el("td", { class: "num", text: fmtUs(s[key]) }))))))),
  );
}

// ---- tree table --------------------------------------------------------------------------------
function treeRows(rows, out = []) {
  for (const row of sortRows(rows, state.sort)) {
    out.push(row);
    if (state.expanded.has(row.id)) treeRows(row.children, out);
  }
  return out;
}

function toggle(row) {
  if (state.expanded.has(row.id)) state.expanded.delete(row.id);
  else state.expanded.add(row.id);
  saveState();
  renderTree();
}

function select(id, { scroll = false } = {}) {
  const row = byIdMap.get(id);
  if (!row) return;
  state.module = id;
  for (const up of ancestors(row)) state.expanded.add(up.id);
  saveState();
  renderTree();
  renderDetail();
  if (scroll) byId("module-detail")?.scrollIntoView({ block: "nearest" });
}

function renderTree() {
  const sortKey = state.sort.replace(/^-/, "");
  const descending = state.sort.startsWith("-");
  const head = el(
    "tr",
    {},
    COLUMNS.map((col) =>
      el(
        "th",
        {
          class: ["sortable", col.num ? "num" : ""].join(" ").trim(),
          title: col.title || null,
          "data-key": col.key,
          "aria-sort": col.key === sortKey ? (descending ? "descending" : "ascending") : "none",
          onclick: () => {
            state.sort = col.key === sortKey ? (descending ? col.key : `-${col.key}`) : col.num ? `-${col.key}` : col.key;
            saveState();
            renderTree();
          },
        },
        col.label,
        el("span", { class: "arrow", text: col.key === sortKey ? (descending ? "\u25bc" : "\u25b2") : "" }),
      ),
    ),
  );
  const body = treeRows(data.modules).map((row) => {
    const open = state.expanded.has(row.id);
    const twisty = row.children.length
      ? el("button", { type: "button", class: "twisty-button", style: TWISTY_STYLE, "data-testid": `toggle-${row.id}`, "aria-expanded": String(open), title: open ? "Collapse" : "Expand",
          onclick: (event) => { event.stopPropagation(); toggle(row); } }, open ? "\u25be" : "\u25b8")
      : el("span", { class: "twisty-button leaf", style: { ...TWISTY_STYLE, visibility: "hidden" } }, "\u25b8");
    return el(
      "tr",
      { class: row.id === state.module ? "expanded" : null, "data-testid": "module-row", "data-id": String(row.id), style: { cursor: "pointer" }, onclick: () => select(row.id) },
      COLUMNS.map((col) => {
        if (col.key === "name") {
          return el("td", { class: "name", title: row.name, style: { paddingLeft: `${8 + 16 * row.depth}px` } }, twisty, " ", row.name,
            row.recomputations ? el("span", { class: "faint", title: "Recomputed during backward (activation checkpointing)", text: ` \u21bb${row.recomputations}` }) : null);
        }
        return el("td", { class: col.num ? "num" : null }, col.format ? col.format(row[col.key]) : row[col.key]);
      }),
    );
  });
  clear(byId("module-tree"), el("div", { class: "table-scroll" }, el("table", { class: "data", "data-testid": "module-tree-table" }, el("thead", {}, head), el("tbody", {}, body))));
}

// ---- icicle -------------------------------------------------------------------------------------
function metric() {
  if (state.metric) return state.metric;
  return data.modules.some((m) => m.device_total_us > 0) ? "device" : "host";
}

function renderIcicle() {
  const chosen = metric();
  const rows = [...byIdMap.values()];
  const selfKey = chosen === "device" ? "device_self_us" : "host_self_us";
  const totalKey = chosen === "device" ? "device_total_us" : "host_total_us";
  const target = byId("icicle");
  clear(byId("metric-switch"),
    ["device", "host"].map((m) => el("button", { type: "button", "aria-pressed": String(m === chosen), "data-testid": `metric-${m}`,
      onclick: () => { state.metric = m; saveState(); renderIcicle(); } }, m === "device" ? "Device time" : "Host time")));
  if (!rows.some((r) => r[totalKey] > 0)) {
    clear(target, emptyState(`No ${chosen} time recorded in modules.`));
    return;
  }
  drawPartition(target, {
    kind: "icicle",
    nodes: {
      ids: rows.map((r) => String(r.id)),
      labels: rows.map((r) => r.name),
      parents: rows.map((r) => (r.parent >= 0 ? String(r.parent) : "")),
      values: rows.map((r) => Math.max(r[selfKey], 0)),
    },
    branchvalues: "remainder",
    colors: rows.map((r) => PALETTE[Math.abs(hash(r.type)) % PALETTE.length]),
    hover: (i) => [`${rows[i].name} (${rows[i].type})`, `${fmtUs(rows[i][totalKey])} \u00b5s total`],
    onClick: (i) => select(rows[i].id, { scroll: true }), // selects the module (no zoom)
    label: `Modules by ${chosen} time`,
  });
}

function hash(text) {
  let value = 0;
  for (const char of String(text)) value = (value * 31 + char.charCodeAt(0)) | 0;
  return value;
}

// ---- detail ------------------------------------------------------------------------------------
function traceLink(row) {
  const first = row.first;
  const margin = Math.max(first.dur_us * 0.05, 1);
  return withQuery("/trace", {
    run: selection.run,
    worker: selection.worker,
    span: selection.span,
    start_us: Math.max(first.ts_us - margin, 0),
    end_us: first.ts_us + first.dur_us + margin,
    slice: first.event,
    slice_worker: selection.worker,
    slice_span: selection.span,
  });
}

function pageLink(page, name) {
  return withQuery(`/${page}`, { ...apiQuery(), module: page === "operators" ? state.module : null, search: name });
}

function namedTable(testid, rows, columns, page) {
  if (!rows.length) return el("p", { class: "muted", text: "None." });
  return el(
    "table",
    { class: "data compact", "data-testid": testid },
    el("thead", {}, el("tr", {}, el("th", { text: "Name" }), el("th", { class: "num", text: "Calls" }), columns.map(([, label]) => el("th", { class: "num", text: label })))),
    el("tbody", {}, rows.map((r) => el("tr", {},
      el("td", { class: "name", title: r.name }, el("a", { href: pageLink(page, r.name), text: r.name })),
      el("td", { class: "num", text: fmtInt(r.calls) }),
      columns.map(([key]) => el("td", { class: "num", text: fmtUs(r[key]) }))))),
  );
}

function renderDetail() {
  const target = byId("module-detail");
  const row = byIdMap.get(state.module);
  if (!row) {
    clear(target, el("p", { class: "muted", text: "Click a module in the table or the icicle to see its operators and kernels." }));
    return;
  }
  const path = [...ancestors(row).reverse(), row].map((r) => r.name).join(" \u203a ");
  const frame = row.frame;
  clear(
    target,
    el("h2", { "data-testid": "module-detail-name" }, row.name, el("span", { class: "sub", text: `${row.type} \u00b7 ${path}` })),
    el("p", { class: "view-links" },
      el("a", { href: traceLink(row), "data-testid": "module-trace-link", text: "Trace view at its first occurrence" }),
      " \u00b7 ",
      frame && frame.href ? el("a", { href: frame.href, "data-testid": "module-source-link", title: frame.text, text: `Source: ${frame.path}:${frame.line}` }) : el("span", { text: frame ? `Source: ${frame.text}` : "No source frame" }),
      frame && frame.external ? [" \u00b7 ", el("a", { href: frame.external, text: "open externally" })] : null,
      " \u00b7 ",
      el("a", { href: withQuery("/operators", { ...apiQuery(), module: row.id }), "data-testid": "module-operators-link",
        title: "The Operator view of the calls of this module and its submodules, forward and backward", text: "Operators of this module" }),
    ),
    el("div", { class: "grid", style: { gridTemplateColumns: "repeat(auto-fit, minmax(380px, 1fr))" } },
      el("div", {}, el("h3", { text: "Top operators (module and submodules)" }),
        namedTable("module-operators", row.top_operators, [["host_us", "Host (\u00b5s)"], ["device_us", "Device (\u00b5s)"]], "operators")),
      el("div", {}, el("h3", { text: "Top kernels (module and submodules)" }),
        namedTable("module-kernels", row.top_kernels, [["device_us", "Device (\u00b5s)"]], "kernels")),
    ),
  );
}

// ---- page --------------------------------------------------------------------------------------
function renderNoModules() {
  return el("section", { class: "panel", "data-testid": "no-modules" },
    emptyState("No module information in this trace", data.reason,
      el("code", { text: "torch.profiler.profile(activities=[...], with_stack=True, with_modules=True)" })));
}

function render() {
  byIdMap = new Map();
  indexModules(data.modules);
  const selected = byIdMap.get(state.module);
  if (selected) for (const up of ancestors(selected)) state.expanded.add(up.id);
  const root = byId("modules");
  const parts = [];
  if (!data.applies) parts.push(renderNoModules());
  else {
    parts.push(
      el("section", { class: "panel" },
        el("h2", {}, "Modules", el("span", { class: "sub", text: data.source === "lightning" ? "from PyTorch Lightning [pl][module] events" : "nn.Module calls, backward attached through fwdbwd flows" })),
        el("div", { id: "module-tree" })),
      el("section", { class: "panel" },
        el("div", { class: "card-title" }, el("h2", { text: "Module hierarchy" }), el("div", { id: "metric-switch", class: "segmented" })),
        el("div", { id: "icicle", class: "chart", "data-testid": "icicle", style: { height: "380px" } })),
      el("section", { class: "panel", id: "module-detail", "data-testid": "module-detail" }),
    );
  }
  parts.push(phasesPanel(data.phases));
  clear(root, parts);
  if (!data.applies) return;
  renderTree();
  renderIcicle();
  renderDetail();
}

async function main() {
  selection = await initSelector("modules", byId("status"));
  if (!selection) return;
  const url = withQuery("/api/modules", apiQuery());
  setJsonLink(url);
  try {
    data = await loadView(url, { statusEl: byId("status") });
  } catch (error) {
    if (!isAbort(error)) showViewError(byId("status"), error, selection);
    return;
  }
  render();
}

main();
