// Kernel view: top kernels pie, Tensor Cores pie, sortable table (by kernel or by launch properties + op).

import { isAbort, loadView } from "../api.js";
import { renderPie } from "../charts.js";
import { bindGroupBy, bindSearchAndTop, parseTop } from "../controls.js";
import { byId, clear, el } from "../dom.js";
import { DASH, fmtBool, fmtDim, fmtFixed2, fmtInt, fmtPct, fmtUs } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { emptyState } from "../status.js";
import { flashRow, renderRowsPanel, sortRows } from "../table.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const GROUPS = ["kernel", "kernel_op"];
const DEFAULT_SORT = "-total_us";
const TC_COLORS = { using: "#59a14f", notUsing: "#bab0ac" };

const TIMES = [
  { key: "calls", label: "Calls", num: true, format: fmtInt },
  { key: "total_us", label: "Total (\u00b5s)", num: true, format: fmtUs },
  { key: "mean_us", label: "Mean (\u00b5s)", num: true, format: fmtUs },
  { key: "max_us", label: "Max (\u00b5s)", num: true, format: fmtUs },
  { key: "min_us", label: "Min (\u00b5s)", num: true, format: fmtUs },
  { key: "mean_blocks_per_sm", label: "Mean Blocks / SM", num: true, format: fmtFixed2,
    title: "Duration-weighted mean of blocks per SM (from the trace's 'blocks per SM')" },
  { key: "mean_est_achieved_occupancy_pct", label: "Mean Est. Achieved Occupancy (%)", num: true, format: fmtPct,
    title: "Duration-weighted mean of the trace's 'est. achieved occupancy %'" },
];

function columns(groupBy) {
  const tcUsed = { key: "tensor_cores_used", label: "Matrix Cores", format: fmtBool,
    title: "The kernel runs on matrix cores: NVIDIA Tensor Cores, AMD MFMA / WMMA (recognised by its name)" };
  if (groupBy === "kernel") return [{ key: "name", label: "Name", cls: "name" }, tcUsed, ...TIMES];
  return [
    { key: "name", label: "Name", cls: "name" },
    { key: "operator", label: "Operator", cls: "op", format: (v) => v || DASH },
    { key: "grid", label: "Grid", num: true, format: fmtDim },
    { key: "block", label: "Block", num: true, format: fmtDim },
    { key: "registers_per_thread", label: "Registers / Thread", num: true, format: fmtInt },
    { key: "shared_memory", label: "Shared Mem (B)", num: true, format: fmtInt },
    tcUsed,
    { key: "op_tensor_cores_eligible", label: "Op TC Eligible", format: fmtBool,
      title: "The launching operator is Tensor Cores eligible" },
    ...TIMES,
  ];
}

const params = readParams();
const state = {
  groupBy: GROUPS.includes(params.group_by) ? params.group_by : "kernel",
  search: params.search || "",
  sort: params.sort || null,
  pieTop: parseTop(params.pie_top),
};

let selection = null;
let data = null;
let controller = null;
let table = null;

const effectiveSort = () => state.sort || DEFAULT_SORT;
const rowKey = (row) =>
  state.groupBy === "kernel"
    ? row.name
    : JSON.stringify([row.name, row.operator, row.grid, row.block, row.registers_per_thread, row.shared_memory]);

function apiQuery(extra = {}) {
  return { run: selection.run, worker: selection.worker, span: selection.span, group_by: state.groupBy, ...extra };
}

function updateJsonLink() {
  setJsonLink(withQuery("/api/kernels", apiQuery({ search: state.search, sort: effectiveSort() })));
}

function filteredRows() {
  const needle = state.search.toLowerCase();
  if (!needle) return data.rows;
  return data.rows.filter((r) => r.name.toLowerCase().includes(needle) || (r.operator || "").toLowerCase().includes(needle));
}

/** Top kernels by total time, whatever the grouping (kernel_op rows of one kernel are summed). */
function kernelSlices(rows) {
  const totals = new Map();
  for (const row of rows) totals.set(row.name, (totals.get(row.name) || 0) + (row.total_us || 0));
  const sorted = [...totals.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
  const slices = sorted.slice(0, state.pieTop).map(([name, value]) => ({ label: name, value, key: name }));
  const rest = sorted.slice(state.pieTop);
  if (rest.length) {
    slices.push({ label: `Other (${rest.length})`, value: rest.reduce((s, [, v]) => s + v, 0), color: "#d5d9df" });
  }
  return slices;
}

function selectKernel(name) {
  const first = sortRows(filteredRows(), effectiveSort()).find((r) => r.name === name);
  if (first && table) flashRow(table, rowKey(first));
}

function renderPies() {
  const rows = filteredRows();
  clear(
    byId("pies"),
    el(
      "section",
      { class: "panel pie-panel", "data-testid": "pie-kernels" },
      el("h2", {}, "Total Time of Kernels", el("span", { class: "sub", text: `top ${state.pieTop} + other` })),
      el("div", { id: "pie-kernels" }),
    ),
    el(
      "section",
      { class: "panel pie-panel", "data-testid": "pie-tensor-cores" },
      el("h2", {}, "Matrix Cores", el("span", { class: "sub", text: "kernel time on Tensor Cores / MFMA / WMMA or not" })),
      el("div", { id: "pie-tc" }),
    ),
  );
  renderPie(byId("pie-kernels"), {
    slices: kernelSlices(rows),
    onSelect: (slice) => selectKernel(slice.key),
    emptyText: "No kernel matches the search.",
  });
  const tc = data.tensor_cores || {};
  renderPie(byId("pie-tc"), {
    slices: [
      { label: "On matrix cores", value: tc.using_us || 0, color: TC_COLORS.using },
      { label: "Not on matrix cores", value: tc.not_using_us || 0, color: TC_COLORS.notUsing },
    ],
    emptyText: "No kernel time recorded.",
  });
}

function renderRows() {
  table = renderRowsPanel({
    rows: filteredRows(),
    totalRows: data.rows.length,
    sort: effectiveSort(),
    onSort: changeSort,
    emptyMessage: `No kernel matches \u201c${state.search}\u201d`,
    columns: columns(state.groupBy),
    rowKey,
    testid: "kernels-table",
    wide: state.groupBy === "kernel_op",
  });
  updateJsonLink();
}

function changeSort(next) {
  state.sort = next;
  updateUrl({ sort: next }, { push: true });
  renderRows();
}

function renderNoKernels() {
  byId("controls").hidden = true;
  byId("table-panel").hidden = true;
  clear(byId("pies"));
  clear(
    byId("status"),
    emptyState(
      "This trace has no GPU kernels (CPU-only profile)",
      "The profiler recorded no CUDA / HIP kernel for this worker and span, so there is nothing to break down here.",
      "To see kernels, profile on a GPU with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA].",
      el("span", {}, "Host-side time is in the ", el("a", { href: withQuery("/operators", { run: selection.run, worker: selection.worker, span: selection.span }), text: "Operator view" }), "."),
    ),
  );
}

async function load() {
  controller?.abort();
  controller = new AbortController();
  const statusEl = byId("status");
  updateJsonLink();
  try {
    data = await loadView(withQuery("/api/kernels", apiQuery()), { statusEl, signal: controller.signal });
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
    return;
  }
  if (!data.rows.length && !data.total_rows) {
    renderNoKernels();
    return;
  }
  byId("controls").hidden = false;
  byId("table-panel").hidden = false;
  renderPies();
  renderRows();
}

async function main() {
  selection = await initSelector("kernels", byId("status"));
  if (!selection) return;
  bindGroupBy(state.groupBy, (value) => {
    state.groupBy = value;
    const sortKey = state.sort ? state.sort.replace(/^-/, "") : null;
    if (sortKey && !columns(value).some((c) => c.key === sortKey)) state.sort = null;
    updateUrl({ group_by: value, sort: state.sort }, { push: true });
    load();
  });
  bindSearchAndTop(state, updateUrl, { renderPies, renderRows });
  await load();
}

main();
