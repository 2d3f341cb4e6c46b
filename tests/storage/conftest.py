"""Fixtures: the three emulators (one each per session, on free ports) and a fresh bucket per test.

The environment is what a user would set: ``AWS_ENDPOINT_URL`` and keys for S3,
``STORAGE_EMULATOR_HOST`` for GCS, ``AZURE_STORAGE_CONNECTION_STRING`` for Azure. ``profscope
serve`` subprocesses inherit it. Loopback never goes through a proxy.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import emulators

# A distinctive secret, so a test can prove it never shows up anywhere (moto accepts any key).
AWS_SECRET = f"profscope-test-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="session")
def storage_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    logs = tmp_path_factory.mktemp("emulator-logs")
    started = [emulators.moto(logs / "moto.log"), emulators.fake_gcs(logs / "gcs.log"),
               emulators.azurite(logs / "azurite.log")]  # fmt: skip
    patch = pytest.MonkeyPatch()
    try:
        for emulator in started:
            emulator.start()
        s3, gcs, azure = started
        for var in ("NO_PROXY", "no_proxy"):
            patch.setenv(var, ",".join(x for x in (os.environ.get(var, ""), "127.0.0.1,localhost") if x))
        env = {
            "AWS_ENDPOINT_URL": s3.url,
            "AWS_ACCESS_KEY_ID": "AKIAPROFSCOPETEST",
            "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
            "STORAGE_EMULATOR_HOST": gcs.url,
            "AZURE_STORAGE_CONNECTION_STRING": emulators.azurite_connection_string(azure.url),
        }
        for name, value in env.items():
            patch.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY",
                     "PROFSCOPE_S3_ENDPOINT_URL", "PROFSCOPE_AZURE_ACCOUNT_URL"):  # fmt: skip
            patch.delenv(name, raising=False)
        yield {**env, "S3": s3.url, "GCS": gcs.url, "AZURE": azure.url}
    finally:
        patch.undo()
        for emulator in started:
            emulator.stop()


@dataclass
class Bucket:
    """A fresh bucket or container in one emulator, with the plain SDK calls a test needs."""

    kind: str  # s3 | gs | az
    name: str
    put: Callable[[str, bytes], None]
    delete: Callable[[str], None]
    get: Callable[[str], bytes]
    keys: Callable[[str], list[str]]  # every key under a prefix
    uploaded: list[str] = field(default_factory=list)

    def uri(self, prefix: str = "") -> str:
        scheme = {"s3": "s3", "gs": "gs", "az": "az"}[self.kind]
        return f"{scheme}://{self.name}/{prefix}".rstrip("/")

    def upload_tree(self, folder: Path, prefix: str) -> None:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())


def new_bucket(kind: str) -> Bucket:
    name = f"t-{uuid.uuid4().hex[:16]}"
    if kind == "s3":
        import boto3

        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=name)
        return Bucket(kind, name, lambda k, d: s3.put_object(Bucket=name, Key=k, Body=d),
                      lambda k: s3.delete_object(Bucket=name, Key=k),
                      lambda k: s3.get_object(Bucket=name, Key=k)["Body"].read(),
                      lambda p: sorted(o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
                          Bucket=name, Prefix=p) for o in page.get("Contents", [])))  # fmt: skip
    if kind == "gs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        client = storage.Client(project="test", credentials=AnonymousCredentials())
        bucket = client.create_bucket(name)
        return Bucket(kind, name, lambda k, d: bucket.blob(k).upload_from_string(d),
                      lambda k: bucket.blob(k).delete(), lambda k: bucket.blob(k).download_as_bytes(raw_download=True),
                      lambda p: sorted(b.name for b in client.list_blobs(name, prefix=p)))  # fmt: skip
    from azure.storage.blob import BlobServiceClient

    container = BlobServiceClient.from_connection_string(os.environ["AZURE_STORAGE_CONNECTION_STRING"])
    container = container.get_container_client(name)
    container.create_container()
    return Bucket(kind, name, lambda k, d: container.upload_blob(k, d, overwrite=True),
                  lambda k: container.delete_blob(k), lambda k: container.download_blob(k).readall(),
                  lambda p: sorted(b.name for b in container.list_blobs(name_starts_with=p)))  # fmt: skip


@pytest.fixture(params=["s3", "gs", "az"])
def bucket(request: pytest.FixtureRequest, storage_env: dict[str, str]) -> Bucket:
    return new_bucket(request.param)


@pytest.fixture
def s3_bucket(storage_env: dict[str, str]) -> Bucket:
    return new_bucket("s3")
