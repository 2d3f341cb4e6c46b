"""Google Cloud Storage: ``gs://bucket/prefix``.

Credentials are the application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
ADC file, workload identity, the metadata server); with none, requests are anonymous (public
buckets). ``STORAGE_EMULATOR_HOST`` (with its ``http://``) points the client at an emulator, used
anonymously. google-cloud-storage's retry (429, 5xx, connection errors; exponential backoff) is
bounded by ``StorageOptions``. The object version is its generation, new on every overwrite.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any

from profscope.sources.base import (
    ObjectInfo,
    ObjectMissing,
    SourceError,
    StorageOptions,
    is_hidden,
    redact,
    split_bucket_uri,
)
from profscope.sources.stream import ObjectStream

log = logging.getLogger("profscope.sources.gcs")

READ_CHUNK_BYTES = 4 << 20  # one ranged GET per chunk while the parser streams the object
UPLOAD_CHUNK_BYTES = 16 << 20  # larger objects go up as a resumable upload in chunks of this size (256 KiB multiple)


class GCSSource:
    def __init__(self, uri: str, options: StorageOptions | None = None, page_size: int = 1000) -> None:
        self.bucket, self.prefix = split_bucket_uri(uri)
        if not self.bucket:
            raise SourceError(f"{uri}: no bucket name (expected gs://BUCKET/PREFIX)")
        self.uri = f"gs://{self.bucket}/{self.prefix}".rstrip("/")
        self.options = options or StorageOptions()
        self.page_size = page_size
        self._client: Any = None
        self._anonymous = False

    def __repr__(self) -> str:
        return f"GCSSource({self.uri!r})"

    def __getstate__(self) -> dict[str, Any]:  # worker processes build their own client
        return {**self.__dict__, "_client": None}

    # ---- client --------------------------------------------------------------------------------
    def _gcs(self) -> Any:
        if self._client is None:
            from google.auth.credentials import AnonymousCredentials
            from google.auth.exceptions import DefaultCredentialsError
            from google.cloud import storage

            if os.environ.get("STORAGE_EMULATOR_HOST"):
                self._anonymous = True
                self._client = storage.Client(project="profscope", credentials=AnonymousCredentials())
            else:
                try:
                    self._client = storage.Client()
                except DefaultCredentialsError:
                    log.info("%s: no Google application default credentials; reading anonymously", self.uri)
                    self._anonymous = True
                    self._client = storage.Client.create_anonymous_client()
                except Exception as exc:
                    raise SourceError(f"{self.uri}: cannot set up the Google client: {redact(str(exc))}") from None
        return self._client

    def _retry(self) -> Any:
        from google.cloud.storage.retry import DEFAULT_RETRY

        return DEFAULT_RETRY.with_delay(initial=0.5, maximum=8.0, multiplier=2.0).with_timeout(
            self.options.backoff_budget_s() + self.options.timeout_s
        )

    def _timeout(self) -> tuple[float, float]:
        return (self.options.timeout_s, self.options.timeout_s)

    def _endpoint(self) -> str:
        return os.environ.get("STORAGE_EMULATOR_HOST") or "https://storage.googleapis.com"

    # ---- Source --------------------------------------------------------------------------------
    def list(self) -> list[ObjectInfo]:
        client = self._gcs()
        found: list[ObjectInfo] = []
        try:
            blobs = client.list_blobs(
                self.bucket,
                prefix=self.prefix or None,
                page_size=self.page_size,
                fields="items(name,size,generation),nextPageToken",
                retry=self._retry(),
                timeout=self._timeout(),
            )
            for blob in blobs:
                key = blob.name[len(self.prefix) :]
                if key and not key.endswith("/") and not is_hidden(key):
                    found.append(ObjectInfo(key=key, size=int(blob.size or 0), version=str(blob.generation)))
        except Exception as exc:
            raise self._error(exc) from None
        return sorted(found, key=lambda o: o.key)

    def stat(self, key: str) -> ObjectInfo:
        try:
            blob = (
                self._gcs()
                .bucket(self.bucket)
                .get_blob(self.prefix + key, retry=self._retry(), timeout=self._timeout())
            )
        except SourceError:
            raise
        except Exception as exc:
            raise self._error(exc, key) from None
        if blob is None:
            raise ObjectMissing(f"gs://{self.bucket}/{self.prefix}{key}: no such object")
        return ObjectInfo(key=key, size=int(blob.size or 0), version=str(blob.generation))

    def open(self, key: str) -> IO[bytes]:
        blob = self._gcs().bucket(self.bucket).blob(self.prefix + key)

        def open_at(offset: int) -> Any:
            # raw_download: the stored bytes, never transcoded (the parser inflates gzip itself)
            reader = blob.open(
                "rb", chunk_size=READ_CHUNK_BYTES, raw_download=True, retry=self._retry(), timeout=self._timeout()
            )
            if offset:
                reader.seek(offset)
            return reader

        return ObjectStream(open_at, lambda exc: self._error(exc, key), _is_transient, self.options.attempts)  # type: ignore[return-value]

    # ---- Store (the shared cache) ----------------------------------------------------------------
    def put(self, key: str, data: IO[bytes], size: int) -> None:
        try:
            blob = self._gcs().bucket(self.bucket).blob(self.prefix + key, chunk_size=UPLOAD_CHUNK_BYTES)
            # writing the same key twice stores the same content, so every failed request may be sent again
            blob.upload_from_file(data, size=size, rewind=False, retry=self._retry(), timeout=self._timeout())
        except SourceError:
            raise
        except Exception as exc:
            if _is_missing(exc):  # an upload creates the object: not found means no bucket
                where = f"{self.uri}/{key}: the bucket {self.bucket} does not exist at {self._endpoint()}"
                raise SourceError(where) from None
            raise self._error(exc, key) from None

    # ---- errors --------------------------------------------------------------------------------
    def _error(self, exc: BaseException, key: str | None = None) -> SourceError:
        where = f"{self.uri}/{key}" if key is not None else self.uri
        kind = ObjectMissing if key is not None and _is_missing(exc) else SourceError
        return kind(redact(f"{where}: {self._reason(exc, key)}"))

    def _reason(self, exc: BaseException, key: str | None) -> str:
        import requests
        from google.api_core import exceptions as google

        endpoint = self._endpoint()
        gave_up = ""
        if isinstance(exc, google.RetryError) and exc.cause is not None:
            gave_up = f" (gave up after retrying for {self.options.backoff_budget_s() + self.options.timeout_s:g} s)"
            exc = exc.cause
        if isinstance(exc, google.NotFound):
            return (
                "no such object (deleted since it was listed?)"
                if key
                else (f"the bucket {self.bucket} does not exist at {endpoint}")
            )
        if isinstance(exc, google.Unauthorized | google.Forbidden):
            who = "anonymous requests are" if self._anonymous else "the application default credentials are"
            return f"access denied: {who} not allowed to list or read (a shared cache: write) this bucket ({exc.code})"
        if isinstance(exc, google.GoogleAPICallError) and exc.code is not None:
            return f"{endpoint} answered {int(exc.code)} {exc.reason or ''}".rstrip() + gave_up
        if isinstance(exc, requests.Timeout):
            return f"no answer from {endpoint} within {self.options.timeout_s:g} s{gave_up}"
        if isinstance(exc, requests.ConnectionError | ConnectionError):
            return f"cannot connect to {endpoint}{gave_up}"
        return f"{type(exc).__name__}: {exc}{gave_up}"


def _is_missing(exc: BaseException) -> bool:
    from google.api_core import exceptions as google

    if isinstance(exc, google.RetryError) and exc.cause is not None:
        exc = exc.cause
    return isinstance(exc, google.NotFound)


def _is_transient(exc: BaseException) -> bool:
    import requests
    from google.api_core import exceptions as google

    if isinstance(exc, google.RetryError):  # the client's own retries are used up
        return False
    if isinstance(exc, google.GoogleAPICallError):
        return exc.code is not None and (int(exc.code) == 429 or int(exc.code) >= 500)
    return isinstance(exc, requests.ConnectionError | requests.Timeout | ConnectionError | TimeoutError)
