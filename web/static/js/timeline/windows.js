// Asks the server for what is visible, per rank: the window (with a margin for panning) at the
// drawing's pixel width. A newer request aborts the older one; until it answers, the last answer
// stays and is drawn transformed to the new viewport.

import { getJSON, isAbort } from "../api.js";
import { withQuery } from "../urlstate.js";

const MARGIN = 0.25; // of the visible span, fetched on each side so a pan shows data at once

/**
 * The trace-local window a section needs for the common-axis `view`, clipped to the trace;
 * null when the trace is entirely outside the view.
 */
export function localWindow(section, view, widthPx) {
  const span = view.end - view.start;
  const start = Math.max(view.start - span * MARGIN - section.shift, 0);
  const end = Math.min(view.end + span * MARGIN - section.shift, section.info.duration_us);
  if (!(end > start)) return null;
  const px = Math.max(Math.round((widthPx * (end - start)) / span), 1);
  return { start: Number(start.toFixed(3)), end: Number(end.toFixed(3)), widthPx: Math.min(px, 16384) };
}

/** Does the section's current answer already cover `wanted` at (about) the same resolution? */
function covers(answer, wanted, trackIds) {
  if (!answer) return false;
  const sameTracks = answer.trackIds === trackIds;
  const resolution = (wanted.end - wanted.start) / wanted.widthPx;
  const answered = (answer.end_us - answer.start_us) / answer.width_px;
  const inside = answer.start_us <= wanted.start + 1e-3 && answer.end_us >= wanted.end - 1e-3;
  return sameTracks && inside && answered <= resolution * 1.05 && answered >= resolution / 1.5;
}

export class WindowLoader {
  constructor({ onAnswer, onError }) {
    this.onAnswer = onAnswer;
    this.onError = onError;
    this.controllers = new Map();
    this.requests = 0;
  }

  /** Fetch each section's window unless its answer already covers it. */
  update(sections, view, widthPx, trackIdsOf) {
    for (const section of sections) {
      if (!section.info) continue;
      const trackIds = trackIdsOf(section).join(",");
      const wanted = localWindow(section, view, widthPx);
      if (!wanted || !trackIds) {
        this.abort(section); // nothing of this rank is visible: an empty answer, nothing to ask
        section.answer = new Map();
        section.rawAnswer = null;
        continue;
      }
      const pending = section.pendingKey;
      const key = `${wanted.start}|${wanted.end}|${wanted.widthPx}|${trackIds}`;
      if (pending === key || covers(section.rawAnswer, wanted, trackIds)) continue;
      this.fetch(section, wanted, trackIds, key);
    }
  }

  abort(section) {
    this.controllers.get(section.index)?.abort();
    this.controllers.delete(section.index);
    section.pendingKey = null;
  }

  async fetch(section, wanted, trackIds, key) {
    this.abort(section);
    const controller = new AbortController();
    this.controllers.set(section.index, controller);
    section.pendingKey = key;
    this.requests += 1;
    const url = withQuery("/api/timeline", {
      ...section.ident,
      start_us: wanted.start,
      end_us: wanted.end,
      width_px: wanted.widthPx,
      tracks: trackIds,
    });
    try {
      const body = await getJSON(url, { signal: controller.signal });
      if (section.pendingKey !== key) return;
      section.pendingKey = null;
      body.trackIds = trackIds;
      section.rawAnswer = body;
      section.answer = new Map(body.tracks.map((t) => [t.id, { ...t, end_us: body.end_us }]));
      this.onAnswer(section);
    } catch (error) {
      if (isAbort(error)) return;
      if (section.pendingKey === key) section.pendingKey = null;
      this.onError(section, error);
    }
  }
}
