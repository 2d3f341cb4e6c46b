// Time <-> pixel math of the timeline: the visible window, zoom and pan, and the time ruler's ticks.
// Times are microseconds on the page's common axis (the first rank's trace origin is 0).

import { decimalFormat, timeUnit } from "../format.js";

export const MIN_SPAN_US = 0.01; // 10 ns: below that, slices are single nanoseconds anyway

/** x (CSS px from the left of the time area) of time `t`. */
function xOf(view, widthPx, t) {
  return ((t - view.start) / (view.end - view.start)) * widthPx;
}

/** Time at x (CSS px from the left of the time area). */
export function timeAt(view, widthPx, x) {
  return view.start + (x / widthPx) * (view.end - view.start);
}

/** Keep a window inside the bounds (with a little room), and never narrower than MIN_SPAN_US. */
export function clampView(view, bounds) {
  const room = (bounds.end - bounds.start) * 0.05;
  const lo = bounds.start - room;
  const hi = bounds.end + room;
  let span = Math.max(view.end - view.start, MIN_SPAN_US);
  span = Math.min(span, hi - lo);
  let start = Math.min(Math.max(view.start, lo), hi - span);
  if (!Number.isFinite(start)) start = lo;
  return { start, end: start + span };
}

/** Zoomed by `factor` (< 1 zooms in) keeping time `anchor` at the same pixel (clamp it with clampView). */
export function zoomed(view, anchor, factor) {
  return { start: anchor - (anchor - view.start) * factor, end: anchor + (view.end - anchor) * factor };
}

/** Moved by `deltaUs` (clamp it with clampView). */
export function shifted(view, deltaUs) {
  return { start: view.start + deltaUs, end: view.end + deltaUs };
}

/** A window that shows [start, start + dur) comfortably: centred, keeping the zoom unless it is too far out or in. */
export function revealView(view, start, dur, bounds) {
  const span = view.end - view.start;
  const visible = start >= view.start && start + dur <= view.end;
  const tooSmall = dur > 0 && dur < span / 2000; // under about a pixel: zoom in so it can be seen
  if (visible && !tooSmall) return view;
  let width = span;
  if (dur > span * 0.8 || tooSmall) width = Math.max(dur * 4, MIN_SPAN_US * 10);
  const centre = start + dur / 2;
  return clampView({ start: centre - width / 2, end: centre + width / 2 }, bounds);
}

const UNITS = [
  { label: "ns", us: 1e-3 },
  { label: "\u00b5s", us: 1 },
  { label: "ms", us: 1e3 },
  { label: "s", us: 1e6 },
];

/** The unit a step reads best in (the largest unit the step is at least one of). */
function unitFor(stepUs) {
  let best = UNITS[0];
  for (const unit of UNITS) if (stepUs >= unit.us) best = unit;
  return best;
}

/** "12.5 ms" etc. for a time or a duration in µs, with an adaptive unit. */
export function fmtTime(us, digits = 3) {
  if (!Number.isFinite(us)) return "\u2014";
  const unit = unitFor(Math.abs(us) || 1);
  const value = us / unit.us;
  return `${Number(value.toFixed(digits))} ${unit.label}`;
}

/**
 * Ruler ticks for a window: a 1-2-5 step giving about one label per `spacingPx`. Labels are times on the
 * page's axis in the unit the window's largest time reads best in, like every other time axis
 * (docs/definitions.md §17): "606.5 ms", not "606500 µs"; with the decimals the step needs.
 */
export function rulerTicks(view, widthPx, spacingPx = 110) {
  const span = view.end - view.start;
  const raw = (span * spacingPx) / Math.max(widthPx, 1);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) || 10 * magnitude;
  const unit = timeUnit(Math.max(Math.abs(view.start), Math.abs(view.end)));
  const decimals = Math.min(Math.max(0, Math.ceil(-Math.log10(step / unit.divisor) - 1e-9)), 9);
  const number = decimalFormat(decimals, decimals);
  const ticks = [];
  const first = Math.ceil(view.start / step);
  for (let i = first; i * step <= view.end; i += 1) {
    const t = i * step;
    ticks.push({ t, x: xOf(view, widthPx, t), label: `${number.format(t / unit.divisor)} ${unit.label}` });
  }
  return { step, unit, ticks };
}
