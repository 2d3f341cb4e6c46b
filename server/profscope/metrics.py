"""Prometheus metrics: ingests, HTTP latency per route template, catalog and cache gauges.

Built on ``prometheus-client`` (the reference client: exact text exposition format, histogram
buckets, ``_created`` samples) with one registry per app, so several apps in one process (tests)
never share counters. Counters and histograms are updated where things happen (the ingest manager,
the HTTP middleware); gauges are read from the server state when ``/metrics`` is scraped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from profscope.state import Profscope

INGEST_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
REQUEST_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CACHE_SIZE_REFRESH_S = 30.0  # walking a large cache on every scrape would cost more than it tells
CONTENT_TYPE = CONTENT_TYPE_LATEST
# Labels come from closed sets: a client choosing a method name must not create a series per name.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER_METHOD = "other"


class IngestMetrics:
    """What the ingest manager reports: one start, then one finish or one failure, per parse."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.started = Counter("profscope_ingests_started", "Trace parses started", registry=registry)
        self.finished = Counter("profscope_ingests_finished", "Trace parses that finished successfully",
                                registry=registry)  # fmt: skip
        self.failed = Counter(
            "profscope_ingests_failed", "Trace parses that failed (bad trace, storage error, worker died)",
            registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "profscope_ingest_duration_seconds",
            "Wall time of one trace parse (read, parse, every view payload), successful or not",
            buckets=INGEST_BUCKETS_S,
            registry=registry,
        )

    def on_start(self) -> None:
        self.started.inc()

    def on_end(self, seconds: float, ok: bool) -> None:
        (self.finished if ok else self.failed).inc()
        self.duration.observe(seconds)


class SharedCacheMetrics:
    """What the shared cache in object storage did: one lookup per trace the local cache lacks, one upload per parse."""

    LOOKUP_RESULTS = ("hit", "failure", "miss", "invalid", "error")
    UPLOAD_RESULTS = ("bundle", "failure", "present", "error")
    RESULT_OUTCOMES = ("fetched", "published", "miss", "invalid", "error")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.lookups = Counter(
            "profscope_shared_cache_lookups",
            "Traces looked up in the shared cache: hit (bundle unpacked), failure (a recorded failure), miss, "
            "invalid (partial or corrupt entry, ignored), error (the store failed)",
            labelnames=("result",),
            registry=registry,
        )
        self.uploads = Counter(
            "profscope_shared_cache_uploads",
            "Entries written to the shared cache: bundle, failure (a failure record), present (another writer was "
            "first), error",
            labelnames=("result",),
            registry=registry,
        )
        self.results = Counter(
            "profscope_shared_cache_results",
            "Query results newer than an entry's bundle: fetched (another replica computed it), published (computed "
            "here and written), miss (computed here), invalid (not JSON, ignored), error (the store failed)",
            labelnames=("result",),
            registry=registry,
        )
        for result in self.RESULT_OUTCOMES:
            self.results.labels(result)
        for result in self.LOOKUP_RESULTS:  # every series exists from the start, at 0
            self.lookups.labels(result)
        for result in self.UPLOAD_RESULTS:
            self.uploads.labels(result)
        self.fetched_bytes = Counter("profscope_shared_cache_fetched_bytes", "Bundle bytes downloaded",
                                     registry=registry)  # fmt: skip
        self.uploaded_bytes = Counter("profscope_shared_cache_uploaded_bytes", "Bundle bytes uploaded",
                                      registry=registry)  # fmt: skip
        self.fetch_duration = Histogram(
            "profscope_shared_cache_fetch_duration_seconds",
            "Wall time of one lookup that found a bundle: manifest, download, checks and unpacking",
            buckets=INGEST_BUCKETS_S,
            registry=registry,
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ingest = IngestMetrics(self.registry)
        self.cache_removed = Counter(
            "profscope_cache_entries_removed", "Local cache entries removed, by reason: gone (the object was deleted "
            "or overwritten) or size (least recently used, beyond --cache-max-bytes)", ["reason"],
            registry=self.registry,
        )  # fmt: skip
        for reason in ("gone", "size"):
            self.cache_removed.labels(reason)
        self.shared_cache = SharedCacheMetrics(self.registry)
        self.request_duration = Histogram(
            "profscope_http_request_duration_seconds",
            "HTTP request latency by route template (e.g. /api/overview) and method",
            labelnames=("method", "route"),
            buckets=REQUEST_BUCKETS_S,
            registry=self.registry,
        )
        self.requests = Counter(
            "profscope_http_requests",
            "HTTP requests by route template, method and status code",
            labelnames=("method", "route", "status"),
            registry=self.registry,
        )

        self.heavy_running = Gauge(
            "profscope_heavy_requests_running", "Requests to the heavy routes (guard.py) being computed now",
            registry=self.registry,
        )  # fmt: skip
        self.heavy_waiting = Gauge(
            "profscope_heavy_requests_waiting", "Requests to the heavy routes waiting for their turn",
            registry=self.registry,
        )  # fmt: skip

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """``route`` is a route template or one of a few fixed names (app.route_template)."""
        method = method if method in HTTP_METHODS else OTHER_METHOD
        self.request_duration.labels(method, route).observe(seconds)
        self.requests.labels(method, route, str(status)).inc()

    def watch(self, state: Profscope) -> None:
        """Report the state's gauges (runs, files, busy workers, cache size) at every scrape."""
        self.registry.register(_StateCollector(state))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, state: Profscope) -> None:
        self.state = state
        self._cache_size = _CachedDirectorySize(Path(state.settings.cache_dir))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.state
        runs = state.runs()
        yield GaugeMetricFamily("profscope_runs", "Runs found under the roots", value=len(runs))
        yield GaugeMetricFamily(
            "profscope_trace_files", "Trace files in those runs", value=sum(len(r.traces()) for r in runs.values())
        )
        yield GaugeMetricFamily(
            "profscope_roots_failing", "Roots whose last listing failed",
            value=sum(1 for r in state.roots if r.error),
        )  # fmt: skip
        running, queued = state.ingest.load()
        yield GaugeMetricFamily("profscope_ingest_workers", "Worker processes that parse traces",
                                value=state.ingest.workers)  # fmt: skip
        yield GaugeMetricFamily("profscope_ingest_workers_busy", "Workers parsing a trace now", value=running)
        yield GaugeMetricFamily("profscope_ingest_queue", "Traces waiting for a worker", value=queued)
        yield GaugeMetricFamily(
            "profscope_cache_size_bytes", "Bytes under the cache directory (refreshed every 30 s at most)",
            value=self._cache_size.get(),
        )  # fmt: skip
        yield GaugeMetricFamily(
            "profscope_cache_max_bytes", "--cache-max-bytes: the bound on entries no served run needs (0: none)",
            value=state.settings.cache_max_bytes,
        )  # fmt: skip


class _CachedDirectorySize:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._value = 0
        self._measured_at = float("-inf")

    def get(self) -> int:
        with self._lock:
            if time.monotonic() - self._measured_at >= CACHE_SIZE_REFRESH_S:
                self._value = directory_size(self.root)
                self._measured_at = time.monotonic()
            return self._value


def directory_size(root: Path) -> int:
    total = 0
    pending = [root]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total
