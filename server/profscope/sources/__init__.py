"""Storage backends. ``open_source`` picks one from a root URI."""

from __future__ import annotations

from profscope.sources.base import ObjectInfo, Source, SourceError
from profscope.sources.local import LocalSource

__all__ = ["LocalSource", "ObjectInfo", "Source", "SourceError", "open_source"]


def open_source(root: str) -> Source:
    if "://" in root and not root.startswith("file://"):
        scheme = root.split("://", 1)[0]
        raise SourceError(f"the {scheme}:// source is not available in this build")
    return LocalSource(root.removeprefix("file://"))
