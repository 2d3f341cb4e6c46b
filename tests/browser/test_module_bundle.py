"""A page's bundle (``module_bundle.py``) runs in Chromium as its modules do: the same evaluation order (depth
first, in import order, each module once), the same values through renamed imports, classes and async
functions, strict mode and an undefined ``this`` in every module, and a top-level ``await`` in the page's script.
The two are loaded from the same files, served to the browser by ``page.route``."""

from __future__ import annotations

import json
from pathlib import Path

from profscope.module_bundle import make_bundle

ORIGIN = "http://bundle.test"
MODULES = {
    "js/log.js": 'export const order = (globalThis.order ??= []);\norder.push("log");\n',
    "js/d.js": (
        'import { order } from "./log.js";\norder.push("d");\nexport const d = "d";\n'
        'export class K {\n  static k() {\n    return "k";\n  }\n}\n'
        "export const strict = (function () {\n  return this === undefined;\n})();\n"
        "export const topThis = String(this);\n"
    ),
    "js/a.js": (
        'import { order } from "./log.js";\nimport { d } from "./d.js";\norder.push("a");\nexport const a = "a" + d;\n'
    ),
    "js/e.js": 'import { order } from "./log.js";\norder.push("e");\nexport const e = 1;\n',
    "js/f.js": 'import { order } from "./log.js";\norder.push("f");\nexport const f = 2;\n',
    "js/b.js": (
        'import { order } from "./log.js";\nimport { d as dee, strict } from "./d.js";\nimport { e } from "./e.js";\n'
        'import { f } from "./f.js";\norder.push("b");\n'
        'export async function b() {\n  return "b" + dee + strict;\n}\n'
    ),
    "js/pages/p.js": (
        'import { a } from "../a.js";\nimport { b } from "../b.js";\nimport { K, topThis } from "../d.js";\n'
        'import { order } from "../log.js";\norder.push("p");\nconst later = await Promise.resolve("awaited");\n'
        "window.result = { order, a, b: await b(), k: K.k(), topThis, pageThis: String(this), later };\n"
    ),
}
PAGES = {
    "native.html": '<script type="module" src="/static/js/pages/p.js"></script>',
    "bundled.html": '<script type="module" src="/static/bundles/p.js"></script>',
}


def result_of(page, html: str) -> dict:
    page.goto(f"{ORIGIN}/{html}")
    return page.wait_for_function("() => window.result").json_value()


def test_a_bundle_runs_as_its_modules_do(page, tmp_path: Path) -> None:
    for name, text in MODULES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    bundle = make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")
    served = {f"/static/{name}": text for name, text in MODULES.items()}
    served["/static/bundles/p.js"] = bundle.script
    served.update({f"/{name}": f"<!doctype html><body>{body}</body>" for name, body in PAGES.items()})
    asked: list[str] = []

    def answer(route) -> None:
        path = route.request.url.removeprefix(ORIGIN)
        asked.append(path)
        kind = "text/html" if path.endswith(".html") else "application/javascript"
        route.fulfill(status=200 if path in served else 404, body=served.get(path, ""), content_type=kind)

    page.route(f"{ORIGIN}/**", answer)
    native = result_of(page, "native.html")
    assert native == {
        "order": ["log", "d", "a", "e", "f", "b", "p"],
        "a": "ad",
        "b": "bdtrue",
        "k": "k",
        "topThis": "undefined",
        "pageThis": "undefined",
        "later": "awaited",
    }
    asked.clear()
    assert result_of(page, "bundled.html") == native
    assert asked == ["/bundled.html", "/static/bundles/p.js"], json.dumps(asked)
