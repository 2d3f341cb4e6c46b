"""Azure Blob Storage: ``az://container/prefix`` and ``https://ACCOUNT.blob.core.windows.net/container/prefix``.

Credentials, first found wins:
1. a SAS token in the ``https://`` URL's query string;
2. ``AZURE_STORAGE_CONNECTION_STRING`` (for ``https://`` URLs only when it names the same account);
3. ``AZURE_STORAGE_KEY`` (account key) or ``AZURE_STORAGE_SAS_TOKEN``, with the account from the URL
   or ``AZURE_STORAGE_ACCOUNT``;
4. ``DefaultAzureCredential`` (azure-identity: managed identity, workload identity, ``az login``...);
5. anonymous (public containers).
``az://`` names no account: it comes from the connection string or ``AZURE_STORAGE_ACCOUNT``.
``--azure-account-url`` / ``PROFSCOPE_AZURE_ACCOUNT_URL`` replaces the account's endpoint (Azurite,
sovereign clouds). The object version is its ETag.
"""

from __future__ import annotations

import logging
import os
from typing import IO, Any
from urllib.parse import urlsplit

from profscope.sources.base import ObjectInfo, ObjectMissing, SourceError, StorageOptions, is_hidden, redact
from profscope.sources.stream import ObjectStream

log = logging.getLogger("profscope.sources.azure")

READ_CHUNK_BYTES = 4 << 20  # the downloader's first GET and every later chunk


def _connection_string_fields(text: str) -> dict[str, str]:
    fields = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            fields[name.strip().lower()] = value.strip()
    return fields


class AzureSource:
    def __init__(self, uri: str, options: StorageOptions | None = None, page_size: int = 1000) -> None:
        self.options = options or StorageOptions()
        self.page_size = page_size
        self._sas: str | None = None
        if uri.startswith("az://"):
            self.account: str | None = None
            container, _, prefix = uri[len("az://") :].partition("/")
            base = "az://"
        else:
            parts = urlsplit(uri)
            host = parts.hostname or ""
            if ".blob." not in host:
                raise SourceError(
                    f"{parts.scheme}://{host}: not an Azure Blob URL (https://ACCOUNT.blob.core.windows.net/...)"
                )
            self.account = host.split(".", 1)[0]
            self._account_url = f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"
            self._sas = parts.query or None
            container, _, prefix = parts.path.lstrip("/").partition("/")
            base = f"{self._account_url}/"
        if not container:
            raise SourceError(f"{redact(uri)}: no container name (expected az://CONTAINER/PREFIX)")
        self.container = container
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.uri = f"{base}{container}/{self.prefix}".rstrip("/")  # never the SAS
        self._client: Any = None
        self._secrets: tuple[str, ...] = tuple(s for s in (self._sas,) if s)
        self.credential_kind = ""

    def __repr__(self) -> str:
        return f"AzureSource({self.uri!r})"

    def __getstate__(self) -> dict[str, Any]:  # worker processes build their own client
        return {**self.__dict__, "_client": None}

    # ---- client --------------------------------------------------------------------------------
    def _client_options(self) -> dict[str, Any]:
        from azure.storage.blob import ExponentialRetry

        retries = max(0, self.options.attempts - 1)
        return {
            "retry_policy": ExponentialRetry(
                initial_backoff=0.5,
                increment_base=2,
                retry_total=retries,
                random_jitter_range=0.5,
                retry_connect=retries,
                retry_read=retries,
                retry_status=retries,
            ),
            "connection_timeout": self.options.timeout_s,
            "read_timeout": self.options.timeout_s,
            "max_single_get_size": READ_CHUNK_BYTES,
            "max_chunk_get_size": READ_CHUNK_BYTES,
        }

    def _container_client(self) -> Any:
        if self._client is None:
            try:
                self._client = self._build_client()
            except SourceError:
                raise
            except Exception as exc:
                raise SourceError(redact(f"{self.uri}: cannot set up the Azure client: {exc}", self._secrets)) from None
            log.info("%s: reading with %s", self.uri, self.credential_kind)
        return self._client

    def _build_client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        options = self._client_options()
        connection_string = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
        fields = _connection_string_fields(connection_string)
        self._secrets += tuple(s for s in (connection_string, fields.get("accountkey"),
                                           fields.get("sharedaccesssignature")) if s)  # fmt: skip
        if self._sas:
            self.credential_kind = "the SAS token in the URL"
            return self._service(BlobServiceClient, self._sas, options)
        if connection_string and (self.account is None or fields.get("accountname") == self.account):
            if self.account is None and not self.options.azure_account_url:
                self.account = fields.get("accountname")
                self.credential_kind = "AZURE_STORAGE_CONNECTION_STRING"
                service = BlobServiceClient.from_connection_string(connection_string, **options)
                return service.get_container_client(self.container)
            self.credential_kind = "the key or SAS of AZURE_STORAGE_CONNECTION_STRING"
            credential = (
                {"account_name": fields["accountname"], "account_key": fields["accountkey"]}
                if "accountkey" in fields
                else fields.get("sharedaccesssignature")
            )
            return self._service(BlobServiceClient, credential, options, fields)
        self.account = (
            self.account or os.environ.get("AZURE_STORAGE_ACCOUNT") or os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        )
        if not self.account:
            raise SourceError(
                f"{self.uri}: which storage account? Set AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT, "
                "or use https://ACCOUNT.blob.core.windows.net/CONTAINER/PREFIX"
            )
        key = os.environ.get("AZURE_STORAGE_KEY")
        sas = os.environ.get("AZURE_STORAGE_SAS_TOKEN")
        self._secrets += tuple(s for s in (key, sas) if s)
        if key:
            self.credential_kind = "AZURE_STORAGE_KEY"
            return self._service(BlobServiceClient, {"account_name": self.account, "account_key": key}, options)
        if sas:
            self.credential_kind = "AZURE_STORAGE_SAS_TOKEN"
            return self._service(BlobServiceClient, sas.lstrip("?"), options)
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            self.credential_kind = "no credential (anonymous: public containers only)"
            return self._service(BlobServiceClient, None, options)
        self.credential_kind = "DefaultAzureCredential"
        return self._service(BlobServiceClient, DefaultAzureCredential(), options)

    def _service(self, service_class: Any, credential: Any, options: dict[str, Any], fields: dict | None = None) -> Any:
        account_url = self.options.azure_account_url or (fields or {}).get("blobendpoint")
        if not account_url:
            account_url = getattr(self, "_account_url", None) or f"https://{self.account}.blob.core.windows.net"
        service = service_class(account_url=account_url.rstrip("/"), credential=credential, **options)
        return service.get_container_client(self.container)

    def _endpoint(self) -> str:
        if self._client is not None:
            return str(self._client.primary_endpoint).split("?", 1)[0].rsplit("/", 1)[0]
        return "Azure Blob Storage"

    # ---- Source --------------------------------------------------------------------------------
    def list(self) -> list[ObjectInfo]:
        container = self._container_client()
        found: list[ObjectInfo] = []
        try:
            pages = container.list_blobs(name_starts_with=self.prefix or None, results_per_page=self.page_size)
            for page in pages.by_page():
                for blob in page:
                    key = blob.name[len(self.prefix) :]
                    if key and not key.endswith("/") and not is_hidden(key):
                        found.append(ObjectInfo(key=key, size=int(blob.size or 0), version=str(blob.etag).strip('"')))
        except Exception as exc:
            raise self._error(exc) from None
        return sorted(found, key=lambda o: o.key)

    def stat(self, key: str) -> ObjectInfo:
        try:
            props = self._container_client().get_blob_client(self.prefix + key).get_blob_properties()
        except SourceError:
            raise
        except Exception as exc:
            raise self._error(exc, key) from None
        return ObjectInfo(key=key, size=int(props.size), version=str(props.etag).strip('"'))

    def open(self, key: str) -> IO[bytes]:
        from azure.core import MatchConditions

        container = self._container_client()
        etag: list[str] = []

        def open_at(offset: int) -> Any:
            extra = {}
            if offset:  # the rest of the same version of the blob
                extra = {"offset": offset, "etag": etag[0], "match_condition": MatchConditions.IfNotModified}
            downloader = container.download_blob(self.prefix + key, max_concurrency=1, **extra)
            etag[:] = [downloader.properties.etag]
            return downloader

        return ObjectStream(open_at, lambda exc: self._error(exc, key), _is_transient, self.options.attempts)  # type: ignore[return-value]

    # ---- Store (the shared cache) ----------------------------------------------------------------
    def put(self, key: str, data: IO[bytes], size: int) -> None:
        try:
            self._container_client().upload_blob(self.prefix + key, data, length=size, overwrite=True,
                                                  max_concurrency=2)  # fmt: skip
        except SourceError:
            raise
        except Exception as exc:
            raise self._error(exc, key) from None

    # ---- errors --------------------------------------------------------------------------------
    def _error(self, exc: BaseException, key: str | None = None) -> SourceError:
        where = f"{self.uri}/{key}" if key is not None else self.uri
        kind = ObjectMissing if key is not None and _is_missing(exc) else SourceError
        return kind(redact(f"{where}: {self._reason(exc, key)}", self._secrets))

    def _reason(self, exc: BaseException, key: str | None) -> str:
        from azure.core import exceptions as azure

        endpoint = self._endpoint()
        status = int(getattr(exc, "status_code", 0) or 0)
        code = getattr(exc, "error_code", None) or ""
        code = str(getattr(code, "value", code))  # a StorageErrorCode enum or a plain string
        if isinstance(exc, azure.ResourceNotFoundError) or status == 404:
            if code == "ContainerNotFound" or key is None:
                return f"the container {self.container} does not exist at {endpoint}"
            return "no such blob (deleted since it was listed?)"
        if isinstance(exc, azure.ResourceModifiedError) or status == 412:
            return "the blob changed while it was being read; it is read again at the next listing"
        if isinstance(exc, azure.ClientAuthenticationError) or status in (401, 403):
            return f"access denied with {self.credential_kind} ({code or status or type(exc).__name__})"
        if isinstance(exc, azure.HttpResponseError) and status:
            return f"{endpoint} answered {status} {code or ''} (gave up after {self.options.attempts} tries)"
        if isinstance(exc, azure.ServiceRequestError):
            return f"cannot connect to {endpoint} (gave up after {self.options.attempts} tries)"
        if isinstance(exc, azure.ServiceResponseError):
            return f"no complete answer from {endpoint} within {self.options.timeout_s:g} s (gave up after retrying)"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _is_missing(exc: BaseException) -> bool:
    """No such blob (a missing container is a configuration error, not a missing object)."""
    from azure.core import exceptions as azure

    code = getattr(exc, "error_code", None) or ""
    code = str(getattr(code, "value", code))
    status = int(getattr(exc, "status_code", 0) or 0)
    return code != "ContainerNotFound" and (isinstance(exc, azure.ResourceNotFoundError) or status == 404)


def _is_transient(exc: BaseException) -> bool:
    from azure.core import exceptions as azure

    if isinstance(exc, azure.ResourceModifiedError):
        return False
    if isinstance(exc, azure.HttpResponseError) and getattr(exc, "status_code", None):
        return int(exc.status_code) == 429 or int(exc.status_code) >= 500
    transient = (azure.ServiceRequestError, azure.ServiceResponseError, azure.IncompleteReadError, ConnectionError)
    return isinstance(exc, transient)
