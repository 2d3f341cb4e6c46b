// Trace: the timeline of one or several ranks of a run on one time axis, drawn from windows the
// server cuts to the pixel width (level of detail on the server), with search, flows, a range
// summary, export, and every bit of state in the URL.

import { getJSON, isAbort, loadView } from "../api.js";
import { byId, clear, debounce, el } from "../dom.js";
import { errorBox } from "../status.js";
import { initSelector, showViewError } from "../selector.js";
import { readParams, showOnHistoryMove, updateUrl, withQuery } from "../urlstate.js";
import { renderRangeSummary, renderSliceDetails } from "../timeline/details.js";
import { groupedTracks, trackKey, trackKind, trackShown, visibleTrackIds } from "../timeline/layout.js";
import { openInPerfetto } from "../timeline/perfetto.js";
import { parseState, stateParams } from "../timeline/state.js";
import { TimelineView } from "../timeline/view.js";
import { fmtTime, rulerTicks } from "../timeline/viewport.js";

const URL_DEBOUNCE_MS = 150;
const SEARCH_DEBOUNCE_MS = 300;

/** A Distributed link names `workers` but no `worker`: the first is the selector's worker. */
function adoptFirstWorker() {
  const params = readParams();
  if (params.workers && !params.worker) updateUrl({ worker: params.workers.split(",")[0] });
}

/** Ranks of one job have different span ids for the same window: take the same position. */
function spanOf(runInfo, worker, leadWorker, leadSpan) {
  const position = runInfo.workers.find((w) => w.worker === leadWorker)?.spans.indexOf(leadSpan) ?? 0;
  const spans = runInfo.workers.find((w) => w.worker === worker)?.spans || [];
  return spans[Math.min(Math.max(position, 0), spans.length - 1)] ?? null;
}

function sectionLabel(section, state) {
  const parts = [section.worker];
  if (section.info?.rank != null) parts.push(`rank ${section.info.rank}`);
  const offset = state.offsets[section.worker] || 0;
  if (offset) parts.push(`offset ${fmtTime(offset)}`);
  if (section.error) parts.push("could not be read");
  return parts.join(" \u00b7 ");
}

/** The same ranks on the same axis: the sections (built once) can show the other state in place. */
function sameRanks(state, next) {
  const same = (a, b) => a.length === b.length && a.every((item, i) => item === b[i]);
  return same(state.workers, next.workers) && state.align === next.align
    && state.workers.every((w) => (state.offsets[w] || 0) === (next.offsets[w] || 0));
}

const sameSlice = (a, b) => (a && b ? a.worker === b.worker && a.span === b.span && a.id === b.id : a === b);

/** A layout key ("2", "2.g1") of a rank, for its position among `after`; null when the rank is gone. */
function renumberKey(key, before, after) {
  const [index, ...rest] = key.split(".");
  const position = after.indexOf(before[Number(index)]);
  return position < 0 ? null : [String(position), ...rest].join(".");
}

class TracePage {
  constructor(selection, statusEl) {
    this.selection = selection;
    this.statusEl = statusEl;
    this.state = parseState(readParams());
    this.state.workers = [selection.worker, ...this.state.workers.filter((w) => w !== selection.worker)];
    const known = new Set(selection.runInfo.workers.map((w) => w.worker));
    this.missing = this.state.workers.filter((w) => !known.has(w));
    this.state.workers = this.state.workers.filter((w) => known.has(w));
    this.sections = this.state.workers.map((worker, index) => {
      const span = index === 0 ? selection.span : spanOf(selection.runInfo, worker, selection.worker, selection.span);
      return { index, worker, span, ident: { run: selection.run, worker, span }, info: null, answer: null };
    });
    this.search = { counts: [], total: 0, token: 0 };
    this.detailsToken = 0;
    this.summaryToken = 0;
    // one history entry per settled gesture (zoom, pan, fold, selection) once the page shows what its
    // URL asked for; until then the URL is only completed (replaced)
    this.settled = false;
    this.syncUrl = debounce(() => updateUrl(stateParams(this.state), { push: this.settled }), URL_DEBOUNCE_MS);
  }

  async load() {
    const results = await Promise.allSettled(
      this.sections.map((section) => loadView(withQuery("/api/timeline/tracks", section.ident), { statusEl: this.statusEl })),
    );
    results.forEach((result, i) => {
      if (result.status === "fulfilled") this.sections[i].info = result.value;
      else this.sections[i].error = result.reason;
    });
    const failed = this.sections.filter((s) => s.error);
    if (failed.length === this.sections.length) {
      showViewError(this.statusEl, failed[0].error, failed[0].ident);
      return false;
    }
    clear(
      this.statusEl,
      failed.map((s) => errorBox({ title: `${s.worker}: this trace could not be read`, message: s.error.message, file: s.error.body?.file })),
      this.missing.length ? errorBox({ title: "Unknown workers", message: `Run ${this.selection.run} has no ${this.missing.join(", ")}.` }) : null,
    );
    for (const section of this.sections) section.label = sectionLabel(section, this.state);
    return true;
  }

  render() {
    const root = byId("trace");
    this.tooltip = el("div", { class: "tl-tooltip", hidden: true, "data-testid": "tooltip" });
    this.canvas = el("canvas", { class: "tl-canvas", tabindex: "0", "data-testid": "timeline", "aria-label": "Timeline" });
    this.detailsEl = el("section", { class: "panel tl-details", "data-testid": "details", hidden: true });
    this.summaryEl = el("section", { class: "panel tl-summary", "data-testid": "range-summary", hidden: true });
    this.windowErrorEl = el("div", { class: "status" });
    clear(
      root,
      this.toolbar(),
      this.ranksBar(),
      this.windowErrorEl,
      el("div", { class: "tl-canvas-wrap" }, this.canvas, this.tooltip),
      el("p", { class: "tl-hint muted", text: "Ctrl + wheel or W / S: zoom \u00b7 drag, shift + wheel or A / D: pan \u00b7 wheel: scroll tracks \u00b7 click: details \u00b7 shift + drag: summary of a range \u00b7 click a group to fold it, a stack's label to unfold it" }),
      el("div", { class: "grid tl-panels" }, this.detailsEl, this.summaryEl),
    );
    this.view = new TimelineView({
      canvas: this.canvas,
      tooltip: this.tooltip,
      state: this.state,
      sections: this.sections,
      hooks: {
        onSelect: (section, id, reveal) => this.select(section, id, reveal),
        onRange: (range, done) => done && this.summarize(range),
        onChange: () => this.changed(),
        onError: (section, error) => this.windowError(section, error),
      },
    });
    window.__profscopeTrace = this.testHook();
    this.changed();
  }

  testHook() {
    const page = this;
    return {
      get view() {
        return { ...page.state.view };
      },
      get stats() {
        return { ...page.view.stats, draws: page.view.draws, requests: page.view.loader.requests };
      },
      get timing() {
        return { firstDrawnMs: page.view.firstDrawnMs, drawMs: [...page.view.drawMs] };
      },
      get idle() {
        return !page.view.fetchScheduled && page.sections.every((s) => !s.pendingKey);
      },
      get answerDrawn() {
        return page.view.draws > page.view.drawsAtAnswer;
      },
      get sections() {
        return page.sections.map((s) => ({ worker: s.worker, span: s.span, shift: s.shift, answered: Boolean(s.answer) }));
      },
      get selected() {
        return page.state.selected ? { ...page.state.selected } : null;
      },
      tracks: (index) => page.sections[index]?.info?.tracks.map((t) => ({ id: t.id, name: t.name, kind: t.kind })) || [],
      drawnSlices: (index, trackId) => page.view.drawnSlices(index, trackId),
      rowTop: (index, trackId) => page.view.rowTop(index, trackId),
      rows: () => page.view.rowBoxes(),
      ruler: () => rulerTicks(page.state.view, page.view.timeWidth()).ticks.map(({ t, label }) => ({ t, label })),
      get height() {
        return page.view.height;
      },
    };
  }

  // ---- toolbar -----------------------------------------------------------------------------
  toolbar() {
    this.searchInput = el("input", { type: "search", id: "trace-search", placeholder: "Find slices by name\u2026", "aria-label": "Find slices by name", value: this.state.query });
    this.searchCount = el("span", { class: "muted tl-search-count", "data-testid": "search-count" });
    this.searchInput.addEventListener("input", debounce(() => this.setQuery(this.searchInput.value.trim()), SEARCH_DEBOUNCE_MS));
    this.searchInput.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        this.step(event.shiftKey ? -1 : 1);
      }
    });
    this.downloadLink = el("a", { class: "button-link", "data-testid": "download-window", download: "", href: "#", text: "Download window" });
    this.exportWorker = el("select", { "aria-label": "Rank to export", hidden: this.sections.length < 2 });
    for (const section of this.sections) this.exportWorker.append(el("option", { value: String(section.index), text: section.worker }));
    this.exportWorker.addEventListener("change", () => this.updateDownload());
    this.perfettoNote = el("span", { class: "muted", "data-testid": "perfetto-note" });
    return el(
      "div",
      { class: "controls tl-toolbar" },
      el("div", { class: "tl-search" }, this.searchInput,
        el("button", { type: "button", "data-testid": "search-prev", title: "Previous match (shift + Enter)", text: "\u25c0", onclick: () => this.step(-1) }),
        el("button", { type: "button", "data-testid": "search-next", title: "Next match (Enter)", text: "\u25b6", onclick: () => this.step(1) }),
        this.searchCount),
      el("button", { type: "button", "data-testid": "reset-zoom", text: "Whole trace", onclick: () => this.view.setView(this.view.bounds()) }),
      this.tracksPicker(),
      this.stacksButton(),
      el("span", { class: "spacer" }),
      this.exportWorker,
      this.downloadLink,
      el("button", { type: "button", "data-testid": "open-perfetto", text: "Open in Perfetto UI", onclick: () => this.perfetto() }),
      this.perfettoNote,
    );
  }

  /** Fold or unfold every CPU stack at once (a track's label folds / unfolds that track alone). */
  stacksButton() {
    const label = () => (this.state.stacks === "full" ? "Fold stacks" : "Unfold stacks");
    const button = el("button", { type: "button", "data-testid": "stacks-toggle", text: label(),
      title: "CPU / Python stacks deeper than a few levels are folded; click a track's label for one track" });
    this.showStacksLabel = () => {
      button.textContent = label();
    };
    button.addEventListener("click", () => {
      this.state.stacks = this.state.stacks === "full" ? "folded" : "full";
      this.state.unfolded.clear();
      this.showStacksLabel();
      this.view.refresh();
    });
    return button;
  }

  /** With several ranks: only GPU streams and steps (compact), or every track. */
  compactToggle() {
    if (this.sections.length < 2) return null;
    this.compactBox = el("input", { type: "checkbox", checked: this.state.compact, "data-testid": "compact-toggle" });
    this.compactBox.addEventListener("change", () => {
      this.state.compact = this.compactBox.checked;
      this.syncPicker();
      this.view.refresh();
    });
    return el("label", { class: "tl-compact", title: "Show each rank's GPU streams and steps only (its deepest CPU thread when it has no GPU)" },
      this.compactBox, "compact ranks");
  }

  /** Ticking a track while compact: the tracks shown become the user's own choice (compact off). */
  leaveCompact() {
    if (!this.state.compact) return;
    for (const section of this.sections) {
      for (const track of section.info?.tracks || []) {
        if (!trackShown(section, track, this.state)) this.state.hidden.add(trackKey(section.index, track.id));
      }
    }
    this.state.compact = false;
    if (this.compactBox) this.compactBox.checked = false;
  }

  syncPicker() {
    for (const box of this.pickerBoxes) box.input.checked = trackShown(box.section, box.track, this.state);
  }

  tracksPicker() {
    this.pickerBoxes = [];
    const body = el("div", { class: "tl-tracks-list" });
    for (const section of this.sections) {
      if (!section.info) continue;
      if (this.sections.length > 1) body.append(el("div", { class: "tl-tracks-rank", text: section.worker }));
      for (const group of groupedTracks(section.info)) {
        body.append(el("div", { class: "tl-tracks-group", text: group.name }));
        for (const track of group.tracks) {
          const key = trackKey(section.index, track.id);
          const box = el("input", { type: "checkbox", checked: trackShown(section, track, this.state), "data-key": key });
          this.pickerBoxes.push({ input: box, section, track });
          box.addEventListener("change", () => {
            this.leaveCompact();
            if (box.checked) this.state.hidden.delete(key);
            else this.state.hidden.add(key);
            this.view.refresh();
          });
          body.append(el("label", { class: "tl-tracks-item" }, box, track.name));
        }
      }
    }
    return el("details", { class: "tl-tracks", "data-testid": "tracks-picker" }, el("summary", { text: "Tracks" }), body);
  }

  ranksBar() {
    const run = this.selection.runInfo;
    const align = el(
      "select",
      { id: "align", "aria-label": "Align ranks by" },
      el("option", { value: "wall", text: "wall clock (baseTimeNanoseconds)", selected: this.state.align === "wall" }),
      el("option", { value: "start", text: "trace start", selected: this.state.align === "start" }),
    );
    align.addEventListener("change", () => {
      this.state.align = align.value;
      this.view.refresh();
    });
    const others = run.workers.map((w) => w.worker).filter((w) => !this.state.workers.includes(w));
    const add = el("select", { "aria-label": "Add a worker", "data-testid": "add-worker", hidden: !others.length },
      el("option", { value: "", text: "add a worker\u2026", selected: true, disabled: true }),
      others.map((w) => el("option", { value: w, text: w })));
    add.addEventListener("change", () => this.setWorkers([...this.state.workers, add.value]));
    const several = this.sections.length > 1;
    if (!several && !others.length) return null;
    return el(
      "div",
      { class: "controls tl-ranks", "data-testid": "ranks" },
      several ? this.sections.map((section) => this.rankControl(section)) : null,
      several ? el("label", {}, "Align by", align) : null,
      this.compactToggle(),
      add,
    );
  }

  rankControl(section) {
    const offset = el("input", {
      type: "number",
      step: "any",
      class: "tl-offset",
      value: String(this.state.offsets[section.worker] || 0),
      "aria-label": `Offset of ${section.worker} in \u00b5s`,
      "data-testid": "offset-input",
      "data-worker": section.worker,
    });
    offset.addEventListener("change", () => {
      this.state.offsets[section.worker] = Number.parseFloat(offset.value) || 0;
      section.label = sectionLabel(section, this.state);
      this.view.refresh();
    });
    const remove = this.sections.length > 1
      ? el("button", { type: "button", class: "tl-remove", title: `Remove ${section.worker}`, text: "\u00d7",
          onclick: () => this.setWorkers(this.state.workers.filter((w) => w !== section.worker)) })
      : null;
    return el("span", { class: "tl-rank", "data-worker": section.worker },
      el("strong", { text: section.worker }),
      section.info?.rank != null ? el("span", { class: "muted", text: ` rank ${section.info.rank}` }) : null,
      el("label", {}, "offset \u00b5s", offset), remove);
  }

  /** Adding or removing a rank reloads the page from its URL (the sections are built once). */
  setWorkers(workers) {
    const moved = (keys) => new Set([...keys].map((key) => renumberKey(key, this.state.workers, workers)).filter(Boolean));
    const state = { ...this.state, workers, collapsed: moved(this.state.collapsed), hidden: moved(this.state.hidden),
      unfolded: moved(this.state.unfolded) };
    location.assign(withQuery("/trace", { ...readParams(), ...stateParams(state), worker: workers[0] }));
  }

  // ---- state changes -----------------------------------------------------------------------
  /**
   * Back / Forward within this trace: the window, folds, tracks, selection, range and search of the URL
   * landed on, shown without a reload (false when it shows other traces or ranks: the page reloads).
   */
  showState(params) {
    const next = parseState(params);
    const { run, worker, span } = this.selection;
    const sameTrace = (params.run ?? run) === run && (params.worker ?? worker) === worker && (params.span ?? span) === span;
    if (!sameTrace || !sameRanks(this.state, next)) return false;
    this.settled = false; // showing a history entry adds none
    Object.assign(this.state, { collapsed: next.collapsed, hidden: next.hidden, unfolded: next.unfolded, stacks: next.stacks,
      compact: next.compact, keepLike: new Set(), range: next.range });
    this.showStacksLabel();
    if (this.compactBox) this.compactBox.checked = next.compact;
    this.syncPicker();
    this.view.refresh();
    this.view.setView(next.view || this.view.bounds());
    this.summarize(next.range);
    if (!sameSlice(this.state.selected, next.selected)) {
      const section = next.selected && this.sections.find((s) => s.worker === next.selected.worker && s.span === next.selected.span && s.info);
      this.select(section || null, section ? next.selected.id : null, false);
    }
    if (next.query !== this.state.query || next.match !== this.state.match) {
      Object.assign(this.state, { query: next.query, match: next.match });
      this.searchInput.value = next.query;
      this.runSearch({ go: false });
    }
    updateUrl(stateParams(this.state)); // the entry reads what is shown (a window clamped to the trace)
    this.settled = true;
    return true;
  }

  changed() {
    this.syncUrl();
    this.updateDownload();
  }

  exportSection() {
    return this.sections[Number(this.exportWorker.value) || 0];
  }

  /** The export route's URL for the focused rank's part of the visible window, or null. */
  exportUrl() {
    const section = this.exportSection();
    if (!section?.info) return null;
    const view = this.state.view;
    const start = Math.max(view.start - section.shift, 0);
    const end = Math.min(view.end - section.shift, section.info.duration_us);
    if (!(end > start)) return null;
    return withQuery("/api/timeline/export", {
      ...section.ident,
      start_us: start.toFixed(3),
      end_us: end.toFixed(3),
      tracks: visibleTrackIds(section, this.state).join(","),
    });
  }

  updateDownload() {
    const url = this.exportUrl();
    this.downloadLink.setAttribute("href", url || "#");
    this.downloadLink.classList.toggle("disabled", !url);
  }

  async perfetto() {
    const url = this.exportUrl();
    if (!url) return;
    const section = this.exportSection();
    this.perfettoNote.textContent = "Opening ui.perfetto.dev\u2026";
    const title = `${this.selection.run} \u00b7 ${section.worker}`;
    this.perfettoNote.textContent = await openInPerfetto(url, title, `${section.worker}.window.trace.json`);
  }

  windowError(section, error) {
    clear(this.windowErrorEl, errorBox({ title: `${section.worker}: the window could not be loaded`, message: error.message }));
  }

  // ---- selection ---------------------------------------------------------------------------
  async select(section, id, reveal) {
    const token = ++this.detailsToken;
    if (!section || id === null) {
      this.state.selected = null;
      this.detailsEl.hidden = true;
      this.view.clearFlows();
      this.changed();
      return;
    }
    this.state.selected = { worker: section.worker, span: section.span, id };
    this.changed();
    this.view.redraw();
    let details;
    try {
      details = await getJSON(withQuery("/api/timeline/slice", { ...section.ident, id }));
    } catch (error) {
      if (token !== this.detailsToken) return;
      this.detailsEl.hidden = false;
      clear(this.detailsEl, errorBox({ title: "No details for this slice", message: error.message }));
      return;
    }
    if (token !== this.detailsToken) return;
    this.detailsEl.hidden = false;
    renderSliceDetails(this.detailsEl, details, {
      where: section.label,
      onRelated: (related) => this.select(section, related.id, true),
      onZoom: () => this.view.setView({ start: details.start_us + section.shift - details.dur_us * 0.1, end: details.start_us + section.shift + details.dur_us * 1.1 }),
    });
    this.view.setFlows(section, details);
    if (!reveal) return;
    this.showTrackOf(section, details.track);
    this.view.reveal(section, details);
  }

  /** Compact ranks hide most tracks: a slice the page reveals brings its track (in every rank). */
  showTrackOf(section, trackId) {
    const track = section.info.tracks.find((t) => t.id === trackId);
    if (!track || trackShown(section, track, this.state)) return;
    this.state.keepLike.add(trackKind(track));
    this.syncPicker();
    this.view.refresh();
  }

  // ---- search ------------------------------------------------------------------------------
  setQuery(query) {
    this.state.query = query;
    this.state.match = 0;
    this.runSearch();
  }

  /** Count matches in every rank, then go to the current one (ranks in order, each in time order). */
  async runSearch({ go = true } = {}) {
    const token = ++this.search.token;
    const query = this.state.query;
    this.changed();
    if (!query) {
      this.search = { counts: [], total: 0, token };
      this.searchCount.textContent = "";
      return;
    }
    const shown = this.sections.filter((s) => s.info);
    const answers = await Promise.all(shown.map((s) => getJSON(withQuery("/api/timeline/search", { ...s.ident, q: query, index: 0 })).catch(() => null)));
    if (token !== this.search.token) return;
    const counts = answers.map((a) => a?.count || 0);
    this.search = { counts, sections: shown, first: answers, total: counts.reduce((a, b) => a + b, 0), token };
    if (go) await this.goToMatch();
    else this.showCount();
  }

  async step(delta) {
    if (!this.search.total) return;
    this.state.match = (this.state.match + delta + this.search.total) % this.search.total;
    await this.goToMatch();
  }

  showCount() {
    const { total } = this.search;
    this.state.match = Math.min(this.state.match, Math.max(total - 1, 0));
    this.searchCount.textContent = total ? `${this.state.match + 1} of ${total}` : "no match";
  }

  async goToMatch() {
    const { counts, sections, first, total, token } = this.search;
    this.showCount();
    if (!total) {
      this.changed();
      return;
    }
    let local = this.state.match;
    let at = 0;
    while (local >= counts[at]) local -= counts[at++];
    const section = sections[at];
    let match = local === 0 ? first[at].match : null;
    if (!match) {
      const body = await getJSON(withQuery("/api/timeline/search", { ...section.ident, q: this.state.query, index: local }));
      if (token !== this.search.token) return;
      match = body.match;
    }
    this.showTrackOf(section, match.track);
    this.view.reveal(section, match);
    await this.select(section, match.id, false);
  }

  // ---- range -------------------------------------------------------------------------------
  async summarize(range) {
    const token = ++this.summaryToken;
    this.changed();
    if (!range) {
      this.summaryEl.hidden = true;
      return;
    }
    const parts = [];
    for (const section of this.sections) {
      if (!section.info) continue;
      const start = Math.max(range.start - section.shift, 0);
      const end = Math.min(range.end - section.shift, section.info.duration_us);
      if (!(end > start)) continue;
      const url = withQuery("/api/timeline/summary", {
        ...section.ident,
        start_us: start.toFixed(3),
        end_us: end.toFixed(3),
        tracks: visibleTrackIds(section, this.state).join(","),
      });
      parts.push(getJSON(url).then((body) => ({ where: section.label, body })));
    }
    let summaries;
    try {
      summaries = await Promise.all(parts);
    } catch (error) {
      if (isAbort(error) || token !== this.summaryToken) return;
      this.summaryEl.hidden = false;
      clear(this.summaryEl, errorBox({ title: "No summary for this range", message: error.message }));
      return;
    }
    if (token !== this.summaryToken) return;
    this.summaryEl.hidden = false;
    renderRangeSummary(this.summaryEl, range, summaries, { onClear: () => this.view.clearRange() });
  }

  /** What the URL asked for beyond the window: the selected slice, the search, the range. */
  async restore() {
    const selected = this.state.selected;
    const section = selected && this.sections.find((s) => s.worker === selected.worker && s.span === selected.span && s.info);
    if (this.state.query) await this.runSearch({ go: false });
    if (section) await this.select(section, selected.id, true); // a shared link shows its slice, scrolled into view
    if (this.state.range) await this.summarize(this.state.range);
  }
}

async function main() {
  const statusEl = byId("status");
  adoptFirstWorker();
  const selection = await initSelector("trace", statusEl);
  if (!selection) return;
  const page = new TracePage(selection, statusEl);
  try {
    if (!(await page.load())) return;
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
    return;
  }
  page.render();
  await page.restore();
  updateUrl(stateParams(page.state)); // what the link asked for, completed: replaces, then user actions push
  page.settled = true;
  showOnHistoryMove((params) => page.showState(params));
}

main();
