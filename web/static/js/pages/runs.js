// Runs page: every run with its state, parse progress, workers x spans and file errors.

import { csvButton } from "../csv.js";
import { byId, clear, debounce, el } from "../dom.js";
import { fmtBytes, fmtInt } from "../format.js";
import { updateNavLinks } from "../selector.js";
import { emptyState, errorBox, progressBar } from "../status.js";
import { readParams, updateUrl, withQuery } from "../urlstate.js";

const BUSY_POLL_MS = 700;
const IDLE_POLL_MS = 5000;
const WORKERS_SHOWN = 8;

let lastBody = "";
let data = null;

function spanChip(run, worker, span, index, count, file) {
  const state = file ? file.state : "queued";
  const details = [file ? file.file : null, `state: ${state}`];
  if (file && state !== "ready" && state !== "error" && file.bytes_total) {
    details.push(`${fmtBytes(file.bytes_done)} of ${fmtBytes(file.bytes_total)}`);
  }
  if (file && file.message) details.push(file.message);
  return el(
    "a",
    {
      class: `chip ${state}`,
      href: withQuery("/overview", { run: run.run, worker, span }),
      title: details.filter(Boolean).join("\n"),
      "data-testid": "span-link",
    },
    el("span", { class: "dot" }),
    count > 1 ? `#${index + 1} ${span}` : span,
  );
}

/** A CUDA allocator snapshot of the run: a chip that opens it on the Memory page. */
function snapshotRow(run, snapshot) {
  const details = [snapshot.file, `state: ${snapshot.state}`, snapshot.message].filter(Boolean).join("\n");
  return [
    el("span", { class: "worker", title: snapshot.worker, text: snapshot.worker }),
    el(
      "span",
      { class: "span-chips" },
      el(
        "a",
        {
          class: `chip ${snapshot.state}`,
          href: withQuery("/memory", { run: run.run, worker: snapshot.worker, snapshot: snapshot.snapshot }),
          title: details,
          "data-testid": "snapshot-link",
        },
        el("span", { class: "dot" }),
        `memory snapshot ${snapshot.snapshot}`,
        oomBadge(snapshot.oom_devices || []),
      ),
    ),
  ];
}

/** "OOM" on a snapshot that holds an out-of-memory entry; the Memory page opens on that device. */
function oomBadge(devices) {
  if (!devices.length) return null;
  const where = devices.map((d) => `cuda:${d}`).join(", ");
  return el("span", { class: "badge error", "data-testid": "oom-badge", title: `Ran out of memory on ${where}`, text: "OOM" });
}

/** An InternLM memory.log of the run: a chip that opens it on the Memory page. */
function memoryLogRow(run, log) {
  const details = [log.file, `state: ${log.state}`, log.message].filter(Boolean).join("\n");
  return [
    el("span", { class: "worker", title: log.worker, text: log.worker }),
    el(
      "span",
      { class: "span-chips" },
      el(
        "a",
        {
          class: `chip ${log.state}`,
          href: withQuery("/memory", { run: run.run, worker: log.worker, log: log.log }),
          title: details,
          "data-testid": "memory-log-link",
        },
        el("span", { class: "dot" }),
        log.log,
      ),
    ),
  ];
}

function workersCell(run) {
  const fileOf = new Map((run.files || []).map((f) => [`${f.worker}\u0000${f.span}`, f]));
  const rows = (run.workers || []).map((w) => [
    el("span", { class: "worker", title: w.worker, text: w.worker }),
    el(
      "span",
      { class: "span-chips" },
      w.spans.map((s, i) => spanChip(run, w.worker, s, i, w.spans.length, fileOf.get(`${w.worker}\u0000${s}`))),
    ),
  ]);
  for (const snapshot of run.snapshots || []) rows.push(snapshotRow(run, snapshot));
  for (const log of run.memory_logs || []) rows.push(memoryLogRow(run, log));
  if (!rows.length) return el("span", { class: "muted", text: "no readable trace" });
  const list = el("div", { class: "worker-list" }, rows.slice(0, WORKERS_SHOWN));
  if (rows.length <= WORKERS_SHOWN) return list;
  return el(
    "div",
    {},
    list,
    el(
      "details",
      {},
      el("summary", { text: `${rows.length - WORKERS_SHOWN} more workers` }),
      el("div", { class: "worker-list" }, rows.slice(WORKERS_SHOWN)),
    ),
  );
}

function stateCell(run) {
  const cell = el("div", {}, el("span", { class: `badge ${run.state}`, text: run.state }));
  if (run.state === "parsing") {
    const files = [...(run.files || []), ...(run.snapshots || []), ...(run.memory_logs || [])];
    const done = files.reduce((sum, f) => sum + (f.state === "ready" || f.state === "error" ? f.bytes_total : f.bytes_done), 0);
    const total = files.reduce((sum, f) => sum + (f.bytes_total || 0), 0);
    cell.append(
      progressBar(run.progress),
      el("div", { class: "faint", text: `${fmtBytes(done)} of ${fmtBytes(total)}` }),
    );
  }
  return cell;
}

function filesCell(run) {
  const files = [...(run.files || []), ...(run.snapshots || []), ...(run.memory_logs || [])];
  const bytes = files.reduce((sum, f) => sum + (f.bytes || 0), 0);
  return `${fmtInt(files.length)} \u00b7 ${fmtBytes(bytes)}`;
}

function errorRow(run) {
  if (!run.errors || !run.errors.length) return null;
  return el(
    "tr",
    { class: "error-row" },
    el("td", {}),
    el(
      "td",
      { colspan: "3" },
      el(
        "ul",
        { class: "file-errors", "data-testid": "file-errors" },
        run.errors.map((e) => el("li", {}, el("span", { class: "file", text: e.file }), ": ", e.message)),
      ),
    ),
  );
}

/** A view's label as the nav shows it: the views registry (views/registry.py) names both. */
const viewLabel = (view) => document.querySelector(`a[data-nav="${view}"]`)?.textContent.trim() || view;

/** A view's link; greyed with "computing…" until the server says its results are there (view_states). */
function viewLink(run, view) {
  const href = withQuery(`/${view}`, { run: run.run });
  if ((run.view_states || {})[view] !== "computing") {
    return el("a", { href, text: viewLabel(view), "data-view": view, "data-state": "ready" });
  }
  return el(
    "a",
    { href, class: "computing", title: "Its results are still being computed", "data-view": view, "data-state": "computing" },
    viewLabel(view),
    el("span", { class: "faint", text: " computing\u2026" }),
  );
}

function viewLinks(run) {
  if (!run.workers?.length && !run.snapshots?.length && !run.memory_logs?.length) return null;
  const links = (run.views || []).map((view) => viewLink(run, view));
  return el("div", { class: "view-links" }, links.flatMap((link, i) => (i ? [" \u00b7 ", link] : [link])));
}

function runRow(run) {
  const first = run.workers?.[0];
  const page = first ? "/overview" : run.snapshots?.length || run.memory_logs?.length ? "/memory" : null;
  const name = page
    ? el("a", { class: "run-name", href: withQuery(page, { run: run.run }), text: run.run })
    : el("span", { class: "run-name", text: run.run });
  return el(
    "tr",
    { "data-run": run.run },
    el("td", {}, name, viewLinks(run)),
    el("td", {}, stateCell(run)),
    el("td", {}, workersCell(run)),
    el("td", { class: "num" }, filesCell(run)),
  );
}

/** A root listed without error but holding no file yet (a bucket prefix before the first upload). */
const isEmptyRoot = (root) => !root.error && root.listed_at && root.objects === 0;

function emptyRoot(root) {
  return el("div", {
    class: "faint",
    "data-testid": "root-empty",
    text: `Nothing under ${root.root} yet: it is listed again every few seconds, and its runs appear when files do.`,
  });
}

function rootError(root) {
  const since = root.listed_at ? new Date(root.listed_at * 1000).toLocaleTimeString() : null;
  const status = since
    ? `Showing the ${fmtInt(root.objects)} files listed at ${since}; parsed runs stay readable.`
    : "No runs from this root until it can be listed.";
  return errorBox({
    title: `Cannot list ${root.root}`,
    message: root.error,
    action: el("div", { class: "faint", "data-testid": "root-status", text: `${status} Retrying automatically.` }),
  });
}

function render() {
  const filter = (readParams().search || "").toLowerCase();
  const runs = data.runs || [];
  const roots = data.roots || [];

  clear(byId("root-errors"), [...roots.filter((r) => r.error).map(rootError), ...roots.filter(isEmptyRoot).map(emptyRoot)]);
  const parsing = runs.filter((r) => r.state === "parsing").length;
  byId("runs-summary").textContent =
    `${fmtInt(runs.length)} run${runs.length === 1 ? "" : "s"} under ${fmtInt(roots.length)} root${roots.length === 1 ? "" : "s"}` +
    (parsing ? ` \u00b7 ${parsing} parsing` : "");

  const target = byId("runs");
  if (!runs.length) {
    const where = roots.map((r) => r.root).join(", ") || "the configured roots";
    clear(
      target,
      emptyState(
        `No traces found under ${where}`,
        "profscope looks for torch.profiler traces (*.pt.trace.json[.gz], *.json[.gz]) in every folder below the roots.",
        "New files are picked up automatically.",
      ),
    );
    return;
  }
  const shown = runs.filter((r) => !filter || r.run.toLowerCase().includes(filter));
  if (!shown.length) {
    clear(target, emptyState(`No run matches \u201c${filter}\u201d`));
    return;
  }
  const table = el(
    "table",
    { class: "data runs-table", "data-testid": "runs-table" },
    el(
      "thead",
      {},
      el("tr", {}, el("th", { text: "Run" }), el("th", { text: "State" }), el("th", { text: "Workers \u00d7 spans" }), el("th", { class: "num", text: "Files" })),
    ),
    el("tbody", {}, shown.map((run) => [runRow(run), errorRow(run)])),
  );
  const csv = csvButton(() => ({
    filename: "runs.csv",
    header: ["Run", "State", "Workers", "Spans", "Files", "Snapshots", "Errors"],
    rows: shown.map((run) => [
      run.run, run.state, (run.workers || []).length, (run.workers || []).reduce((n, w) => n + w.spans.length, 0),
      (run.files || []).length, (run.snapshots || []).length, (run.errors || []).length,
    ]),
  }));
  clear(target, el("div", { class: "panel" }, el("div", { class: "table-tools" }, csv), table));
}

async function poll() {
  let delay = IDLE_POLL_MS;
  try {
    const response = await fetch("/api/runs", { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`GET /api/runs answered ${response.status}`);
    const text = await response.text();
    if (text !== lastBody) {
      lastBody = text;
      data = JSON.parse(text);
      render();
    }
    if ((data.runs || []).some((r) => r.state === "parsing")) delay = BUSY_POLL_MS;
  } catch (error) {
    clear(byId("runs"), errorBox({ title: "Cannot list runs", message: String(error.message || error) }));
  }
  setTimeout(poll, delay);
}

function main() {
  updateNavLinks(null);
  const filterInput = byId("run-filter");
  filterInput.value = readParams().search || "";
  filterInput.addEventListener(
    "input",
    debounce(() => {
      updateUrl({ search: filterInput.value.trim() });
      if (data) render();
    }, 150),
  );
  poll();
}

main();
