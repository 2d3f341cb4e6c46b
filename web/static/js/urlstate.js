// Every bit of page state lives in the query string, so a pasted URL restores the same view.
// A user's action (sort, grouping, zoom, a chosen step...) adds a history entry (`push`), an
// incidental change (defaults written back, a debounced echo) replaces the current one; Back and
// Forward then reload the page from the URL they land on, which restores that state, unless the page
// shows that URL's state in place (`showOnHistoryMove`: the Trace view's zoom, without a reload).

// Parameters renamed so that one meaning has one name on every page and in the API (docs/ARCHITECTURE.md,
// "Parameter names"), by page path: old name -> new name. A link written before keeps working: its old
// names are read once, here, before any page reads its state, and the URL is rewritten to the new ones.
// (The Memory page's snapshot window, whose new name depends on the snapshot's axis, renames its own.)
export const RENAMED_PARAMS = {
  "/": { q: "search" },
  "/operators": { shape: "input_shape", top: "pie_top" },
  "/kernels": { top: "pie_top" },
  "/distributed": { rsort: "ranks_sort", osort: "op_stats_sort", csort: "collectives_sort", gsort: "process_groups_sort" },
  "/diff": { kernel_sort: "kernels_sort" },
};

function renameOldParams() {
  const renamed = RENAMED_PARAMS[location.pathname];
  if (!renamed) return;
  const url = new URL(location.href);
  for (const [old, name] of Object.entries(renamed)) {
    if (!url.searchParams.has(old)) continue;
    if (!url.searchParams.has(name)) url.searchParams.set(name, url.searchParams.get(old)); // the new name wins
    url.searchParams.delete(old);
  }
  if (url.href !== location.href) history.replaceState(history.state, "", url);
}

renameOldParams();

let shownSearch = location.search; // the query the page shows; a popstate to another one reloads
let showInPlace = null;

window.addEventListener("popstate", () => {
  if (location.search === shownSearch) return;
  if (showInPlace?.(readParams())) shownSearch = location.search;
  else location.reload();
});

/** Back / Forward call show(params) first: it shows that state in place and returns true, or false to reload. */
export function showOnHistoryMove(show) {
  showInPlace = show;
}

export function readParams() {
  return Object.fromEntries(new URLSearchParams(location.search));
}

/** Set (or, for null / "" values, remove) query parameters without reloading the page. */
export function updateUrl(changes, { push = false } = {}) {
  const url = new URL(location.href);
  for (const [key, value] of Object.entries(changes)) {
    if (value === null || value === undefined || value === "") url.searchParams.delete(key);
    else url.searchParams.set(key, String(value));
  }
  if (url.href === location.href) return;
  if (push) history.pushState(null, "", url);
  else history.replaceState(null, "", url);
  shownSearch = location.search;
}

/** "/path?k=v&..." leaving out null and empty values. */
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value === null || value === undefined || value === "") continue;
    query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}
