"""A cache of parsed traces in object storage (``--cache-dir s3://BUCKET/PREFIX``, ``gs://``, ``az://``).

Stateless ``profscope serve`` replicas and the pods of a ``profscope index`` Indexed Job share it. Each
process still works from a local cache directory (tables memory-mapped from local disk, as always);
the shared cache holds, per cache key, an immutable copy of a complete local entry:

    <cache URI>/v1/<cache key>/bundle-<sha256>.tar   the entry's files (summary.json, tables/, timeline/,
                                                     views/) as one uncompressed tar, named by its digest
    <cache URI>/v1/<cache key>/manifest.json         written last: names the bundle, its size and digest

A query whose version is newer than an entry's bundle is computed by the first replica that needs it
(``store.py``), which publishes the result next to the bundle, under the name it has in the entry:

    <cache URI>/v1/<cache key>/views/<query>.v<version>.json

so the other replicas read it instead of computing it again. It is one JSON file, written whole by one
put (object stores never show half an object); a reader checks that it is JSON before keeping it.

A cache key changes whenever the object (ETag / generation, size) or the parser version does, so an
entry is written once and never updated: readers see a manifest or nothing. The manifest is written
after the bundle and names it by digest, so a reader never pairs a manifest with another writer's
bundle, and a writer that dies mid-way leaves at most a bundle nothing refers to. Readers check the
bundle's size and SHA-256 while unpacking it into a hidden staging folder, and rename it into place
only when both match: a truncated, corrupt or missing bundle is ignored (the trace is parsed instead),
never served. A failed parse is a manifest with ``state: error`` and the reason, without a bundle, so
replicas show the failure instead of each failing again; storage errors are never recorded.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import logging
import os
import re
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from profscope import __version__
from profscope.cache import TraceCache, dumps
from profscope.sources import ObjectMissing, StorageOptions, open_store

if TYPE_CHECKING:
    from profscope.catalog import TraceFile
    from profscope.metrics import SharedCacheMetrics

log = logging.getLogger("profscope.shared_cache")

LAYOUT = "v1"  # bump when the bundle or the manifest changes shape: old and new servers then never mix entries
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20
MAX_RESULT_BYTES = 1 << 30  # a published query result (a call tree of a large trace is tens of MB)
COPY_BYTES = 1 << 20
STORE_WARNING_INTERVAL_S = 60.0  # a store that is down fails every lookup: say so once a minute, not per trace
UNRECORDED_FAILURES = frozenset({"SourceError"})  # storage trouble is retried, never recorded for other replicas
_BUNDLE_NAME = re.compile(r"^bundle-[0-9a-f]{64}\.tar$")
# What a bundle may hold: the files of a local entry, one level deep, no hidden (staging) names.
_MEMBER = re.compile(r"^(?:summary\.json|(?:tables|timeline|views)/[A-Za-z0-9_][A-Za-z0-9_.\-]*)$")


class BundleInvalid(Exception):
    """A shared entry that cannot be used (partial, corrupt, unexpected content): ignored, never served."""


# ---- the bundle --------------------------------------------------------------------------------------
def entry_files(directory: Path) -> list[tuple[str, Path]]:
    """(name in the bundle, path) of every file of a complete local entry, in a stable order."""
    found = []
    for folder in ("tables", "timeline", "views"):
        base = directory / folder
        if base.is_dir():
            for path in sorted(base.iterdir()):
                name = f"{folder}/{path.name}"
                if path.is_file() and _MEMBER.match(name):
                    found.append((name, path))
    found.append(("summary.json", directory / "summary.json"))  # last: a bundle cut short lacks it
    return found


class BundleReader(io.RawIOBase):
    """An entry's files as an uncompressed tar, assembled while it is read: no copy on disk, and seekable,
    so an upload can send a part again. Headers are fixed (mode 0644, mtime 0, no owner), so the same
    files always make the same bytes."""

    def __init__(self, files: list[tuple[str, Path]]) -> None:
        super().__init__()
        self._starts: list[int] = []
        self._parts: list[bytes | Path] = []
        self._lengths: list[int] = []
        for name, path in files:
            size = path.stat().st_size
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = size, 0o644, 0
            self._add(info.tobuf(tarfile.PAX_FORMAT, "utf-8", "strict"))
            self._add(path, size)
            self._add(bytes(-size % tarfile.BLOCKSIZE))
        end = 2 * tarfile.BLOCKSIZE  # two zero blocks end the archive, padded to a whole record as tar does
        self._add(bytes(end + -(self._end() + end) % tarfile.RECORDSIZE))
        self.size = self._end()
        self.files = len(files)
        self._position = 0
        self._fd: tuple[Path, int] | None = None  # the file being read, kept open between reads

    def _end(self) -> int:
        return self._starts[-1] + self._lengths[-1] if self._starts else 0

    def _add(self, part: bytes | Path, length: int | None = None) -> None:
        length = len(part) if isinstance(part, bytes) else length or 0
        if length:
            self._starts.append(self._end())
            self._parts.append(part)
            self._lengths.append(length)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        """Fills the whole buffer unless the end comes first (uploaders take a short read for the end)."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._position < self.size:
            index = bisect.bisect_right(self._starts, self._position) - 1
            within = self._position - self._starts[index]
            count = min(len(view) - done, self._lengths[index] - within)
            part = self._parts[index]
            if isinstance(part, bytes):
                view[done : done + count] = part[within : within + count]
            elif os.preadv(self._descriptor(part), [view[done : done + count]], within) != count:
                raise OSError(f"{part} changed while it was being bundled")
            done += count
            self._position += count
        return done

    def _descriptor(self, path: Path) -> int:
        if self._fd is None or self._fd[0] != path:
            self._close_file()
            self._fd = (path, os.open(path, os.O_RDONLY))
        return self._fd[1]

    def _close_file(self) -> None:
        if self._fd is not None:
            os.close(self._fd[1])
            self._fd = None

    def close(self) -> None:
        self._close_file()
        super().close()

    def digest(self) -> str:
        """SHA-256 of the whole bundle (one read through it; the position goes back to the start)."""
        hasher = hashlib.sha256()
        buffer = bytearray(COPY_BYTES)
        self.seek(0)
        while count := self.readinto(buffer):
            hasher.update(memoryview(buffer)[:count])
        self.seek(0)
        return hasher.hexdigest()


class _CheckedStream(io.RawIOBase):
    """Counts and hashes what is read through it; never reads more than one byte past the expected size."""

    def __init__(self, raw: IO[bytes], size: int) -> None:
        super().__init__()
        self._raw = raw
        self.size = size
        self.count = 0
        self._hasher = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(min(len(buffer), self.size + 1 - self.count))
        if self.count + len(data) > self.size:
            raise BundleInvalid(f"it holds more than the {self.size} bytes its manifest gives")
        buffer[: len(data)] = data
        self.count += len(data)
        self._hasher.update(data)
        return len(data)

    def drain(self) -> None:
        while self.read(COPY_BYTES):
            pass

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()


def extract_bundle(stream: IO[bytes], size: int, sha256: str, target: Path) -> None:
    """Unpack a bundle read from ``stream`` into the folder ``target``, which appears only once the bundle's
    size and digest match the manifest's and it holds a summary; BundleInvalid otherwise (``target`` untouched)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.fetch-", dir=target.parent))
    try:
        checked = _CheckedStream(stream, size)
        try:
            with tarfile.open(fileobj=checked, mode="r|", bufsize=COPY_BYTES) as archive:
                for member in archive:
                    _extract_member(archive, member, staging)
        except tarfile.TarError as exc:
            raise BundleInvalid(f"it is not a whole tar archive ({exc})") from None
        checked.drain()
        if checked.count != size:
            raise BundleInvalid(f"it holds {checked.count} bytes where its manifest gives {size} (cut short?)")
        if checked.hexdigest() != sha256:
            raise BundleInvalid("its SHA-256 differs from its manifest's (corrupt?)")
        if not (staging / "summary.json").is_file():
            raise BundleInvalid("it holds no summary.json")
        shutil.rmtree(target, ignore_errors=True)  # a stale partial entry; an entry being served is never replaced
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _extract_member(archive: tarfile.TarFile, member: tarfile.TarInfo, staging: Path) -> None:
    if not member.isreg() or not _MEMBER.match(member.name):
        raise BundleInvalid(f"it holds an unexpected member {member.name!r}")  # links, folders, other paths
    path = staging / member.name
    if path.exists():
        raise BundleInvalid(f"it holds {member.name!r} twice")
    path.parent.mkdir(exist_ok=True)
    source = archive.extractfile(member)
    assert source is not None  # a regular file
    with open(path, "wb") as out:
        shutil.copyfileobj(source, out, COPY_BYTES)


# ---- the manifest ------------------------------------------------------------------------------------
def parse_manifest(data: bytes, cache_key: str) -> dict[str, Any]:
    """A manifest's JSON, checked: for this entry, and either a bundle (name = digest, size) or a failure."""
    try:
        manifest = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise BundleInvalid("its manifest is not JSON (cut short?)") from None
    if not isinstance(manifest, dict) or manifest.get("cache_key") != cache_key:
        raise BundleInvalid("its manifest belongs to another entry")
    state = manifest.get("state")
    if state == "ready":
        size = manifest.get("bytes")
        name = str(manifest.get("bundle"))
        if not _BUNDLE_NAME.match(name) or name != f"bundle-{manifest.get('sha256')}.tar":
            raise BundleInvalid("its manifest does not name a bundle by its SHA-256")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise BundleInvalid("its manifest gives no bundle size")
    elif state == "error":
        error = manifest.get("error")
        if not isinstance(error, dict) or not isinstance(error.get("message"), str):
            raise BundleInvalid("its manifest records a failure without a reason")
    else:
        raise BundleInvalid(f"its manifest has an unknown state {state!r}")
    return manifest


def _read_at_most(stream: IO[bytes], limit: int) -> bytes:
    chunks, total = [], 0
    while total <= limit and (chunk := stream.read(limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


# ---- the shared cache --------------------------------------------------------------------------------
class SharedCache:
    """Entries in an object store: ``fetch`` into a local cache, ``publish`` from it."""

    def __init__(
        self,
        uri: str,
        options: StorageOptions | None = None,
        metrics: SharedCacheMetrics | None = None,
        writer: str = "profscope",
    ) -> None:
        self.store = open_store(uri, options)  # the sources' own client, credentials, endpoint and retries
        self.uri = self.store.uri  # never holds a credential
        self.metrics = metrics
        self.writer = f"{writer} (profscope {__version__} on {socket.gethostname()})"
        self._warned_at = float("-inf")
        self._warn_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SharedCache({self.uri!r})"

    def object_key(self, cache_key: str, name: str) -> str:
        """Where a file of an entry lives, relative to the cache URI."""
        return f"{LAYOUT}/{cache_key}/{name}"

    def lookup(self, cache_key: str) -> dict[str, Any] | None:
        """The entry's checked manifest, or None when there is none. Raises SourceError when the store fails
        and BundleInvalid when the manifest is unusable."""
        try:
            with self.store.open(self.object_key(cache_key, MANIFEST)) as stream:
                data = _read_at_most(stream, MAX_MANIFEST_BYTES)
        except ObjectMissing:
            return None
        if len(data) > MAX_MANIFEST_BYTES:
            raise BundleInvalid("its manifest is too large")
        return parse_manifest(data, cache_key)

    def fetch(self, cache_key: str, local: TraceCache) -> str:
        """Bring the entry into ``local`` if the shared cache has it. Returns what happened: ``hit`` (bundle
        unpacked), ``failure`` (a recorded failure, now the local error), ``miss``, ``invalid`` (a partial or
        corrupt entry, ignored) or ``error`` (the store or the local disk failed). Only the first two leave a
        local result; after the others the caller parses the trace."""
        started = time.perf_counter()
        manifest: dict[str, Any] | None = None
        try:
            manifest = self.lookup(cache_key)
            if manifest is None:
                result = "miss"
            elif manifest["state"] == "error":
                local.write_error(cache_key, {**manifest["error"], "recorded_by": manifest.get("written_by")})
                result = "failure"
            else:
                with self.store.open(self.object_key(cache_key, manifest["bundle"])) as stream:
                    extract_bundle(stream, manifest["bytes"], manifest["sha256"], local.directory(cache_key))
                result = "hit"
        except (BundleInvalid, ObjectMissing) as exc:  # ObjectMissing here: the manifest names a missing bundle
            reason = "its manifest names a bundle that does not exist" if isinstance(exc, ObjectMissing) else exc
            log.warning("ignoring the shared cache entry %s/%s/%s: %s", self.uri, LAYOUT, cache_key, reason)
            result = "invalid"
        except OSError as exc:  # SourceError (the store) or the local disk
            self._warn_store(f"cannot use the shared cache {self.uri}: {exc}; parsing locally instead")
            result = "error"
        if self.metrics is not None:
            self.metrics.lookups.labels(result).inc()
            if result == "hit" and manifest is not None:
                self.metrics.fetched_bytes.inc(manifest["bytes"])
                self.metrics.fetch_duration.observe(time.perf_counter() - started)
        return result

    def has_bundle(self, cache_key: str) -> bool:
        """Whether the entry is complete: a manifest and a bundle of the manifest's size (the digest is checked
        by readers, which download it anyway). Raises SourceError when the store fails."""
        try:
            manifest = self.lookup(cache_key)
        except BundleInvalid:
            return False
        if manifest is None or manifest["state"] != "ready":
            return False
        try:
            return self.store.stat(self.object_key(cache_key, manifest["bundle"])).size == manifest["bytes"]
        except ObjectMissing:
            return False

    def publish(self, cache_key: str, local: TraceCache, trace: TraceFile, replace: bool = False) -> str | None:
        """Write the local entry to the shared cache, bundle first, manifest last; a local failure becomes a
        failure record. Unless ``replace`` (the shared entry was found invalid), an entry another writer put
        there first is kept. Returns ``bundle``, ``failure``, ``present``, or None when there is nothing to
        share (no result yet, or a storage error, which is retried rather than recorded). Raises SourceError."""
        try:
            result = self._publish(cache_key, local, trace, replace)
        except OSError:
            if self.metrics is not None:
                self.metrics.uploads.labels("error").inc()
            raise
        if self.metrics is not None and result is not None:
            self.metrics.uploads.labels(result).inc()
        return result

    def _publish(self, cache_key: str, local: TraceCache, trace: TraceFile, replace: bool) -> str | None:
        ready = local.is_ready(cache_key)
        error = None if ready else local.error(cache_key)
        if not ready and (error is None or error.get("kind") in UNRECORDED_FAILURES):
            return None
        if not replace:
            try:
                existing = self.lookup(cache_key)
            except BundleInvalid:
                existing = None
            if existing is not None and (existing["state"] == "ready" or not ready):  # a success beats a failure
                return "present"
        manifest: dict[str, Any] = {
            "layout": LAYOUT,
            "cache_key": cache_key,
            "source": {
                "root": trace.source,
                "key": trace.key,
                "size": trace.info.size,
                "version": trace.info.version,
                "kind": trace.kind,
            },
            "written_by": self.writer,
            "written_at": time.time(),
        }
        if ready:
            with BundleReader(entry_files(local.directory(cache_key))) as bundle:
                sha256 = bundle.digest()
                name = f"bundle-{sha256}.tar"
                self.store.put(self.object_key(cache_key, name), bundle, bundle.size)
            manifest.update(state="ready", bundle=name, bytes=bundle.size, sha256=sha256, files=bundle.files)
            if self.metrics is not None:
                self.metrics.uploaded_bytes.inc(bundle.size)
        else:
            assert error is not None
            reason = {"message": error.get("message") or "failed", "kind": error.get("kind") or "Error"}
            manifest.update(state="error", error=reason)
        data = dumps(manifest)
        self.store.put(self.object_key(cache_key, MANIFEST), io.BytesIO(data), len(data))
        return "bundle" if ready else "failure"

    # ---- query results published on their own -------------------------------------------------------
    def result_key(self, cache_key: str, stored_name: str) -> str:
        """Where a query result computed after the entry's bundle lives: its name in the entry's ``views/``."""
        return self.object_key(cache_key, f"views/{stored_name}.json")

    def fetch_result(self, cache_key: str, stored_name: str) -> bytes | None:
        """A query result another replica computed and published (``publish_result``), or None when there is
        none, it is not JSON, or the store fails (the caller then computes it)."""
        try:
            with self.store.open(self.result_key(cache_key, stored_name)) as stream:
                data = _read_at_most(stream, MAX_RESULT_BYTES)
        except ObjectMissing:
            self._count_result("miss")
            return None
        except OSError as exc:
            self._warn_store(f"cannot read a result from the shared cache {self.uri}: {exc}; computing it locally")
            self._count_result("error")
            return None
        try:
            if len(data) > MAX_RESULT_BYTES:
                raise ValueError(f"it is larger than {MAX_RESULT_BYTES} bytes")
            orjson.loads(data)
        except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
            log.warning("ignoring %s/%s: %s", self.uri, self.result_key(cache_key, stored_name), exc)
            self._count_result("invalid")
            return None
        self._count_result("fetched")
        return data

    def publish_result(self, cache_key: str, stored_name: str, data: bytes) -> bool:
        """Write a query result computed from an entry's stored tables next to the entry's bundle. False when
        the store fails: the result stays local, and the next replica that needs it computes it too."""
        try:
            self.store.put(self.result_key(cache_key, stored_name), io.BytesIO(data), len(data))
        except OSError as exc:
            self._warn_store(f"cannot write a result to the shared cache {self.uri}: {exc}")
            self._count_result("error")
            return False
        self._count_result("published")
        return True

    def _count_result(self, result: str) -> None:
        if self.metrics is not None:
            self.metrics.results.labels(result).inc()

    def _warn_store(self, message: str) -> None:
        with self._warn_lock:
            now = time.monotonic()
            if now - self._warned_at < STORE_WARNING_INTERVAL_S:
                log.debug("%s", message)
                return
            self._warned_at = now
        log.warning("%s", message)
