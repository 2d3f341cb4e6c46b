// The timeline canvas and its state: the ranks shown (sections) on one time axis, the window,
// the layout of rows, the selected slice with its flows, a selected range. Redraws on animation
// frames; asks for new windows (debounced) after the view settles.

import { debounce } from "../dom.js";
import { hitTest } from "./hittest.js";
import { bindInteractions } from "./interaction.js";
import { RULER_PX, laneMiddle, layoutRows, visibleTrackIds } from "./layout.js";
import { counterLabel, draw, timeScale } from "./renderer.js";
import { clampView, fmtTime, revealView } from "./viewport.js";
import { WindowLoader } from "./windows.js";

const GUTTER_PX = 230;
const FETCH_DEBOUNCE_MS = 60;
const MIN_HEIGHT_PX = 160;
const DRAW_HISTORY = 600;
const FLOW_RELATIONS = { "launched by": "in", launches: "out", kernels: "out", forward: "in", backward: "out" };

export class TimelineView {
  /**
   * canvas, tooltip: DOM nodes; state: the page state (state.js); sections: [{index, worker, ident, info, ...}]
   * hooks: {onSelect(section, id, reveal), onRange(range, done), onChange(), onError(section, error)}
   */
  constructor({ canvas, tooltip, state, sections, hooks }) {
    this.canvas = canvas;
    this.tooltip = tooltip;
    this.state = state;
    this.sections = sections;
    this.hooks = hooks;
    this.scrollY = 0;
    this.flows = [];
    this.stats = { slices: 0, merged: 0, points: 0, labels: 0, flows: 0 };
    this.draws = 0;
    this.drawsAtAnswer = 0; // frames drawn when the last window answer arrived: later ones show it
    this.drawMs = []; // the last frames' drawing times, for bench/ (smooth panning)
    this.firstDrawnMs = null; // since navigation: the first frame drawn from a window answer
    this.pending = false;
    this.loader = new WindowLoader({
      onAnswer: () => {
        this.drawsAtAnswer = this.draws;
        this.redraw();
      },
      onError: (section, error) => hooks.onError(section, error),
    });
    const fetchLater = debounce(() => this.fetch(), FETCH_DEBOUNCE_MS);
    this.fetchScheduled = false; // a window request will be made when the view settles
    this.fetchSoon = () => {
      this.fetchScheduled = true;
      fetchLater();
    };
    this.computeShifts();
    this.relayout();
    this.state.view = clampView(state.view || this.bounds(), this.bounds());
    this.resize();
    new ResizeObserver(() => this.resize()).observe(canvas.parentElement);
    bindInteractions(canvas, this);
  }

  // ---- geometry ----------------------------------------------------------------------------
  /** Each section's offset on the common axis: its wall-clock start relative to the first's, plus the user's offset. */
  computeShifts() {
    const reference = this.sections[0]?.info?.wall_start_us;
    for (const section of this.sections) {
      const wall = section.info?.wall_start_us;
      const aligned = this.state.align === "wall" && reference != null && wall != null ? wall - reference : 0;
      section.shift = aligned + (this.state.offsets[section.worker] || 0);
    }
  }

  bounds() {
    const shown = this.sections.filter((s) => s.info);
    if (!shown.length) return { start: 0, end: 1 };
    return {
      start: Math.min(...shown.map((s) => s.shift)),
      end: Math.max(...shown.map((s) => s.shift + Math.max(s.info.duration_us, 1))),
    };
  }

  relayout() {
    this.layout = layoutRows(this.sections, this.state);
    this.fitHeight();
  }

  fitHeight() {
    const wrap = this.canvas.parentElement;
    const available = Math.max(window.innerHeight * 0.72, 360);
    const wanted = Math.max(Math.min(this.layout.height + RULER_PX + 2, available), MIN_HEIGHT_PX);
    if (Math.abs(wrap.clientHeight - wanted) > 1) wrap.style.height = `${Math.round(wanted)}px`;
  }

  resize() {
    const wrap = this.canvas.parentElement;
    const ratio = window.devicePixelRatio || 1;
    this.width = wrap.clientWidth;
    this.height = wrap.clientHeight;
    this.canvas.style.width = `${this.width}px`;
    this.canvas.style.height = `${this.height}px`;
    this.canvas.width = Math.round(this.width * ratio);
    this.canvas.height = Math.round(this.height * ratio);
    this.clampScroll();
    this.redraw();
    this.fetchSoon();
  }

  /** Width of the time area: what a window request's width_px is. */
  timeWidth() {
    return Math.max(this.width - GUTTER_PX, 1);
  }

  clampScroll() {
    const most = Math.max(this.layout.height + RULER_PX - this.height, 0);
    this.scrollY = Math.min(Math.max(this.scrollY, 0), most);
  }

  // ---- drawing -----------------------------------------------------------------------------
  scene() {
    const selected = this.state.selected;
    const section = selected && this.sections.find((s) => s.worker === selected.worker && s.span === selected.span);
    return {
      width: this.width,
      height: this.height,
      gutter: GUTTER_PX,
      scrollY: this.scrollY,
      view: this.state.view,
      layout: this.layout,
      selected: section ? { section: section.index, id: selected.id } : null,
      range: this.state.range,
      flows: this.flows,
    };
  }

  redraw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      const started = performance.now();
      const ctx = this.canvas.getContext("2d");
      const ratio = window.devicePixelRatio || 1;
      ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
      this.stats = draw(ctx, this.scene());
      this.draws += 1;
      const finished = performance.now();
      this.drawMs.push(finished - started);
      if (this.drawMs.length > DRAW_HISTORY) this.drawMs.shift();
      if (this.firstDrawnMs === null && this.stats.slices + this.stats.merged > 0) this.firstDrawnMs = finished;
    });
  }

  fetch() {
    this.fetchScheduled = false;
    this.loader.update(this.sections, this.state.view, this.timeWidth(), (section) => visibleTrackIds(section, this.state));
  }

  // ---- changes -----------------------------------------------------------------------------
  setView(view) {
    this.leave(); // what was under the pointer moved away
    this.state.view = clampView(view, this.bounds());
    this.redraw();
    this.fetchSoon();
    this.hooks.onChange();
  }

  /** Layout changed (collapsed / hidden tracks, alignment, offsets): lay out, draw, fetch again. */
  refresh() {
    this.computeShifts();
    this.relayout();
    this.clampScroll();
    this.resize();
    this.hooks.onChange();
  }

  scrollRows(dy) {
    const before = this.scrollY;
    this.scrollY += dy;
    this.clampScroll();
    if (this.scrollY === before) return false;
    this.leave(); // what was under the pointer moved away
    this.redraw();
    return true;
  }

  /** Show a slice of a section: zoom / pan so it is visible and scroll its row into view. */
  reveal(section, brief) {
    const start = brief.start_us + section.shift;
    this.setView(revealView(this.state.view, start, brief.dur_us, this.bounds()));
    const row = this.layout.trackRows.get(`${section.index}/${brief.track}`);
    if (!row) return;
    const y = laneMiddle(row, brief.depth);
    const visibleRows = this.height - RULER_PX;
    if (y < this.scrollY + 10 || y > this.scrollY + visibleRows - 10) {
      this.scrollY = y - visibleRows / 3;
      this.clampScroll();
      this.redraw();
    }
  }

  /** Flow arrows for the selected slice from its details' related slices. */
  setFlows(section, details) {
    const self = { section: section.index, track: details.track, depth: details.depth, start_us: details.start_us };
    this.flows = [];
    for (const related of details?.related || []) {
      const direction = FLOW_RELATIONS[related.relation];
      if (!direction) continue;
      const other = { section: section.index, track: related.track, depth: related.depth, start_us: related.start_us };
      this.flows.push(direction === "in" ? { from: other, to: self } : { from: self, to: other });
    }
    this.redraw();
  }

  clearFlows() {
    this.flows = [];
    this.redraw();
  }

  /** The slices of a track drawn as themselves, with their boxes in canvas CSS px (for tests and tools). */
  drawnSlices(sectionIndex, trackId) {
    const section = this.sections[sectionIndex];
    const row = this.layout.trackRows.get(`${sectionIndex}/${trackId}`);
    const answer = section?.answer?.get(trackId);
    if (!row || !answer?.slices) return [];
    const scale = timeScale(this.scene());
    const top = RULER_PX - this.scrollY;
    return answer.slices
      .map((s) => ({
        id: s.id,
        name: s.name,
        kind: s.kind,
        depth: s.depth,
        dur_us: s.dur_us,
        x: scale.x(s.start_us + section.shift),
        w: s.dur_us * scale.pxPerUs,
        y: top + laneMiddle(row, s.depth),
      }))
      .filter((b) => b.x + b.w > GUTTER_PX && b.x < this.width && b.y > RULER_PX && b.y < this.height);
  }

  /** Every laid-out row with its top in canvas CSS px at the current scroll (for tests and tools). */
  rowBoxes() {
    return this.layout.rows.map((row) => ({
      type: row.type,
      section: row.section.index,
      key: row.key,
      track: row.track?.id ?? null,
      group: row.group?.kind ?? null,
      top: RULER_PX - this.scrollY + row.y,
      h: row.h,
      lanes: row.lanes ?? null,
      folded: Boolean(row.folded),
    }));
  }

  /** The top of a track's row in canvas CSS px at the current scroll, or null when it is not laid out. */
  rowTop(sectionIndex, trackId) {
    const row = this.layout.trackRows.get(`${sectionIndex}/${trackId}`);
    return row ? RULER_PX - this.scrollY + row.y : null;
  }

  // ---- input (called by interaction.js) ----------------------------------------------------
  toggleRow(x, y) {
    const found = hitTest(this.scene(), x, y);
    const row = found?.row;
    const foldable = row?.type === "track" && row.foldable && x < GUTTER_PX;
    if (!row || (row.type !== "section" && row.type !== "group" && !foldable)) return false;
    const keys = foldable ? this.state.unfolded : this.state.collapsed;
    if (keys.has(row.key)) keys.delete(row.key);
    else keys.add(row.key);
    this.refresh();
    return true;
  }

  click(x, y) {
    const found = hitTest(this.scene(), x, y);
    const hit = found?.hit;
    if (hit?.type === "slice") {
      this.hooks.onSelect(hit.section, hit.item.id, false);
    } else if (hit?.type === "merged") {
      const start = hit.item.start_us + hit.section.shift;
      const pad = hit.item.dur_us * 0.1;
      this.setView({ start: start - pad, end: start + hit.item.dur_us + pad });
    } else if (x > GUTTER_PX && found?.row?.type === "track") {
      this.hooks.onSelect(null, null, false);
    }
  }

  hover(x, y, event) {
    const found = hitTest(this.scene(), x, y);
    if (!found?.hit) {
      this.leave();
      return;
    }
    this.tooltip.textContent = describe(found.hit, found.row);
    this.tooltip.hidden = false;
    const box = this.canvas.getBoundingClientRect();
    const left = Math.min(event.clientX - box.left + 14, this.width - 340);
    this.tooltip.style.left = `${Math.max(left, 0)}px`;
    this.tooltip.style.top = `${event.clientY - box.top + 16}px`;
  }

  leave() {
    this.tooltip.hidden = true;
  }

  dragRange(start, end, done) {
    this.state.range = end > start ? { start, end } : null;
    this.redraw();
    this.hooks.onRange(this.state.range, done);
  }

  clearRange() {
    this.dragRange(0, 0, true);
  }
}

function describe(hit, row) {
  const item = hit.item;
  if (hit.type === "counter") return `${row.track.name}\n${counterLabel(row.track, item[1])} at ${fmtTime(item[0])}`;
  if (hit.type === "merged") {
    return `${item.count} slices in ${fmtTime(item.dur_us)} (busy ${fmtTime(item.busy_us)})\nmostly: ${item.name}\nclick to zoom in`;
  }
  return `${item.name}\n${item.kind || "slice"} \u00b7 ${fmtTime(item.dur_us)} at ${fmtTime(item.start_us)}`;
}
