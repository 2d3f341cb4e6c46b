// What is under the pointer: a row of the layout, and in a track row the slice, merged block or
// counter value drawn there (from the section's last window answer).

import { LANE_PX, RULER_PX, TRACK_PAD_PX, laneOf } from "./layout.js";
import { timeScale } from "./renderer.js";

const SLOP_PX = 2; // slices narrower than this are still hit within a couple of pixels

export function rowAt(scene, y) {
  if (y < RULER_PX) return null;
  const rowsY = y - RULER_PX + scene.scrollY;
  return scene.layout.rows.find((row) => rowsY >= row.y && rowsY < row.y + row.h) || null;
}

/** {row, hit: {type: "slice"|"merged"|"counter", item, section}} or {row} or null. */
export function hitTest(scene, x, y) {
  const row = rowAt(scene, y);
  if (!row || row.type !== "track" || x < scene.gutter) return row ? { row } : null;
  const answer = row.section.answer?.get(row.track.id);
  if (!answer) return { row };
  const scale = timeScale(scene);
  const t = (x - scene.gutter) / scale.pxPerUs + scene.view.start - row.section.shift;
  const slop = SLOP_PX / scale.pxPerUs;
  if (row.track.kind === "counter") {
    const point = lastAtOrBefore(answer.points, t);
    return point ? { row, hit: { type: "counter", item: point, section: row.section } } : { row };
  }
  const lane = Math.floor((y - RULER_PX + scene.scrollY - row.y - TRACK_PAD_PX) / LANE_PX);
  const covers = (item) => laneOf(row, item.depth) === lane && t >= item.start_us - slop && t <= item.start_us + item.dur_us + slop;
  const exact = (item) => laneOf(row, item.depth) === lane && t >= item.start_us && t <= item.start_us + item.dur_us;
  const slice = deepest(answer.slices, exact) || deepest(answer.slices, covers);
  if (slice) return { row, hit: { type: "slice", item: slice, section: row.section } };
  const block = deepest(answer.merged, exact) || deepest(answer.merged, covers);
  return block ? { row, hit: { type: "merged", item: block, section: row.section } } : { row };
}

/** The deepest item that passes `test`: what a folded stack's last lane shows on top. */
function deepest(items, test) {
  let found = null;
  for (const item of items) if (test(item) && (!found || item.depth > found.depth)) found = item;
  return found;
}

function lastAtOrBefore(points, t) {
  let found = null;
  for (const point of points) {
    if (point[0] > t) break;
    found = point;
  }
  return found;
}
