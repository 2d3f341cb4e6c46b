"""No import cycle in server/, and every import points down the layers (issue 12, item 7; docs/ARCHITECTURE.md).

Imports are read from the source with ``ast``, including those inside functions (a lazy import hides a
cycle, it does not remove it); only ``if TYPE_CHECKING:`` imports, which never run, are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "server"

# Lowest first. A module belongs to the layer of its longest matching prefix and may import its own layer
# and the layers below. The ingest jobs run in the worker: parse (ingest), then compute the cached queries
# (analysis), so they sit above analysis.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "profscope",
            "profscope.config",
            "profscope.logs",
            "profscope.assets",
            "profscope.parser_versions",
            "profscope.sources",
        ),
    ),
    ("catalog", ("profscope.catalog",)),
    ("stored tables", ("profscope.tables", "profscope.snapshot_tables", "profscope.cache", "profscope.cache_bounds")),
    ("ingest", ("profscope.ingest",)),
    ("analysis", ("profscope.analysis",)),
    (
        "ingest jobs",
        (
            "profscope.ingest.jobs",
            "profscope.ingest.request",
            "profscope.ingest.parallel_queries",
            "profscope.ingest.snapshot_job",
            "profscope.ingest.memory_log_job",
        ),
    ),
    ("store", ("profscope.store", "profscope.shared_cache", "profscope.cache_bounds")),
    ("views", ("profscope.views", "profscope.api", "profscope.pages")),
    (
        "app",
        (
            "profscope.state",
            "profscope.metrics",
            "profscope.auth",
            "profscope.guard",
            "profscope.static_assets",
            "profscope.http_protocol",
            "profscope.app",
            "profscope.indexer",
            "profscope.cli",
            "profscope.demo",
        ),
    ),
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SERVER / "profscope").rglob("*.py"):
        parts = path.relative_to(SERVER).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _runtime_imports(name: str, path: Path) -> set[str]:
    """The profscope modules ``name`` imports when it runs."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names if alias.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            imported |= set(_from_import(node, package))
    return imported - {name}


def _from_import(node: ast.ImportFrom, package: str) -> Iterator[str]:
    base = node.module or ""
    if node.level:
        kept = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*kept, base] if base else kept)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in MODULES:
            yield submodule
        elif base in MODULES:
            yield base


GRAPH = {name: _runtime_imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for root in sorted(GRAPH):
        if root in index:
            continue
        work = [(root, iter(sorted(GRAPH[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _layer(module: str) -> int:
    best, best_length = None, -1
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = rank, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def test_the_walk_sees_the_server() -> None:
    assert len(MODULES) > 60 and "profscope.views.registry" in MODULES
    assert "profscope.analysis.overview" in GRAPH["profscope.views.overview"]
    assert "profscope.ingest.snapshot_job" in GRAPH["profscope.ingest.jobs"]  # a lazy import counts


def test_no_import_cycle() -> None:
    assert _cycles() == []


def test_a_cycle_is_found_when_there_is_one() -> None:
    GRAPH["profscope.tables"].add("profscope.views.registry")  # registry -> ... -> tables -> registry
    try:
        assert any("profscope.tables" in cycle for cycle in _cycles())
    finally:
        GRAPH["profscope.tables"].discard("profscope.views.registry")


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{module} ({LAYERS[_layer(module)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if _layer(target) > _layer(module)
    ]
    assert upward == []
