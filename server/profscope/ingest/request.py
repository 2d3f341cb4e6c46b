"""What a worker is asked to read: one file of any kind, and the cached queries to compute after the parse.

``IngestRequest.for_file`` is the one way ``serve`` (the ingest pool), ``index`` and ``ingest`` build it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profscope.cache import TraceCache
from profscope.catalog import TraceFile
from profscope.sources import Source

if TYPE_CHECKING:
    from profscope.analysis.payloads import Query

log = logging.getLogger("profscope.ingest")


@dataclass(frozen=True)
class IngestRequest:
    source: Source  # pickled to the worker; object-store sources carry options, never a live client
    key: str
    size: int
    cache_key: str
    cache_root: str
    max_trace_bytes: int
    kind: str = "trace"  # or "nsys", "snapshot", "memory_log" (catalog.NSYS, catalog.SNAPSHOT, catalog.MEMORY_LOG)
    # the machine is this parse's alone (no other parse running or waiting): it may use a second core for its views
    second_core: bool = True
    # ALL: parse and compute every view. FIRST: parse, compute the ``first`` queries only, leave the entry
    # unfinished (its manifest lists them); REST: compute the others from the saved tables and finish it
    stage: str = "all"
    max_snapshot_bytes: int = 8 << 30
    queries: tuple[Query, ...] = ()  # computed after the parse; their functions travel to the worker by name
    alone_in_run: bool = False  # its run holds no trace of another worker (for_its_run)

    @classmethod
    def for_file(
        cls,
        file: TraceFile,
        source: Source,
        cache_root: str | Path,
        queries: tuple[Query, ...],
        max_trace_bytes: int,
        max_snapshot_bytes: int = 8 << 30,
        cache_key: str | None = None,
        second_core: bool = True,
        stage: str = "all",
        alone_in_run: bool = False,
    ) -> IngestRequest:
        """The request for any kind of file the catalog knows (trace, snapshot, memory.log): the one way
        ``serve``, ``index`` and ``ingest`` ask for a parse. ``alone_in_run``: its run holds no trace of another
        worker (see ``for_its_run``)."""
        return cls(
            source=source,
            key=file.key,
            size=file.info.size,
            cache_key=cache_key or file.cache_key,
            cache_root=str(cache_root),
            max_trace_bytes=max_trace_bytes,
            kind=file.kind,
            max_snapshot_bytes=max_snapshot_bytes,
            queries=tuple(q for q in queries if q.at_ingest and q.kind == QUERY_KIND.get(file.kind)),
            second_core=second_core,
            stage=stage,
            alone_in_run=alone_in_run,
        )

    def for_its_run(self, facts: dict[str, Any]) -> IngestRequest:
        """This request, without the queries ``for_ranks`` when the parse ``facts`` (``jobs._parse_facts``) show
        that the Distributed view does not apply to its run: the run holds no trace of another worker and this one
        is not a rank of a bigger job (``job_ranks``). If the run gains a rank later, the store computes them."""
        from profscope.analysis.distributed import job_ranks

        # one worker: its name decides nothing (rule 1 needs two), its distributedInfo does
        if not self.alone_in_run or job_ranks([self.key], lambda: [facts]).reason is None:
            return self
        return replace(self, queries=tuple(q for q in self.queries if not q.for_ranks))


ALL, FIRST, REST = "all", "first", "rest"  # IngestRequest.stage
# a memory.log has no queries: its router reads the log; an nsys export is parsed into the same tables as a trace
QUERY_KIND = {"trace": "trace", "nsys": "trace", "snapshot": "snapshot"}


def ingest_timings(started: float, parse_s: float, phase_s: dict[str, float], view_errors: dict) -> dict[str, Any]:
    """The fields every ingest summary ends with: how long the parse and each phase took, and the queries
    that failed (``started``: the ``time.perf_counter()`` of the ingest's start)."""
    return {
        "parse_s": parse_s,
        "phase_s": phase_s,
        "total_s": time.perf_counter() - started,
        "view_errors": view_errors,
    }


def write_query_results(
    cache: TraceCache,
    request: IngestRequest,
    source: Any,
    phase_s: dict[str, float],
    progress: dict[str, Any] | None = None,
) -> dict:
    """Compute and store every query of the request, the ``first`` ones first; returns the errors by query name
    (their results say so). With ``progress`` (the entry's manifest, see cache.py), each result is listed in it
    once written, so its page answers before the other queries are done."""
    errors = {}
    for query in sorted(request.queries, key=lambda q: not q.first):
        if not query.first:
            held_for_tests()
        mark = time.perf_counter()
        value, error = query.compute(source)
        cache.write_view(request.cache_key, query.stored_name, value)
        if progress is not None:
            progress["views"].append(query.stored_name)
            cache.write_progress(request.cache_key, progress)
        phase_s[query.name] = time.perf_counter() - mark
        if error is not None:
            log.error("query %s failed for %s", query.name, request.key)
            errors[query.name] = error
    return errors


def held_for_tests() -> None:
    """``PROFSCOPE_TEST_HOLD_QUERIES``: a path; the queries that are not ``first`` wait until it exists. Tests use
    it to see the first views answer while the others are not computed yet (never set in use)."""
    gate = os.environ.get("PROFSCOPE_TEST_HOLD_QUERIES")
    while gate and not os.path.exists(gate):
        time.sleep(0.05)
