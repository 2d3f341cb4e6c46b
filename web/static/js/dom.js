// Building DOM nodes without innerHTML: every string from a trace goes in as a text node.

export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/** el("a", {href, class, text, onclick, dataset}, ...children) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = String(value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style" && typeof value === "object") Object.assign(node.style, value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "href") node.setAttribute("href", safeHref(value));
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  return append(node, children);
}

export function clear(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** Links built from data may only be same-origin paths or ordinary schemes (never javascript:). */
export function safeHref(url) {
  const text = String(url);
  if (text.startsWith("/") && !text.startsWith("//")) return text;
  try {
    const parsed = new URL(text, location.href);
    if (["http:", "https:", "vscode:", "vscode-insiders:", "file:", "idea:", "pycharm:"].includes(parsed.protocol)) {
      return parsed.href;
    }
  } catch {
    // fall through: an unparsable link becomes inert
  }
  return "#";
}

export function debounce(fn, ms) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

export function byId(id) {
  return document.getElementById(id);
}
