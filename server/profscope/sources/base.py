"""The one interface every storage backend implements: list, stat, open; object stores also put (the shared cache)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO, Protocol


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # '/'-separated path relative to the source root
    size: int
    version: str  # changes whenever the content may have changed (mtime+size, ETag, generation)


@dataclass(frozen=True)
class StorageOptions:
    """How the object-store sources connect; the same in the server and in its worker processes."""

    s3_endpoint_url: str | None = None  # MinIO, Ceph, R2...; else AWS_ENDPOINT_URL or AWS itself
    azure_account_url: str | None = None  # e.g. Azurite or a sovereign cloud; else from the URI or account
    timeout_s: float = 20.0  # connect timeout and the longest wait for one read
    attempts: int = 5  # tries per request on throttling, 5xx and connection errors (exponential backoff)

    def backoff_budget_s(self) -> float:
        """The longest total sleep between the tries of one request (0.5 s doubling, at most 8 s each)."""
        return sum(min(0.5 * 2**i, 8.0) for i in range(max(0, self.attempts - 1)))


class SourceError(OSError):
    """A storage problem (unreachable, denied, missing), with a message fit for the page."""


class ObjectMissing(SourceError):
    """The object does not exist (for the shared cache: a miss, not a failure of the store)."""


class Source(Protocol):
    uri: str  # what the page shows and cache keys use: never holds a credential

    def list(self) -> list[ObjectInfo]: ...

    def stat(self, key: str) -> ObjectInfo: ...

    def open(self, key: str) -> IO[bytes]: ...


class Store(Source, Protocol):
    """An object store that can also be written: the home of a shared cache (``--cache-dir s3://...``)."""

    def put(self, key: str, data: IO[bytes], size: int) -> None:
        """Write ``size`` bytes read from ``data`` (seekable, so a failed part can be sent again) as ``key``."""
        ...


def is_hidden(relative_key: str) -> bool:
    """Keys under a folder whose name starts with '.' (``.git``, a shared ``.profscope`` cache) are skipped."""
    return any(part.startswith(".") for part in relative_key.split("/")[:-1])


def split_bucket_uri(uri: str) -> tuple[str, str]:
    """``scheme://bucket/some/prefix`` -> (bucket, ``some/prefix/``); the prefix is a folder."""
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


# Credential-shaped text that an SDK may put into an exception or log line: (pattern, replacement).
_QUERY_SECRETS = (
    "sig|se|sv|sp|spr|srt|ss|st|skoid|sktid|skt|ske|sks|skv|sr|X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|"
    "X-Goog-Signature|X-Goog-Credential|access_token"
)
_KEY_SECRETS = "AccountKey|SharedAccessSignature|SharedAccessKey|aws_secret_access_key"
_SECRET_PATTERNS = [
    (re.compile(rf"(?i)\b({_QUERY_SECRETS})=[^&\s'\"]+"), r"\1=***"),
    (re.compile(rf"(?i)\b({_KEY_SECRETS})=[^;\s'\"]+"), r"\1=***"),
    (re.compile(r"(?i)\b(Authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\n]+"), r"\1***"),
]


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without any of ``secrets`` and without SAS parameters, keys or signatures."""
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, "***")
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text
