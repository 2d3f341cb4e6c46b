// Distributed view: every rank of a span side by side (torch-tb-profiler's Distributed view, HTA's
// per-rank analyses), stragglers, collectives and process groups. State: run / span / step / table sorts.

import { isAbort, loadView } from "../api.js";
import { drawBars } from "../chart/bars.js";
import { byId, clear, el } from "../dom.js";
import { DASH, fmtBytes, fmtDuration, fmtInt, fmtPctSign, fmtUs, timeUnit } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { emptyState } from "../status.js";
import { renderTable, sortRows } from "../table.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const OVERLAP = [
  { key: "computation_us", label: "Computation", color: "#4e79a7",
    help: "Compute kernels (or, without kernels, host ops) running while no collective runs." },
  { key: "overlapping_us", label: "Overlapping", color: "#59a14f",
    help: "Computation and communication at the same time: communication hidden behind computation." },
  { key: "communication_us", label: "Communication", color: "#e15759",
    help: "Collectives running while no computation runs: exposed communication." },
  { key: "other_us", label: "Other", color: "#bab0ac", help: "The rest of the step (idle, host overhead...)." },
];
const WAIT = [
  { key: "data_transfer_us", label: "Data Transfer", color: "#76b7b2",
    help: "Per collective call, the shortest duration of the same call on any rank: the time the data takes." },
  { key: "synchronizing_us", label: "Synchronizing", color: "#f28e2b",
    help: "Communication time minus data transfer: waiting for the other ranks to arrive." },
];
const TEMPORAL = [
  { key: "compute_us", label: "Compute", color: "#4e79a7" },
  { key: "non_compute_us", label: "Non-compute", color: "#f28e2b" },
  { key: "idle_us", label: "Idle", color: "#bab0ac" },
];
const IDLE = [
  { key: "host_wait_us", label: "Host wait", color: "#e15759" },
  { key: "kernel_wait_us", label: "Kernel wait", color: "#edc948" },
  { key: "other_us", label: "Other wait", color: "#bab0ac" },
];
const KERNEL_TYPES = [
  { key: "COMP", label: "Computation", color: "#4e79a7" },
  { key: "COMM", label: "Communication", color: "#e15759" },
  { key: "MEM", label: "Memory", color: "#edc948" },
];
const SLOW_COLOR = "#e15759";
const RANK_COLOR = "#4e79a7";

const params = readParams();
const state = {
  step: params.step || "",
  sorts: { ranks: params.ranks_sort || "rank", ops: params.op_stats_sort || "-total_latency_us",
    colls: params.collectives_sort || "-lost_us", groups: params.process_groups_sort || "-total_us" },
};
// Each table's sort is "<its key in /api/distributed>_sort" (docs/ARCHITECTURE.md, "Parameter names")
const SORT_PARAMS = { ranks: "ranks_sort", ops: "op_stats_sort", colls: "collectives_sort", groups: "process_groups_sort" };

const rankLabel = (r) => `rank ${r.rank}`;

function section(title, sub, testid, ...body) {
  return el("section", { class: "panel", "data-testid": testid },
    el("h2", {}, title, sub ? el("span", { class: "sub", text: sub }) : null), ...body);
}

/** The value of a rank for the chosen step ("" = the average over steps). */
function stepValue(rank, key) {
  if (!state.step) return rank[key];
  const step = (rank.steps || []).find((s) => s.step === state.step);
  return step ? step[key] : null;
}

function stackedBars(target, ranks, series, { valueOf, unitLabel = null, percent = false, onClick = null }) {
  const values = series.map((s) => ranks.map((r) => valueOf(r, s.key)));
  const maxTotal = Math.max(0, ...ranks.map((_, i) => values.reduce((sum, v) => sum + (v[i] || 0), 0)));
  const unit = percent ? { divisor: 1, label: "%" } : timeUnit(maxTotal);
  drawBars(target, {
    categories: ranks.map(rankLabel),
    series: series.map((s, i) => ({
      name: s.label,
      color: s.color,
      values: values[i].map((v) => (v == null ? null : v / unit.divisor)),
      hover: (j) => [`${s.label}: ${percent ? fmtPctSign(values[i][j]) : `${fmtUs(values[i][j])} \u00b5s`}`],
      note: (j) => `${rankLabel(ranks[j])} \u00b7 ${ranks[j].worker}`,
    })),
    valueTitle: unitLabel || (percent ? "%" : `Time (${unit.label})`),
    gap: ranks.length < 4 ? 0.5 : 0.2,
    onClick: onClick ? (j) => onClick(ranks[j]) : null,
    label: series.map((s) => s.label).join(", "),
  });
}

function chartPanel(title, sub, id, testid) {
  return section(title, sub, testid, el("div", { class: "chart", id }));
}

function stepSelect(data) {
  const select = el(
    "select",
    {
      id: "step",
      "aria-label": "Step",
      onchange: (e) => {
        state.step = e.target.value;
        updateUrl({ step: state.step }, { push: true });
        drawStepCharts(data);
      },
    },
    el("option", { value: "", text: "All steps (average)", selected: !state.step }),
    data.steps.map((s) => el("option", { value: s, text: `Step ${s}`, selected: s === state.step })),
  );
  return el("label", {}, "Step ", select);
}

function drawStepCharts(data) {
  const ready = data.ranks.filter((r) => r.state === "ready");
  stackedBars(byId("overlap-chart"), ready, OVERLAP, { valueOf: stepValue });
  stackedBars(byId("wait-chart"), ready, WAIT, { valueOf: stepValue });
}

function summaryCard(data, selection) {
  const ready = data.ranks.filter((r) => r.state === "ready");
  const backends = [...new Set(ready.map((r) => r.backend).filter(Boolean))].join(", ") || DASH;
  const world = Math.max(0, ...ready.map((r) => r.world_size || 0)) || null;
  const m = data.matching || {};
  const pairs = [
    ["Ranks with a trace", `${fmtInt(data.ranks.length)}${world ? ` of ${fmtInt(world)}` : ""}`],
    ["Backend", backends],
    ["Span", `#${data.span_position}`],
    ["Collective calls", fmtInt(m.calls)],
    ["Matched on every rank of their group", m.collectives ? `${fmtInt(m.complete)} of ${fmtInt(m.collectives)}` : DASH],
    ["Time alignment", data.alignment?.method || DASH,
      "How the ranks' clocks are put on one axis: absolute time recorded in the traces, or the end of shared collectives."],
  ];
  return section("Job", null, "job-summary",
    el("dl", { class: "kv" }, pairs.map(([k, v, help]) => [el("dt", { title: help || null, text: k }), el("dd", { text: v })])),
  );
}

function slowestCard(data) {
  const slowest = data.stragglers.find((s) => s.slowest);
  if (!slowest) {
    return section("Slowest rank", null, "slowest-rank",
      el("p", { class: "muted", text: "No rank made the others wait: no matched collective started late." }));
  }
  const worst = slowest.worst;
  return section(
    "Slowest rank",
    "the rank the others waited for the longest",
    "slowest-rank",
    el("p", {}, el("strong", { text: `rank ${slowest.rank}` }), ` (${slowest.worker}) arrived last at `,
      el("strong", { text: `${fmtInt(slowest.last_count)} of ${fmtInt(slowest.shared_calls)}` }),
      " shared collectives; the other ranks waited ", el("strong", { text: fmtDuration(slowest.lost_us) }), " for it in total."),
    worst
      ? el("p", {}, `Worst: ${worst.name} (${worst.kind}) \u2014 ${fmtDuration(worst.lost_us)} lost, `,
          el("a", { id: "slowest-link", "data-testid": "slowest-link", href: worst.trace_url,
            text: `open rank ${slowest.rank} beside the others in the Trace view` }))
      : null,
  );
}

function warningsPanel(data) {
  const notes = [...data.warnings];
  for (const rank of data.ranks) for (const w of rank.warnings || []) notes.push(`${rank.worker}: ${w}`);
  if (!notes.length) return null;
  return el("section", { class: "panel info-box", "data-testid": "warnings", role: "status" },
    el("h2", { text: "What does not match" }), el("ul", { class: "plain" }, notes.map((w) => el("li", { text: w }))));
}

function tablePanel(name, title, sub, columns, rows, rowKey) {
  const holder = el("div", { id: `${name}-table` });
  const panel = section(title, sub, `${name}-panel`, holder);
  const draw = () => {
    if (!rows.length) {
      clear(holder, emptyState("Nothing to show"));
      return;
    }
    renderTable(holder, {
      columns,
      rows: sortRows(rows, state.sorts[name]),
      sort: state.sorts[name],
      rowKey,
      testid: `${name}-table`,
      wide: columns.length > 9,
      onSort: (next) => {
        state.sorts[name] = next;
        updateUrl({ [SORT_PARAMS[name]]: next }, { push: true });
        draw();
      },
    });
  };
  return { panel, draw };
}

const us = (label, key, title = null) => ({ key, label: `${label} (\u00b5s)`, num: true, format: fmtUs, title });
const link = (text) => (row) => (row.trace_url ? el("a", { href: row.trace_url, text }) : DASH);

function ranksTable(data) {
  const rows = data.ranks.map((r) => ({ ...r, state_text: r.state === "ready" ? r.mode : `error: ${r.error}` }));
  return tablePanel("ranks", "Ranks", "per rank, average per step (× steps = the rank's time in collectives over the span's steps)", [
    { key: "rank", label: "Rank", num: true, title: "From distributedInfo, else the worker's name, else inferred (PaddlePaddle traces of one job, definitions §10), else file order" },
    { key: "worker", label: "Worker", cls: "name" },
    { key: "rank_source", label: "Rank from" },
    { key: "state_text", label: "Measured on", title: "device: kernels on the GPU; host: ops on the CPU (no kernels)" },
    ...OVERLAP.map((c) => us(c.label, c.key, c.help)),
    ...WAIT.map((c) => us(c.label, c.key, c.help)),
    { key: "calls", label: "Collective calls", num: true, format: fmtInt },
  ], rows, (r) => r.worker);
}

function collectivesTable(data) {
  const rows = data.collectives.map((c) => ({ ...c, number: c.seq ?? c.ordinal, group: c.process_group ?? DASH }));
  return tablePanel("colls", "Straggling collectives", "calls whose ranks arrived apart, by time lost waiting", [
    { key: "name", label: "Collective", cls: "name" },
    { key: "kind", label: "Type" },
    { key: "group", label: "Group" },
    { key: "number", label: "Seq / #", num: true, title: "Sequence number in its process group, or n-th call of its type" },
    { key: "ranks", label: "Ranks", num: true, format: (v, r) => (v === r.expected_ranks ? fmtInt(v) : `${v} of ${r.expected_ranks}`) },
    { key: "last_rank", label: "Last rank", num: true },
    us("Skew", "skew_us", "Arrival of the last rank minus arrival of the first"),
    us("Time lost", "lost_us", "Sum over the other ranks of how long they waited for the last one"),
    us("Data transfer", "data_transfer_us", "The shortest duration of this call on any rank"),
    { key: "bytes", label: "Size", num: true, format: fmtBytes },
    { key: "trace", label: "Trace", cell: link("open") },
  ], rows, (r) => String(r.key));
}

function opsTable(data) {
  return tablePanel("ops", "Communication operations", "per rank, totals over the whole span (torch-tb-profiler's Communication Operations Stats)", [
    { key: "rank", label: "Rank", num: true },
    { key: "name", label: "Name", cls: "name" },
    { key: "calls", label: "Calls", num: true, format: fmtInt },
    { key: "total_bytes", label: "Total size", num: true, format: fmtBytes, title: "In msg nelems × dtype, or Π Input Dims × type" },
    { key: "avg_bytes", label: "Avg size", num: true, format: fmtBytes },
    us("Total latency", "total_latency_us"),
    us("Avg latency", "avg_latency_us"),
    us("Data transfer", "data_transfer_us"),
    us("Avg data transfer", "avg_data_transfer_us"),
    us("Synchronizing", "synchronizing_us"),
  ], data.op_stats, (r) => `${r.worker}\u0000${r.name}`);
}

function groupsTable(data) {
  const rows = data.process_groups.map((g) => ({
    ...g,
    label: g.name ?? DASH,
    members: g.ranks ? (g.ranks.length > 12 ? `${g.ranks.slice(0, 12).join(", ")}, \u2026` : g.ranks.join(", ")) : DASH,
    types: (g.collective_types || []).join(", ") || DASH,
  }));
  return tablePanel("groups", "Process groups", "what each group (DP / TP / PP ...) costs: summed over its ranks, whole span (= the sum of its ranks' rows above)", [
    { key: "label", label: "Group" },
    { key: "desc", label: "Description", cls: "op" },
    { key: "dimension", label: "Dimension", format: (v) => v || DASH, title: "From the description: world, dp, tp, pp, ep, cp..." },
    { key: "size", label: "Ranks #", num: true, format: fmtInt, title: "Number of ranks in the group" },
    { key: "members", label: "Ranks", cls: "op" },
    { key: "types", label: "Collectives" },
    { key: "calls", label: "Calls", num: true, format: fmtInt },
    us("Total", "total_us"),
    us("Data transfer", "data_transfer_us"),
    us("Synchronizing", "synchronizing_us"),
    { key: "total_bytes", label: "Data size", num: true, format: fmtBytes, title: "Bytes moved by the group's collectives" },
  ], rows, (r) => `${r.label}\u0000${r.desc}`);
}

function topologyPanel(data) {
  return section("Devices", "nodes \u2192 processes \u2192 GPUs", "topology",
    el("ul", { class: "plain" }, data.topology.map((node) =>
      el("li", {}, el("strong", { text: node.host }),
        el("ul", { class: "plain" }, node.processes.map((p) =>
          el("li", {}, `rank ${p.rank} \u00b7 ${p.worker}${p.pid ? ` \u00b7 pid ${p.pid}` : ""}`,
            p.gpus.length
              ? el("ul", { class: "plain" }, p.gpus.map((g) =>
                  el("li", { text: `GPU ${g.id}: ${g.name || "unknown device"}${g.memory_bytes ? `, ${fmtBytes(g.memory_bytes)}` : ""}${g.compute_capability ? `, compute ${g.compute_capability}` : ""}` })))
              : el("span", { class: "muted", text: " \u00b7 CPU only" }))))))));
}

function stragglerChart(target, data) {
  const rows = data.stragglers;
  const ranks = rows.map((s) => data.ranks.find((r) => r.worker === s.worker));
  drawBars(target, {
    categories: ranks.map(rankLabel),
    series: [{
      name: "Arrived last (calls)",
      colors: rows.map((s) => (s.slowest ? SLOW_COLOR : RANK_COLOR)),
      values: rows.map((s) => s.last_count),
      text: (i) => (rows[i].lost_us > 0 ? `${fmtDuration(rows[i].lost_us)} waited` : ""),
      hover: (i) => [`${rows[i].last_count} calls (${fmtPctSign(rows[i].last_pct)}) \u00b7 others waited ${fmtDuration(rows[i].lost_us)}`],
      note: (i) => `${rankLabel(ranks[i])} \u00b7 ${rows[i].worker}`,
    }],
    valueTitle: "Times last to arrive",
    ticks: { integer: true },
    legend: false,
    gap: rows.length < 4 ? 0.5 : 0.2,
    onClick: (i) => {
      if (rows[i]?.worst?.trace_url) location.assign(rows[i].worst.trace_url);
    },
    label: "Times each rank arrived last at a collective",
  });
}

function drawHta(data) {
  const gpu = data.ranks.filter((r) => r.hta);
  stackedBars(byId("temporal-chart"), gpu, TEMPORAL, {
    percent: true,
    valueOf: (r, key) => (r.hta.temporal.window_us ? (100 * r.hta.temporal[key]) / r.hta.temporal.window_us : null),
  });
  const idleTotal = (r) => IDLE.reduce((sum, c) => sum + (r.hta.idle[c.key] || 0), 0);
  stackedBars(byId("idle-chart"), gpu, IDLE, {
    percent: true,
    valueOf: (r, key) => (idleTotal(r) ? (100 * r.hta.idle[key]) / idleTotal(r) : null),
  });
  stackedBars(byId("kernel-type-chart"), gpu, KERNEL_TYPES, { valueOf: (r, key) => r.hta.kernel_types[key].time_us });
  stackedBars(byId("overlap-ratio-chart"), gpu, [{ key: "ratio", label: "Overlap", color: "#59a14f" }], {
    percent: true,
    valueOf: (r) => (r.hta.comm_comp_overlap_ratio == null ? null : 100 * r.hta.comm_comp_overlap_ratio),
  });
}

function render(data, selection) {
  const root = byId("distributed");
  if (state.step && !data.steps.includes(state.step)) {
    state.step = ""; // a step of another span (the span changed): all steps, in the URL as in the selector
    updateUrl({ step: null });
  }
  const ready = data.ranks.filter((r) => r.state === "ready");
  if (!ready.length) {
    clear(root, warningsPanel(data), emptyState("No rank of this span could be read"));
    return;
  }
  const tables = [ranksTable(data), collectivesTable(data), opsTable(data), groupsTable(data)];
  const anyGpu = ready.some((r) => r.hta);
  const hta = anyGpu
    ? el("div", { class: "grid pies" },
        chartPanel("Temporal breakdown, all device activity",
          "share of [first start, last end]; with HTA's filter: temporal_hta_filter in the JSON",
          "temporal-chart", "temporal"),
        chartPanel("Idle time breakdown", "as HTA: share of the gaps between device activities on each stream, all streams together",
          "idle-chart", "idle"),
        chartPanel("Kernel type breakdown", "as HTA: device time by type (COMM / COMP / MEM)", "kernel-type-chart", "kernel-types"),
        chartPanel("Communication\u2013computation overlap", "as HTA: time computing while communicating / time communicating",
          "overlap-ratio-chart", "overlap-ratio"))
    : null;
  clear(
    root,
    warningsPanel(data),
    el("div", { class: "grid cards" }, summaryCard(data, selection), slowestCard(data)),
    el("div", { class: "controls" }, stepSelect(data)),
    el("div", { class: "grid pies" },
      chartPanel("Computation / Communication",
        ready.every((r) => r.mode === "host") ? "per rank, measured on the host: these ranks ran no GPU kernels" : "per rank",
        "overlap-chart", "overlap"),
      chartPanel("Synchronizing / Data transfer", "communication split into waiting and moving data", "wait-chart", "wait")),
    section("Stragglers", "how often each rank arrived last at a collective, and how long the others waited for it; " +
      "click a bar to see its worst one in the Trace view", "stragglers", el("div", { class: "chart small", id: "straggler-chart" })),
    tables[1].panel,
    tables[0].panel,
    hta,
    tables[2].panel,
    tables[3].panel,
    topologyPanel(data),
  );
  drawStepCharts(data);
  stragglerChart(byId("straggler-chart"), data);
  if (anyGpu) drawHta(data);
  for (const t of tables) t.draw();
}

async function main() {
  const statusEl = byId("status");
  const selection = await initSelector("distributed", statusEl);
  if (!selection) return;
  const url = withQuery("/api/distributed", { run: selection.run, span: selection.span });
  setJsonLink(url);
  try {
    const data = await loadView(url, { statusEl });
    if (data.applies === false) clear(byId("distributed"), emptyState("Not a distributed run", data.reason));
    else render(data, selection);
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
  }
}

main();
