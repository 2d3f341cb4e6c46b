// Source viewer: the lines around a stack frame's line, served only from --source-root folders.

import { getJSON } from "../api.js";
import { byId, clear, el } from "../dom.js";
import { fmtInt } from "../format.js";
import { updateNavLinks } from "../selector.js";
import { errorBox, loading } from "../status.js";
import { readParams, withQuery } from "../urlstate.js";

const CONTEXT_LINES = 200;

function render(target, body) {
  const rows = body.lines.map((text, i) => {
    const number = body.first_line + i;
    return el(
      "tr",
      { class: number === body.line ? "target" : null, id: `L${number}`, "data-line": String(number) },
      el("td", { class: "ln", text: String(number) }),
      el("td", { class: "code", text: text || " " }),
    );
  });
  const last = body.first_line + body.lines.length - 1;
  clear(
    target,
    el(
      "div",
      { class: "muted", style: { marginBottom: "6px" } },
      `${body.resolved} \u00b7 lines ${fmtInt(body.first_line)}\u2013${fmtInt(last)}`,
    ),
    el("div", { class: "source-scroll" }, el("div", { class: "source-view", "data-testid": "source-view" }, el("table", {}, el("tbody", {}, rows)))),
  );
  const targetRow = target.querySelector("tr.target");
  if (targetRow) targetRow.scrollIntoView({ block: "center" });
}

async function main() {
  const { path, line, run, worker, span } = readParams();
  updateNavLinks(run ? { run, worker, span } : null); // the nav leads back to the run the frame came from
  const target = byId("source");
  byId("source-path").textContent = path ? `${path}${line ? `:${line}` : ""}` : "";
  if (!path) {
    clear(target, errorBox({ title: "No file given", message: "Open this page from a call stack frame (?path=FILE&line=N)." }));
    return;
  }
  clear(target, loading());
  try {
    const body = await getJSON(withQuery("/api/source", { path, line: line || 1, context: CONTEXT_LINES }));
    render(target, body);
  } catch (error) {
    clear(target, errorBox({ title: "Cannot show this file", message: error.message, file: path }));
  }
}

main();
