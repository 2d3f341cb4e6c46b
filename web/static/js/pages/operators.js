// Operator view: pies of the top operators, a sortable table, and call stacks per operator.

import { isAbort, loadView } from "../api.js";
import { renderPie, topSlices } from "../charts.js";
import { bindGroupBy, bindSearchAndTop, parseTop } from "../controls.js";
import { byId, clear, el } from "../dom.js";
import { DASH, fmtBool, fmtInt, fmtPct, fmtUs } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { errorBox, loading } from "../status.js";
import { flashRow, renderRowsPanel } from "../table.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const GROUPS = ["operator", "operator_input_shape"];

const PIES = [
  { key: "device_self_us", title: "Device Self Time", device: true, withOther: true },
  { key: "device_total_us", title: "Device Total Time", device: true },
  { key: "host_self_us", title: "Host Self Time", withOther: true },
  { key: "host_total_us", title: "Host Total Time" },
];

/** Let long shapes wrap after commas rather than inside a number. */
function breakableShape(shape) {
  return shape ? shape.replace(/,/g, ",\u200b") : DASH;
}

function columns(byShape) {
  return [
    { key: "name", label: "Name", cls: "name" },
    byShape ? { key: "input_shape", label: "Input Shape", cls: "shape", format: breakableShape } : null,
    { key: "calls", label: "Calls", num: true, format: fmtInt },
    { key: "device_self_us", label: "Device Self (\u00b5s)", num: true, format: fmtUs,
      title: "Time of the kernels, memcpys and memsets this operator launched itself" },
    { key: "device_total_us", label: "Device Total (\u00b5s)", num: true, format: fmtUs,
      title: "Device time of this operator and of the operators it called" },
    { key: "host_self_us", label: "Host Self (\u00b5s)", num: true, format: fmtUs,
      title: "Host time of the operator minus the operators below it and its runtime calls; annotations " +
        "(record_function, nccl:*) are not rows and take no time from the operator around them" },
    { key: "host_total_us", label: "Host Total (\u00b5s)", num: true, format: fmtUs,
      title: "Host time of the operator including its children" },
    { key: "tensor_cores_eligible", label: "TC Eligible", format: fmtBool,
      title: "Tensor Cores eligible: a conv / matmul-like operator that could run on Tensor Cores" },
    { key: "tensor_cores_self_pct", label: "TC Self (%)", num: true, format: fmtPct,
      title: "Share of this operator's device self time in kernels that use Tensor Cores" },
    { key: "tensor_cores_total_pct", label: "TC Total (%)", num: true, format: fmtPct,
      title: "Share of this operator's device total time in kernels that use Tensor Cores" },
  ].filter(Boolean);
}

const params = readParams();
const state = {
  groupBy: GROUPS.includes(params.group_by) ? params.group_by : "operator",
  search: params.search || "",
  sort: params.sort || null,
  pieTop: parseTop(params.pie_top),
  stack: params.stack ?? null,
  shape: params.input_shape ?? null,
  module: /^\d+$/.test(params.module || "") ? params.module : null, // an id of /api/modules (docs/definitions.md §14.3)
};

let selection = null;
let allRows = [];
let accounting = null;
let emptyReason = null; // why the trace has no operators, when the server knows
let moduleShown = null; // the module the rows are filtered to: {id, name, type, path}
let controller = null;
let table = null;
const stackCache = new Map();

const byShape = () => state.groupBy === "operator_input_shape";
const rowKey = (row) => (byShape() ? JSON.stringify([row.name, row.input_shape || ""]) : row.name);
const rowLabel = (row) => (byShape() && row.input_shape ? `${row.name} ${row.input_shape}` : row.name);
const hasDeviceTime = () => allRows.some((r) => r.device_self_us > 0 || r.device_total_us > 0);
const effectiveSort = () => state.sort || (hasDeviceTime() ? "-device_self_us" : "-host_self_us");

function expandedKey() {
  if (state.stack === null) return null;
  return byShape() ? JSON.stringify([state.stack, state.shape || ""]) : state.stack;
}

function filteredRows() {
  const needle = state.search.toLowerCase();
  return needle ? allRows.filter((r) => r.name.toLowerCase().includes(needle)) : allRows;
}

function apiQuery(extra = {}) {
  return { run: selection.run, worker: selection.worker, span: selection.span, group_by: state.groupBy, module: state.module, ...extra };
}

function updateJsonLink() {
  setJsonLink(withQuery("/api/operators", apiQuery({ search: state.search, sort: effectiveSort() })));
}

// ---- call stacks ------------------------------------------------------------------------------
function frameItem(frame) {
  if (!frame.links || !frame.links.view) return el("li", { class: "native", text: frame.text });
  return el(
    "li",
    {},
    el("a", { href: frame.links.view, title: "Show the source", text: frame.text }),
    frame.links.external
      ? el("a", { class: "external", href: frame.links.external, target: "_blank", rel: "noopener", text: "open \u2197" })
      : null,
  );
}

function callerFrame(frames) {
  const withPath = frames.filter((f) => f.path);
  return withPath.find((f) => !/(site-packages|dist-packages|^torch\/|\/torch\/)/.test(f.path)) || withPath[0] || null;
}

function metric(label, value) {
  return el("span", { class: "metric" }, `${label} `, el("b", { text: value }));
}

function renderStacks(target, stacks) {
  if (!stacks.length) {
    clear(target, el("p", { class: "muted", "data-testid": "no-stack", text: "No call stack recorded for this operator (profile with with_stack=True)." }));
    return;
  }
  clear(
    target,
    el(
      "div",
      { class: "stacks", "data-testid": "stacks" },
      el("div", { class: "muted", text: `${stacks.length} distinct call stack${stacks.length === 1 ? "" : "s"} (innermost frame first)` }),
      stacks.map((stack, i) => {
        const caller = callerFrame(stack.frames);
        return el(
          "details",
          { class: "stack", open: i < 3 },
          el(
            "summary",
            {},
            metric("Calls", fmtInt(stack.calls)),
            metric("Device self", `${fmtUs(stack.device_self_us)} \u00b5s`),
            metric("Device total", `${fmtUs(stack.device_total_us)} \u00b5s`),
            metric("Host self", `${fmtUs(stack.host_self_us)} \u00b5s`),
            metric("Host total", `${fmtUs(stack.host_total_us)} \u00b5s`),
            caller ? el("span", { class: "metric mono", text: `from ${caller.text}` }) : null,
          ),
          el("ol", { class: "frames" }, stack.frames.map(frameItem)),
        );
      }),
    ),
  );
}

function stacksUrl(row) {
  const query = new URLSearchParams(apiQuery());
  query.delete("group_by");
  if (state.module === null) query.delete("module"); // URLSearchParams would send "null"
  query.set("name", row.name);
  if (byShape()) query.set("input_shape", row.input_shape || "");
  return `/api/operators/stacks?${query}`;
}

function renderDetail(row) {
  const target = el("div", { class: "stack-detail" }, loading("Loading call stacks\u2026"));
  const url = stacksUrl(row);
  const cached = stackCache.get(url);
  if (cached) {
    renderStacks(target, cached);
    return target;
  }
  loadView(url, { statusEl: target })
    .then((body) => {
      stackCache.set(url, body.stacks || []);
      renderStacks(target, body.stacks || []);
    })
    .catch((error) => clear(target, errorBox({ title: "Cannot load call stacks", message: error.message })));
  return target;
}

function toggle(row) {
  const open = rowKey(row) === expandedKey();
  state.stack = open ? null : row.name;
  state.shape = open || !byShape() ? null : row.input_shape || "";
  updateUrl({ stack: state.stack, input_shape: state.shape }, { push: true });
  renderRows();
}

// ---- pies and table ---------------------------------------------------------------------------
function selectRow(key) {
  const row = allRows.find((r) => rowKey(r) === key);
  if (!row) return;
  if (rowKey(row) !== expandedKey()) toggle(row);
  flashRow(table, key);
}

function renderPies() {
  const target = byId("pies");
  const rows = filteredRows();
  const shown = PIES.filter((p) => !p.device || hasDeviceTime());
  clear(
    target,
    shown.map((pie) =>
      el(
        "section",
        { class: "panel pie-panel", "data-testid": `pie-${pie.key}` },
        el("h2", {}, pie.title, el("span", { class: "sub", text: `top ${state.pieTop}${pie.withOther ? " + other" : ""}` })),
        el("div", { id: `pie-${pie.key}` }),
      ),
    ),
  );
  for (const pie of shown) {
    renderPie(byId(`pie-${pie.key}`), {
      slices: topSlices(rows, pie.key, state.pieTop, { label: rowLabel, key: rowKey, withOther: pie.withOther }),
      onSelect: (slice) => selectRow(slice.key),
      emptyText: state.search ? "No operator matches the search." : "No time recorded.",
    });
  }
}

function renderRows() {
  table = renderRowsPanel({
    rows: filteredRows(),
    totalRows: allRows.length,
    sort: effectiveSort(),
    onSort: changeSort,
    emptyMessage: state.search ? `No operator matches \u201c${state.search}\u201d` : emptyReason || "This trace has no operators",
    columns: columns(byShape()),
    rowKey,
    expandedKey: expandedKey(),
    onToggle: toggle,
    renderDetail,
    testid: "operators-table",
  });
  updateJsonLink();
}

/** The module filter as a removable chip: "Module: <path> ×". */
function renderModuleChip() {
  byId("module-chip")?.remove();
  if (!moduleShown) return;
  byId("controls").prepend(
    el("span", { class: "chip filter-chip", id: "module-chip", "data-testid": "module-chip", title: `${moduleShown.type}: ${moduleShown.path}` },
      `Module: ${moduleShown.path}`,
      el("button", { type: "button", class: "chip-remove", "data-testid": "module-chip-remove", "aria-label": "Show all operators, not only this module's", title: "Remove the module filter",
        onclick: () => {
          state.module = null;
          moduleShown = null;
          state.stack = state.shape = null;
          updateUrl({ module: null, stack: null, input_shape: null }, { push: true });
          load();
        } }, "\u00d7")));
}

/** Where the rows' self times come from, so that they can be seen to add up (docs/definitions.md). */
function renderAccounting() {
  byId("accounting")?.remove();
  if (!accounting) return;
  const a = accounting;
  const device = a.device_total_us > 0
    ? [
        el("dt", { text: "Device" }),
        el("dd", { "data-testid": "accounting-device",
          text: `${moduleShown ? "the kernels, memcpys and memsets launched in the module" : "all kernels, memcpys and memsets"} ` +
            `${fmtUs(a.device_total_us)} µs = device self time of the ` +
            `operators ${fmtUs(a.device_self_us)} µs + launched outside any operator (unattributed) ` +
            `${fmtUs(a.device_unattributed_us)} µs` }),
      ]
    : [];
  byId("table-panel").append(
    el("details", { class: "definitions", id: "accounting" },
      el("summary", { text: "How the self times add up" }),
      el("dl", {},
        el("dt", { text: "Host" }),
        el("dd", { "data-testid": "accounting-host",
          text: `time inside ${moduleShown ? "the module's " : ""}operators ${fmtUs(a.host_in_operators_us)} µs = host self time of the operators ` +
            `${fmtUs(a.host_self_us)} µs + runtime calls they made ${fmtUs(a.host_runtime_in_operators_us)} µs. ` +
            "Annotations (record_function, nccl:*) and steps are not rows: their time belongs to the operator " +
            "around them, or to no operator." }),
        ...device)));
}

function changeSort(next) {
  state.sort = next;
  updateUrl({ sort: next }, { push: true });
  renderRows();
}

async function load() {
  controller?.abort();
  controller = new AbortController();
  const statusEl = byId("status");
  updateJsonLink();
  try {
    const data = await loadView(withQuery("/api/operators", apiQuery()), { statusEl, signal: controller.signal });
    allRows = data.rows || [];
    accounting = data.accounting || null;
    emptyReason = data.empty_reason || null;
    moduleShown = data.module || null;
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
    return;
  }
  byId("controls").hidden = false;
  byId("table-panel").hidden = false;
  renderModuleChip();
  renderPies();
  renderRows();
  renderAccounting();
  const expanded = table?.querySelector("tr.expanded");
  if (expanded) expanded.scrollIntoView({ block: "center" });
}

async function main() {
  selection = await initSelector("operators", byId("status"));
  if (!selection) return;
  bindGroupBy(state.groupBy, (value) => {
    state.groupBy = value;
    state.stack = state.shape = null;
    if (state.sort && state.sort.replace(/^-/, "") === "input_shape" && value === "operator") state.sort = null;
    updateUrl({ group_by: value, stack: null, input_shape: null, sort: state.sort }, { push: true });
    load();
  });
  bindSearchAndTop(state, updateUrl, { renderPies, renderRows });
  await load();
}

main();
