// Names shortened in the middle: the start and the end that tells names apart both stay readable
// (`aten::cudnn_convolution_backward_weight` vs `..._input`, `…/inference/xdit_sd_3.5`). The one
// helper for every table cell, legend and selector that shows a name; the full name is in its title.

import { el } from "./dom.js";

const MIN_SHORTENED = 12; // shorter names are never cut (host_vmpid_15466 and _15467 must keep their tails)

/** How many trailing characters always stay visible: about 45% of the name, 10 to 20 characters. */
function tailLength(text) {
  return Math.min(20, Math.max(10, Math.round(text.length * 0.45)));
}

/**
 * Where a name's distinguishing part ends: before a C++ template or parameter list
 * (`void cudnn::detail::bn_fw_tr_1C11_kernel_NCHW<float, …>(cudnnTensorStruct, …)` is told apart by
 * `bn_fw_tr_1C11_kernel_NCHW`, not by `int, int)`), else at the end.
 */
function keyEnd(text) {
  for (let i = 8; i < text.length; i += 1) if (text[i] === "<" || text[i] === "(") return i;
  return text.length;
}

/**
 * A node in three parts: the head shrinks with an ellipsis as its box narrows, the tail (the end of
 * the distinguishing part) always shows, and a template or parameter list after it is cut at the
 * right edge (`whole`: the tail is the end of the text, as in a path). Widen the box to read more; the
 * text content and the title are the whole name.
 * (Inline boxes, not flex items: copied text and innerText stay one line.)
 */
export function middleEllipsis(text, { cls = "", whole = false } = {}) {
  const value = String(text ?? "");
  const end = whole ? value.length : keyEnd(value); // whole: the end tells them apart (a path's file:line)
  const key = value.slice(0, end);
  const cut = value.length > MIN_SHORTENED && key.length > 12 ? end - Math.min(tailLength(key), key.length - 4) : end;
  const node = el(
    "span",
    { class: `mid-ellipsis ${cls}`.trim(), title: value },
    el("span", { class: "head", text: value.slice(0, cut) }),
    value.slice(cut, end), // the tail, always drawn
    end < value.length ? value.slice(end) : null, // a template / parameter list, cut at the right edge
  );
  node.style.setProperty("--tail-w", `${(emWidth(value.slice(cut, end)) + 0.15).toFixed(2)}em`);
  return node;
}

let measuring = null; // one canvas context for the page: measuring text needs no layout

/** The width of `text` in em of the page's font, so the room kept for a tail follows each element's font size. */
function emWidth(text) {
  if (!measuring) {
    measuring = document.createElement("canvas").getContext("2d");
    measuring.font = `100px ${getComputedStyle(document.body).fontFamily}`;
  }
  return measuring.measureText(text).width / 100;
}

/** The same cut for places that hold plain text only (<option>, chart labels): at most `maxChars`. */
export function shortenMiddle(text, maxChars) {
  const value = String(text ?? "");
  if (value.length <= maxChars) return value;
  const tail = Math.min(maxChars - 2, Math.max(tailLength(value), Math.ceil((maxChars - 1) * 0.6)));
  return `${value.slice(0, maxChars - 1 - tail)}\u2026${value.slice(-tail)}`;
}
