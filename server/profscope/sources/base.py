"""The one interface every storage backend implements: list, stat, open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Protocol


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # '/'-separated path relative to the source root
    size: int
    version: str  # changes whenever the content may have changed (mtime+size, ETag, generation)


class SourceError(OSError):
    """A storage problem (unreachable, denied, missing), with a message fit for the page."""


class Source(Protocol):
    uri: str

    def list(self) -> list[ObjectInfo]: ...

    def stat(self, key: str) -> ObjectInfo: ...

    def open(self, key: str) -> IO[bytes]: ...
