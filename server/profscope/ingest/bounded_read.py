"""Reading a stream in chunks up to a size limit, reporting progress: shared by the parsers that need the
whole file (an nsys export copied to a temporary file for SQLite, a memory.log read as text)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO

CHUNK_BYTES = 1 << 20


def chunks_within(
    raw: IO[bytes], limit: int, on_progress: Callable[[int], None] | None, too_large: Callable[[], Exception]
) -> Iterator[bytes]:
    """The chunks of ``raw``; raises ``too_large()`` once more than ``limit`` bytes were read."""
    done = 0
    while chunk := raw.read(CHUNK_BYTES):
        done += len(chunk)
        if done > limit:
            raise too_large()
        yield chunk
        if on_progress is not None:
            on_progress(done)
