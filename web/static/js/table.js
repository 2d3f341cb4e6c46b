// Sortable data tables with sticky headers, right-aligned numbers and optional expandable rows.

import { csvButton, csvFilename } from "./csv.js";
import { byId, clear, el } from "./dom.js";
import { middleEllipsis } from "./ellipsis.js";
import { fmtInt, fmtUs, fmtUsColumn } from "./format.js";
import { emptyState } from "./status.js";

const INITIAL_LIMIT = 1000;

function compare(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "boolean" || typeof b === "boolean") return Number(a) - Number(b);
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.max(a.length, b.length); i += 1) {
      const diff = (a[i] ?? 0) - (b[i] ?? 0);
      if (diff) return diff;
    }
    return 0;
  }
  return String(a).localeCompare(String(b));
}

/** Sort like the API does: `-col` is descending; rows without a value go last either way. */
export function sortRows(rows, sort) {
  if (!sort) return rows.slice();
  const descending = sort.startsWith("-");
  const key = sort.replace(/^-/, "");
  const present = rows.filter((r) => r[key] !== null && r[key] !== undefined);
  const absent = rows.filter((r) => r[key] === null || r[key] === undefined);
  present.sort((a, b) => (descending ? compare(b[key], a[key]) : compare(a[key], b[key])));
  return present.concat(absent);
}

/**
 * columns: [{key, label, title?, num?, cls?, format?(value, row), cell?(row) -> Node, csv?(row)}]
 * options: {rows, sort, onSort, rowKey, expandedKey, onToggle, renderDetail, caption, csvName}
 * Name columns (cls "name" / "op") are shortened in the middle and can be widened by dragging
 * their header's right edge; every table has a CSV download of its rows in the order shown.
 */
export function renderTable(container, options) {
  const { rows, sort, onSort, rowKey, expandedKey = null, onToggle = null, renderDetail = null } = options;
  // µs columns: one number of decimals per column (see fmtUsColumn)
  const columns = options.columns.map((col) =>
    col.format === fmtUs ? { ...col, format: fmtUsColumn(rows.map((row) => row[col.key])) } : col,
  );
  let limit = options.limit || INITIAL_LIMIT;
  const expandable = Boolean(onToggle);
  const sortKey = sort ? sort.replace(/^-/, "") : null;
  const descending = sort ? sort.startsWith("-") : false;

  const headCells = columns.map((col) => {
    const active = col.key === sortKey;
    const th = el(
      "th",
      {
        class: ["sortable", col.num ? "num" : ""].join(" ").trim(),
        title: col.title || null,
        "data-key": col.key,
        "aria-sort": active ? (descending ? "descending" : "ascending") : "none",
        scope: "col",
        onclick: () => {
          const next = active ? (descending ? col.key : `-${col.key}`) : col.num ? `-${col.key}` : col.key;
          onSort(next);
        },
      },
      col.label,
      el("span", { class: "arrow", text: active ? (descending ? "\u25bc" : "\u25b2") : "" }),
      NAME_CLASSES.includes(col.cls) ? resizeHandle(col.cls) : null,
    );
    return th;
  });
  const thead = el("thead", {}, el("tr", {}, expandable ? el("th", { "aria-label": "expand" }) : null, headCells));
  const tbody = el("tbody");
  const table = el("table", { class: options.wide ? "data wide" : "data", "data-testid": options.testid || null }, thead, tbody);
  const scroll = el("div", { class: "table-scroll" }, table);
  const foot = el("div", { class: "table-foot" });

  function fillBody() {
    const shown = rows.slice(0, limit);
    const fragment = document.createDocumentFragment();
    for (const row of shown) {
      const key = rowKey ? rowKey(row) : null;
      const isExpanded = expandable && key === expandedKey;
      const cells = columns.map((col) => {
        const value = row[col.key];
        const text = col.format ? col.format(value, row) : value ?? "";
        const content = col.cell ? col.cell(row) : NAME_CLASSES.includes(col.cls) ? middleEllipsis(text) : text;
        const td = el("td", { class: [col.num ? "num" : "", col.cls || ""].join(" ").trim() || null }, content);
        if (col.cls === "shape") td.title = value == null ? "" : String(value);
        return td;
      });
      const tr = el(
        "tr",
        {
          class: [expandable ? "expandable" : "", isExpanded ? "expanded" : ""].join(" ").trim() || null,
          "data-key": key,
          tabindex: expandable ? "0" : null,
          "aria-expanded": expandable ? String(isExpanded) : null,
        },
        expandable ? el("td", { class: "twisty", text: isExpanded ? "\u25be" : "\u25b8" }) : null,
        cells,
      );
      if (expandable) {
        tr.addEventListener("click", (event) => {
          if (event.target.closest("a")) return;
          onToggle(row);
        });
        tr.addEventListener("keydown", (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            onToggle(row);
          }
        });
      }
      fragment.append(tr);
      if (isExpanded && renderDetail) {
        fragment.append(
          el("tr", { class: "detail" }, el("td", { colspan: String(columns.length + 1) }, renderDetail(row))),
        );
      }
    }
    tbody.replaceChildren(fragment);
    clear(foot);
    if (rows.length > limit) {
      foot.append(
        `Showing ${fmtInt(limit)} of ${fmtInt(rows.length)} rows.`,
        el("button", {
          type: "button",
          text: "Show all",
          onclick: () => {
            limit = rows.length;
            fillBody();
          },
        }),
      );
    }
  }

  fillBody();
  const tools = el(
    "div",
    { class: "table-tools" },
    csvButton(() => ({
      filename: csvFilename(options.csvName || options.testid || "table"),
      header: columns.map((col) => col.label),
      rows: rows.map((row) => columns.map((col) => (col.csv ? col.csv(row) : row[col.key]))),
    })),
  );
  clear(container, tools, scroll, foot);
  return table;
}

const NAME_CLASSES = ["name", "op"];

/** Drag a name column's header edge to widen or narrow it (sets --w-name / --w-op on the table). */
function resizeHandle(cls) {
  return el("span", {
    class: "col-resize",
    title: "Drag to widen the column",
    onclick: (event) => event.stopPropagation(), // not a sort click
    onpointerdown: (event) => {
      event.preventDefault();
      event.stopPropagation();
      const th = event.currentTarget.parentElement;
      const table = th.closest("table");
      const startX = event.clientX;
      const startWidth = th.getBoundingClientRect().width;
      const move = (e) => table.style.setProperty(`--w-${cls}`, `${Math.max(80, startWidth + e.clientX - startX)}px`);
      const up = () => {
        window.removeEventListener("pointermove", move);
        window.removeEventListener("pointerup", up);
      };
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    },
  });
}

/** Scroll a row into view and flash it. */
export function flashRow(table, key) {
  const row = [...table.querySelectorAll("tbody tr[data-key]")].find((tr) => tr.dataset.key === key);
  if (!row) return;
  row.scrollIntoView({ block: "center", behavior: "smooth" });
  row.classList.remove("flash");
  void row.offsetWidth;
  row.classList.add("flash");
}

// The table panel of the Operator and Kernel pages: the searched rows, sorted, with an
// "n of m rows" count, or `emptyMessage` when none is left. Returns the table (null when empty).
export function renderRowsPanel({ rows, totalRows, sort, emptyMessage, ...options }) {
  const sorted = sortRows(rows, sort);
  byId("row-count").textContent =
    sorted.length === totalRows ? `${fmtInt(sorted.length)} rows` : `${fmtInt(sorted.length)} of ${fmtInt(totalRows)} rows`;
  const target = byId("table");
  if (!sorted.length) {
    clear(target, emptyState(emptyMessage));
    return null;
  }
  return renderTable(target, { rows: sorted, sort, ...options });
}
