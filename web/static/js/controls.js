// The group-by / search / top-N controls of the Operator and Kernel pages, bound to URL state.

import { byId, debounce, el } from "./dom.js";

export const TOP_CHOICES = [5, 10, 15, 20];
export const DEFAULT_TOP = 10;

export function parseTop(value) {
  const n = Number.parseInt(value, 10);
  return Number.isFinite(n) && n > 0 && n <= 100 ? n : DEFAULT_TOP;
}

export function bindGroupBy(current, onChange) {
  const group = byId("group-by");
  const buttons = [...group.querySelectorAll("button[data-value]")];
  const mark = (value) => buttons.forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.value === value)));
  mark(current);
  for (const button of buttons) {
    button.addEventListener("click", () => {
      if (button.getAttribute("aria-pressed") === "true") return;
      mark(button.dataset.value);
      onChange(button.dataset.value);
    });
  }
}

export function bindSearch(current, onChange) {
  const input = byId("search");
  input.value = current;
  input.addEventListener("input", debounce(() => onChange(input.value.trim()), 200));
}

export function bindTop(current, onChange) {
  const select = byId("top");
  if (![...select.options].some((o) => Number(o.value) === current)) {
    select.append(el("option", { value: String(current), text: String(current) }));
  }
  select.value = String(current);
  select.addEventListener("change", () => onChange(parseTop(select.value)));
}

// Search filters the rows (and the pies); top-N changes only the pies. Both live in the URL.
export function bindSearchAndTop(state, updateUrl, { renderPies, renderRows }) {
  bindSearch(state.search, (value) => {
    state.search = value;
    updateUrl({ search: value });
    renderPies();
    renderRows();
  });
  bindTop(state.pieTop, (value) => {
    state.pieTop = value;
    updateUrl({ pie_top: value }); // not the API's `top`, which cuts the table's rows
    renderPies();
  });
}
