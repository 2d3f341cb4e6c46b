"""Keeping the local cache bounded: entries of objects that are gone or overwritten are dropped, and beyond
``--cache-max-bytes`` the least recently used entries no run being served needs are evicted.

Every entry records where it came from (``origin.json``: root and key). An entry whose root this server listed
successfully, but whose key (at that size, version and parser version) is not in the listing any more, belongs
to an object that was deleted or overwritten, or to an older parser: nobody can ask for it again. Entries of
other roots (a cache directory shared with other servers, or with earlier runs of ``profscope serve`` on other
folders) are only ever evicted for size, oldest use first. The entries of the runs being served are never
evicted: with eager parsing they would be parsed again at the next rescan, over and over; when they alone
exceed the limit, the log says so once.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from profscope.cache import TraceCache

log = logging.getLogger("profscope.cache")

DEFAULT_CACHE_MAX_BYTES = 20 << 30
TIDY_EVERY_S = 60.0  # a walk of the cache directory; the rescan itself may come every few seconds


@dataclass
class CacheEntry:
    cache_key: str
    bytes: int
    used_at: float  # the entry directory's mtime: the last time a server served (or wrote) it
    origin: dict[str, str] | None


@dataclass
class TidyReport:
    gone: list[str] = field(default_factory=list)  # cache keys dropped: their object was deleted or overwritten
    evicted: list[str] = field(default_factory=list)  # cache keys dropped for size, least recently used first
    bytes_kept: int = 0
    live_bytes: int = 0  # what the runs being served take


def _entry_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def cache_entries(cache: TraceCache) -> list[CacheEntry]:
    try:
        folders = [entry for entry in os.scandir(cache.root) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    entries = []
    for folder in folders:
        try:
            used_at = folder.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        origin = cache.origin(folder.name)
        entries.append(CacheEntry(folder.name, _entry_bytes(Path(folder.path)), used_at, origin))
    return entries


def tidy_cache(cache: TraceCache, live: set[str], listed_roots: set[str], max_bytes: int) -> TidyReport:
    """``live``: the cache keys of every file of the runs served now; ``listed_roots``: the roots whose last
    listing succeeded (a root that cannot be listed says nothing about its objects)."""
    report = TidyReport()
    now = time.time()
    for cache_key in live:
        cache.record_use(cache_key, now)
    spare = []
    for entry in cache_entries(cache):
        if entry.cache_key in live:
            report.live_bytes += entry.bytes
        elif entry.origin is not None and entry.origin.get("root") in listed_roots:
            cache.forget(entry.cache_key)
            report.gone.append(entry.cache_key)
            continue
        else:
            spare.append(entry)
        report.bytes_kept += entry.bytes
    if max_bytes > 0:
        for entry in sorted(spare, key=lambda e: e.used_at):
            if report.bytes_kept <= max_bytes:
                break
            cache.forget(entry.cache_key)
            report.evicted.append(entry.cache_key)
            report.bytes_kept -= entry.bytes
    return report
