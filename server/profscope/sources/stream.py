"""A streaming read of one stored object that survives dropped connections.

The parser reads the object front to back in chunks (``ingest/json_stream.py`` decompresses as it
goes), so nothing is downloaded whole. When a read fails with a transient error the stream opens
the object again at the byte it had reached (a ranged request) and carries on, a bounded number of
times with exponential backoff. Every other failure becomes a ``SourceError`` whose message names
the object but no credential.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from typing import Any, Protocol

from profscope.sources.base import SourceError


class Readable(Protocol):
    def read(self, size: int = -1) -> bytes: ...


class ObjectStream(io.RawIOBase):
    """Read-only, non-seekable stream; ``open_at(offset)`` returns a body that reads from ``offset``."""

    def __init__(
        self,
        open_at: Callable[[int], Readable],
        describe: Callable[[BaseException], SourceError],
        is_transient: Callable[[BaseException], bool],
        attempts: int,
    ) -> None:
        self._open_at = open_at
        self._describe = describe
        self._is_transient = is_transient
        self._attempts = max(1, attempts)
        self._offset = 0
        self._body: Readable | None = self._call(lambda: open_at(0), attempts=1)  # the SDK retried the open

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._call(lambda: self._read(len(buffer)))
        n = len(data)
        buffer[:n] = data
        self._offset += n
        return n

    def _read(self, size: int) -> bytes:
        if self._body is None:
            self._body = self._open_at(self._offset)
        try:
            return self._body.read(size)
        except BaseException:
            self._drop_body()
            raise

    def _call(self, action: Callable[[], Any], attempts: int | None = None) -> Any:
        attempts = attempts or self._attempts
        for attempt in range(attempts):
            try:
                return action()
            except SourceError:
                raise
            except Exception as exc:
                if not self._is_transient(exc) or attempt + 1 >= attempts:
                    raise self._describe(exc) from None
                time.sleep(min(0.5 * 2**attempt, 8.0))
        raise AssertionError("unreachable")

    def _drop_body(self) -> None:
        body, self._body = self._body, None
        close = getattr(body, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is replaced anyway
                close()

    def close(self) -> None:
        self._drop_body()
        super().close()
