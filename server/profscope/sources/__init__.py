"""Storage backends. ``open_source`` picks one from a root URI.

Creating a source only parses its URI: nothing touches the network until the first ``list``, so a
store that is down at start-up shows as a root error and recovers at a later listing.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from profscope.sources.base import ObjectInfo, ObjectMissing, Source, SourceError, StorageOptions, Store, redact
from profscope.sources.local import LocalSource

__all__ = [
    "LocalSource",
    "ObjectInfo",
    "ObjectMissing",
    "Source",
    "SourceError",
    "StorageOptions",
    "Store",
    "is_object_store_uri",
    "open_source",
    "open_store",
    "redact",
]


def is_object_store_uri(text: str) -> bool:
    """True for s3://, gs://, az:// and https://ACCOUNT.blob... (not for a path or file://)."""
    return "://" in text and not text.startswith("file://")


def open_source(root: str, exclude: list[Path] | None = None, options: StorageOptions | None = None) -> Source:
    """The source for a root URI; ``exclude`` names local folders never to list (the cache)."""
    if not is_object_store_uri(root):
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


def open_store(uri: str, options: StorageOptions | None = None) -> Store:
    """The writable object store at a URI (the shared cache): the sources' own clients, credentials and options."""
    if not is_object_store_uri(uri):
        raise SourceError(f"{redact(uri)}: not an object-store URI (s3://, gs://, az:// or https://ACCOUNT.blob...)")
    return open_source(uri, options=options)  # type: ignore[return-value]  # every object-store source can put
