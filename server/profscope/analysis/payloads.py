"""Cached queries: pure analysis functions whose results are stored per parsed file, each with its own version.

An analysis function becomes a cached query with ``@payload("name", version=N)``: the decorator leaves
the function as it is and attaches a ``Query`` to it (``function.query``). View modules list the queries
they need; the registry (``profscope.views``) collects them, the ingest worker computes them all once per
file, and the store (``profscope.store``) reads them. The stored result is named ``name.vN``, so bumping
``version`` after changing a formula makes every cache (local and shared) miss that result alone, and the
store recomputes it from the stored tables without parsing the file again.

Queries of allocator snapshots declare ``kind="snapshot"`` and receive the snapshot's tables; trace
queries receive a ``TraceContext``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger("profscope.analysis")

Builder = TypeVar("Builder", bound=Callable[..., Any])


@dataclass(frozen=True)
class Query:
    """A cached result: its name (what routers ask for), its version, the function that computes it."""

    name: str
    version: int
    build: Callable[[Any], Any]
    kind: str = "trace"  # "trace" (receives a TraceContext) or "snapshot" (receives SnapshotTables)
    # computed before the other queries of its file: its page answers while the slower ones are still computed
    first: bool = False
    # computed by the ingest worker with the others; False: left to the first request that needs it (the
    # store computes it from the stored tables then), for results few users ask for that would weigh on every
    # ingest (the Operator page filtered to a module: ~9% of a 1 GB ingest with module events)
    at_ingest: bool = True
    # read only by the Distributed view (the rank summary): the ingest of a trace alone in its run that is not a rank
    # of a bigger job leaves it to the store, which computes it if the run gains a rank (IngestRequest.for_its_run)
    for_ranks: bool = False

    @property
    def stored_name(self) -> str:
        """The file name of the result in a cache entry: a new version is a new name, never a stale hit."""
        return f"{self.name}.v{self.version}"

    def compute(self, source: Any) -> tuple[Any, str | None]:
        """The result, or ``{"error": ...}`` and the error text: one broken query must not hide the others."""
        try:
            return self.build(source), None
        except Exception as exc:
            log.exception("query %s failed", self.name)
            error = f"{type(exc).__name__}: {exc}"
            return {"error": error}, error


def payload(
    name: str,
    version: int = 1,
    kind: str = "trace",
    first: bool = False,
    at_ingest: bool = True,
    for_ranks: bool = False,
) -> Callable[[Builder], Builder]:
    """Declare ``function`` as the cached query ``name``; bump ``version`` whenever its result changes.
    ``first``: the ingest computes it before the queries without the flag (the Overview, a rank's summary).
    ``at_ingest=False``: the ingest skips it; the store computes it at its first request. ``for_ranks``: the
    ingest skips it where the Distributed view does not apply (``IngestRequest.for_its_run``); the store computes it
    if it is asked for."""

    def declare(function: Builder) -> Builder:
        query = Query(name, version, function, kind, first, at_ingest, for_ranks)
        function.query = query  # type: ignore[attr-defined]
        return function

    return declare


def query_of(function: Callable[..., Any]) -> Query:
    """The query a function was declared as (with ``@payload``)."""
    declared = getattr(function, "query", None)
    if not isinstance(declared, Query):
        raise TypeError(f"{function.__qualname__} is not declared with @payload")
    return declared


def unique_queries(queries: Iterable[Query]) -> tuple[Query, ...]:
    """Each query once, in the order first met (views share queries): the first of a name is kept."""
    found: dict[str, Query] = {}
    for query in queries:
        found.setdefault(query.name, query)
    return tuple(found.values())


def declared_queries() -> tuple[Query, ...]:
    """Every query declared with ``@payload`` in ``profscope.analysis``, importing each of its modules.

    The same set as the views' (``profscope.views.registry.queries``, a test holds them equal), without
    the web framework the view modules import: ``serve`` starts the first parse with it before building
    the app, and a prestarted parse worker warms up with it."""
    import importlib
    import pkgutil

    import profscope.analysis

    modules = [
        importlib.import_module(m.name)
        for m in pkgutil.iter_modules(profscope.analysis.__path__, "profscope.analysis.")
    ]
    declared = (getattr(value, "query", None) for module in modules for value in vars(module).values())
    return unique_queries(query for query in declared if isinstance(query, Query))
