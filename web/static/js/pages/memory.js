// Memory view: the profiler's memory events (curve, events, per-operator statistics), a CUDA
// allocator snapshot (active memory timeline, allocator state, top allocations, call stacks, OOM) or
// an InternLM memory.log (memory curve by category, sunburst of a category by layer).
// State in the URL: run, worker, span | snapshot | log, device, start/end (window), moment, category, sorts.

import { getJSON, isAbort, loadView } from "../api.js";
import { drawBars } from "../chart/bars.js";
import { PALETTE } from "../chart/palette.js";
import { drawPartition } from "../chart/partition.js";
import { drawXY, numberAxis } from "../chart/xy.js";
import { timeAxis } from "../charts.js";
import { byId, clear, el } from "../dom.js";
import { middleEllipsis } from "../ellipsis.js";
import { DASH, decimalFormat, fmtBytes, fmtDuration, fmtFixed2, fmtInt, fmtPctSign, fmtUs } from "../format.js";
import { setJsonLink, showStorageBanner, showViewError, unknownRunBox, updateNavLinks } from "../selector.js";
import { emptyState, errorBox, loading } from "../status.js";
import { renderTable, sortRows } from "../table.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

// The page's own state changes a user makes (device, zoom, moment, allocation, sort...): Back undoes them.
const USER_ACTION = { push: true };

const params = readParams();
const statusEl = byId("status");
const root = byId("memory");
let controller = null;

const MIB = 1024 * 1024;
const fixed1 = decimalFormat(1, 1);
const SUNBURST_DEPTH = 4; // the root and three rings at a time; a click on a sector zooms into it
const STATE_COLORS = { active_allocated: "#4e79a7", active_pending_free: "#e15759", inactive: "#d5d9df" };

function numberOrNull(value) {
  const n = Number(value);
  return value === undefined || value === "" || Number.isNaN(n) ? null : n;
}

// ---- selection -------------------------------------------------------------------------------------
function sourcesOf(runInfo) {
  const traces = (runInfo.workers || []).flatMap((w) =>
    w.spans.map((s) => ({ kind: "trace", worker: w.worker, span: s, label: `trace \u00b7 ${w.worker} \u00b7 ${s}` })),
  );
  const snapshots = (runInfo.snapshots || [])
    .filter((s) => s.state !== "error")
    .map((s) => ({ kind: "snapshot", worker: s.worker, snapshot: s.snapshot, label: `snapshot \u00b7 ${s.worker} \u00b7 ${s.snapshot}` }));
  const logs = (runInfo.memory_logs || [])
    .filter((s) => s.state !== "error")
    .map((s) => ({ kind: "log", worker: s.worker, log: s.log, label: `${s.log} \u00b7 ${s.worker}` }));
  return [...traces, ...snapshots, ...logs];
}

function sourceKey(source) {
  const name = { trace: source.span, snapshot: source.snapshot, log: source.log }[source.kind];
  return `${source.kind}\u0000${source.worker}\u0000${name}`;
}

function chooseSource(sources) {
  if (params.snapshot) return sources.find((s) => s.kind === "snapshot" && s.snapshot === params.snapshot && (!params.worker || s.worker === params.worker));
  if (params.log) return sources.find((s) => s.kind === "log" && s.log === params.log && (!params.worker || s.worker === params.worker));
  if (params.span || params.worker) {
    return sources.find((s) => s.kind === "trace" && (!params.worker || s.worker === params.worker) && (!params.span || s.span === params.span));
  }
  return sources[0];
}

function renderBar(runs, runInfo, sources, current) {
  const runSelect = el(
    "select",
    { id: "sel-run", "aria-label": "Run", onchange: (e) => location.assign(withQuery("/memory", { run: e.target.value })) },
    runs.map((r) => el("option", { value: r.run, selected: r.run === runInfo.run, text: r.run })),
  );
  const sourceSelect = el(
    "select",
    {
      id: "sel-source",
      "aria-label": "Trace, snapshot or memory.log",
      onchange: (e) => {
        const next = sources.find((s) => sourceKey(s) === e.target.value);
        location.assign(withQuery("/memory", { run: runInfo.run, worker: next.worker, span: next.span, snapshot: next.snapshot, log: next.log }));
      },
    },
    sources.map((s) => el("option", { value: sourceKey(s), selected: current && sourceKey(s) === sourceKey(current), text: s.label })),
  );
  clear(
    byId("selector"),
    el("label", {}, "Run", runSelect),
    el("label", {}, "Source", sourceSelect),
    el("span", { class: "spacer" }),
    el("a", { id: "json-link", href: "#", hidden: true, title: "This view as JSON (the API call the page makes)", text: "JSON" }),
  );
}

async function start() {
  let data;
  try {
    data = await getJSON("/api/runs");
  } catch (error) {
    clear(statusEl, errorBox({ title: "Cannot list runs", message: error.message }));
    return;
  }
  const runs = data.runs || [];
  showStorageBanner(data.roots);
  if (!runs.length) {
    clear(byId("selector"));
    clear(statusEl, emptyState("No traces or snapshots found", el("a", { href: "/", text: "See the Runs page" })));
    return;
  }
  const runInfo = params.run
    ? runs.find((r) => r.run === params.run)
    : runs.find((r) => (r.views || []).includes("memory")) || runs[0];
  if (!runInfo) {
    clear(statusEl, await unknownRunBox(params.run));
    return;
  }
  const sources = sourcesOf(runInfo);
  const current = chooseSource(sources);
  renderBar(runs, runInfo, sources, current);
  if (!current) {
    const reasons = (runInfo.errors || []).map((e) => `${e.file}: ${e.message}`).join("\n");
    clear(statusEl, errorBox({ title: "Nothing to show in this run", message: reasons || "No readable trace or snapshot." }));
    return;
  }
  const ident = {
    trace: { run: runInfo.run, worker: current.worker, span: current.span },
    snapshot: { run: runInfo.run, worker: current.worker, snapshot: current.snapshot },
    log: { run: runInfo.run, worker: current.worker, log: current.log },
  }[current.kind];
  updateUrl(ident);
  updateNavLinks(current.kind === "trace" ? ident : { run: runInfo.run }, runInfo);
  if (current.kind === "trace") new ProfilerMemory(ident).load();
  else if (current.kind === "snapshot") new SnapshotMemory(ident).load();
  else new MemoryLogView(ident).load();
}

function deviceSelect(devices, current, label, onChange) {
  return el(
    "label",
    {},
    label,
    el(
      "select",
      { id: "sel-device", "aria-label": "Device", onchange: (e) => onChange(e.target.value) },
      devices.map((d) => el("option", { value: String(d.value), selected: String(d.value) === String(current), text: d.label })),
    ),
  );
}

function stat(label, value, title = null) {
  return el("div", { class: "mem-stat", title }, el("div", { class: "label", text: label }), el("div", { class: "value", text: value }));
}

function tablePanel(title, sub, testid) {
  const body = el("div", { class: "mem-table" });
  const count = el("span", { class: "sub" });
  return { panel: el("section", { class: "panel", "data-testid": testid }, el("h2", {}, title, el("span", { class: "sub", text: sub }), count), body), body, count };
}

// ---- profiler memory events ----------------------------------------------------------------------
const EVENT_COLUMNS = [
  { key: "operator", label: "Operator", cls: "name" },
  { key: "size_bytes", label: "Size", num: true, format: fmtBytes },
  { key: "alloc_time_us", label: "Allocation Time (\u00b5s)", num: true, format: fmtUs },
  { key: "release_time_us", label: "Release Time (\u00b5s)", num: true, format: fmtUs },
  { key: "duration_us", label: "Duration (\u00b5s)", num: true, format: fmtUs },
];
const STAT_COLUMNS = [
  { key: "operator", label: "Operator", cls: "name" },
  { key: "calls", label: "Calls", num: true, format: fmtInt },
  { key: "size_increase_bytes", label: "Size Increase", num: true, format: fmtBytes, title: "Memory increase including all operators called by it" },
  { key: "self_size_increase_bytes", label: "Self Size Increase", num: true, format: fmtBytes, title: "Memory increase by the operator itself" },
  { key: "allocation_count", label: "Allocation Count", num: true, format: fmtInt, title: "Allocations including all operators called by it" },
  { key: "self_allocation_count", label: "Self Allocation Count", num: true, format: fmtInt },
  { key: "allocation_size_bytes", label: "Allocation Size", num: true, format: fmtBytes, title: "Bytes allocated including all operators called by it (frees not subtracted)" },
  { key: "self_allocation_size_bytes", label: "Self Allocation Size", num: true, format: fmtBytes },
];

class ProfilerMemory {
  constructor(ident) {
    this.ident = ident;
    this.device = params.device || null;
    this.window = { start: numberOrNull(params.start_us), end: numberOrNull(params.end_us) };
    this.eventsSort = params.events_sort || "alloc_time_us";
    this.statsSort = params.stats_sort || "-self_size_increase_bytes";
  }

  query() {
    return { ...this.ident, device: this.device, start_us: this.window.start, end_us: this.window.end, width_px: 1500 };
  }

  async load() {
    controller?.abort();
    controller = new AbortController();
    if (!this.data) clear(root, loading());
    const url = withQuery("/api/memory", this.query());
    setJsonLink(url);
    try {
      this.data = await loadView(url, { statusEl, signal: controller.signal });
    } catch (error) {
      if (!isAbort(error)) {
        clear(root);
        showViewError(statusEl, error, this.ident);
      }
      return;
    }
    this.device = this.data.device;
    updateUrl({ device: this.device });
    this.render();
  }

  render() {
    const data = this.data;
    if (!data.devices.length) {
      clear(root, emptyState("This trace has no memory events", data.reason || "", "Pick an allocator snapshot in Source, if the run has one."));
      return;
    }
    const windowed = this.window.start !== null || this.window.end !== null;
    const controls = el(
      "div",
      { class: "controls" },
      deviceSelect(data.devices.map((d) => ({ value: d, label: d })), data.device, "Device", (next) => {
        this.device = next;
        this.window = { start: null, end: null };
        updateUrl({ device: next, start_us: null, end_us: null }, USER_ACTION);
        this.load();
      }),
      windowed
        ? el("span", { class: "window-note", "data-testid": "range" },
            `Range ${fmtUs(data.window_us[0])} \u2013 ${fmtUs(data.window_us[1])} \u00b5s `,
            el("button", { type: "button", text: "Reset range", onclick: () => this.setWindow(null, null) }))
        : el("span", { class: "muted", text: "Drag on the curve to select a time range; both tables follow it." }),
    );
    const stats = el(
      "div",
      { class: "mem-stats" },
      data.peak_allocated_bytes != null
        ? stat("Peak allocated", fmtBytes(data.peak_allocated_bytes), "Largest 'Total Allocated' of this device's memory events")
        : null,
      // The CPU allocator reserves nothing (kineto writes 0); old traces record no totals: not shown.
      data.peak_reserved_bytes && data.device !== "CPU"
        ? stat("Peak reserved", fmtBytes(data.peak_reserved_bytes), "Largest 'Total Reserved' (allocated + cached by the allocator)")
        : null,
      stat("Memory events in range", fmtInt(data.points_in_window)),
    );
    const chart = el("div", { class: "chart", id: "memory-curve", "data-testid": "memory-curve" });
    const events = tablePanel("Memory Events", "allocation and release paired by address", "memory-events");
    const opStats = tablePanel("Memory Statistics", "per operator", "memory-stats");
    clear(
      root,
      el("div", { class: "page-head" }, el("h1", { text: "Memory" }), el("span", { class: "sub", text: `${data.worker} \u00b7 ${data.span}` })),
      controls,
      el("section", { class: "panel" }, el("h2", {}, "Memory Curve", el("span", { class: "sub", text: "allocated and reserved bytes; peak marked" })), stats,
        data.curve_reason ? el("p", { class: "muted small", "data-testid": "curve-note", text: `The curve: ${data.curve_reason}.` }) : null, chart),
      events.panel,
      opStats.panel,
    );
    this.drawCurve(chart);
    this.drawTable(events, data.events, EVENT_COLUMNS, "events_sort", "eventsSort", "No memory event in this range.");
    this.drawTable(opStats, data.stats, STAT_COLUMNS, "stats_sort", "statsSort", "No operator allocated memory in this range.");
  }

  drawTable(target, rows, columns, param, field, emptyText) {
    target.count.textContent = ` \u00b7 ${fmtInt(rows.length)} rows`;
    if (!rows.length) {
      clear(target.body, emptyState(emptyText));
      return;
    }
    renderTable(target.body, {
      rows: sortRows(rows, this[field]),
      columns,
      sort: this[field],
      testid: `${param.replace("_sort", "")}-table`,
      onSort: (next) => {
        this[field] = next;
        updateUrl({ [param]: next }, USER_ACTION);
        this.drawTable(target, rows, columns, param, field, emptyText);
      },
    });
  }

  drawCurve(chart) {
    const points = this.data.curve;
    const x = points.map((p) => p[0]);
    const allocated = points.map((p) => p[1] / MIB);
    const withReserved = this.data.device !== "CPU" && points.some((p) => p[2] !== null);
    const sinceStart = this.data.curve_kind === "bytes_running_sum";
    let peakIndex = 0;
    for (let i = 1; i < allocated.length; i += 1) if (allocated[i] > allocated[peakIndex]) peakIndex = i;
    const at = (i) => `${fixed1.format(x[i])} \u00b5s`;
    const series = [
      { type: "line", shape: "hv", color: PALETTE[0], name: sinceStart ? "Allocated since the trace started" : "Allocated", x, y: allocated,
        hover: (i) => [at(i), `allocated ${fmtFixed2(allocated[i])} MiB`] },
    ];
    if (withReserved) {
      const reserved = points.map((p) => p[2] / MIB);
      series.push({ type: "line", shape: "hv", color: PALETTE[1], name: "Reserved", x, y: reserved,
        hover: (i) => [at(i), `reserved ${fmtFixed2(reserved[i])} MiB`] });
    }
    const annotations = [];
    if (points.length) {
      series.push({ type: "markers", symbol: "diamond", size: 10, color: "#e15759", name: "Peak", x: [x[peakIndex]], y: [allocated[peakIndex]],
        hover: () => [`peak ${fmtFixed2(allocated[peakIndex])} MiB at ${at(peakIndex)}`] });
      const what = this.window.start !== null || this.window.end !== null ? "highest in range" : "peak";
      annotations.push({ x: x[peakIndex], y: allocated[peakIndex], text: `${what} ${fmtBytes(points[peakIndex][1])}`, color: "#b3261e" });
    }
    drawXY(chart, {
      series,
      x: { range: this.data.window_us, axis: timeAxis("time since the trace starts") },
      y: { title: "MiB" },
      annotations,
      onZoom: (range) => (range ? this.setWindow(range[0], range[1]) : this.setWindow(null, null)),
      label: "Memory curve",
    });
  }

  setWindow(startUs, endUs) {
    this.window = { start: startUs === null ? null : Math.max(0, startUs), end: endUs };
    updateUrl({ start_us: this.window.start === null ? null : this.window.start.toFixed(3), end_us: endUs === null ? null : endUs.toFixed(3) }, USER_ACTION);
    this.load();
  }
}

// ---- allocator snapshots -------------------------------------------------------------------------
const TOP_COLUMNS = [
  { key: "size", label: "Size", num: true, format: fmtBytes },
  { key: "addr", label: "Address", cls: "mono" },
  { key: "stream", label: "Stream", num: true, format: fmtInt },
  { key: "alloc_at_us", label: "Allocated at (\u00b5s)", num: true, format: (v, row) => (row.before_trace ? "before the trace" : fmtInt(v ?? row.alloc_entry)) },
  { key: "top_frames", label: "Where (innermost Python frames)", cls: "frames", format: (v) => (v && v.length ? v.slice(0, 2).map(shortFrame).join("\n") : DASH),
    cell: (row) => (row.top_frames?.length ? row.top_frames.slice(0, 2).map((frame) => middleEllipsis(shortFrame(frame), { whole: true })) : DASH) },
];

// The names of a snapshot timeline's window, by the timeline's axis (as /api/memory/snapshot/timeline's)
const WINDOW_NAMES = { time_us: ["start_us", "end_us"], entry: ["start_entry", "end_entry"] };
const OLD_WINDOW_NAMES = ["start", "end"];

class SnapshotMemory {
  constructor(ident) {
    this.ident = ident;
    this.device = numberOrNull(params.device);
    // The window on the timeline's x axis, named for its unit as in the API: start_us / end_us (µs since the
    // device's first entry) or start_entry / end_entry (entry indexes: a snapshot without times). Links
    // from before said start / end for either: read once, then renamed once the axis is known.
    this.window = {
      start: numberOrNull(params.start_us ?? params.start_entry ?? params.start),
      end: numberOrNull(params.end_us ?? params.end_entry ?? params.end),
    };
    this.windowNames = params.start_us !== undefined || params.end_us !== undefined ? WINDOW_NAMES.time_us
      : params.start_entry !== undefined || params.end_entry !== undefined ? WINDOW_NAMES.entry : OLD_WINDOW_NAMES;
    this.moment = params.moment === "end" ? "end" : "peak";
    this.pinned = numberOrNull(params.allocation);
  }

  q(extra = {}) {
    return { ...this.ident, device: this.device, ...extra };
  }

  async load() {
    controller?.abort();
    controller = new AbortController();
    clear(root, loading());
    const url = withQuery("/api/memory/snapshot", this.q());
    setJsonLink(url);
    try {
      this.summary = await loadView(url, { statusEl, signal: controller.signal });
    } catch (error) {
      if (!isAbort(error)) showViewError(statusEl, error, this.ident);
      clear(root);
      return;
    }
    if (!this.summary.devices.length) {
      clear(root, emptyState("This snapshot has no segments and no trace entries"));
      return;
    }
    // Opened without a device: the one that ran out of memory, if any (its OOM panel is scrolled to).
    this.openOnOom = this.device === null && (this.summary.oom_devices || []).length > 0;
    if (this.openOnOom) this.device = this.summary.oom_devices[0];
    if (this.device === null || !this.summary.devices.some((d) => d.device === this.device)) this.device = this.summary.devices[0].device;
    updateUrl({ device: this.device });
    this.render();
  }

  render() {
    const info = this.summary.devices.find((d) => d.device === this.device);
    this.timelineEl = el("div", { class: "chart timeline", id: "snapshot-timeline", "data-testid": "snapshot-timeline" });
    this.timelineNote = el("div", { class: "muted timeline-note" });
    this.tooltip = el("div", { class: "band-tooltip", "data-testid": "band-tooltip", hidden: true });
    this.detail = el("div", { class: "band-detail", "data-testid": "allocation-detail" });
    this.segmentsEl = el("div", { "data-testid": "segments" });
    this.topEl = el("div", { "data-testid": "top-allocations" });
    this.sunburstEl = el("div", { class: "chart sunburst", id: "stack-sunburst", "data-testid": "stack-sunburst" });
    this.oomEl = el("div", { "data-testid": "oom", id: "oom" });
    const momentButtons = el(
      "span",
      { class: "segmented", role: "group", "aria-label": "Moment" },
      ["peak", "end"].map((m) =>
        el("button", { type: "button", "aria-pressed": String(this.moment === m), text: m === "peak" ? "at the peak" : "at snapshot time",
          onclick: () => { this.moment = m; updateUrl({ moment: m === "peak" ? null : m }, USER_ACTION); this.loadLive(); } }),
      ),
    );
    clear(
      root,
      el("div", { class: "page-head" }, el("h1", { text: "Memory" }), el("span", { class: "sub", text: `${this.summary.worker} \u00b7 ${this.summary.snapshot} (${this.summary.shape})` })),
      el(
        "div",
        { class: "controls" },
        deviceSelect(this.summary.devices.map((d) => ({ value: d.device, label: `cuda:${d.device}${d.oom_count ? " (out of memory)" : ""}` })), this.device, "Device", (next) => this.showDevice(Number(next))),
      ),
      this.oomBanner(info),
      el(
        "div",
        { class: "mem-stats" },
        stat("Peak allocated", fmtBytes(info.peak_allocated_bytes), "Largest allocated bytes of the replayed trace (requested sizes, as memory_viz)"),
        stat("Allocated at snapshot", fmtBytes(info.end_allocated_bytes)),
        stat("Peak reserved", fmtBytes(info.peak_reserved_bytes), "cudaMalloc'd segments, replayed backwards from the snapshot"),
        stat("Reserved at snapshot", fmtBytes(info.end_reserved_bytes)),
        stat("Trace entries", fmtInt(info.entries)),
        stat("Allocations", fmtInt(info.allocations)),
      ),
      el("section", { class: "panel" },
        el("h2", {}, "Active Memory Timeline", el("span", { class: "sub", text: "each live allocation a band; drag to zoom, double-click to reset; hover for details, click to pin" })),
        this.timelineNote, el("div", { class: "timeline-wrap" }, this.timelineEl, this.tooltip), this.detail),
      this.oomEl,
      el("div", { class: "grid mem-live" },
        el("section", { class: "panel" }, el("h2", {}, "Largest live allocations ", momentButtons), this.topEl),
        el("section", { class: "panel" }, el("h2", {}, "Live bytes by call stack", el("span", { class: "sub", text: "from the outermost frame (centre) inwards" })), this.sunburstNote = el("div", { class: "muted small frames-note" }), this.sunburstEl)),
      el("section", { class: "panel" }, el("h2", {}, "Allocator state at snapshot time", el("span", { class: "sub", text: "segments and their blocks" })), this.segmentsEl),
    );
    this.loadTimeline();
    this.loadLive();
    this.loadSegments();
    this.loadOom();
    if (this.pinned !== null) this.pin(this.pinned, { restoring: true });
  }

  showDevice(device) {
    this.device = device;
    this.openOnOom = false;
    this.window = { start: null, end: null };
    updateUrl({ device, ...this.windowUrl(null, null, WINDOW_NAMES.time_us), allocation: null }, USER_ACTION);
    this.render();
  }

  /** Which devices ran out of memory: this one (with a link down to its OOM panel) or others (to switch). */
  oomBanner(info) {
    const others = (this.summary.oom_devices || []).filter((d) => d !== this.device);
    if (!info.oom_count && !others.length) return null;
    const when = info.first_oom_at_us !== null && info.first_oom_at_us !== undefined ? ` at ${fmtDuration(info.first_oom_at_us)} on the timeline` : "";
    return el("div", { class: "oom-banner", role: "alert", "data-testid": "oom-banner" },
      info.oom_count
        ? [`cuda:${this.device} ran out of memory${info.oom_count > 1 ? ` ${info.oom_count} times` : ""}${when} (red line). `,
            el("a", { href: "#oom", text: "The request, free memory and what was live ↓", onclick: (event) => { event.preventDefault(); this.oomEl.scrollIntoView({ block: "start" }); } })]
        : null,
      others.length
        ? el("span", {}, info.oom_count ? " Also: " : "", ...others.map((d) =>
            el("button", { type: "button", class: "link", text: `cuda:${d} ran out of memory`, onclick: () => this.showDevice(d) })))
        : null);
  }

  async fetchView(path, extra = {}) {
    return loadView(withQuery(`/api/memory/snapshot/${path}`, this.q(extra)), { statusEl });
  }

  // -- timeline --
  async loadTimeline() {
    const height = 420;
    if (!this.summary.devices.find((d) => d.device === this.device)?.entries) {
      // A segments-only snapshot (no allocation history): a timeline would be a flat 0-1 axis of nothing.
      this.timelineNote.textContent = "";
      this.timelineEl.style.height = "auto";
      clear(this.timelineEl, emptyState(
        "No allocation history in this snapshot",
        "It holds the allocator's segments only (taken without torch.cuda.memory._record_memory_history), so there is no timeline; " +
          "what was live when it was taken is below.",
      ));
      return;
    }
    // The whole window is asked at the server's default size (computed when the snapshot was read, so
    // the first draw is a cached read; the chart stretches it to the plot); a zoomed window at the plot's own.
    const whole = this.window.start === null && this.window.end === null;
    const size = whole ? {} : { width_px: Math.max(300, Math.round(this.timelineEl.clientWidth || 1100)), height_px: height - 60 };
    const [startName, endName] = this.windowNames;
    const url = withQuery("/api/memory/snapshot/timeline", this.q({ [startName]: this.window.start, [endName]: this.window.end, ...size }));
    setJsonLink(url);
    let data;
    try {
      data = await loadView(url, { statusEl });
    } catch (error) {
      clear(this.timelineEl, errorBox({ title: "Cannot draw the timeline", message: error.message }));
      return;
    }
    this.timeline = data;
    if (this.windowNames !== WINDOW_NAMES[data.axis]) { // an old link's start / end, or another device's axis
      this.windowNames = WINDOW_NAMES[data.axis];
      updateUrl(this.windowUrl(this.window.start, this.window.end, this.windowNames));
    }
    const axisLabel = data.axis === "time_us" ? "time since the first trace entry" : "trace entry (the snapshot records no times)";
    this.timelineNote.textContent =
      `${fmtInt(data.bands_shown)} allocations drawn one by one (each \u2265 ${fmtBytes(data.bytes_per_px)} per pixel), ` +
      `${fmtInt(data.summarized_count)} smaller ones summarized in the grey band at the bottom. x: ${axisLabel}.`;
    this.drawTimeline(data, height);
  }

  drawTimeline(data, height) {
    const groups = PALETTE.slice(0, 10).map((color) => ({ x: [], y: [], color }));
    data.bands.forEach((band, index) => {
      const group = groups[index % groups.length];
      const outline = bandOutline(band, data.window);
      group.x.push(...outline.x, null);
      group.y.push(...outline.y.map((v) => v / MIB), null);
    });
    const small = stepOutline(data.summarized.x, data.summarized.y, data.window[1]);
    const series = [
      { type: "area", shape: "hv", color: "#c9ced6", opacity: 1, name: "small allocations", legend: false, x: small.x, y: small.y.map((v) => v / MIB) },
      ...groups.filter((g) => g.x.length).map((g) => ({ type: "polygons", color: g.color, x: g.x, y: g.y })),
    ];
    if (data.reserved.x.length) {
      series.push({ type: "line", shape: "hv", dash: true, color: "#6b7480", width: 1, name: "reserved", legend: false, x: data.reserved.x,
        y: data.reserved.max.map((v) => v / MIB) });
    }
    const chart = this.timelineEl;
    chart.style.height = `${height}px`;
    this.timelineFrame = drawXY(chart, {
      series,
      x: { range: data.window, axis: data.axis === "time_us" ? timeAxis("time") : numberAxis("trace entry") },
      y: { title: "MiB" },
      hover: "none",
      legend: false,
      vlines: this.oomMarker(data),
      onZoom: (range) => {
        this.window = range ? { start: range[0], end: range[1] } : { start: null, end: null };
        updateUrl(this.windowUrl(this.window.start, this.window.end, this.windowNames), USER_ACTION);
        this.loadTimeline();
      },
      onClick: (_at, event) => {
        const band = this.bandAt(event);
        if (band) this.pin(band.id);
      },
      label: "Active memory timeline",
    });
    if (!chart.dataset.bound) {
      chart.dataset.bound = "1";
      chart.addEventListener("mousemove", (event) => this.hover(event));
      chart.addEventListener("mouseleave", () => { this.tooltip.hidden = true; });
    }
  }

  /** URL parameters of a window on the timeline: ``names`` set (entries as whole indexes), the others removed. */
  windowUrl(start, end, names) {
    const cleared = Object.fromEntries([...Object.values(WINDOW_NAMES).flat(), ...OLD_WINDOW_NAMES].map((name) => [name, null]));
    const entries = names === WINDOW_NAMES.entry;
    const shown = (value, round) => (value === null ? null : entries ? String(round(value)) : value.toFixed(1));
    return { ...cleared, [names[0]]: shown(start, Math.floor), [names[1]]: shown(end, Math.ceil) };
  }

  /** A red line where this device first ran out of memory (timelines with times only). */
  oomMarker(data) {
    const at = this.summary.devices.find((d) => d.device === this.device)?.first_oom_at_us;
    if (data.axis !== "time_us" || at === null || at === undefined) return [];
    return [{ x: at, text: "OOM", color: "#b3261e" }];
  }

  bandAt(event) {
    const at = this.timelineFrame?.toData(event);
    if (!at || !this.timeline) return null;
    const y = at.y * MIB;
    for (const band of this.timeline.bands) {
      const bottom = bandBottomAt(band, at.x);
      if (bottom !== null && y >= bottom && y < bottom + band.size) return band;
    }
    return null;
  }

  hover(event) {
    const band = this.bandAt(event);
    if (!band) {
      this.tooltip.hidden = true;
      return;
    }
    const frames = this.timeline.stacks[band.stack] || [];
    const when = this.timeline.axis === "time_us" ? "\u00b5s" : "entry";
    clear(
      this.tooltip,
      el("strong", { text: `${fmtBytes(band.size)} at ${band.addr}` }),
      el("div", { text: `stream ${band.stream} \u00b7 live ${fmtInt(band.x_start)} \u2013 ${fmtInt(band.x_end)} ${when}` }),
      el("pre", { text: frames.length ? frames.join("\n") : "no stack recorded" }),
      el("div", { class: "muted", text: "click to pin and see the whole stack" }),
    );
    const box = this.timelineEl.getBoundingClientRect();
    this.tooltip.style.left = `${Math.min(event.clientX - box.left + 14, box.width - 380)}px`;
    this.tooltip.style.top = `${event.clientY - box.top + 14}px`;
    this.tooltip.hidden = false;
  }

  /** Show an allocation's details; a click adds a history entry, restoring the URL's `allocation` does not. */
  async pin(id, { restoring = false } = {}) {
    this.pinned = id;
    updateUrl({ allocation: id }, { push: !restoring });
    clear(this.detail, loading());
    let detail;
    try {
      detail = await this.fetchView("allocation", { id });
    } catch (error) {
      clear(this.detail, errorBox({ title: "Cannot load the allocation", message: error.message }));
      return;
    }
    const at = (us, entry) => (us !== null ? `${fmtInt(us)} \u00b5s` : `entry ${fmtInt(entry)}`);
    const freed = detail.free_entry === null ? "still allocated at snapshot time" : `freed at ${at(detail.free_at_us, detail.free_entry)}`;
    const allocated = detail.before_trace ? "allocated before the trace began" : `allocated at ${at(detail.alloc_at_us, detail.alloc_entry)}`;
    clear(
      this.detail,
      el("h3", {}, `Allocation ${detail.addr} \u00b7 ${fmtBytes(detail.size)}`, el("button", { type: "button", class: "link", text: "close", onclick: () => { clear(this.detail); updateUrl({ allocation: null }, USER_ACTION); } })),
      el("div", { class: "muted", text: `stream ${detail.stream} \u00b7 ${allocated} \u00b7 ${freed}` }),
      frameList(detail.frames),
    );
  }

  // -- top allocations and sunburst --
  async loadLive() {
    for (const button of root.querySelectorAll('[aria-label="Moment"] button')) {
      button.setAttribute("aria-pressed", String(button.textContent === (this.moment === "peak" ? "at the peak" : "at snapshot time")));
    }
    clear(this.topEl, loading());
    try {
      const [top, stacks] = await Promise.all([this.fetchView("top", { moment: this.moment, limit: 200 }), this.fetchView("stacks", { moment: this.moment })]);
      this.drawTop(top);
      this.drawSunburst(stacks);
    } catch (error) {
      clear(this.topEl, errorBox({ title: "Cannot load live allocations", message: error.message }));
    }
  }

  drawTop(top) {
    const note = el("div", { class: "muted", text: `${fmtInt(top.live_count)} allocations, ${fmtBytes(top.live_bytes)} live ${this.moment === "peak" ? "at the peak" : "when the snapshot was taken"}; the largest ${fmtInt(top.rows.length)}:` });
    const body = el("div", { class: "mem-table" });
    clear(this.topEl, note, body);
    if (!top.rows.length) {
      clear(body, emptyState("Nothing was allocated at that moment."));
      return;
    }
    renderTable(body, {
      rows: top.rows, columns: TOP_COLUMNS, sort: "-size", testid: "top-table", rowKey: (r) => String(r.id),
      onSort: () => {}, onToggle: (row) => this.pin(row.id),
    });
  }

  drawSunburst(tree) {
    if (!tree.ids.length || !tree.total_bytes) {
      clear(this.sunburstEl, emptyState("Nothing was allocated at that moment."));
      return;
    }
    this.sunburstNote.textContent = tree.common_frames.length
      ? `Every stack starts with ${tree.common_frames.length} shared frame(s), not drawn: ${tree.common_frames.slice(-2).join(" \u2192 ")}`
      : "";
    drawPartition(this.sunburstEl, {
      kind: "sunburst",
      // sectors show the function alone ("forward (model.py:40)" is too long to stay legible); hover has it all
      nodes: { ids: tree.ids, labels: tree.labels, parents: tree.parents, values: tree.values, text: tree.labels.map((l) => l.split(" (")[0]) },
      branchvalues: "total",
      maxdepth: SUNBURST_DEPTH,
      hover: (i, node) => [tree.labels[i], `${fmtInt(node.total)} bytes \u00b7 ${fmtPctSign(100 * node.percentRoot)} of live`],
      label: "Live bytes by call stack",
    });
  }

  // -- allocator state --
  async loadSegments() {
    clear(this.segmentsEl, loading());
    let state;
    try {
      state = await this.fetchView("segments");
    } catch (error) {
      clear(this.segmentsEl, errorBox({ title: "Cannot load the segments", message: error.message }));
      return;
    }
    const chart = el("div", { class: "chart segments-chart", "data-testid": "segments-chart" });
    clear(
      this.segmentsEl,
      el("div", { class: "mem-stats" },
        stat("Reserved", fmtBytes(state.reserved_bytes), `${fmtInt(state.segment_count)} segments (cudaMalloc)`),
        stat("Allocated", fmtBytes(state.allocated_bytes), "active_allocated blocks (block sizes)"),
        stat("Rounding waste", fmtBytes(state.rounding_waste_bytes), "block size - requested size of allocated blocks"),
        stat("Pending free", fmtBytes(state.pending_free_bytes), "freed, waiting for other streams (record_stream)"),
        stat("Cached (free)", fmtBytes(state.cached_bytes), "inactive blocks: free space inside reserved segments"),
        stat("Largest cached block", fmtBytes(state.largest_cached_block)),
        stat("Fragmentation", fmtPctSign(100 * state.fragmentation), `fragmentation = ${state.fragmentation_definition}`)),
      el("p", { class: "muted", text: `Fragmentation = ${state.fragmentation_definition}: 0% when the free space is one block; near 100% when it is split into many small pieces, so a large request can fail although the free total would fit.` }),
      chart,
    );
    drawSegments(chart, state);
  }

  async loadOom() {
    let data;
    try {
      data = await this.fetchView("oom");
    } catch {
      return;
    }
    if (!data.ooms.length) {
      clear(this.oomEl);
      return;
    }
    clear(
      this.oomEl,
      ...data.ooms.map((oom) =>
        el("section", { class: "panel oom", "data-testid": "oom-moment" },
          el("h2", {}, "Out of memory", el("span", { class: "sub", text: oom.at_us !== null ? `at ${fmtUs(oom.at_us)} \u00b5s on the timeline` : `at trace entry ${fmtInt(oom.entry)}` })),
          el("div", { class: "mem-stats" },
            stat("Requested", fmtBytes(oom.requested_bytes)),
            stat("Free on the device (driver)", fmtBytes(oom.device_free_bytes)),
            stat("Allocated then", fmtBytes(oom.allocated_bytes)),
            stat("Reserved then", fmtBytes(oom.reserved_bytes)),
            stat("Largest cached block", fmtBytes(oom.largest_cached_block_at_snapshot), "free block inside reserved segments, at snapshot time"),
            stat("Live allocations", fmtInt(oom.live_count))),
          oom.entries_after ? el("p", { class: "muted", text: `The trace goes on for ${fmtInt(oom.entries_after)} allocations/frees after this OOM, so the cached blocks shown are those at snapshot time.` }) : null,
          frameList(oom.frames, "oom-frames", "No stack was recorded for this request."),
          el("div", { class: "mem-table" }, ...oom.largest_live.map((a) => el("div", { class: "oom-live" }, el("span", { text: `${fmtBytes(a.size)} ${a.addr}` }), middleEllipsis(a.top_frames[0] || "", { cls: "muted", whole: true })))),
        ),
      ),
    );
    if (this.openOnOom) {
      this.openOnOom = false;
      this.oomEl.scrollIntoView({ block: "start" });
    }
  }
}

// ---- InternLM memory.log -------------------------------------------------------------------------
const CATEGORY_COLORS = { params: PALETTE[0], grads: PALETTE[1], os_params: PALETTE[2], os_state: PALETTE[3], activation: PALETTE[4] };

class MemoryLogView {
  constructor(ident) {
    this.ident = ident;
    this.window = { start: numberOrNull(params.start_us), end: numberOrNull(params.end_us) };
    this.category = params.category || null;
  }

  q(extra = {}) {
    return { run: this.ident.run, worker: this.ident.worker, ...extra };
  }

  async load() {
    controller?.abort();
    controller = new AbortController();
    if (!this.data) clear(root, loading());
    const url = withQuery("/api/memory/log", this.q({ start_us: this.window.start, end_us: this.window.end, width_px: 1500 }));
    setJsonLink(url);
    try {
      this.data = await loadView(url, { statusEl, signal: controller.signal });
    } catch (error) {
      if (!isAbort(error)) {
        clear(root);
        showViewError(statusEl, error, this.ident);
      }
      return;
    }
    this.render();
  }

  render() {
    const data = this.data;
    const head = el("div", { class: "page-head" }, el("h1", { text: "Memory" }),
      el("span", { class: "sub", text: `${data.worker} \u00b7 ${data.log} (InternLM SimpleMemoryProfiler)` }));
    const warnings = data.warnings.length
      ? el("ul", { class: "muted log-warnings", "data-testid": "log-warnings" }, data.warnings.map((w) => el("li", { text: w })))
      : null;
    if (!data.points) {
      clear(root, head, emptyState("This memory.log has no memory state yet", "SimpleMemoryProfiler writes one at start, after each forward and backward, and at each step."), warnings);
      return;
    }
    const windowed = this.window.start !== null || this.window.end !== null;
    const at = (name) => data.at_peak[name];
    const stats = el(
      "div",
      { class: "mem-stats" },
      stat("Peak total", fmtBytes(data.peak_allocated_bytes), `Largest total_memory in the log, at ${fmtUs(data.peak_time_us)} \u00b5s`),
      stat("Parameters", fmtBytes(at("params")), "params_memory at the peak"),
      stat("Gradients", fmtBytes(at("grads")), "grads_memory at the peak"),
      stat("Optimizer", fmtBytes(at("os_params") + at("os_state")), "os_params_memory + os_state_memory at the peak"),
      stat("Activations at peak", fmtBytes(at("activation"))),
      stat("Peak activations", fmtBytes(data.peaks.activation)),
      stat("Points in range", fmtInt(data.points_in_window)),
    );
    const controls = el(
      "div",
      { class: "controls" },
      windowed
        ? el("span", { class: "window-note", "data-testid": "range" },
            `Range ${fmtUs(data.window_us[0])} \u2013 ${fmtUs(data.window_us[1])} \u00b5s `,
            el("button", { type: "button", text: "Reset range", onclick: () => this.setWindow(null, null) }))
        : el("span", { class: "muted", text: "Drag on the curve to zoom into a time range." }),
    );
    const chart = el("div", { class: "chart", id: "log-curve", "data-testid": "log-curve" });
    this.sunburstEl = el("div", { class: "chart sunburst", id: "layer-sunburst", "data-testid": "layer-sunburst" });
    this.sunburstNote = el("div", { class: "muted small" });
    const available = data.sunbursts.map((s) => s.category);
    if (!available.includes(this.category)) this.category = available[0] || null;
    this.categoryButtons = el(
      "span",
      { class: "segmented", role: "group", "aria-label": "Category" },
      data.sunbursts.map((s) => el("button", { type: "button", "aria-pressed": String(s.category === this.category), text: s.label, dataset: { category: s.category },
        onclick: () => { this.category = s.category; updateUrl({ category: s.category }, USER_ACTION); this.loadLayers(); } })),
    );
    clear(
      root,
      head,
      controls,
      warnings,
      el("section", { class: "panel" },
        el("h2", {}, "Memory Curve", el("span", { class: "sub", text: "tensor bytes by category (stacked); total and its peak marked" })), stats, chart),
      el("section", { class: "panel" },
        el("h2", {}, "Memory by layer ", this.categoryButtons),
        this.sunburstNote, available.length ? this.sunburstEl : emptyState("This memory.log has no layout yet")),
    );
    this.drawCurve(chart);
    if (this.category) this.loadLayers();
  }

  drawCurve(chart) {
    const data = this.data;
    const x = data.curve.map((p) => p[0]);
    const total = data.curve.map((p) => p[1] / MIB);
    // a step per logged point (the state holds until the next one), stacked; markers show each point, the last included
    const base = x.map(() => 0);
    const series = data.categories.map((c) => {
      const below = base.slice();
      const values = data.category_curve[c.category].map((v) => v / MIB);
      values.forEach((v, i) => { base[i] += v; });
      return { type: "area", shape: "hv", width: 0.5, markers: 4, color: CATEGORY_COLORS[c.category], name: c.label, x, y: base.slice(), base: below,
        hover: (i) => [`${c.label} ${fmtFixed2(values[i])} MiB`] };
    });
    series.push({ type: "line", shape: "hv", color: "#1f2328", width: 1.5, dash: true, name: "total", x, y: total,
      hover: (i) => [`total ${fmtFixed2(total[i])} MiB`] });
    let peakIndex = 0;
    for (let i = 1; i < total.length; i += 1) if (total[i] > total[peakIndex]) peakIndex = i;
    const annotations = [];
    if (x.length) {
      series.push({ type: "markers", symbol: "diamond", size: 10, color: "#e15759", name: "peak", legend: false, x: [x[peakIndex]], y: [total[peakIndex]] });
      const what = this.window.start !== null || this.window.end !== null ? "highest in range" : "peak";
      annotations.push({ x: x[peakIndex], y: total[peakIndex], text: `${what} ${fmtBytes(data.curve[peakIndex][1])}`, color: "#b3261e" });
    }
    drawXY(chart, {
      series: [...series.slice(-2), ...series.slice(0, -2)].reverse(), // the stack's top drawn last, total and peak over it
      x: { range: data.window_us, axis: timeAxis("time since the profiler started") },
      y: { title: "MiB" },
      hover: "x",
      xLabel: (value) => `${fmtInt(value)} \u00b5s`,
      annotations,
      onZoom: (range) => (range ? this.setWindow(range[0], range[1]) : this.setWindow(null, null)),
      label: "Memory curve by category",
    });
  }

  setWindow(startUs, endUs) {
    this.window = { start: startUs === null ? null : Math.max(0, startUs), end: endUs };
    updateUrl({ start_us: this.window.start === null ? null : this.window.start.toFixed(3), end_us: endUs === null ? null : endUs.toFixed(3) }, USER_ACTION);
    this.load();
  }

  async loadLayers() {
    for (const button of this.categoryButtons.querySelectorAll("button")) {
      button.setAttribute("aria-pressed", String(button.dataset.category === this.category));
    }
    const url = withQuery("/api/memory/log/layers", this.q({ category: this.category }));
    let tree;
    try {
      tree = await loadView(url, { statusEl });
    } catch (error) {
      clear(this.sunburstEl, errorBox({ title: "Cannot load the layout", message: error.message }));
      return;
    }
    this.sunburstNote.textContent = `${tree.label}: ${fmtBytes(tree.total_bytes)} as logged at ${fmtUs(tree.time_us)} \u00b5s (layouts ${tree.layouts.join(", ")}); from the model (centre) to its tensors`;
    drawPartition(this.sunburstEl, {
      kind: "sunburst",
      nodes: { ids: tree.ids, labels: tree.labels, parents: tree.parents, values: tree.values },
      branchvalues: "total",
      maxdepth: SUNBURST_DEPTH,
      hover: (i, node) => [String(tree.ids[i]), `${fmtInt(node.total)} bytes \u00b7 ${fmtPctSign(100 * node.percentRoot)}`],
      label: `${tree.label} by layer`,
    });
  }
}

/** "/long/path/to/file.py:12 fn" -> "fn (to/file.py:12)" */
function shortFrame(text) {
  const match = /^(.*):(\d+) (.*)$/.exec(text);
  if (!match) return text;
  const parts = match[1].replace(/\\/g, "/").split("/");
  return `${match[3]} (${parts.slice(-2).join("/")}:${match[2]})`;
}

function stepOutline(xs, ys, xEnd) {
  const x = [];
  const y = [];
  for (let i = 0; i < xs.length; i += 1) {
    x.push(xs[i]);
    y.push(ys[i]);
    x.push(i + 1 < xs.length ? xs[i + 1] : xEnd);
    y.push(ys[i]);
  }
  return { x, y };
}

/** A band as a closed polygon: its bottom edge as steps, then the top edge (bottom + size) back. */
function bandOutline(band, window) {
  const xs = band.x.slice();
  const ys = band.y;
  if (!xs.length) return { x: [], y: [] };
  xs[0] = Math.max(Math.min(xs[0], band.x_start), window[0]);
  const end = Math.min(band.x_end, window[1]);
  const bottom = stepOutline(xs, ys, end);
  const x = [...bottom.x, ...bottom.x.slice().reverse()];
  const y = [...bottom.y, ...bottom.y.slice().reverse().map((v) => v + band.size)];
  return { x, y };
}

/** The band's bottom at x, or null when it is not live there. */
function bandBottomAt(band, x) {
  if (!band.x.length || x < Math.min(band.x[0], band.x_start) || x > band.x_end) return null;
  let lo = 0;
  let hi = band.x.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (band.x[mid] <= x) lo = mid;
    else hi = mid - 1;
  }
  return band.y[lo];
}

/** A frame's file and line, cut in the middle so the file name and line stay in sight; all of it on hover. */
function framePath(frame) {
  return middleEllipsis(`${frame.filename}:${frame.line}`, { cls: "frame-path", whole: true });
}

function frameList(frames, testid = "allocation-frames", emptyText = "No stack was recorded for this allocation.") {
  if (!frames.length) return el("p", { class: "muted", text: emptyText });
  return el(
    "ol",
    { class: "frames", "data-testid": testid },
    frames.map((f) =>
      el("li", {},
        middleEllipsis(f.name, { cls: "func" }),
        f.links && f.links.view
          ? el("a", { href: f.links.view, class: "frame-link" }, framePath(f))
          : el("span", { class: "muted" }, framePath(f)),
        f.links && f.links.external ? el("a", { href: f.links.external, class: "external", text: " \u2197", title: "Open in your editor / repository" }) : null),
    ),
  );
}

function drawSegments(chart, state) {
  const shown = state.segments.slice(0, 80);
  if (!shown.length) {
    clear(chart, emptyState("No segments on this device."));
    return;
  }
  const byState = {};
  shown.forEach((segment, row) => {
    segment.blocks.state.forEach((blockState, i) => {
      const from = segment.blocks.offset[i] / MIB;
      (byState[blockState] ||= []).push({ index: row, from, to: from + segment.blocks.size[i] / MIB,
        hover: [`${blockState} ${fmtBytes(segment.blocks.size[i])} (requested ${fmtBytes(segment.blocks.requested_size[i])})`] });
    });
  });
  const height = Math.max(200, 22 * shown.length + 60);
  chart.style.height = `${height}px`; // one row per segment: the box grows with them (the CSS default is 340 px)
  drawBars(chart, {
    categories: shown.map((segment) => `${segment.address} (${fmtBytes(segment.total_size)})`),
    series: Object.entries(byState).map(([name, bars]) => ({
      name: name.replace("active_allocated", "allocated").replace("active_pending_free", "pending free").replace("inactive", "cached (free)"),
      color: STATE_COLORS[name],
      bars,
    })),
    mode: "overlay",
    horizontal: true,
    valueTitle: "MiB from the segment's start",
    gap: 0.2,
    outline: true,
    label: "Segments and their blocks",
  });
  if (state.segments_shown < state.segment_count || state.segments.length > shown.length) {
    chart.after(el("p", { class: "muted", text: `The ${shown.length} largest of ${fmtInt(state.segment_count)} segments are drawn.` }));
  }
}

start();
