// A donut: one slice per value, clockwise from twelve o'clock, its share written inside when it fits.

import { hideTooltip, mountChart, showTooltip, svg, svgRoot, textOn, textWidth } from "./core.js";
import { decimalFormat } from "../format.js";

const SHARE = decimalFormat(1, 1);

/** The point at radius r and angle a (radians, 0 at twelve o'clock, clockwise) around (cx, cy). */
function polar(cx, cy, r, a) {
  return [cx + r * Math.sin(a), cy - r * Math.cos(a)];
}

/** The path of the ring's sector from angle a0 to a1 between radii inner and outer. */
export function sectorPath(cx, cy, inner, outer, a0, a1) {
  if (a1 - a0 >= 2 * Math.PI - 1e-9) { // the whole ring: two halves (an arc cannot end where it starts)
    return sectorPath(cx, cy, inner, outer, a0, a0 + Math.PI) + sectorPath(cx, cy, inner, outer, a0 + Math.PI, a1);
  }
  const large = a1 - a0 > Math.PI ? 1 : 0;
  const [x0, y0] = polar(cx, cy, outer, a0);
  const [x1, y1] = polar(cx, cy, outer, a1);
  if (inner <= 0) return `M${cx} ${cy}L${x0} ${y0}A${outer} ${outer} 0 ${large} 1 ${x1} ${y1}Z`;
  const [x2, y2] = polar(cx, cy, inner, a1);
  const [x3, y3] = polar(cx, cy, inner, a0);
  return `M${x0} ${y0}A${outer} ${outer} 0 ${large} 1 ${x1} ${y1}L${x2} ${y2}A${inner} ${inner} 0 ${large} 0 ${x3} ${y3}Z`;
}

/**
 * Whether a text box width x height centred at angle mid, radius r of the centre stays inside the sector
 * (a0..a1, inner..outer): each corner's radius and angle are checked.
 */
export function fitsInSector(width, height, { a0, a1, inner, outer }, mid, radius) {
  const cx = radius * Math.sin(mid);
  const cy = -radius * Math.cos(mid);
  for (const [dx, dy] of [[-1, -1], [1, -1], [1, 1], [-1, 1]]) {
    const x = cx + (dx * width) / 2;
    const y = cy + (dy * height) / 2;
    const r = Math.hypot(x, y);
    if (r < inner || r > outer) return false;
    if (a1 - a0 >= 2 * Math.PI - 1e-9) continue;
    let angle = Math.atan2(x, -y); // 0 at twelve o'clock, clockwise
    while (angle < a0) angle += 2 * Math.PI;
    if (angle > a1) return false;
  }
  return true;
}

/**
 * Where a sector's text goes (the attributes of its <text>): level across the sector at the first of `sizes`
 * where it fits, else along the ring, else along the radius (both turned so that they never read upside
 * down), else nowhere (null). A sector is {a0, a1, inner, outer, cx, cy}.
 */
export function sectorLabel(text, s, sizes) {
  const mid = (s.a0 + s.a1) / 2;
  const radius = (s.inner + s.outer) / 2;
  const [x, y] = polar(s.cx, s.cy, radius, mid);
  const at = { x, y, "text-anchor": "middle", "dominant-baseline": "central", text };
  for (const size of sizes) {
    if (fitsInSector(textWidth(text, size) + 2, size + 2, s, mid, radius)) return { ...at, "font-size": size };
  }
  const degrees = (mid * 180) / Math.PI;
  const span = s.a1 - s.a0;
  for (const size of sizes) { // along the ring: the chord at the text's inner edge holds its width
    const chord = span >= Math.PI ? 2 * (radius - size / 2) : 2 * (radius - size / 2) * Math.sin(span / 2);
    if (textWidth(text, size) + 6 > chord || size + 4 > s.outer - s.inner) continue;
    const turn = degrees > 90 && degrees < 270 ? degrees + 180 : degrees;
    return { ...at, "font-size": size, transform: `rotate(${turn} ${x} ${y})` };
  }
  for (const size of sizes) { // along the radius
    if (textWidth(text, size) + 4 > s.outer - s.inner || span * radius < size + 2) continue;
    const turn = mid > Math.PI ? degrees + 90 : degrees - 90;
    return { ...at, "font-size": size, transform: `rotate(${turn} ${x} ${y})` };
  }
  return null;
}

/**
 * Draw a donut into `container` (which has its size from CSS). slices: [{value, color, hover: [lines]}] with
 * values > 0; onClick(index) when a slice is clicked (slices with `clickable` only).
 */
export function drawDonut(container, { slices, hole = 0.45, label = "", onClick = null }) {
  const total = slices.reduce((sum, slice) => sum + slice.value, 0);
  const frame = mountChart(container, (host, width, height) => {
    const root = svgRoot(host, width, height, label);
    const cx = width / 2;
    const cy = height / 2;
    const outer = Math.max(4, Math.min(width, height) / 2 - 2);
    const inner = outer * hole;
    let angle = 0;
    slices.forEach((slice, index) => {
      const share = slice.value / total;
      const sector = { a0: angle, a1: angle + share * 2 * Math.PI, inner, outer };
      angle = sector.a1;
      const path = svg("path", { class: `slice${slice.clickable && onClick ? " clickable" : ""}`, d: sectorPath(cx, cy, inner, outer, sector.a0, sector.a1),
        fill: slice.color, stroke: "#fff", "stroke-width": 1, "data-index": index });
      path.addEventListener("pointermove", (event) => showTooltip(frame.tooltip, event, slice.hover));
      path.addEventListener("pointerleave", () => hideTooltip(frame.tooltip));
      if (slice.clickable && onClick) path.addEventListener("click", () => onClick(index));
      root.append(path);
      const label = sectorLabel(`${SHARE.format(100 * share)}%`, { ...sector, cx, cy }, [12, 11, 10, 9]);
      if (label) root.append(svg("text", { class: "slice-text", ...label, fill: textOn(slice.color), "pointer-events": "none" }));
    });
  }, { kind: "pie", downloads: true, label });
  return frame;
}
