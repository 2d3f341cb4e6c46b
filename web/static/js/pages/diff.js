// Diff view: a baseline trace against the target (the trace of the selector bar). Step time as a waterfall
// and a table, operators and kernels compared, the call tree walked level by level, per-rank deltas.
// Every bit of state is in the URL under the API's parameter names (run / worker / span for the target,
// base_run / base_worker / base_span, group_by, kernel_group_by, tree_path repeated per level).

import { isAbort, loadView } from "../api.js";
import { drawBars } from "../chart/bars.js";
import { byId, clear, debounce, el } from "../dom.js";
import { DASH, fmtInt, fmtPct, fmtUs } from "../format.js";
import { initSelector, setJsonLink } from "../selector.js";
import { emptyState, errorBox } from "../status.js";
import { renderTable, sortRows } from "../table.js";
import { updateUrl } from "../urlstate.js";

const CATEGORIES = [
  ["kernel_us", "Kernel"], ["memcpy_us", "Memcpy"], ["memset_us", "Memset"], ["communication_us", "Communication"],
  ["runtime_us", "Runtime"], ["dataloader_us", "DataLoader"], ["cpu_exec_us", "CPU Exec"], ["other_us", "Other"],
];
const GPU_METRICS = [
  ["utilization_pct", "GPU Utilization (%)"], ["est_sm_efficiency_pct", "Est. SM Efficiency (%)"],
  ["est_achieved_occupancy_pct", "Est. Achieved Occupancy (%)"], ["tensor_cores_pct", "Tensor Cores (%)"],
];
const RANK_METRICS = [
  ["computation_us", "Computation"], ["overlapping_us", "Overlapping"], ["communication_us", "Communication"],
  ["synchronizing_us", "Synchronizing"], ["data_transfer_us", "Data Transfer"], ["other_us", "Other"],
];
const STATUS_TITLES = { added: "Only in the target", removed: "Only in the baseline", same: "Equal calls, within 1%" };

const params = new URLSearchParams(location.search);
const state = {
  base: { run: params.get("base_run"), worker: params.get("base_worker"), span: params.get("base_span") },
  groupBy: params.get("group_by") === "operator_input_shape" ? "operator_input_shape" : "operator",
  kernelGroupBy: params.get("kernel_group_by") === "kernel_op" ? "kernel_op" : "kernel",
  treePath: params.getAll("tree_path"),
  search: params.get("search") || "",
  sort: params.get("sort") || null,
  kernelsSort: params.get("kernels_sort") || null,
};
let selection = null;
let controller = null;
let body = null;

// ---- URL ----------------------------------------------------------------------------------------
function apiQuery() {
  const query = new URLSearchParams({ run: selection.run, worker: selection.worker, span: selection.span });
  for (const [key, value] of Object.entries({ base_run: state.base.run, base_worker: state.base.worker,
    base_span: state.base.span, group_by: state.groupBy, kernel_group_by: state.kernelGroupBy })) {
    if (value) query.set(key, value);
  }
  for (const name of state.treePath) query.append("tree_path", name);
  return query;
}

/** Write the tree path (one tree_path per level) into the URL; a new level is a history entry. */
function writeTreePath(push) {
  const url = new URL(location.href);
  url.searchParams.delete("tree_path");
  for (const name of state.treePath) url.searchParams.append("tree_path", name);
  if (url.href === location.href) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
}

// ---- baseline picker ----------------------------------------------------------------------------
function picker(id, label, options, current, onChange) {
  const node = el("select", { id, "aria-label": `Baseline ${label.toLowerCase()}`, onchange: (e) => onChange(e.target.value) });
  if (!current) node.append(el("option", { value: "", selected: true, disabled: true, text: "choose\u2026" }));
  for (const value of options) node.append(el("option", { value, selected: value === current, text: value }));
  return el("label", {}, label, node);
}

/** A baseline run without worker / span means its first ones (as the API reads it): written into the URL. */
function fillBaseDefaults(runs) {
  const run = runs.find((r) => r.run === state.base.run);
  if (!run) return;
  const worker = run.workers.find((w) => w.worker === state.base.worker) || run.workers[0];
  state.base.worker = worker.worker;
  if (!worker.spans.includes(state.base.span)) state.base.span = worker.spans[0];
  updateUrl({ base_worker: state.base.worker, base_span: state.base.span });
}

function renderBasePicker() {
  const runs = selection.runs.filter((r) => (r.workers || []).length);
  fillBaseDefaults(runs);
  const run = runs.find((r) => r.run === state.base.run);
  const workers = run ? run.workers : [];
  const worker = workers.find((w) => w.worker === state.base.worker);
  const choose = (changes) => {
    Object.assign(state.base, changes);
    state.treePath = [];
    updateUrl({ base_run: state.base.run, base_worker: state.base.worker, base_span: state.base.span });
    writeTreePath(false);
    renderBasePicker();
    load();
  };
  clear(
    byId("base-selector"),
    picker("base-run", "Run", runs.map((r) => r.run), state.base.run, (value) => {
      const first = runs.find((r) => r.run === value).workers[0];
      choose({ run: value, worker: first.worker, span: first.spans[0] });
    }),
    picker("base-worker", "Worker", workers.map((w) => w.worker), state.base.worker, (value) => {
      choose({ worker: value, span: workers.find((w) => w.worker === value).spans[0] });
    }),
    picker("base-span", "Span", worker ? worker.spans : [], state.base.span, (value) => choose({ span: value })),
    el("button", { type: "button", id: "swap", title: "Make the baseline the target and the target the baseline",
      text: "Swap", disabled: !state.base.run, onclick: swapSides }),
  );
  byId("diff-sides").hidden = false;
}

function swapSides() {
  const url = new URL(location.href);
  const target = { run: selection.run, worker: selection.worker, span: selection.span };
  for (const key of ["run", "worker", "span"]) {
    url.searchParams.set(key, state.base[key]);
    url.searchParams.set(`base_${key}`, target[key]);
  }
  url.searchParams.delete("tree_path");
  location.assign(url);
}

// ---- rendering ----------------------------------------------------------------------------------
const signed = (value) => (value === null || value === undefined ? DASH : `${value > 0 ? "+" : ""}${fmtUs(value)}`);
const ratio = (value) => (value === null || value === undefined ? DASH : `\u00d7${value.toFixed(2)}`);

function statusBadge(status) {
  return el("span", { class: `badge diff-${status}`, title: STATUS_TITLES[status] || "Calls or time changed", text: status });
}

function panel(title, sub, ...children) {
  return el("section", { class: "panel" }, el("h2", {}, title, sub ? el("span", { class: "sub", text: sub }) : null), ...children);
}

/** The baseline step, each category's change stacked on where the last one ended, the target step. */
function renderWaterfall(container, steps) {
  const labels = ["Baseline step", ...CATEGORIES.map(([, label]) => label), "Target step"];
  const values = [steps.base.total_us, ...CATEGORIES.map(([key]) => steps.delta[key]), steps.target.total_us];
  const last = values.length - 1;
  const bases = [];
  let level = 0;
  values.forEach((value, i) => {
    bases.push(i === 0 || i === last ? 0 : level);
    level = i === 0 ? value : level + value;
  });
  const texts = values.map((v, i) => (i === 0 || i === last ? fmtUs(v) : signed(v)));
  drawBars(container, {
    categories: labels,
    series: [{
      name: "Average step",
      colors: values.map((v, i) => (i === 0 || i === last ? "#4e79a7" : v >= 0 ? "#e15759" : "#59a14f")),
      values,
      bases,
      text: (i) => texts[i],
      hover: (i) => [`${labels[i]}: ${texts[i]} \u00b5s`],
    }],
    mode: "overlay",
    valueTitle: "Average step (\u00b5s)",
    legend: false,
    connect: true,
    label: "Average step, baseline to target, by category",
  });
}

function stepTable(steps) {
  const rows = [["total_us", "Step total"], ...CATEGORIES].map(([key, label]) => ({
    category: label, base: steps.base[key], target: steps.target[key], delta: steps.delta[key],
  }));
  const table = el("div");
  renderTable(table, {
    rows, sort: null, onSort: () => {}, testid: "diff-steps-table",
    columns: [
      { key: "category", label: "Category", cls: "name" },
      { key: "base", label: `Baseline (\u00b5s, ${steps.base_steps} steps)`, num: true, format: fmtUs },
      { key: "target", label: `Target (\u00b5s, ${steps.target_steps} steps)`, num: true, format: fmtUs },
      { key: "delta", label: "Delta (\u00b5s)", num: true, format: signed },
    ],
  });
  return table;
}

function gpuTable(gpus) {
  const rows = [];
  for (const [side, label] of [["base", "Baseline"], ["target", "Target"]]) {
    for (const gpu of gpus[side]) rows.push({ side: label, ...gpu });
  }
  if (!rows.length) return el("p", { class: "muted", text: "Neither side ran GPU kernels." });
  const table = el("div");
  renderTable(table, {
    rows, sort: null, onSort: () => {}, testid: "diff-gpu-table",
    columns: [
      { key: "side", label: "Side", cls: "name" }, { key: "device", label: "GPU", num: true, format: fmtInt },
      ...GPU_METRICS.map(([key, label]) => ({ key, label, num: true, format: fmtPct })),
    ],
  });
  return table;
}

function sideColumns(prefix, label, format = fmtUs) {
  return [
    { key: `base_${prefix}`, label: `Base ${label}`, num: true, format },
    { key: `target_${prefix}`, label: `Target ${label}`, num: true, format },
  ];
}

const CHANGE_COLUMNS = [
  { key: "delta_us", label: "Delta (\u00b5s)", num: true, format: signed },
  { key: "ratio", label: "Ratio", num: true, format: ratio },
  { key: "status", label: "Status", format: statusBadge },
];

function operatorColumns() {
  return [
    { key: "name", label: "Operator", cls: "name" },
    state.groupBy === "operator_input_shape" ? { key: "input_shape", label: "Input Shape", cls: "shape" } : null,
    ...sideColumns("calls", "Calls", fmtInt),
    ...sideColumns("device_self_us", "Device Self (\u00b5s)"),
    ...sideColumns("device_total_us", "Device Total (\u00b5s)"),
    ...sideColumns("host_self_us", "Host Self (\u00b5s)"),
    ...sideColumns("host_total_us", "Host Total (\u00b5s)"),
    ...CHANGE_COLUMNS,
  ].filter(Boolean);
}

function kernelColumns() {
  return [
    { key: "name", label: "Kernel", cls: "name" },
    state.kernelGroupBy === "kernel_op" ? { key: "operator", label: "Launching Operator", cls: "op" } : null,
    ...sideColumns("calls", "Calls", fmtInt),
    ...sideColumns("total_us", "Total (\u00b5s)"),
    ...CHANGE_COLUMNS,
  ].filter(Boolean);
}

function segmented(id, label, choices, current, onChange) {
  return el(
    "div",
    { class: "segmented", role: "group", "aria-label": label, id },
    choices.map(([value, text]) =>
      el("button", { type: "button", "data-value": value, "aria-pressed": String(value === current), text,
        onclick: () => value !== current && onChange(value) }),
    ),
  );
}

function searched(rows) {
  const needle = state.search.toLowerCase();
  if (!needle) return rows;
  return rows.filter((r) => r.name.toLowerCase().includes(needle) || String(r.operator || "").toLowerCase().includes(needle));
}

// The URL parameter of each table's sort (docs/ARCHITECTURE.md, "Parameter names")
const SORT_PARAMS = { sort: "sort", kernelsSort: "kernels_sort" };

function renderComparisonTable(target, { rows, sortKey, columns, testid, empty }) {
  const sort = state[sortKey];
  const shown = sortRows(searched(rows), sort);
  if (!shown.length) {
    clear(target, emptyState(state.search ? `Nothing matches \u201c${state.search}\u201d` : empty));
    return;
  }
  renderTable(target, {
    rows: shown, sort, wide: true, testid, columns,
    onSort: (next) => {
      state[sortKey] = next;
      updateUrl({ [SORT_PARAMS[sortKey]]: next });
      renderComparisonTable(target, { rows, sortKey, columns, testid, empty });
    },
  });
}

function treeBreadcrumb() {
  const crumbs = [el("a", { href: "#", "data-level": "0", text: "All top-level ops", onclick: (e) => { e.preventDefault(); goToLevel(0); } })];
  state.treePath.forEach((name, i) => {
    crumbs.push(" \u203a ", el("a", { href: "#", "data-level": String(i + 1), text: name, title: name,
      onclick: (e) => { e.preventDefault(); goToLevel(i + 1); } }));
  });
  return el("nav", { class: "breadcrumb", "aria-label": "Call tree path", "data-testid": "tree-path" }, crumbs);
}

function goToLevel(level) {
  state.treePath = state.treePath.slice(0, level);
  writeTreePath(true);
  load();
}

function drillInto(row) {
  if (!row.has_children) return;
  state.treePath = [...state.treePath, row.name];
  writeTreePath(true);
  load();
}

function renderTree(tree) {
  const target = el("div");
  const columns = [
    { key: "name", label: "Name", cls: "name",
      cell: (row) => (row.has_children
        ? el("a", { href: "#", class: "drill", text: row.name, title: `Show what ${row.name} called`,
          onclick: (e) => { e.preventDefault(); drillInto(row); } })
        : el("span", { text: row.name, title: row.name })) },
    { key: "kind", label: "Kind" },
    ...sideColumns("calls", "Calls", fmtInt),
    ...sideColumns("host_total_us", "Host Total (\u00b5s)"),
    ...sideColumns("device_total_us", "Device Total (\u00b5s)"),
    ...CHANGE_COLUMNS,
  ];
  if (!tree.found) {
    clear(target, emptyState("Neither trace has this path in its call tree.", "Go back up with the links above."));
  } else if (!tree.children.length) {
    clear(target, emptyState("Nothing below this node."));
  } else {
    renderTable(target, { rows: tree.children, sort: null, onSort: () => {}, wide: true, testid: "diff-tree-table", columns });
  }
  const node = tree.node;
  const summary = node
    ? el("p", { class: "muted", "data-testid": "tree-node" },
      `${node.name}: host total ${fmtUs(node.base_host_total_us)} \u2192 ${fmtUs(node.target_host_total_us)} \u00b5s (${signed(node.delta_us)}), `,
      `device total ${fmtUs(node.base_device_total_us)} \u2192 ${fmtUs(node.target_device_total_us)} \u00b5s. `,
      "Ops change by host total time, kernels by device time.")
    : el("p", { class: "muted", text: "Top-level ops and annotations of each trace; every ProfilerStep#N is one node, ProfilerStep#*. Click a name to see what it called." });
  return panel("Call tree", "compared level by level", treeBreadcrumb(), summary, target);
}

function renderRanks(distributed) {
  if (!distributed) return null;
  if (distributed.note) return panel("Ranks", null, el("p", { class: "muted", text: distributed.note }));
  const columns = [
    { key: "rank", label: "Rank", num: true, format: fmtInt },
    ...RANK_METRICS.flatMap(([key, label]) => [
      { key: `base_${key}`, label: `Base ${label} (\u00b5s)`, num: true, format: fmtUs },
      { key: `target_${key}`, label: `Target ${label} (\u00b5s)`, num: true, format: fmtUs },
      { key: `delta_${key}`, label: `\u0394 ${label}`, num: true, format: signed },
    ]),
  ];
  const target = el("div");
  renderTable(target, { rows: distributed.ranks, sort: null, onSort: () => {}, wide: true, testid: "diff-ranks-table", columns });
  return panel("Ranks", "average step of each rank, joined on the rank number", target);
}

function render() {
  const root = byId("diff");
  const notes = [body.normalisation_note, body.device_columns?.note].filter(Boolean);
  byId("diff-note").textContent = notes.join(" ");
  if (body.same_trace) {
    clear(root, emptyState(body.message));
    return;
  }
  const chart = el("div", { class: "chart", id: "diff-waterfall", "data-testid": "diff-waterfall" });
  const operatorTable = el("div");
  const kernelTable = el("div");
  const search = el("input", { type: "search", id: "search", value: state.search, placeholder: "Operator or kernel name\u2026", "aria-label": "Search operators and kernels" });
  clear(
    root,
    el("div", { class: "grid" },
      panel("Step time", "average step, baseline \u2192 target", chart),
      panel("Per category", null, stepTable(body.steps), el("h3", { text: "GPUs" }), gpuTable(body.steps.gpus))),
    renderTree(body.tree),
    el("div", { class: "controls" }, el("label", {}, "Search", search)),
    panel("Operators", `${fmtInt(body.operators.length)} rows, largest change first`,
      segmented("group-by", "Group operators by", [["operator", "Operator"], ["operator_input_shape", "Operator + Input Shape"]],
        state.groupBy, (value) => { state.groupBy = value; updateUrl({ group_by: value }); load(); }),
      operatorTable),
    panel("Kernels", `${fmtInt(body.kernels.length)} rows, largest change first`,
      segmented("kernel-group-by", "Group kernels by", [["kernel", "Kernel"], ["kernel_op", "Kernel + Launching Operator"]],
        state.kernelGroupBy, (value) => { state.kernelGroupBy = value; updateUrl({ kernel_group_by: value }); load(); }),
      kernelTable),
    renderRanks(body.distributed),
  );
  const tables = () => {
    renderComparisonTable(operatorTable, { rows: body.operators, sortKey: "sort", columns: operatorColumns(), testid: "diff-operators-table", empty: "Neither trace has operators." });
    renderComparisonTable(kernelTable, { rows: body.kernels, sortKey: "kernelsSort", columns: kernelColumns(), testid: "diff-kernels-table", empty: "Neither trace ran GPU kernels." });
  };
  search.addEventListener("input", debounce(() => { state.search = search.value.trim(); updateUrl({ search: state.search }); tables(); }, 200));
  renderWaterfall(chart, body.steps);
  tables();
}

async function load() {
  controller?.abort();
  controller = new AbortController();
  const statusEl = byId("status");
  if (!state.base.run) {
    clear(byId("diff"), emptyState("Choose a baseline", "Pick the run, worker and span to compare the trace above with."));
    return;
  }
  const url = `/api/diff?${apiQuery()}`;
  setJsonLink(url);
  try {
    body = await loadView(url, { statusEl, signal: controller.signal });
  } catch (error) {
    if (isAbort(error)) return;
    const side = error.body?.side === "base" ? "The baseline" : error.body?.side === "target" ? "The target" : "A trace";
    clear(byId("diff"));
    clear(statusEl, errorBox({ title: `${side} could not be read`, message: error.message, file: error.body?.file }));
    return;
  }
  render();
}

async function main() {
  selection = await initSelector("diff", byId("status"));
  if (!selection) return;
  renderBasePicker();
  window.addEventListener("popstate", () => {
    state.treePath = new URLSearchParams(location.search).getAll("tree_path");
    load();
  });
  await load();
}

main();
