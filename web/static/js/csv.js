// CSV downloads of tables: the rows, order and columns the page shows (after search and sort).
// The server's `format=csv` on the JSON twins writes the same dialect (profscope/api/csv.py).

import { el } from "./dom.js";

/** A spreadsheet would run a cell starting with = + - @ as a formula; a leading ' keeps it text. */
function csvCell(value) {
  if (value === null || value === undefined) return "";
  let text = Array.isArray(value) ? value.join(",") : typeof value === "object" ? JSON.stringify(value) : String(value);
  if (typeof value === "string" && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** RFC 4180 text: a header line, then one line per row (rows are arrays of cell values). */
export function toCsv(header, rows) {
  return [header, ...rows].map((cells) => cells.map(csvCell).join(",")).join("\r\n") + "\r\n";
}

export function downloadCsv(filename, header, rows) {
  const blob = new Blob([toCsv(header, rows)], { type: "text/csv;charset=utf-8" });
  const link = el("a", { download: filename });
  link.href = URL.createObjectURL(blob);
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 0);
}

/** "page-what.csv" from the page and a short name of the table. */
export function csvFilename(what) {
  const page = document.body.dataset.page || "profscope";
  return `${page}-${what}.csv`.replace(/[^A-Za-z0-9_.-]+/g, "_");
}

/** A "CSV" button; `table()` gives {filename, header, rows} when clicked, so it exports what is shown then. */
export function csvButton(table) {
  return el("button", {
    type: "button",
    class: "csv-download",
    title: "Download this table as CSV (the rows and columns shown, in this order)",
    text: "CSV \u2193",
    onclick: () => {
      const { filename, header, rows } = table();
      downloadCsv(filename, header, rows);
    },
  });
}
