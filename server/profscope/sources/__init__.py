"""Storage backends. ``open_source`` picks one from a root URI.

Creating a source only parses its URI: nothing touches the network until the first ``list``, so a
store that is down at start-up shows as a root error and recovers at a later listing.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from profscope.sources.base import ObjectInfo, Source, SourceError, StorageOptions, redact
from profscope.sources.local import LocalSource

__all__ = ["LocalSource", "ObjectInfo", "Source", "SourceError", "StorageOptions", "open_source", "redact"]


def open_source(root: str, exclude: list[Path] | None = None, options: StorageOptions | None = None) -> Source:
    """The source for a root URI; ``exclude`` names local folders never to list (the cache)."""
    if "://" not in root or root.startswith("file://"):
        return LocalSource(root.removeprefix("file://"), exclude=exclude)
    scheme = root.split("://", 1)[0].lower()
    if scheme == "s3":
        from profscope.sources.s3 import S3Source

        return S3Source(root, options)
    if scheme == "gs":
        from profscope.sources.gcs import GCSSource

        return GCSSource(root, options)
    if scheme == "az" or (scheme in ("https", "http") and ".blob." in (urlsplit(root).hostname or "")):
        from profscope.sources.azure import AzureSource

        return AzureSource(root, options)
    raise SourceError(
        f"{redact(root)}: unknown kind of root; use a folder, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX, "
        "az://CONTAINER/PREFIX or https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX"
    )
