"""Each page's script and every module it imports, answered as one script (``/static/bundles/<page>.js``).

A page's modules are a dozen small files: fetched one by one, each waits its turn on the server and in the
browser's network stack, which on a 2-core machine also runs the renderer; the page's own script runs only
once the last has arrived. One script per page is one request (``bench/RESULTS.md``, run 25).

There is no build step: the bundle is made from ``web/static/js`` when first asked for, and made again when any of
its files changes (as ``os.stat`` says), so an edited module shows on the next reload. The modules keep to the
forms this file reads, and anything else is refused with the file and line (``BundleError``), never bundled
wrongly:

- ``import { a, b as c } from "./x.js";`` — named imports of a relative path, at the start of a line;
- ``export function|async function|const|class name`` — named declarations, at the start of a line.

Each imported module becomes a function scope run once, in the order the browser would evaluate the modules
(depth first, in import order); its exports are the object it returns, and an import is a ``const``
destructuring of that object. Exports are ``const``, functions and classes, so a destructured import sees what a
live binding would. The page's own script stays at the bundle's top level (a top-level ``await`` still works).
Every line of a module keeps its line: the source map (``<page>.js.map``, one section per module) takes the
browser's developer tools and stack traces back to the original files.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

_IMPORT = re.compile(r'^import\s*\{([^}]*)\}\s*from\s*"(\.{1,2}/[^"\n]+\.js)"\s*;?', re.M)
_EXPORT = re.compile(r"^export\s+((?:async\s+function|function|const|class)\s+([A-Za-z_$][\w$]*))", re.M)
_MODULE_SYNTAX = re.compile(r"^[ \t]*(import|export)\b.*$", re.M)  # what is left after the two forms above
_SPECIFIER = re.compile(r"^([A-Za-z_$][\w$]*)(?:\s+as\s+([A-Za-z_$][\w$]*))?$")
_RESERVED_PREFIX = "$module_"  # the bundle's names for the modules' export objects


class BundleError(ValueError):
    """A module this bundler does not read: the page's script is not bundled (the error names file and line)."""


@dataclass(frozen=True, slots=True)
class Module:
    url: str  # /static/js/...
    path: Path
    imports: tuple[str, ...]  # the URLs it imports, in order
    exports: tuple[str, ...]
    lines: tuple[str, ...]  # its text, imports as const destructurings and exports as declarations


@dataclass(frozen=True, slots=True)
class Bundle:
    script: str
    source_map: str
    stamps: tuple[tuple[Path, int, int], ...]  # (file, mtime_ns, size) of every file it was made of


def stamp(path: Path) -> tuple[Path, int, int]:
    stat = path.stat()
    return (path, stat.st_mtime_ns, stat.st_size)


def is_current(bundle: Bundle) -> bool:
    """Whether every file the bundle was made of is as it was then."""
    try:
        return all(stamp(recorded[0]) == recorded for recorded in bundle.stamps)
    except OSError:
        return False


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _object_name(url: str) -> str:
    return _RESERVED_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", url.removeprefix("/static/js/").removesuffix(".js"))


def read_module(path: Path, static_root: Path) -> Module:
    text = path.read_text(encoding="utf-8")
    url = "/static/" + path.relative_to(static_root).as_posix()
    if _RESERVED_PREFIX in text:
        raise BundleError(f"{url}: uses the bundle's reserved name prefix {_RESERVED_PREFIX!r}")
    imports: list[str] = []

    def as_destructuring(match: re.Match[str]) -> str:
        target = (path.parent / match[2]).resolve()
        try:
            target_url = "/static/" + target.relative_to(static_root).as_posix()
        except ValueError:
            raise BundleError(f"{url}:{_line_of(text, match.start())}: imports {match[2]}, outside /static") from None
        if not target.is_file():
            raise BundleError(f"{url}:{_line_of(text, match.start())}: imports {match[2]}, which is not a file")
        bindings = []
        for piece in match[1].split(","):
            specifier = _SPECIFIER.match(piece.strip())
            if specifier is None and piece.strip():
                raise BundleError(f"{url}:{_line_of(text, match.start())}: cannot read the import {piece.strip()!r}")
            if specifier is not None:
                name, alias = specifier.groups()
                bindings.append(f"{name}: {alias}" if alias else name)
        imports.append(target_url)
        # the statement keeps its line count, so the module's lines keep their numbers
        return "const { " + ", ".join(bindings) + " } = " + _object_name(target_url) + ";" + "\n" * match[0].count("\n")

    text = _IMPORT.sub(as_destructuring, text)
    exports = tuple(match[2] for match in _EXPORT.finditer(text))
    text = _EXPORT.sub(r"\1", text)
    leftover = _MODULE_SYNTAX.search(text)
    if leftover is not None:
        raise BundleError(f"{url}:{_line_of(text, leftover.start())}: cannot bundle {leftover[0].strip()!r}")
    return Module(url=url, path=path, imports=tuple(imports), exports=exports, lines=tuple(text.split("\n")))


def _evaluation_order(page: Module, static_root: Path) -> list[Module]:
    """The imported modules in the order the browser evaluates them: depth first, in import order, each once."""
    modules: dict[str, Module] = {}
    order: list[Module] = []
    visiting: list[str] = []

    def visit(url: str) -> None:
        if url in visiting:
            raise BundleError(f"{url}: imported in a cycle ({' -> '.join([*visiting, url])})")
        if url in modules:
            return
        clash = next((other for other in modules if _object_name(other) == _object_name(url)), None)
        if clash is not None:
            raise BundleError(f"{url}: its bundle name {_object_name(url)} is also {clash}'s (rename one of them)")
        module = read_module(static_root / url.removeprefix("/static/"), static_root)
        modules[url] = module
        visiting.append(url)
        for imported in module.imports:
            visit(imported)
        visiting.pop()
        order.append(module)

    visiting.append(page.url)
    for imported in page.imports:
        visit(imported)
    return order


def _identity_mappings(line_count: int) -> str:
    """Source-map mappings of lines copied as they are: line i of the output is line i of the source."""
    return ";".join(["AAAA"] + ["AACA"] * (line_count - 1))


def make_bundle(page_script: Path, static_root: Path, map_name: str) -> Bundle:
    """The page's script and its modules as one script, with its source map (named ``map_name``)."""
    static_root = static_root.resolve()
    page = read_module(page_script.resolve(), static_root)
    modules = _evaluation_order(page, static_root)
    out: list[str] = [f"// {page.url} and the modules it imports, as one script (profscope/module_bundle.py)"]
    sections = []
    for module in modules:
        out.append(f"const {_object_name(module.url)} = (() => {{")
        sections.append({"offset": {"line": len(out), "column": 0}, "map": _section(module)})
        out.extend(module.lines)
        out.append(f"return {{ {', '.join(module.exports)} }};")
        out.append("})();")
    sections.append({"offset": {"line": len(out), "column": 0}, "map": _section(page)})
    out.extend(page.lines)
    out.append(f"//# sourceMappingURL={map_name}")
    source_map = {"version": 3, "file": map_name.removesuffix(".map"), "sections": sections}
    return Bundle(
        script="\n".join(out) + "\n",
        source_map=json.dumps(source_map, separators=(",", ":")),
        stamps=tuple(stamp(module.path) for module in (page, *modules)),
    )


def _section(module: Module) -> dict:
    return {"version": 3, "sources": [module.url], "names": [], "mappings": _identity_mappings(len(module.lines))}
