// API reference rendered from FastAPI's /openapi.json (its Swagger UI would load from a CDN).

import { getJSON } from "../api.js";
import { byId, clear, el } from "../dom.js";
import { updateNavLinks } from "../selector.js";
import { errorBox, loading } from "../status.js";

const METHODS = ["get", "post", "put", "patch", "delete"];

function typeOf(schema) {
  if (!schema) return "";
  if (schema.$ref) return schema.$ref.split("/").pop();
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (schema.anyOf) {
    return schema.anyOf
      .filter((s) => s.type !== "null")
      .map(typeOf)
      .join(" | ");
  }
  if (schema.type === "array") return `${typeOf(schema.items)}[]`;
  return schema.type || "";
}

function constraints(schema) {
  if (!schema) return [];
  const parts = [];
  if (schema.default !== undefined && schema.default !== null && schema.default !== "") {
    parts.push(`default ${JSON.stringify(schema.default)}`);
  }
  if (schema.minimum !== undefined) parts.push(`\u2265 ${schema.minimum}`);
  if (schema.maximum !== undefined) parts.push(`\u2264 ${schema.maximum}`);
  return parts;
}

function slug(method, path) {
  return `${method}-${path.replace(/[^a-zA-Z0-9]+/g, "-").replace(/^-|-$/g, "")}`;
}

function parametersTable(parameters) {
  if (!parameters.length) return el("p", { class: "muted", text: "No parameters." });
  return el(
    "table",
    { class: "data compact" },
    el(
      "thead",
      {},
      el("tr", {}, ["Name", "In", "Type", "Description"].map((h) => el("th", { text: h }))),
    ),
    el(
      "tbody",
      {},
      parameters.map((p) => {
        const notes = constraints(p.schema);
        return el(
          "tr",
          {},
          el("td", {}, el("code", { text: p.name }), p.required ? el("span", { class: "required", text: "required" }) : null),
          el("td", { text: p.in }),
          el("td", {}, el("code", { text: typeOf(p.schema) })),
          el("td", {}, p.description || p.schema?.description || "", notes.length ? el("span", { class: "faint", text: ` (${notes.join(", ")})` }) : null),
        );
      }),
    ),
  );
}

function responsesTable(responses) {
  return el(
    "table",
    { class: "data compact" },
    el("thead", {}, el("tr", {}, el("th", { text: "Code" }), el("th", { text: "Meaning" }))),
    el(
      "tbody",
      {},
      Object.entries(responses || {}).map(([code, response]) =>
        el("tr", {}, el("td", {}, el("code", { text: code })), el("td", { text: response.description || "" })),
      ),
    ),
  );
}

function operationCard(path, method, op) {
  const parameters = op.parameters || [];
  const simpleGet = method === "get" && !parameters.some((p) => p.required);
  return el(
    "section",
    { class: "panel endpoint", id: slug(method, path), "data-testid": "endpoint" },
    el(
      "div",
      { class: "endpoint-head" },
      el("span", { class: `method ${method}`, text: method.toUpperCase() }),
      el("span", { class: "endpoint-path", text: path }),
      el("span", { class: "summary", text: op.summary || "" }),
      simpleGet ? el("a", { href: path, text: "try it" }) : null,
    ),
    op.description ? el("p", { class: "muted", text: op.description }) : null,
    el("h3", { text: "Parameters" }),
    parametersTable(parameters),
    el("h3", { text: "Responses" }),
    responsesTable(op.responses),
  );
}

function render(target, spec) {
  const operations = [];
  for (const [path, item] of Object.entries(spec.paths || {})) {
    for (const method of METHODS) if (item[method]) operations.push({ path, method, op: item[method] });
  }
  const info = spec.info || {};
  clear(
    target,
    el(
      "section",
      { class: "panel" },
      el("h2", { text: `${info.title || "API"} ${info.version || ""}` }),
      info.description ? el("p", { text: info.description }) : null,
      el(
        "ul",
        { class: "api-toc" },
        operations.map(({ path, method, op }) =>
          el("li", {}, el("a", { href: `#${slug(method, path)}` }, el("code", { text: `${method.toUpperCase()} ${path}` })), ` \u2014 ${op.summary || ""}`),
        ),
      ),
    ),
    operations.map(({ path, method, op }) => operationCard(path, method, op)),
  );
  if (location.hash) document.getElementById(location.hash.slice(1))?.scrollIntoView();
}

async function main() {
  updateNavLinks(null);
  const target = byId("api-docs");
  clear(target, loading());
  try {
    render(target, await getJSON("/openapi.json"));
  } catch (error) {
    clear(target, errorBox({ title: "Cannot load /openapi.json", message: error.message }));
  }
}

main();
