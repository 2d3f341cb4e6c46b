"""Each object-store source against its real emulator: paginated listing, versions, streaming reads, errors."""

from __future__ import annotations

import gzip
import io

import pytest

from conftest import corpus_file
from profscope.ingest.kineto import parse_trace, parse_trace_file
from profscope.sources import SourceError, StorageOptions, open_source

from .conftest import Bucket, new_bucket
from .fault_proxy import FaultProxy

TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"
FAST = StorageOptions(timeout_s=5, attempts=2)


def _source(bucket: Bucket, prefix: str, page_size: int = 1000):  # type: ignore[no-untyped-def]
    source = open_source(bucket.uri(prefix), options=FAST)
    source.page_size = page_size
    return source


def test_listing_is_paginated_relative_and_skips_hidden_folders(bucket: Bucket) -> None:
    keys = [f"runs/r{i}/w.{i}.pt.trace.json.gz" for i in range(7)]
    for i, key in enumerate(keys):
        bucket.put(key, b"x" * (i + 1))
    bucket.put("runs/.profscope-cache/abc/summary.json", b"{}")  # a shared cache in the bucket is not listed
    bucket.put("other/w.1.pt.trace.json", b"{}")  # outside the prefix
    listed = _source(bucket, "runs", page_size=3).list()  # three pages and a bit
    assert [o.key for o in listed] == sorted(k.removeprefix("runs/") for k in keys)
    assert [o.size for o in listed] == [i + 1 for i in range(7)]
    assert all(o.version for o in listed)
    assert [o.key for o in _source(bucket, "").list()] == sorted([*keys, "other/w.1.pt.trace.json"])


def test_version_changes_when_an_object_is_overwritten(bucket: Bucket) -> None:
    bucket.put("p/a.json", b'{"traceEvents": []}')
    source = _source(bucket, "p")
    before = source.list()[0]
    assert source.stat("a.json") == before
    bucket.put("p/a.json", b'{"traceEvents": [ ]}')
    after = source.list()[0]
    assert after.version != before.version
    assert source.stat("a.json") == after


def test_open_streams_a_gzip_trace_into_the_parser(bucket: Bucket) -> None:
    local = corpus_file(TINYGPT)
    bucket.put("p/tiny/worker0.1.pt.trace.json.gz", local.read_bytes())
    source = _source(bucket, "p")
    with source.open("tiny/worker0.1.pt.trace.json.gz") as stream:
        assert not stream.seekable()  # the parser never seeks: it reads front to back
        tables = parse_trace(stream)
    expected = parse_trace_file(local)
    for table in ("events", "ops", "python", "memory"):
        assert tables.row_count(table) == expected.row_count(table) > 0
    with source.open("tiny/worker0.1.pt.trace.json.gz") as stream:
        assert gzip.decompress(stream.read()) == gzip.decompress(local.read_bytes())


def test_missing_bucket_and_object_are_clear_source_errors(bucket: Bucket) -> None:
    bucket.put("p/a.json", b"{}")
    with pytest.raises(SourceError, match="no such"):
        _source(bucket, "p").open("gone.json").read()
    missing = open_source(f"{bucket.uri().split('://')[0]}://no-such-bucket-{bucket.name}/p", options=FAST)
    with pytest.raises(SourceError) as error:
        missing.list()
    assert "does not exist" in str(error.value) and f"no-such-bucket-{bucket.name}" in str(error.value)


def test_a_dropped_connection_mid_object_resumes_where_it_stopped(storage_env: dict[str, str]) -> None:
    """The proxy promises the whole body, sends 100 kB and hangs up: the stream asks for the rest."""
    bucket = new_bucket("s3")
    data = corpus_file(TINYGPT).read_bytes()
    bucket.put("p/t.pt.trace.json.gz", data)
    proxy = FaultProxy(storage_env["S3"])
    try:
        proxy.cut_after_bytes, proxy.cuts_left = 100_000, 2
        source = open_source(bucket.uri("p"), options=StorageOptions(s3_endpoint_url=proxy.url, attempts=3))
        with source.open("t.pt.trace.json.gz") as stream:
            received = io.BytesIO()
            while chunk := stream.read(64 << 10):
                received.write(chunk)
        assert proxy.cut == 2
        assert received.getvalue() == data
    finally:
        proxy.close()


def test_uris_never_hold_credentials() -> None:
    sas = "sv=2024-08-04&se=2031-01-01&sr=c&sp=rl&sig=c2VjcmV0LXNpZ25hdHVyZQ%3D%3D"
    source = open_source(f"https://acct.blob.core.windows.net/traces/runs?{sas}")
    assert source.uri == "https://acct.blob.core.windows.net/traces/runs"
    assert "sig" not in repr(source)
    with pytest.raises(SourceError) as error:
        open_source(f"ftp://host/x?{sas}")
    assert "c2VjcmV0" not in str(error.value)
