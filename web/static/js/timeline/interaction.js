// Pointer and keyboard input on the timeline canvas, turned into calls on the view:
// ctrl/⌘ + wheel (and trackpad pinch) zooms at the cursor, wheel scrolls rows (shift + wheel and
// horizontal wheel pan), drag pans, shift + drag selects a range, click selects, W/A/S/D zoom and
// pan while held (like Perfetto), Escape clears the range.

import { shifted as shift, timeAt, zoomed as zoom } from "./viewport.js";

const CLICK_SLOP_PX = 3;
const WHEEL_ZOOM = 0.0025; // per wheel pixel
const KEY_ZOOM_PER_S = 2.2; // e-folds per second while W / S is held
const KEY_PAN_PER_S = 0.9; // of the window per second while A / D is held
const LINE_PX = 16;
const KEY_PRESS_S = 0.15; // how far one short key press moves, in seconds of holding

function isTyping(event) {
  const tag = event.target?.tagName;
  return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || event.target?.isContentEditable;
}

/**
 * view: {scene(), setView(view) (clamps it), scrollRows(dy) -> bool, click(x, y), hover(x, y, event),
 *        leave(), dragRange(start, end, done), toggleRow(x, y) -> bool, clearRange()}
 */
export function bindInteractions(canvas, view) {
  let pointer = null; // the last pointer position over the canvas (CSS px), for zoom anchoring
  let drag = null;

  const local = (event) => {
    const box = canvas.getBoundingClientRect();
    return { x: event.clientX - box.left, y: event.clientY - box.top };
  };
  const timeAtX = (x) => {
    const scene = view.scene();
    return timeAt(scene.view, scene.width - scene.gutter, x - scene.gutter);
  };

  canvas.addEventListener(
    "wheel",
    (event) => {
      const scene = view.scene();
      const scaleY = event.deltaMode === 1 ? LINE_PX : 1;
      const { x } = local(event);
      if (event.ctrlKey || event.metaKey) {
        event.preventDefault();
        const anchor = x > scene.gutter ? timeAtX(x) : (scene.view.start + scene.view.end) / 2;
        const factor = Math.exp(event.deltaY * scaleY * WHEEL_ZOOM);
        view.setView(zoom(scene.view, anchor, factor));
        return;
      }
      const horizontal = event.shiftKey ? event.deltaY || event.deltaX : event.deltaX;
      if (horizontal) {
        event.preventDefault();
        const usPerPx = (scene.view.end - scene.view.start) / (scene.width - scene.gutter);
        view.setView(shift(scene.view, horizontal * scaleY * usPerPx));
        return;
      }
      if (view.scrollRows(event.deltaY * scaleY)) event.preventDefault();
    },
    { passive: false },
  );

  canvas.addEventListener("mousedown", (event) => {
    if (event.button !== 0) return;
    event.preventDefault();
    canvas.focus({ preventScroll: true });
    const at = local(event);
    const scene = view.scene();
    drag = { ...at, moved: false, range: event.shiftKey, startView: scene.view, startTime: timeAtX(at.x), gutter: at.x < scene.gutter };
  });

  window.addEventListener("mousemove", (event) => {
    const at = local(event);
    if (!drag) {
      const inside = event.target === canvas;
      pointer = inside ? at : null;
      if (inside) view.hover(at.x, at.y, event);
      return;
    }
    if (Math.abs(at.x - drag.x) + Math.abs(at.y - drag.y) > CLICK_SLOP_PX) drag.moved = true;
    if (!drag.moved || drag.gutter) return;
    if (drag.range) {
      const now = timeAtX(at.x);
      view.dragRange(Math.min(drag.startTime, now), Math.max(drag.startTime, now), false);
    } else {
      const scene = view.scene();
      const usPerPx = (drag.startView.end - drag.startView.start) / (scene.width - scene.gutter);
      view.setView(shift(drag.startView, (drag.x - at.x) * usPerPx));
    }
  });

  window.addEventListener("mouseup", (event) => {
    if (!drag) return;
    const at = local(event);
    const done = drag;
    drag = null;
    if (!done.moved) {
      if (!view.toggleRow(at.x, at.y)) view.click(at.x, at.y);
    } else if (done.range && !done.gutter) {
      const now = timeAtX(at.x);
      view.dragRange(Math.min(done.startTime, now), Math.max(done.startTime, now), true);
    }
  });

  canvas.addEventListener("mouseleave", () => {
    pointer = null;
    view.leave();
  });

  bindKeys(view, () => pointer, timeAtX);
}

function bindKeys(view, pointerOf, timeAtX) {
  const held = new Set();
  let last = null;
  const advance = (dt) => {
    let current = view.scene().view;
    const span = current.end - current.start;
    const pointer = pointerOf();
    const anchor = pointer && pointer.x > view.scene().gutter ? timeAtX(pointer.x) : (current.start + current.end) / 2;
    if (held.has("w")) current = zoom(current, anchor, Math.exp(-KEY_ZOOM_PER_S * dt));
    if (held.has("s")) current = zoom(current, anchor, Math.exp(KEY_ZOOM_PER_S * dt));
    if (held.has("a")) current = shift(current, -span * KEY_PAN_PER_S * dt);
    if (held.has("d")) current = shift(current, span * KEY_PAN_PER_S * dt);
    view.setView(current);
  };
  const loop = (now) => {
    if (!held.size) return;
    advance(Math.min((now - last) / 1000, 0.1));
    last = now;
    requestAnimationFrame(loop);
  };
  window.addEventListener("keydown", (event) => {
    if (isTyping(event) || event.ctrlKey || event.metaKey || event.altKey) return;
    const key = event.key.toLowerCase();
    if (key === "escape") {
      view.clearRange();
      return;
    }
    if (key.length !== 1 || !"wasd".includes(key)) return;
    event.preventDefault();
    if (held.has(key)) return; // auto-repeat: the animation is already running
    const idle = !held.size;
    held.add(key);
    advance(KEY_PRESS_S); // a short press moves too, not only a held key
    if (idle) {
      last = performance.now();
      requestAnimationFrame(loop);
    }
  });
  window.addEventListener("keyup", (event) => held.delete(event.key.toLowerCase()));
  window.addEventListener("blur", () => held.clear());
}
