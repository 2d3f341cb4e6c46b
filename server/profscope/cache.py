"""On-disk cache of parsed traces: tables, view payloads and remembered failures, per cache key.

Layout: ``<cache_dir>/traces/<cache key>/{tables/, views/<payload>.json, summary.json, origin.json}``
(``progress.json`` while it is being written) or ``<cache key>/error.json``. Every write goes through a
temporary name and ``os.replace``, so a reader (or a restarted server) never sees half a result.

An entry is complete once ``summary.json`` is written (last). While the worker is still computing, the
manifest ``progress.json`` lists what is finished: ``facts`` (what the parse found, written once the
tables are saved) and ``views`` (each result written so far, in order, added after its file is written).
A result in that list is served before the entry is complete: it and the tables it was computed from are
whole (see ``Store.result``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Any

import orjson

_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def dumps(value: Any) -> bytes:
    return orjson.dumps(value, option=_ORJSON_OPTIONS)


_STORAGE_FULL = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        staging.write_bytes(data)
        os.replace(staging, path)
    except OSError:
        staging.unlink(missing_ok=True)  # a full disk must not keep the half-written file
        raise


def is_cache_write_failure(exc: OSError, cache_root: str | Path) -> bool:
    """The error came from writing the cache (full, read-only, deleted), not from reading a trace."""
    if exc.errno in _STORAGE_FULL:
        return True
    filename = exc.filename or exc.filename2
    return filename is not None and Path(os.fsdecode(filename)).is_relative_to(cache_root)


class TraceCache:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def directory(self, cache_key: str) -> Path:
        return self.root / cache_key

    def tables_dir(self, cache_key: str) -> Path:
        return self.directory(cache_key) / "tables"

    def timeline_dir(self, cache_key: str) -> Path:
        return self.directory(cache_key) / "timeline"

    def view_path(self, cache_key: str, name: str) -> Path:
        return self.directory(cache_key) / "views" / f"{name}.json"

    def summary(self, cache_key: str) -> dict[str, Any] | None:
        return self._read_json(self.directory(cache_key) / "summary.json")

    def error(self, cache_key: str) -> dict[str, Any] | None:
        return self._read_json(self.directory(cache_key) / "error.json")

    def is_ready(self, cache_key: str) -> bool:
        return self.summary(cache_key) is not None

    def progress(self, cache_key: str) -> dict[str, Any] | None:
        """The manifest of an entry being written: ``{"facts": {...}, "views": [stored names finished]}``."""
        return self._read_json(self.directory(cache_key) / "progress.json")

    def write_progress(self, cache_key: str, progress: dict[str, Any]) -> None:
        write_atomic(self.directory(cache_key) / "progress.json", dumps(progress))

    def facts(self, cache_key: str) -> dict[str, Any] | None:
        """What the parse of the file found (events, kernels, format, distributedInfo...): from its summary once
        complete, from its manifest while its results are still being computed, None before the parse ends."""
        summary = self.summary(cache_key)
        if summary is not None:
            return summary
        progress = self.progress(cache_key)
        return progress.get("facts") if progress else None

    def finished_early(self, cache_key: str, name: str) -> bool:
        """Whether the stored result ``name`` of an entry still being written is finished (in its manifest)."""
        progress = self.progress(cache_key)
        return bool(progress) and name in progress.get("views", ())

    def write_view(self, cache_key: str, name: str, value: Any) -> None:
        self.write_view_bytes(cache_key, name, dumps(value))

    def write_view_bytes(self, cache_key: str, name: str, data: bytes) -> None:
        write_atomic(self.view_path(cache_key, name), data)

    def read_view(self, cache_key: str, name: str) -> bytes | None:
        try:
            return self.view_path(cache_key, name).read_bytes()
        except OSError:
            return None

    def write_summary(self, cache_key: str, summary: dict[str, Any]) -> None:
        """Mark the entry complete; its manifest is no longer read, and a complete entry holds none (a shared
        cache bundle holds exactly the files of a complete entry)."""
        write_atomic(self.directory(cache_key) / "summary.json", dumps(summary))
        (self.directory(cache_key) / "progress.json").unlink(missing_ok=True)

    def write_error(self, cache_key: str, error: dict[str, Any]) -> None:
        write_atomic(self.directory(cache_key) / "error.json", dumps(error))

    def forget(self, cache_key: str) -> None:
        shutil.rmtree(self.directory(cache_key), ignore_errors=True)

    def origin(self, cache_key: str) -> dict[str, Any] | None:
        """Where the entry came from: ``{"root": ..., "key": ...}`` (see cache_bounds.py)."""
        return self._read_json(self.directory(cache_key) / "origin.json")

    def record_origin(self, cache_key: str, root: str, key: str) -> None:
        """Once the entry of a served file exists: which root and key it is of (cache_bounds.py)."""
        directory = self.directory(cache_key)
        if directory.is_dir() and not (directory / "origin.json").exists():
            with contextlib.suppress(OSError):  # a cache that cannot be written says so where it is written
                write_atomic(directory / "origin.json", dumps({"root": root, "key": key}))

    def record_use(self, cache_key: str, at: float) -> None:
        """The entry of a file being served: its use time, kept as its directory's mtime (least recently used
        entries are evicted first)."""
        with contextlib.suppress(OSError):  # no entry yet
            os.utime(self.directory(cache_key), (at, at))

    @staticmethod
    def _read_json(path: Path) -> dict[str, Any] | None:
        try:
            return orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
