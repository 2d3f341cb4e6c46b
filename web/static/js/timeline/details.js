// The panels under the timeline: one slice's details (arguments, flows, Python stack) and the
// summary of a selected time range. Built with el(): trace strings are text, never markup.

import { clear, el } from "../dom.js";
import { DASH, fmtInt, fmtPct } from "../format.js";
import { fmtTime } from "./viewport.js";

const MAX_SUMMARY_ROWS = 50;

function argValue(value) {
  if (Array.isArray(value)) return value.join(", ");
  if (value !== null && typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function kv(pairs) {
  return el(
    "dl",
    { class: "kv tl-kv" },
    pairs.filter(([, value]) => value !== null && value !== undefined).map(([label, value]) => [el("dt", { text: label }), el("dd", {}, value)]),
  );
}

/**
 * details: the /api/timeline/slice answer; where: "rank 1 · worker"; onRelated(brief) selects a
 * related slice; onZoom() zooms to this one.
 */
export function renderSliceDetails(target, details, { where, onRelated, onZoom }) {
  const related = details.related || [];
  const stack = details.stack || [];
  clear(
    target,
    el(
      "div",
      { class: "tl-details-head" },
      el("h2", { class: "tl-slice-name", "data-testid": "slice-name", text: details.name }),
      el("button", { type: "button", "data-testid": "zoom-to-slice", text: "Zoom to slice", onclick: onZoom }),
    ),
    kv([
      ["Kind", details.kind],
      ["Category", details.category || DASH],
      ["Track", details.track_name || details.track],
      ["Worker", where],
      ["Start", fmtTime(details.start_us)],
      ["Duration", el("span", { "data-testid": "slice-duration", text: fmtTime(details.dur_us) })],
      ["Depth", String(details.depth)],
      ["Slice id", String(details.id)],
    ]),
    Object.keys(details.args || {}).length
      ? [el("h3", { text: "Arguments" }), kv(Object.entries(details.args).map(([k, v]) => [k, argValue(v)]))]
      : null,
    related.length
      ? [
          el("h3", { text: "Flows" }),
          el(
            "ul",
            { class: "plain tl-related", "data-testid": "related" },
            related.map((r) =>
              el(
                "li",
                {},
                el("span", { class: "muted", text: `${r.relation}: ` }),
                el("a", {
                  href: "#",
                  "data-testid": "related-link",
                  "data-relation": r.relation,
                  "data-id": String(r.id),
                  text: r.name,
                  onclick: (event) => {
                    event.preventDefault();
                    onRelated(r);
                  },
                }),
                el("span", { class: "muted", text: ` (${fmtTime(r.dur_us)})` }),
              ),
            ),
          ),
        ]
      : null,
    stack.length
      ? [
          el("h3", { text: "Python stack" }),
          el(
            "ol",
            { class: "frames tl-stack", "data-testid": "stack" },
            stack.map((frame) =>
              el(
                "li",
                {},
                frame.href ? el("a", { href: frame.href, target: "_blank", rel: "noopener", text: frame.name }) : frame.name,
                frame.external ? [" ", el("a", { href: frame.external, class: "muted", text: "\u2197", title: "Open in your editor / repository" })] : null,
              ),
            ),
          ),
        ]
      : null,
  );
}

function summaryTable(testid, columns, rows) {
  return el(
    "div",
    { class: "table-scroll tl-summary-table" },
    el(
      "table",
      { class: "data compact", "data-testid": testid },
      el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null, text: c.label })))),
      el(
        "tbody",
        {},
        rows.map((row) => el("tr", {}, columns.map((c) => el("td", { class: c.num ? "num" : "name", title: c.num ? null : row[c.key], text: c.format ? c.format(row[c.key]) : row[c.key] })))),
      ),
    ),
  );
}

/** summaries: [{where, body}] (one /api/timeline/summary answer per rank). */
export function renderRangeSummary(target, range, summaries, { onClear }) {
  clear(
    target,
    el(
      "div",
      { class: "tl-details-head" },
      el("h2", { text: `Selected range: ${fmtTime(range.end - range.start)}` }),
      el("button", { type: "button", "data-testid": "clear-range", text: "Clear", onclick: onClear }),
    ),
    summaries.map(({ where, body }) => [
      summaries.length > 1 ? el("h3", { text: where }) : null,
      el("p", { class: "muted", text: `${fmtInt(body.slices)} slices, ${fmtInt(body.names)} names, from ${fmtTime(body.start_us)} to ${fmtTime(body.end_us)}` }),
      summaryTable(
        "range-by-name",
        [
          { key: "name", label: "Name" },
          { key: "kind", label: "Kind" },
          { key: "count", label: "Count", num: true, format: fmtInt },
          { key: "total_us", label: "Total", num: true, format: fmtTime },
          { key: "avg_us", label: "Average", num: true, format: fmtTime },
        ],
        body.by_name.slice(0, MAX_SUMMARY_ROWS),
      ),
      summaryTable(
        "range-by-track",
        [
          { key: "name", label: "Track" },
          { key: "count", label: "Slices", num: true, format: fmtInt },
          { key: "busy_us", label: "Busy", num: true, format: fmtTime },
          { key: "busy_pct", label: "Busy %", num: true, format: fmtPct },
        ],
        body.by_track,
      ),
    ]),
  );
}
