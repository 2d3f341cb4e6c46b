// The run / worker / span bar shared by the view pages, the nav links, and the JSON-twin link.

import { ApiError, getJSON, postJSON } from "./api.js";
import { byId, clear, el } from "./dom.js";
import { shortenMiddle } from "./ellipsis.js";
import { emptyState, errorBox, progressBar } from "./status.js";
import { readParams, withQuery } from "./urlstate.js";

// Run and worker names longer than this are cut in the middle in their <select> (full name on hover).
const RUN_LABEL_CHARS = 46;

// Parameters that name a row of one trace: dropped when the trace changes.
const TRACE_LOCAL_PARAMS = ["stack", "shape", "module", "expanded"];

/** A run that holds memory snapshots or memory.log files and no trace: only Memory applies. */
const onlyMemoryFiles = (runInfo) =>
  !(runInfo.files || []).length && ((runInfo.snapshots || []).length > 0 || (runInfo.memory_logs || []).length > 0);

/**
 * Why a page does not apply to a run (the tab's tooltip), or null when it does or cannot be told yet.
 * The reason is the views registry's (``applies`` of each ``views/*.py``, sent as ``unavailable``).
 */
export function unavailableReason(page, runInfo) {
  if (!runInfo || page === "runs") return null;
  const reason = (runInfo.unavailable || {})[page];
  return reason && (runInfo.state === "ready" || onlyMemoryFiles(runInfo)) ? reason : null;
}

/** Point the nav tabs at the same run / worker / span; grey out (with the reason) those that do not apply. */
export function updateNavLinks(ident, runInfo = null) {
  for (const link of document.querySelectorAll("a[data-nav]")) {
    const page = link.dataset.nav;
    if (page === "runs") continue;
    link.setAttribute("href", withQuery(`/${page}`, ident || {}));
    const reason = unavailableReason(page, runInfo);
    link.classList.toggle("unavailable", Boolean(reason));
    if (reason) link.title = reason;
    else link.removeAttribute("title");
  }
}

/** A small banner at the top of the page while a root cannot be listed (the Runs page has the details). */
export function showStorageBanner(roots) {
  document.getElementById("storage-banner")?.remove();
  const down = (roots || []).filter((r) => r.error);
  if (!down.length) return;
  const names = down.map((r) => r.root).join(", ");
  const banner = el("div", { id: "storage-banner", class: "storage-banner", role: "status", "data-testid": "storage-banner", title: down.map((r) => r.error).join("\n") },
    el("strong", { text: `Storage unavailable: cannot list ${names}.` }),
    ` ${down.some((r) => r.stale) ? "Showing its runs from the last listing; " : ""}retrying automatically · `,
    el("a", { href: "/", text: "details on the Runs page" }));
  document.getElementById("main")?.prepend(banner);
}

export function setJsonLink(url) {
  const link = byId("json-link");
  if (!link) return;
  link.setAttribute("href", url);
  link.hidden = false;
}

function navigate(page, changes) {
  const params = readParams();
  for (const key of TRACE_LOCAL_PARAMS) delete params[key];
  location.assign(withQuery(`/${page}`, { ...params, ...changes }));
}

function select(id, label, options, current, onChange) {
  const node = el("select", { id, "aria-label": label, title: current, onchange: (e) => onChange(e.target.value) });
  for (const option of options) {
    node.append(el("option", { value: option.value, selected: option.value === current, text: option.label, title: option.value }));
  }
  if (current === null) node.prepend(el("option", { value: "", selected: true, disabled: true, text: "choose\u2026" }));
  return el("label", {}, label, node);
}

const RUN_POLL_MS = 1500;

function runStateNote(runInfo) {
  const note = el("span", { class: "run-state", id: "run-state" });
  fillRunState(note, runInfo);
  return note;
}

function fillRunState(note, runInfo) {
  if (!runInfo || runInfo.state === "ready") {
    clear(note);
  } else if (runInfo.state === "error") {
    clear(note, el("span", { class: "badge error", title: "No trace of this run could be read", text: "error" }));
  } else {
    note.title = "Traces of this run are still being parsed";
    clear(note, el("span", { class: "badge parsing", text: "parsing" }), " ", progressBar(runInfo.progress));
  }
}

/** Keep the run's parse state in the bar current while other files of the run are parsed. */
async function watchRunState(runInfo) {
  let current = runInfo;
  while (current.state === "parsing") {
    await new Promise((resolve) => setTimeout(resolve, RUN_POLL_MS));
    try {
      current = await getJSON(withQuery("/api/run", { run: current.run }));
    } catch {
      return;
    }
    const note = byId("run-state");
    if (note) fillRunState(note, current);
  }
  updateNavLinks(readIdent(), current);
}

function readIdent() {
  const { run, worker, span } = readParams();
  return { run, worker, span };
}

// A worker whose trace records no rank but was taken as one rank of a job (docs/definitions.md §10) shows
// the inferred number in front of its name; the name stays the worker's id in links.
function workerLabel(w) {
  return w.inferred_rank == null ? w.worker : `rank ${w.inferred_rank} (inferred) · ${w.worker}`;
}

function renderBar(page, runs, runInfo, worker, span) {
  const bar = byId("selector");
  if (!bar) return;
  const workers = runInfo ? runInfo.workers : [];
  const spans = workers.find((w) => w.worker === worker)?.spans || [];
  clear(
    bar,
    select("sel-run", "Run", runs.map((r) => ({ value: r.run, label: shortenMiddle(r.run, RUN_LABEL_CHARS) })), runInfo ? runInfo.run : null, (run) =>
      navigate(page, { run, worker: null, span: null }),
    ),
    select("sel-worker", "Worker", workers.map((w) => ({ value: w.worker, label: shortenMiddle(workerLabel(w), RUN_LABEL_CHARS) })), worker, (next) => {
      // Keep the span's position: ranks of one job have different span ids for the same window.
      const index = Math.max(0, spans.indexOf(span));
      const nextSpans = workers.find((w) => w.worker === next)?.spans || [];
      navigate(page, { run: runInfo.run, worker: next, span: nextSpans[Math.min(index, nextSpans.length - 1)] });
    }),
    select(
      "sel-span",
      "Span",
      spans.map((s, i) => ({ value: s, label: spans.length > 1 ? `#${i + 1} \u00b7 ${s}` : s })),
      span,
      (next) => navigate(page, { run: runInfo.run, worker, span: next }),
    ),
    runStateNote(runInfo),
    el("span", { class: "spacer" }),
    compareLink(page, runInfo, worker, span),
    el("a", { id: "json-link", href: "#", hidden: true, title: "This view as JSON (the API call the page makes)", text: "JSON" }),
  );
}

/** "Compare with…": the Diff view with this trace as its target (the baseline is picked there). */
function compareLink(page, runInfo, worker, span) {
  if (page === "diff" || !runInfo || !span) return null;
  const href = withQuery("/diff", { run: runInfo.run, worker, span });
  return el("a", { id: "compare-link", href, title: "Compare this trace with a baseline trace", text: "Compare with\u2026" });
}

function firstUsable(items, usable) {
  return items.find(usable) || items[0];
}

/** Write run / worker / span into the URL, ahead of the page's own parameters. */
function putIdentFirst(ident) {
  const rest = new URLSearchParams(location.search);
  const query = new URLSearchParams(ident);
  for (const [key, value] of rest) if (!(key in ident)) query.append(key, value);
  const url = `${location.pathname}?${query}${location.hash}`;
  if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, "", url);
}

/**
 * Resolve run / worker / span from the URL (the first of each when missing, written back into the
 * URL), fill the selector bar, and return {run, worker, span, runInfo}; null when there is nothing
 * to show (the reason is rendered into statusEl).
 */
export async function initSelector(page, statusEl) {
  let data;
  try {
    data = await getJSON("/api/runs");
  } catch (error) {
    clear(statusEl, errorBox({ title: "Cannot list runs", message: error.message }));
    return null;
  }
  const runs = data.runs || [];
  const params = readParams();
  showStorageBanner(data.roots);
  if (!runs.length) {
    renderBar(page, runs, null, null, null);
    const roots = (data.roots || []).map((r) => r.root).join(", ") || "the configured roots";
    clear(
      statusEl,
      el(
        "div",
        { class: "empty-state", "data-testid": "empty-state" },
        el("strong", { text: `No traces found under ${roots}` }),
        el("div", {}, "See the ", el("a", { href: "/", text: "Runs page" }), " for what was found."),
      ),
    );
    return null;
  }
  const runInfo = params.run ? runs.find((r) => r.run === params.run) : firstUsable(runs, (r) => r.state !== "error");
  if (!runInfo) {
    renderBar(page, runs, null, null, null);
    clear(statusEl, await unknownRunBox(params.run));
    return null;
  }
  const workers = runInfo.workers || [];
  if (onlyMemoryFiles(runInfo)) {
    renderBar(page, runs, runInfo, null, null);
    updateNavLinks({ run: runInfo.run }, runInfo);
    const memory = el("a", { href: withQuery("/memory", { run: runInfo.run }), "data-testid": "memory-link", text: "Memory view" });
    clear(statusEl, emptyState("This run holds only memory snapshots", el("span", {}, "There is no profiler trace here to show; its snapshots are in the ", memory, ".")));
    return null;
  }
  if (!workers.length) {
    renderBar(page, runs, runInfo, null, null);
    const reasons = (runInfo.errors || []).map((e) => `${e.file}: ${e.message}`).join("\n");
    clear(statusEl, errorBox({ title: "This run has no readable trace", message: reasons || "No trace files." }));
    return null;
  }
  // Defaults skip traces that failed, so a bare URL opens something readable when there is one.
  const failed = new Set((runInfo.files || []).filter((f) => f.state === "error").map((f) => `${f.worker}\u0000${f.span}`));
  const readable = (worker, spanId) => !failed.has(`${worker}\u0000${spanId}`);
  const workerInfo = params.worker
    ? workers.find((w) => w.worker === params.worker)
    : firstUsable(workers, (w) => w.spans.some((s) => readable(w.worker, s)));
  const span =
    workerInfo &&
    (params.span
      ? workerInfo.spans.find((s) => s === params.span)
      : firstUsable(workerInfo.spans, (s) => readable(workerInfo.worker, s)));
  if (!workerInfo || !span) {
    renderBar(page, runs, runInfo, workerInfo ? workerInfo.worker : null, null);
    const what = workerInfo ? `span \u201c${params.span}\u201d` : `worker \u201c${params.worker}\u201d`;
    clear(statusEl, errorBox({ title: "Unknown worker or span", message: `Run ${runInfo.run} has no ${what}. Choose one above.` }));
    return null;
  }
  const ident = { run: runInfo.run, worker: workerInfo.worker, span };
  putIdentFirst(ident);
  renderBar(page, runs, runInfo, ident.worker, ident.span);
  updateNavLinks(ident, runInfo);
  watchRunState(runInfo);
  return { ...ident, runInfo, runs };
}

/** Why a link's run is not there: where it went (a link to the same page on the new name), or that it is gone. */
export async function unknownRunBox(run) {
  const moved = await getJSON(withQuery("/api/runs/moved", { run })).catch(() => null);
  if (!moved?.moved_to) {
    return errorBox({ title: "Unknown run", message: `There is no run named \u201c${run}\u201d. Choose one above.` });
  }
  const url = new URL(location.href);
  url.searchParams.set("run", moved.moved_to);
  const go = el("a", { href: `${url.pathname}${url.search}`, "data-testid": "moved-link", text: `Open \u201c${moved.moved_to}\u201d` });
  return errorBox({
    title: "This run moved",
    message: `There is no run named \u201c${run}\u201d any more; it is now \u201c${moved.moved_to}\u201d.`,
    action: go,
  });
}

/** Show why a view could not load; a trace that failed to parse gets a Retry button. */
export function showViewError(statusEl, error, ident) {
  if (!(error instanceof ApiError)) {
    clear(statusEl, errorBox({ title: "Something went wrong", message: String(error?.message || error) }));
    return;
  }
  if (error.status === 422) {
    const retry = el("button", {
      type: "button",
      text: "Parse again",
      onclick: async () => {
        await postJSON(withQuery("/api/retry", ident));
        location.reload();
      },
    });
    clear(
      statusEl,
      errorBox({ title: "This trace could not be read", message: error.message, file: error.body.file, action: retry }),
    );
    return;
  }
  clear(statusEl, errorBox({ title: `Request failed (${error.status})`, message: error.message }));
}
