// The Trace page's state as URL parameters, so a pasted link opens the same view.
//
// Links into the page (their contract): the Overview's step chart gives
// `run, worker, span, start_us, end_us`; the Distributed page gives `run, span, workers=w1,w2,...,
// start_us, end_us` (the window relative to the FIRST worker's trace origin, `span` that worker's).
// Added here: `align` (wall | start), `offsets` (µs per shown worker, in `workers` order),
// `collapsed` / `hidden` (layout keys, see layout.js), `slice` + `slice_worker` + `slice_span` (a
// slice id means something in one trace only: the selector may change worker or span and keep the
// other parameters), `q` + `match`, `range` (start,end of a selected range), `stacks=full` (CPU
// stacks unfolded), `unfolded` (track keys whose fold differs from `stacks`), `compact=0` (several
// ranks with every track, not only GPU streams and steps).

const num = (text) => {
  const value = Number.parseFloat(text);
  return Number.isFinite(value) ? value : null;
};
const list = (text) => (text ? text.split(",").filter(Boolean) : []);

export function parseState(params) {
  const shown = list(params.workers);
  const workers = params.worker ? [params.worker, ...shown.filter((w) => w !== params.worker)] : shown;
  const offsets = list(params.offsets).map((v) => num(v) ?? 0);
  const start = num(params.start_us);
  const end = num(params.end_us);
  const range = list(params.range).map(num);
  const slice = Number.parseInt(params.slice, 10);
  return {
    workers,
    // offsets are listed in the order of the link's `workers`; re-key them by worker
    offsets: Object.fromEntries(shown.length ? shown.map((w, i) => [w, offsets[i] ?? 0]) : [[workers[0], offsets[0] ?? 0]]),
    align: params.align === "start" ? "start" : "wall",
    view: start !== null && end !== null && end > start ? { start, end } : null,
    collapsed: new Set(list(params.collapsed)),
    hidden: new Set(list(params.hidden)),
    unfolded: new Set(list(params.unfolded)),
    stacks: params.stacks === "full" ? "full" : "folded",
    compact: workers.length > 1 && params.compact !== "0",
    keepLike: new Set(), // not in the URL: follows the selected slice (layout.js trackShown)
    selected:
      Number.isInteger(slice) && slice >= 0 && params.slice_worker && params.slice_span
        ? { worker: params.slice_worker, span: params.slice_span, id: slice }
        : null,
    query: params.q || "",
    match: Math.max(Number.parseInt(params.match, 10) || 0, 0),
    range: range.length === 2 && range[0] !== null && range[1] !== null && range[1] > range[0] ? { start: range[0], end: range[1] } : null,
  };
}

const fixed = (value) => Number(value.toFixed(3));

/** URL parameters for a state (null removes a parameter). `worker` stays the selector's worker. */
export function stateParams(state) {
  const several = state.workers.length > 1;
  const offsets = state.workers.map((w) => fixed(state.offsets[w] || 0));
  return {
    workers: several ? state.workers.join(",") : null,
    offsets: offsets.some((o) => o !== 0) ? offsets.join(",") : null,
    align: state.align === "wall" ? null : state.align,
    start_us: state.view ? fixed(state.view.start) : null,
    end_us: state.view ? fixed(state.view.end) : null,
    collapsed: state.collapsed.size ? [...state.collapsed].join(",") : null,
    hidden: state.hidden.size ? [...state.hidden].join(",") : null,
    unfolded: state.unfolded.size ? [...state.unfolded].join(",") : null,
    stacks: state.stacks === "full" ? "full" : null,
    compact: several && !state.compact ? 0 : null,
    slice: state.selected ? state.selected.id : null,
    slice_worker: state.selected ? state.selected.worker : null,
    slice_span: state.selected ? state.selected.span : null,
    q: state.query || null,
    match: state.query && state.match ? state.match : null,
    range: state.range ? `${fixed(state.range.start)},${fixed(state.range.end)}` : null,
  };
}
