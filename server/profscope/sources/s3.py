"""Amazon S3 and S3-compatible stores (MinIO, Ceph, R2): ``s3://bucket/prefix``.

Credentials come from boto3's standard chain (environment, shared config and profiles, SSO, web
identity, instance and container roles); with none at all, requests go unsigned (public buckets).
The endpoint is ``--s3-endpoint-url`` / ``PROFSCOPE_S3_ENDPOINT_URL``, else ``AWS_ENDPOINT_URL``
(read by boto3 itself), else AWS. botocore's "standard" retry mode retries throttling, 5xx and
connection errors with exponential backoff, ``StorageOptions.attempts`` tries in all.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger("profscope.sources.s3")

UPLOAD_PART_BYTES = 16 << 20  # larger objects go up in parts of this size, each retried on its own

_THROTTLING = {"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests"}
_BAD_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "AuthorizationHeaderMalformed",
}


class S3Source:
    def __init__(self, uri: str, options: StorageOptions | None = None, page_size: int = 1000) -> None:
        self.bucket, self.prefix = split_bucket_uri(uri)
        if not self.bucket:
            raise SourceError(f"{uri}: no bucket name (expected s3://BUCKET/PREFIX)")
        self.uri = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.options = options or StorageOptions()
        self.page_size = page_size
        self._client: Any = None
        self._secrets: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"S3Source({self.uri!r})"

    def __getstate__(self) -> dict[str, Any]:  # worker processes build their own client
        return {**self.__dict__, "_client": None, "_secrets": ()}

    # ---- client --------------------------------------------------------------------------------
    def _s3(self) -> Any:
        if self._client is None:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config

            try:
                session = boto3.session.Session()
                credentials = session.get_credentials()
            except Exception as exc:  # a broken profile or config file
                raise SourceError(f"{self.uri}: cannot read the AWS configuration: {redact(str(exc))}") from None
            if credentials is not None:
                frozen = credentials.get_frozen_credentials()
                self._secrets = tuple(s for s in (frozen.secret_key, frozen.token) if s)
            else:
                log.info("%s: no AWS credentials found; sending unsigned requests (public buckets only)", self.uri)
            config = Config(
                retries={"mode": "standard", "total_max_attempts": max(1, self.options.attempts)},
                connect_timeout=self.options.timeout_s,
                read_timeout=self.options.timeout_s,
                signature_version=None if credentials is not None else UNSIGNED,
                user_agent_extra="profscope",
            )
            self._client = session.client("s3", endpoint_url=self.options.s3_endpoint_url or None, config=config)
        return self._client

    def _endpoint(self) -> str:
        return str(self._client.meta.endpoint_url) if self._client is not None else "S3"

    # ---- Source --------------------------------------------------------------------------------
    def list(self) -> list[ObjectInfo]:
        client = self._s3()
        found: list[ObjectInfo] = []
        try:
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": self.page_size}
            )
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(self.prefix) :]
                    if key and not key.endswith("/") and not is_hidden(key):
                        found.append(ObjectInfo(key=key, size=int(item["Size"]), version=item["ETag"].strip('"')))
        except Exception as exc:
            raise self._error(exc) from None
        return sorted(found, key=lambda o: o.key)

    def stat(self, key: str) -> ObjectInfo:
        try:
            head = self._s3().head_object(Bucket=self.bucket, Key=self.prefix + key)
        except SourceError:
            raise
        except Exception as exc:
            raise self._error(exc, key) from None
        return ObjectInfo(key=key, size=int(head["ContentLength"]), version=head["ETag"].strip('"'))

    def open(self, key: str) -> IO[bytes]:
        client = self._s3()
        etag: list[str] = []

        def open_at(offset: int) -> Any:
            extra = {"Range": f"bytes={offset}-", "IfMatch": etag[0]} if offset and etag else {}
            response = client.get_object(Bucket=self.bucket, Key=self.prefix + key, **extra)
            etag[:] = [response["ETag"]]
            return response["Body"]

        return ObjectStream(open_at, lambda exc: self._error(exc, key), _is_transient, self.options.attempts)  # type: ignore[return-value]

    # ---- Store (the shared cache) ----------------------------------------------------------------
    def put(self, key: str, data: IO[bytes], size: int) -> None:
        from boto3.s3.transfer import TransferConfig

        parts = TransferConfig(
            multipart_threshold=UPLOAD_PART_BYTES, multipart_chunksize=UPLOAD_PART_BYTES, max_concurrency=4
        )
        try:
            self._s3().upload_fileobj(data, self.bucket, self.prefix + key, Config=parts)
        except SourceError:
            raise
        except Exception as exc:
            raise self._error(exc, key) from None

    # ---- errors --------------------------------------------------------------------------------
    def _error(self, exc: BaseException, key: str | None = None) -> SourceError:
        where = f"{self.uri}/{key}" if key is not None else self.uri
        kind = ObjectMissing if key is not None and _is_missing(exc) else SourceError
        return kind(redact(f"{where}: {self._reason(exc)}", self._secrets))

    def _reason(self, exc: BaseException) -> str:
        from botocore import exceptions as boto

        endpoint = self._endpoint()
        if isinstance(exc, boto.ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            if code == "NoSuchBucket":
                return f"the bucket {self.bucket} does not exist at {endpoint}"
            if code in ("NoSuchKey", "404") or status == 404:
                return "no such object (deleted since it was listed?)"
            if code in _BAD_CREDENTIALS:
                return f"the credentials were rejected ({code}); check AWS_PROFILE / AWS_ACCESS_KEY_ID"
            if code == "AccessDenied" or status == 403:
                return (
                    "access denied: the credentials may not list or read this bucket (s3:ListBucket, s3:GetObject; "
                    "a shared cache also needs s3:PutObject to be written)"
                )
            if code == "PreconditionFailed" or status == 412:
                return "the object changed while it was being read; it is read again at the next listing"
            if code in _THROTTLING or status == 429 or status >= 500:
                return f"{endpoint} answered {status} {code} {self._tries()}"
            return f"{endpoint} answered {status} {code}: {error.get('Message', '')}".rstrip(": ")
        if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
            return f"no usable AWS credentials: {exc}"
        if isinstance(exc, boto.ConnectTimeoutError | boto.ReadTimeoutError):
            return f"no answer from {endpoint} within {self.options.timeout_s:g} s {self._tries()}"
        if isinstance(exc, boto.EndpointConnectionError | boto.ConnectionClosedError):
            return f"cannot connect to {endpoint} {self._tries()}"
        if isinstance(exc, boto.IncompleteReadError | boto.ResponseStreamingError | ConnectionError):
            return f"the connection to {endpoint} broke while reading {self._tries()}"
        return f"{type(exc).__name__}: {exc}"

    def _tries(self) -> str:
        return f"(gave up after {self.options.attempts} tries)"


def _is_missing(exc: BaseException) -> bool:
    """No such key (a missing bucket is a configuration error, not a missing object)."""
    from botocore import exceptions as boto

    if not isinstance(exc, boto.ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code != "NoSuchBucket" and (code in ("NoSuchKey", "404") or status == 404)


def _is_transient(exc: BaseException) -> bool:
    from botocore import exceptions as boto
    from urllib3 import exceptions as urllib3_errors

    if isinstance(exc, boto.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return status == 429 or status >= 500 or exc.response.get("Error", {}).get("Code") in _THROTTLING
    transient = (
        boto.ConnectionError,  # EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError
        boto.HTTPClientError,  # ReadTimeoutError, ConnectionClosedError, ResponseStreamingError
        boto.IncompleteReadError,
        urllib3_errors.ProtocolError,
        urllib3_errors.ReadTimeoutError,
        ConnectionError,
        TimeoutError,
    )
    return isinstance(exc, transient)
