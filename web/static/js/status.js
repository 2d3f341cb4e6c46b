// Progress bars, error boxes and empty states.

import { clear, el } from "./dom.js";
import { fmtBytes } from "./format.js";

export function progressBar(fraction, { indeterminate = false } = {}) {
  const pct = Math.max(0, Math.min(1, fraction || 0)) * 100;
  return el(
    "div",
    {
      class: indeterminate ? "progress indeterminate" : "progress",
      role: "progressbar",
      "aria-valuemin": "0",
      "aria-valuemax": "100",
      "aria-valuenow": indeterminate ? null : pct.toFixed(0),
    },
    el("div", { class: "bar", style: { width: `${pct.toFixed(1)}%` } }),
  );
}

const WAITING = {
  queued: "Waiting to be parsed",
  pending: "Waiting for a parser worker",
  parsing: "Parsing",
};

/** The body of a 202 answer: {state, progress, bytes_done, bytes_total, file, message}. */
export function renderProgress(target, status) {
  const state = status.state || "parsing";
  const started = state === "parsing" && status.bytes_done > 0;
  const label = `${WAITING[state] || "Parsing"} ${status.file || "the trace"}\u2026`;
  const detail = started
    ? `${fmtBytes(status.bytes_done)} of ${fmtBytes(status.bytes_total)} read (${Math.round((status.progress || 0) * 100)}%)`
    : status.bytes_total
      ? `${fmtBytes(status.bytes_total)} to read`
      : "";
  clear(
    target,
    el(
      "div",
      { class: "progress-box", "data-testid": "parse-progress" },
      el("div", { class: "label", text: label }),
      progressBar(status.progress, { indeterminate: !started }),
      el("div", { class: "detail", text: [detail, status.message].filter(Boolean).join(" \u00b7 ") }),
    ),
  );
}

export function errorBox({ title, message, file = null, action = null }) {
  return el(
    "div",
    { class: "error-box", role: "alert", "data-testid": "error" },
    el("strong", { text: title }),
    el("div", { class: "message", text: message }),
    file ? el("div", { class: "file", text: file }) : null,
    action,
  );
}

export function emptyState(title, ...lines) {
  return el(
    "div",
    { class: "empty-state", "data-testid": "empty-state" },
    el("strong", { text: title }),
    ...lines.map((line) => el("div", {}, line)),
  );
}

export function loading(text = "Loading\u2026") {
  return el("div", { class: "loading", text });
}
