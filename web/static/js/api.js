// Calls to the JSON API. View endpoints answer 202 while a trace is parsed: poll until 200.

import { renderProgress } from "./status.js";

export const POLL_MS = 700;

export class ApiError extends Error {
  constructor(status, message, body = {}) {
    super(message);
    this.name = "ApiError";
    this.status = status;
    this.body = body;
  }
}

async function errorFrom(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // not JSON: keep the status text
  }
  let message = body.error || body.detail || response.statusText || `HTTP ${response.status}`;
  if (Array.isArray(message)) message = message.map((d) => d.msg || JSON.stringify(d)).join("; ");
  return new ApiError(response.status, String(message), body);
}

export async function getJSON(url, { signal } = {}) {
  const response = await fetch(url, { signal, headers: { Accept: "application/json" } });
  if (!response.ok) throw await errorFrom(response);
  return response.json();
}

export async function postJSON(url) {
  const response = await fetch(url, { method: "POST", headers: { Accept: "application/json" } });
  if (!response.ok && response.status !== 202) throw await errorFrom(response);
  return response.json();
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new DOMException("aborted", "AbortError"));
    });
  });
}

/**
 * GET a view endpoint; while it answers 202, show the parse progress in `statusEl` and ask again.
 * Resolves with the 200 body; rejects with ApiError (422 = the trace could not be read).
 */
export async function loadView(url, { statusEl = null, signal = null } = {}) {
  for (;;) {
    const response = await fetch(url, { signal, headers: { Accept: "application/json" } });
    if (response.status === 202) {
      const status = await response.json();
      if (statusEl) renderProgress(statusEl, status);
      await sleep(POLL_MS, signal);
      continue;
    }
    if (!response.ok) throw await errorFrom(response);
    const body = await response.json();
    if (statusEl) statusEl.replaceChildren();
    return body;
  }
}

export function isAbort(error) {
  return error?.name === "AbortError";
}
