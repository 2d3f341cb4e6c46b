"""The store: what the routers read of a parsed file, through one object injected with FastAPI ``Depends``.

It owns the results of the cached queries (read from the cache entry; a result whose query version is
newer than the entry's is computed here from the stored tables, written next to the others, and never
triggers a parse; with a shared cache in object storage it is first looked for there, and published there
once computed when this server writes to it, so one replica computes it for all), and one bounded cache of
loaded structures (memory-mapped tables, snapshot tables, the timeline index, structures a router derives
from them), by key, least recently used first out.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import Query
from profscope.analysis.timeline_index import TimelineIndex
from profscope.cache import TraceCache, dumps
from profscope.shared_cache import SharedCache
from profscope.snapshot_tables import SnapshotTables
from profscope.tables import TraceTables

log = logging.getLogger("profscope.store")

LOADED_CAPACITY = 16  # loaded structures kept: a few files' tables, indexes and derived lookups


class Store:
    def __init__(
        self,
        cache: TraceCache,
        queries: Iterable[Query],
        capacity: int = LOADED_CAPACITY,
        shared: SharedCache | None = None,
        publish: bool = False,
    ) -> None:
        self.cache = cache
        self.shared = shared  # where other replicas publish the results they computed
        self.publish = publish and shared is not None  # publish the results computed here
        self.queries = {query.name: query for query in queries}
        self.capacity = capacity
        self._loaded: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[tuple[str, str], threading.Lock] = {}

    # ---- cached query results ------------------------------------------------------------------
    def result(self, cache_key: str, name: str) -> bytes | None:
        """The stored JSON of query ``name`` (or of another file the ingest wrote, e.g. ``timeline``), None when
        the file is not parsed yet or its entry is gone. A query the entry lacks (its version was bumped since
        the parse) is computed now from the stored tables."""
        summary = self.cache.summary(cache_key)
        query = self.queries.get(name)
        if summary is None:  # not parsed, or still being written (the summary is written last)
            return self._finished_early(cache_key, query.stored_name if query else name)
        if query is None:
            return self.cache.read_view(cache_key, name)
        data = self.cache.read_view(cache_key, query.stored_name)
        if data is not None:
            return data
        if summary.get("kind", "trace") != query.kind:  # not that kind of file
            return None
        return self._recompute(cache_key, query)

    def available(self, cache_key: str, name: str) -> bool:
        """Whether ``result`` has an answer without a parse: stored, or computable from the stored tables."""
        query = self.queries.get(name)
        if not self.cache.is_ready(cache_key):  # being written: only what its manifest lists (see ``result``)
            return self.cache.finished_early(cache_key, query.stored_name if query else name)
        return query is not None or self.cache.view_path(cache_key, name).exists()

    def all_available(self, cache_key: str, names: list[str], ready: bool) -> bool:
        """``available`` for every one of ``names``, reading at most the entry's manifest once: ``ready`` says the
        entry is complete (its ingest state, known to the caller), so its summary is not read again."""
        if ready:
            return all(name in self.queries or self.cache.view_path(cache_key, name).exists() for name in names)
        progress = self.cache.progress(cache_key)
        listed = set(progress.get("views", ())) if progress else set()
        return all((self.queries[n].stored_name if n in self.queries else n) in listed for n in names)

    def _finished_early(self, cache_key: str, stored_name: str) -> bytes | None:
        """A result of an entry still being written, once its manifest lists it: the result file was written
        whole before it was listed, after the tables were saved (a half-written entry is never served)."""
        if not self.cache.finished_early(cache_key, stored_name):
            return None
        return self.cache.read_view(cache_key, stored_name)

    def _recompute(self, cache_key: str, query: Query) -> bytes | None:
        with self._lock:
            lock = self._computing.setdefault((cache_key, query.name), threading.Lock())
        with lock:  # concurrent requests for the same result compute it once
            data = self.cache.read_view(cache_key, query.stored_name)
            if data is not None:
                return data
            data = self.shared.fetch_result(cache_key, query.stored_name) if self.shared is not None else None
            if data is not None:
                self.cache.write_view_bytes(cache_key, query.stored_name, data)
                return data
            try:
                source = self._query_input(cache_key, query.kind)
            except (OSError, ValueError, KeyError):  # the entry was removed under us: the caller parses again
                return None
            value, _ = query.compute(source)
            data = dumps(value)
            self.cache.write_view_bytes(cache_key, query.stored_name, data)
            log.info("computed %s v%d of %s from its stored tables", query.name, query.version, cache_key)
            if self.publish:
                assert self.shared is not None
                self.shared.publish_result(cache_key, query.stored_name, data)
            return data

    def _query_input(self, cache_key: str, kind: str) -> Any:
        if kind == "snapshot":
            return self.snapshot_tables(cache_key)
        return TraceContext(self.trace_tables(cache_key))

    # ---- loaded structures ---------------------------------------------------------------------
    def loaded(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """``build()``'s value, kept among the last ``capacity`` loaded structures."""
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
        value = build()
        with self._lock:
            self._loaded[key] = value
            while len(self._loaded) > self.capacity:
                self._loaded.popitem(last=False)
        return value

    def trace_tables(self, cache_key: str) -> TraceTables:
        return self.loaded(("tables", cache_key), lambda: TraceTables.load(self.cache.tables_dir(cache_key)))

    def snapshot_tables(self, cache_key: str) -> SnapshotTables:
        return self.loaded(("snapshot", cache_key), lambda: SnapshotTables.load(self.cache.tables_dir(cache_key)))

    def timeline_index(self, cache_key: str) -> TimelineIndex:
        return self.loaded(("timeline", cache_key), lambda: TimelineIndex.load(self.cache.timeline_dir(cache_key)))
