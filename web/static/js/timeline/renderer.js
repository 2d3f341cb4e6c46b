// Draws the timeline on a 2D canvas: ruler, rank / group / track labels, slices stacked by depth,
// merged blocks, counters as step areas, the selected slice with its flow arrows, a selected range.
// Text from traces only ever reaches the canvas (fillText), never the DOM as markup.

import { fmtBytes } from "../format.js";
import { GROUP_PX, LANE_PX, RULER_PX, SECTION_PX, TRACK_PAD_PX, laneMiddle, laneOf } from "./layout.js";
import { fmtTime, rulerTicks } from "./viewport.js";

const PALETTE = [
  "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#c9a227", "#b07aa1", "#e8779b",
  "#9c755f", "#6b8fd6", "#d37295", "#3f9e8f", "#8e6bbf", "#d4763b", "#5f9e3f", "#7d8a99",
];
const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", Arial, sans-serif';
const BOLD = `600 ${FONT}`;
const CHAR_PX = 6.2; // a rough width per character of FONT, to cut labels without measuring each
const colorCache = new Map();

/** A stable colour per slice name (FNV-1a hash into the palette). */
export function colorOf(name) {
  let color = colorCache.get(name);
  if (color) return color;
  let hash = 2166136261;
  for (let i = 0; i < name.length; i += 1) hash = Math.imul(hash ^ name.charCodeAt(i), 16777619);
  color = PALETTE[(hash >>> 0) % PALETTE.length];
  if (colorCache.size > 50_000) colorCache.clear();
  colorCache.set(name, color);
  return color;
}

function fitText(ctx, text, widthPx) {
  if (widthPx < 14) return null;
  const chars = Math.floor(widthPx / CHAR_PX);
  if (chars < 2) return null;
  let out = text.length > chars ? `${text.slice(0, Math.max(chars - 1, 1))}\u2026` : text;
  while (out.length > 2 && ctx.measureText(out).width > widthPx) out = `${out.slice(0, -2)}\u2026`;
  return out;
}

/** Where the time area is: x of a time on the common axis, and its scale. */
export function timeScale(scene) {
  const area = scene.width - scene.gutter;
  const pxPerUs = area / (scene.view.end - scene.view.start);
  return { area, pxPerUs, x: (t) => scene.gutter + (t - scene.view.start) * pxPerUs };
}

export function draw(ctx, scene) {
  const stats = { slices: 0, merged: 0, points: 0, labels: 0, flows: 0 };
  const { width, height } = scene;
  ctx.clearRect(0, 0, width, height);
  ctx.fillStyle = "#ffffff";
  ctx.fillRect(0, 0, width, height);
  ctx.font = FONT;
  ctx.textBaseline = "middle";

  ctx.save();
  ctx.beginPath();
  ctx.rect(0, RULER_PX, width, height - RULER_PX);
  ctx.clip();
  const top = RULER_PX - scene.scrollY;
  for (const row of scene.layout.rows) {
    const y = top + row.y;
    if (y + row.h < RULER_PX || y > height) continue;
    drawRow(ctx, scene, row, y, stats);
  }
  const current = scene.layout.rows.findLast((row) => row.type === "section" && row.y < scene.scrollY);
  if (current) drawRow(ctx, scene, current, RULER_PX, stats); // keep the rank in sight while scrolled
  ctx.restore();
  ctx.save();
  ctx.beginPath();
  ctx.rect(scene.gutter, RULER_PX, width - scene.gutter, height - RULER_PX);
  ctx.clip();
  drawGridLines(ctx, scene);
  drawRange(ctx, scene);
  drawFlows(ctx, scene, top, stats);
  ctx.restore();

  drawRuler(ctx, scene);
  ctx.strokeStyle = "#c5cbd3";
  ctx.beginPath();
  ctx.moveTo(scene.gutter + 0.5, 0);
  ctx.lineTo(scene.gutter + 0.5, height);
  ctx.stroke();
  return stats;
}

function drawRow(ctx, scene, row, y, stats) {
  if (row.type === "section") {
    ctx.fillStyle = "#1c2430";
    ctx.fillRect(0, y, scene.width, row.h);
    ctx.fillStyle = "#ffffff";
    ctx.font = BOLD;
    ctx.fillText(`${row.collapsed ? "\u25b8" : "\u25be"} ${row.label}`, 8, y + SECTION_PX / 2);
    ctx.font = FONT;
    return;
  }
  if (row.type === "group") {
    ctx.fillStyle = "#eef1f5";
    ctx.fillRect(0, y, scene.width, row.h);
    ctx.fillStyle = "#1d232b";
    ctx.font = BOLD;
    ctx.fillText(fitText(ctx, `${row.collapsed ? "\u25b8" : "\u25be"} ${row.label}`, scene.gutter - 12) || "", 8, y + GROUP_PX / 2);
    ctx.font = FONT;
    ctx.strokeStyle = "#dde1e6";
    ctx.beginPath();
    ctx.moveTo(0, y + row.h - 0.5);
    ctx.lineTo(scene.width, y + row.h - 0.5);
    ctx.stroke();
    return;
  }
  drawTrackLabel(ctx, scene, row, y);
  const answer = row.section.answer?.get(row.track.id);
  ctx.save();
  ctx.beginPath();
  ctx.rect(scene.gutter, y, scene.width - scene.gutter, row.h);
  ctx.clip();
  if (answer && row.track.kind === "counter") drawCounter(ctx, scene, row, y, answer, stats);
  else if (answer) drawSlices(ctx, scene, row, y, answer, stats);
  ctx.restore();
  ctx.strokeStyle = "#eceef1";
  ctx.beginPath();
  ctx.moveTo(0, y + row.h - 0.5);
  ctx.lineTo(scene.width, y + row.h - 0.5);
  ctx.stroke();
}

/** A counter's value in its unit: bytes, percent or a plain number. */
export function counterLabel(track, value) {
  if (track.unit === "bytes") return fmtBytes(value);
  if (track.unit === "%") return `${Number(value.toFixed(1))}%`;
  return String(Number(value.toFixed(2)));
}

function drawTrackLabel(ctx, scene, row, y) {
  ctx.fillStyle = "#5e6875";
  const label = fitText(ctx, row.label, scene.gutter - 26);
  if (label) ctx.fillText(label, 20, y + Math.min(row.h, LANE_PX + 2 * TRACK_PAD_PX) / 2);
  if (row.foldable) {
    ctx.fillStyle = "#2f6fb3";
    const note = row.folded
      ? `\u25b8 ${row.stackDepth - row.lanes + 1} deeper levels folded`
      : `\u25be ${row.stackDepth} levels \u00b7 fold`;
    ctx.fillText(fitText(ctx, note, scene.gutter - 26) || "", 20, y + TRACK_PAD_PX + LANE_PX * 1.5);
  }
  if (row.track.kind === "counter") {
    ctx.fillStyle = "#8a939f";
    ctx.fillText(`max ${counterLabel(row.track, row.track.max ?? 0)}`, 20, y + row.h - 9);
  }
}

function drawSlices(ctx, scene, row, y, answer, stats) {
  const { x } = timeScale(scene);
  const shift = row.section.shift;
  const left = scene.gutter;
  const right = scene.width;
  const selected = scene.selected && scene.selected.section === row.section.index ? scene.selected.id : null;
  let selectedBox = null;
  for (const block of byLane(answer.merged, row)) {
    const x0 = Math.max(x(block.start_us + shift), left - 1);
    const x1 = Math.min(x(block.start_us + block.dur_us + shift), right + 1);
    if (x1 < left || x0 > right) continue;
    const top = y + TRACK_PAD_PX + laneOf(row, block.depth) * LANE_PX;
    ctx.globalAlpha = 0.45 + 0.45 * Math.min(block.busy_us / Math.max(block.dur_us, 1e-9), 1);
    ctx.fillStyle = colorOf(block.name);
    ctx.fillRect(x0, top + 1, Math.max(x1 - x0, 1), LANE_PX - 2);
    ctx.globalAlpha = 1;
    stats.merged += 1;
  }
  for (const slice of byLane(answer.slices, row)) {
    const x0 = x(slice.start_us + shift);
    const x1 = x(slice.start_us + slice.dur_us + shift);
    if (x1 < left || x0 > right) continue;
    const top = y + TRACK_PAD_PX + laneOf(row, slice.depth) * LANE_PX;
    const cx0 = Math.max(x0, left - 1);
    const w = Math.max(Math.min(x1, right + 1) - cx0, 1);
    ctx.fillStyle = colorOf(slice.name);
    ctx.fillRect(cx0, top + 1, w, LANE_PX - 2);
    stats.slices += 1;
    if (slice.id === selected) selectedBox = [cx0, top + 1, w, LANE_PX - 2];
    if (w > 24) {
      const text = fitText(ctx, slice.name, w - 6);
      if (text) {
        ctx.fillStyle = "#ffffff";
        ctx.fillText(text, cx0 + 3, top + LANE_PX / 2);
        stats.labels += 1;
      }
    }
  }
  if (selectedBox) {
    ctx.strokeStyle = "#111111";
    ctx.lineWidth = 2;
    ctx.strokeRect(...selectedBox);
    ctx.lineWidth = 1;
  }
}

/** Items in drawing order: a folded stack's last lane draws deeper items over shallower ones. */
function byLane(items, row) {
  if (!row.folded) return items;
  const last = row.lanes - 1;
  const deep = items.filter((item) => item.depth >= last).sort((a, b) => a.depth - b.depth);
  return [...items.filter((item) => item.depth < last), ...deep];
}

function drawCounter(ctx, scene, row, y, answer, stats) {
  const points = answer.points;
  if (!points.length) return;
  const { x } = timeScale(scene);
  const shift = row.section.shift;
  const low = Math.min(row.track.min ?? 0, 0);
  const high = Math.max(row.track.max ?? 0, low + 1e-9);
  const bottom = y + row.h - 3;
  const usable = row.h - 8;
  const yOf = (v) => bottom - ((v - low) / (high - low)) * usable;
  const end = x((answer.end_us ?? points[points.length - 1][0]) + shift);
  const color = row.track.unit === "bytes" ? "#b07aa1" : row.track.unit === "%" ? "#59a14f" : "#4e79a7";
  ctx.beginPath();
  ctx.moveTo(x(points[0][0] + shift), bottom);
  let lastY = bottom;
  for (const [t, v] of points) {
    const px = x(t + shift);
    ctx.lineTo(px, lastY);
    lastY = yOf(v);
    ctx.lineTo(px, lastY);
  }
  ctx.lineTo(end, lastY);
  ctx.lineTo(end, bottom);
  ctx.closePath();
  ctx.globalAlpha = 0.3;
  ctx.fillStyle = color;
  ctx.fill();
  ctx.globalAlpha = 1;
  ctx.strokeStyle = color;
  ctx.stroke();
  stats.points += points.length;
}

function drawGridLines(ctx, scene) {
  const { ticks } = rulerTicks(scene.view, scene.width - scene.gutter);
  ctx.strokeStyle = "rgba(0, 0, 0, 0.06)";
  ctx.beginPath();
  for (const tick of ticks) {
    const px = Math.round(scene.gutter + tick.x) + 0.5;
    ctx.moveTo(px, RULER_PX);
    ctx.lineTo(px, scene.height);
  }
  ctx.stroke();
}

function drawRange(ctx, scene) {
  if (!scene.range) return;
  const { x } = timeScale(scene);
  const x0 = Math.max(x(scene.range.start), scene.gutter);
  const x1 = Math.min(x(scene.range.end), scene.width);
  if (x1 <= x0) return;
  ctx.fillStyle = "rgba(31, 95, 191, 0.12)";
  ctx.fillRect(x0, RULER_PX, x1 - x0, scene.height - RULER_PX);
  ctx.strokeStyle = "rgba(31, 95, 191, 0.8)";
  ctx.beginPath();
  ctx.moveTo(x0 + 0.5, RULER_PX);
  ctx.lineTo(x0 + 0.5, scene.height);
  ctx.moveTo(x1 - 0.5, RULER_PX);
  ctx.lineTo(x1 - 0.5, scene.height);
  ctx.stroke();
}

/** Arrows between slices: each end {section, track, depth, start_us} (trace-local time). */
function drawFlows(ctx, scene, top, stats) {
  const { x } = timeScale(scene);
  ctx.strokeStyle = "#c2185b";
  ctx.fillStyle = "#c2185b";
  ctx.lineWidth = 1.5;
  for (const flow of scene.flows) {
    const ends = [flow.from, flow.to].map((end) => {
      const row = scene.layout.trackRows.get(`${end.section}/${end.track}`);
      const section = row?.section;
      return row ? { x: x(end.start_us + section.shift), y: top + laneMiddle(row, end.depth) } : null;
    });
    if (!ends[0] || !ends[1]) continue;
    const [a, b] = ends;
    const bend = Math.max(Math.abs(b.y - a.y) / 2, 20);
    ctx.beginPath();
    ctx.moveTo(a.x, a.y);
    ctx.bezierCurveTo(a.x, a.y + Math.sign(b.y - a.y || 1) * bend, b.x, b.y - Math.sign(b.y - a.y || 1) * bend, b.x, b.y);
    ctx.stroke();
    const dir = Math.sign(b.y - a.y || 1);
    ctx.beginPath();
    ctx.moveTo(b.x, b.y);
    ctx.lineTo(b.x - 4, b.y - dir * 7);
    ctx.lineTo(b.x + 4, b.y - dir * 7);
    ctx.closePath();
    ctx.fill();
    stats.flows += 1;
  }
  ctx.lineWidth = 1;
}

function drawRuler(ctx, scene) {
  ctx.fillStyle = "#f5f6f8";
  ctx.fillRect(0, 0, scene.width, RULER_PX);
  ctx.strokeStyle = "#c5cbd3";
  ctx.beginPath();
  ctx.moveTo(0, RULER_PX - 0.5);
  ctx.lineTo(scene.width, RULER_PX - 0.5);
  ctx.stroke();
  const { ticks } = rulerTicks(scene.view, scene.width - scene.gutter);
  ctx.fillStyle = "#1d232b";
  ctx.strokeStyle = "#8a939f";
  ctx.beginPath();
  for (const tick of ticks) {
    const px = Math.round(scene.gutter + tick.x) + 0.5;
    ctx.moveTo(px, RULER_PX - 8);
    ctx.lineTo(px, RULER_PX);
    ctx.fillText(tick.label, px + 3, RULER_PX / 2 - 2);
  }
  ctx.stroke();
  ctx.fillStyle = "#f5f6f8";
  ctx.fillRect(0, 0, scene.gutter, RULER_PX - 1);
  ctx.fillStyle = "#5e6875";
  ctx.fillText(`window ${fmtTime(scene.view.end - scene.view.start)}`, 8, RULER_PX / 2);
}
