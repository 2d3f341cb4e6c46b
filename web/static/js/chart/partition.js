// A hierarchy as nested shares: an icicle (rows of rectangles, the root on top) or a sunburst (rings around the
// root). A click on a node with children zooms into it, a click on the root of the zoom goes back up one level.

import { fitText, hideTooltip, lighter, mountChart, showTooltip, svg, svgRoot, textOn } from "./core.js";
import { sectorLabel, sectorPath } from "./pie.js";
import { PALETTE } from "./palette.js";

const ROOT_COLOR = "#f3f5f7";

/**
 * The tree of nodes (ids, parents: "" for a root) with each node's total: its value when values are totals
 * ("total"), else its value plus its children's totals ("remainder"). Children are sorted by total, largest first.
 */
export function hierarchy({ ids, parents, values, branchvalues = "total" }) {
  const index = new Map(ids.map((id, i) => [String(id), i]));
  const children = ids.map(() => []);
  const roots = [];
  parents.forEach((parent, i) => {
    const at = parent === "" || parent === null || parent === undefined ? undefined : index.get(String(parent));
    if (at === undefined || at === i) roots.push(i);
    else children[at].push(i);
  });
  const totals = values.map((v) => Math.max(0, Number(v) || 0));
  if (branchvalues === "remainder") {
    const order = [];
    const stack = [...roots];
    while (stack.length) {
      const node = stack.pop();
      order.push(node);
      stack.push(...children[node]);
    }
    for (let k = order.length - 1; k >= 0; k -= 1) {
      const node = order[k];
      for (const child of children[node]) totals[node] += totals[child];
    }
  }
  for (const list of children) list.sort((a, b) => totals[b] - totals[a]);
  roots.sort((a, b) => totals[b] - totals[a]);
  const parentOf = ids.map(() => -1);
  children.forEach((list, node) => list.forEach((child) => { parentOf[child] = node; }));
  return { children, roots, totals, parentOf };
}

/** Each node's colour: given ones kept; else the top nodes' palette colours, lighter at each level below. */
function nodeColors(tree, given) {
  if (given) return given;
  const colors = tree.totals.map(() => ROOT_COLOR);
  const paint = (node, color) => {
    colors[node] = color;
    tree.children[node].forEach((child) => paint(child, lighter(color, 0.2)));
  };
  const top = tree.roots.length === 1 ? tree.children[tree.roots[0]] : tree.roots;
  top.forEach((node, k) => paint(node, PALETTE[k % PALETTE.length]));
  return colors;
}

/**
 * The nodes drawn from the zoom's root: [{node, depth, start, end}] where start..end is the node's share (0..1)
 * of its row or ring, each child within its parent's share (by total), down to `levels` rows.
 */
export function layoutShares(tree, top, levels) {
  const placed = [];
  const place = (nodes, start, end, depth, total) => {
    if (depth >= levels || !(total > 0)) return;
    let at = start;
    for (const node of nodes) {
      const width = ((end - start) * tree.totals[node]) / total;
      placed.push({ node, depth, start: at, end: at + width });
      place(tree.children[node], at, at + width, depth + 1, tree.totals[node]);
      at += width;
    }
  };
  const nodes = top === null ? tree.roots : [top];
  place(nodes, 0, 1, 0, nodes.reduce((sum, node) => sum + tree.totals[node], 0));
  return placed;
}

/**
 * Draw an icicle or a sunburst into `container`. nodes: {ids, parents, values, labels, text?} (text: what a node
 * shows inside; its label by default); branchvalues "total" | "remainder"; maxdepth: rows or rings shown at once
 * (the root's included). hover(i, {total, percentRoot}) -> lines; onClick(i): what a click does instead of zooming.
 */
export function drawPartition(container, {
  kind, nodes, branchvalues = "total", maxdepth = Infinity, colors = null, hover = null, onClick = null, label = "",
}) {
  const tree = hierarchy({ ...nodes, branchvalues });
  const fills = nodeColors(tree, colors);
  const text = nodes.text || nodes.labels;
  const zoom = { top: tree.roots.length === 1 ? tree.roots[0] : null };
  const depthBelow = (node) => 1 + Math.max(0, ...tree.children[node].map(depthBelow));
  const levels = () => Math.min(maxdepth, zoom.top === null ? Math.max(0, ...tree.roots.map(depthBelow)) : depthBelow(zoom.top));
  const rootTotal = () => (zoom.top === null ? tree.roots.reduce((sum, r) => sum + tree.totals[r], 0) : tree.totals[zoom.top]);
  const press = (node) => {
    if (onClick) {
      onClick(node);
      return;
    }
    if (node === zoom.top) {
      if (tree.parentOf[node] >= 0) zoom.top = tree.parentOf[node];
      else return;
    } else if (tree.children[node].length) zoom.top = node;
    else return;
    frame.redraw();
  };
  const zoomNote = (node) => {
    if (node === zoom.top) return tree.parentOf[node] >= 0 ? "click to go back up" : null;
    return tree.children[node].length ? "click to zoom in" : null;
  };
  const bind = (shape, node) => {
    shape.addEventListener("pointermove", (event) => {
      const total = tree.totals[node];
      const lines = hover ? hover(node, { total, percentRoot: rootTotal() ? total / rootTotal() : 0 }) : [String(nodes.labels[node])];
      showTooltip(frame.tooltip, event, lines, onClick ? null : zoomNote(node));
    });
    shape.addEventListener("pointerleave", () => hideTooltip(frame.tooltip));
    shape.addEventListener("click", () => press(node));
    return shape;
  };
  const frame = mountChart(container, (host, width, height) => {
    const root = svgRoot(host, width, height, label);
    const placed = layoutShares(tree, zoom.top, levels());
    if (kind === "sunburst") drawRings(root, placed, { width, height, levels: levels(), fills, text, bind, single: zoom.top !== null });
    else drawRows(root, placed, { width, height, levels: levels(), fills, text, bind });
  }, { kind, label });
  return frame;
}

function drawRows(root, placed, o) {
  const rowHeight = o.height / Math.max(1, o.levels);
  for (const p of placed) {
    const x = 1 + p.start * (o.width - 2);
    const w = (p.end - p.start) * (o.width - 2);
    const y = p.depth * rowHeight;
    const group = svg("g", { class: "node", "data-node": p.node });
    group.append(svg("rect", { class: "cell", x, y: y + 0.5, width: Math.max(0, w - 1), height: rowHeight - 1, fill: o.fills[p.node] }));
    if (w >= 24 && rowHeight >= 16) {
      const shown = fitText(o.text[p.node], w - 8, 11);
      if (shown) group.append(svg("text", { class: "node-text", x: x + 4, y: y + 14, fill: textOn(o.fills[p.node]), "font-size": 11, "pointer-events": "none", text: shown }));
    }
    root.append(o.bind(group, p.node));
  }
}

function drawRings(root, placed, o) {
  const cx = o.width / 2;
  const cy = o.height / 2;
  const radius = Math.max(10, Math.min(o.width, o.height) / 2 - 4);
  const rings = o.single ? o.levels : o.levels + 1; // several roots: a hole in the middle instead of the root's disk
  const thickness = radius / Math.max(1, rings);
  for (const p of placed) {
    const depth = o.single ? p.depth : p.depth + 1;
    const inner = depth === 0 ? 0 : depth * thickness;
    const outer = (depth + 1) * thickness;
    const a0 = p.start * 2 * Math.PI;
    const a1 = p.end * 2 * Math.PI;
    const group = svg("g", { class: "node", "data-node": p.node });
    const fill = depth === 0 ? "#fff" : o.fills[p.node];
    group.append(svg("path", { class: "sector", d: depth === 0 ? circlePath(cx, cy, outer) : sectorPath(cx, cy, inner, outer, a0, a1), fill, stroke: "#fff", "stroke-width": 1 }));
    const label = nodeLabel(String(o.text[p.node]), { a0, a1, inner, outer, cx, cy, center: depth === 0 });
    if (label) group.append(svg("text", { class: "node-text", ...label, fill: depth === 0 ? "#1d232b" : textOn(fill), "pointer-events": "none" }));
    root.append(o.bind(group, p.node));
  }
}

function circlePath(cx, cy, r) {
  return `M${cx - r} ${cy}A${r} ${r} 0 1 0 ${cx + r} ${cy}A${r} ${r} 0 1 0 ${cx - r} ${cy}Z`;
}

/** A sector's text, where it fits (pie.sectorLabel); the root's disk holds its text in the middle, cut to fit. */
function nodeLabel(text, s) {
  if (!s.center) {
    const whole = sectorLabel(text, s, [11]);
    if (whole) return whole;
    const cut = fitText(text, s.outer - s.inner - 6, 11);
    return cut && cut !== text ? sectorLabel(cut, s, [11]) : null;
  }
  const shown = fitText(text, s.outer * 2 - 8, 11);
  return shown ? { x: s.cx, y: s.cy, "text-anchor": "middle", "dominant-baseline": "central", "font-size": 11, text: shown } : null;
}
