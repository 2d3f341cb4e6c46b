"""Storage backends. ``open_source`` picks one from a root URI."""

from __future__ import annotations

from pathlib import Path

from profscope.sources.base import ObjectInfo, Source, SourceError
from profscope.sources.local import LocalSource

__all__ = ["LocalSource", "ObjectInfo", "Source", "SourceError", "open_source"]


def open_source(root: str, exclude: list[Path] | None = None) -> Source:
    """The source for a root URI; ``exclude`` names local folders never to list (the cache)."""
    if "://" in root and not root.startswith("file://"):
        scheme = root.split("://", 1)[0]
        raise SourceError(f"the {scheme}:// source is not available in this build")
    return LocalSource(root.removeprefix("file://"), exclude=exclude)
