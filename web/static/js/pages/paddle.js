// Paddle Summary view: PaddlePaddle's own summary tables (as Profiler.summary() prints them), with a time unit switch.

import { isAbort, loadView } from "../api.js";
import { byId, clear, el } from "../dom.js";
import { fmtInt } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { emptyState } from "../status.js";
import { modelSummaryTable, ratio, STATS_HEADERS, stats as statsIn, summaryTable, timeIn, UNIT_LABELS, unitOf } from "../summary_tables.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const params = readParams();
const state = { unit: unitOf(params.unit) };
let selection = null;
let data = null;
let controller = null;

const time = (ns) => timeIn(ns, state.unit);
const stats = (s) => statsIn(s, state.unit);
const table = summaryTable;

function section(title, note, content) {
  return el("section", { class: "panel" }, el("h2", {}, title, el("span", { class: "sub", text: note })), content);
}

function overview() {
  const cpu = data.overview.cpu.map((r, i) => ({ depth: i ? 1 : 0, cells: [r.type, fmtInt(r.calls), time(r.time_ns), ratio(r.ratio_pct)] }));
  const gpu = data.overview.gpu.map((r) => ({ depth: 1, cells: [r.type, fmtInt(r.calls), time(r.time_ns), ratio(r.ratio_pct)] }));
  return section(
    "Overview Summary",
    "time per event type, overlaps merged; ratios of the ProfileStep time",
    el("div", {}, table("paddle-overview-cpu", ["Event Type", "Calls", "CPU Time", "Ratio (%)"], cpu),
      gpu.length ? table("paddle-overview-gpu", ["Device", "Calls", "GPU Time", "Ratio (%)"], gpu) : ""),
  );
}

function model() {
  if (!data.model.length) return "";
  return section("Model Summary", "outermost Dataloader / Forward / Backward / Optimization events", modelSummaryTable(data.model, state.unit, "paddle-model"));
}

function distribution() {
  if (!data.distribution) return "";
  const rows = Object.entries(data.distribution).map(([name, r], i) => ({ depth: i ? 1 : 0, cells: [name, time(r.time_ns), ratio(r.ratio_pct)] }));
  return section("Distribution Summary", "communication, computation and their overlap", table("paddle-distribution", ["Name", "Total Time", "Ratio (%)"], rows));
}

function statRow(row, depth) {
  return { depth, cells: [row.name, fmtInt(row.calls), stats(row.cpu), stats(row.gpu)] };
}

function operators() {
  const rows = [];
  for (const op of data.operators) {
    rows.push(statRow(op, 0));
    for (const inner of op.inner) {
      rows.push(statRow(inner, 1));
      for (const kernel of inner.kernels) rows.push(statRow(kernel, 2));
    }
    for (const kernel of op.kernels) rows.push(statRow(kernel, 1));
  }
  return section("Operator Summary", "each operator with its infer_meta / compute / kernel launch rows", table("paddle-operators", ["Name", "Calls", ...STATS_HEADERS], rows));
}

function kernels() {
  if (!data.kernels.length) return "";
  const rows = data.kernels.map((k) => ({ cells: [k.name, fmtInt(k.calls), stats(k.gpu)] }));
  return section("Kernel Summary", "", table("paddle-kernels", ["Name", "Calls", "GPU Total / Avg / Max / Min / Ratio(%)"], rows));
}

function memory() {
  return data.memory.map((place) =>
    section(
      `Memory Summary - ${place.place}`,
      `Peak Allocated Memory: ${fmtInt(place.peak_allocated_bytes)} B \u00b7 Peak Reserved Memory: ${fmtInt(place.peak_reserved_bytes)} B`,
      table("paddle-memory", ["Name", "Type", "Allocation Count", "Free Count", "Allocation Size", "Free Size", "Increased Size"],
        place.rows.map((r) => ({ cells: [r.name, r.type, fmtInt(r.allocation_count), fmtInt(r.free_count), fmtInt(r.allocation_bytes), fmtInt(r.free_bytes), fmtInt(r.increased_bytes)] }))),
    ),
  );
}

function userDefined() {
  if (!data.user_defined.length) return "";
  return section("UserDefined Summary", "Python RecordEvent ranges", table("paddle-user-defined", ["Name", "Calls", ...STATS_HEADERS], data.user_defined.map((r) => statRow(r, 0))));
}

function render() {
  clear(byId("tables"), el("p", { class: "muted", text: `Time unit: ${UNIT_LABELS[state.unit]}` }), overview(), model(), distribution(), operators(), kernels(), ...memory(), userDefined());
  setJsonLink(withQuery("/api/paddle/summary", { ...ident(), unit: state.unit }));
}

const ident = () => ({ run: selection.run, worker: selection.worker, span: selection.span });

async function load() {
  controller?.abort();
  controller = new AbortController();
  const statusEl = byId("status");
  try {
    data = await loadView(withQuery("/api/paddle/summary", { ...ident(), unit: state.unit }), { statusEl, signal: controller.signal });
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
    return;
  }
  if (!data.applies) {
    clear(byId("tables"));
    clear(statusEl, emptyState("No Paddle summary for this trace", data.reason));
    return;
  }
  byId("controls").hidden = false;
  render();
}

async function main() {
  selection = await initSelector("paddle", byId("status"));
  if (!selection) return;
  const unit = byId("unit");
  unit.value = state.unit;
  unit.addEventListener("change", () => {
    state.unit = unit.value;
    updateUrl({ unit: state.unit });
    if (data) render();
  });
  await load();
}

main();
