"""The pages' bundles (``module_bundle.py``): every page's script bundles; each module's lines keep their
numbers, as its source map says; what the bundler does not read is refused with the file and line, never bundled
wrongly. (That a bundle runs as its modules do, in a real browser: tests/browser/test_module_bundle.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from profscope.assets import web_dir
from profscope.module_bundle import BundleError, is_current, make_bundle, read_module

STATIC = web_dir() / "static"
PAGE_SCRIPTS = sorted((STATIC / "js" / "pages").glob("*.js"))
REWRITTEN = re.compile(r"^\s*(import|export)\b")


def decoded_lines(mappings: str) -> list[int]:
    """The source line of each generated line of a section whose lines are copied as they are (AAAA, AACA...)."""
    lines, line = [], 0
    for i, segment in enumerate(mappings.split(";")):
        assert segment == ("AAAA" if i == 0 else "AACA"), segment
        line += 0 if i == 0 else 1
        lines.append(line)
    return lines


@pytest.mark.parametrize("script", PAGE_SCRIPTS, ids=lambda p: p.stem)
def test_each_page_bundles_and_its_map_leads_back_to_every_line(script: Path) -> None:
    bundle = make_bundle(script, STATIC, map_name=f"{script.stem}.js.map")
    out = bundle.script.split("\n")
    source_map = json.loads(bundle.source_map)
    assert source_map["version"] == 3 and out[-2] == f"//# sourceMappingURL={script.stem}.js.map"
    sources = [section["map"]["sources"][0] for section in source_map["sections"]]
    assert sources[-1] == "/static/js/pages/" + script.name  # the page's own script comes last, at the top level
    assert len(set(sources)) == len(sources) == len(bundle.stamps)  # each module once
    offsets = [section["offset"]["line"] for section in source_map["sections"]]
    assert offsets == sorted(offsets)
    for section in source_map["sections"]:
        original = (STATIC / section["map"]["sources"][0].removeprefix("/static/")).read_text().split("\n")
        start = section["offset"]["line"]
        in_import = False
        for generated, source_line in enumerate(decoded_lines(section["map"]["mappings"])):
            line = original[source_line]
            in_import = in_import or line.startswith("import")
            if not in_import and not REWRITTEN.match(line):  # an import or export keeps its lines, not its text
                assert out[start + generated] == line, (section["map"]["sources"][0], source_line + 1)
            in_import = in_import and ' from "' not in line
        assert len(decoded_lines(section["map"]["mappings"])) == len(original)
    assert is_current(bundle)


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_imports_become_destructurings_and_exports_declarations(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "js/a.js": (
                'import {\n  one as uno,\n  two,\n} from "./b.js";\nexport async function f() {}\nexport class C {}\n'
            ),
            "js/b.js": "export const one = 1;\nexport function two() {}\n",
        },
    )
    module = read_module(tmp_path / "js" / "a.js", tmp_path)
    assert module.imports == ("/static/js/b.js",) and module.exports == ("f", "C")
    assert module.lines[:6] == (
        "const { one: uno, two } = $module_b;",
        "",
        "",
        "",
        "async function f() {}",
        "class C {}",
    )
    assert read_module(tmp_path / "js" / "b.js", tmp_path).exports == ("one", "two")


REFUSED = {
    "a default export": ("export default function f() {}\n", 1),
    "an export list": ("const a = 1;\n\nexport { a };\n", 3),
    "a let export": ("export let a = 1;\n", 1),
    "a namespace import": ('import * as b from "./b.js";\n', 1),
    "a default import": ('\nimport b from "./b.js";\n', 2),
    "a bare import": ('import "./b.js";\n', 1),
    "an import of a package": ('import { x } from "lodash";\n', 1),
    "a re-export": ('export { one } from "./b.js";\n', 1),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_what_it_does_not_read_is_refused_with_file_and_line(tmp_path: Path, case: str) -> None:
    text, line = REFUSED[case]
    write(tmp_path, {"js/a.js": text, "js/b.js": "export const one = 1;\n"})
    with pytest.raises(BundleError, match=rf"^/static/js/a\.js:{line}: "):
        read_module(tmp_path / "js" / "a.js", tmp_path)


def test_a_missing_module_a_cycle_a_name_clash_and_the_reserved_prefix_are_refused(tmp_path: Path) -> None:
    write(tmp_path, {"js/pages/p.js": 'import { x } from "../gone.js";\n'})
    with pytest.raises(BundleError, match=r"^/static/js/pages/p\.js:1: imports \.\./gone\.js, which is not a file"):
        make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")
    write(
        tmp_path,
        {
            "js/pages/p.js": 'import { a } from "../a.js";\n',
            "js/a.js": 'import { b } from "./b.js";\nexport const a = 1;\n',
            "js/b.js": 'import { a } from "./a.js";\nexport const b = 2;\n',
        },
    )
    with pytest.raises(BundleError, match=r"cycle \(/static/js/pages/p\.js -> /static/js/a\.js -> /static/js/b\.js"):
        make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")
    write(tmp_path, {"js/pages/p.js": 'import { a } from "../a-b.js";\nimport { b } from "../a_b.js";\n'})
    write(tmp_path, {"js/a-b.js": "export const a = 1;\n", "js/a_b.js": "export const b = 2;\n"})
    with pytest.raises(BundleError, match=r"^/static/js/a_b\.js: its bundle name \$module_a_b is also /static/js/a-b"):
        make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")
    write(tmp_path, {"js/pages/p.js": "const $module_a = 1;\n"})
    with pytest.raises(BundleError, match="reserved name prefix"):
        make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")


def test_a_bundle_is_stale_once_any_of_its_files_changes(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"js/pages/p.js": 'import { a } from "../a.js";\nconsole.log(a);\n', "js/a.js": "export const a = 1;\n"},
    )
    bundle = make_bundle(tmp_path / "js" / "pages" / "p.js", tmp_path, "p.js.map")
    assert is_current(bundle)
    (tmp_path / "js" / "a.js").write_text("export const a = 22;\n")  # another size
    assert not is_current(bundle)
    (tmp_path / "js" / "a.js").unlink()
    assert not is_current(bundle)
