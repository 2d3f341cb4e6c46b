"""Storage faults while serving: the store stopped, answering 500, answering too slowly, failing object reads.

The server stays up, keeps serving parsed runs, shows the root's problem in /api/runs and on the
runs page, and recovers by itself when the store is back. Faults are real: a stopped emulator
process, or a real HTTP proxy in front of the emulator that answers 500 or waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from conftest import corpus_file
from serving import alive, running_server, wait_for

from . import emulators
from .conftest import new_bucket
from .fault_proxy import FaultProxy
from .snapshots import TRACES

FAST = ("--rescan-seconds", "0.5", "--storage-attempts", "2", "--storage-timeout", "1")
TINY = sorted(corpus_file(TRACES["tinygpt"]).iterdir())


def _root(base: str) -> dict:
    (root,) = httpx.get(f"{base}/api/runs", timeout=10).json()["roots"]
    return root


def _overview(base: str) -> httpx.Response:
    return httpx.get(f"{base}/api/overview", params={"run": "tinygpt"}, timeout=10)


def _parsed(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs", timeout=10).json()["runs"]
    return bool(runs) and all(r["state"] == "ready" for r in runs)


def _upload_tiny(client, bucket: str) -> None:  # type: ignore[no-untyped-def]
    for path in TINY:
        client.put_object(Bucket=bucket, Key=f"runs/tinygpt/{path.name}", Body=path.read_bytes())


@pytest.fixture
def proxied_s3(storage_env: dict[str, str]) -> Iterator[tuple[FaultProxy, str]]:
    bucket = new_bucket("s3")
    for path in TINY:
        bucket.put(f"runs/tinygpt/{path.name}", path.read_bytes())
    proxy = FaultProxy(storage_env["S3"])
    yield proxy, bucket.uri("runs")
    proxy.close()


def test_store_stopped_keeps_parsed_runs_and_recovers_when_it_returns(
    storage_env: dict[str, str], tmp_path: Path
) -> None:
    store = emulators.moto(tmp_path / "moto.log").start()
    try:
        client = boto3.client("s3", endpoint_url=store.url)
        client.create_bucket(Bucket="stopping")
        _upload_tiny(client, "stopping")
        flags = ("--s3-endpoint-url", store.url, *FAST)
        with running_server(["s3://stopping/runs"], tmp_path / "cache", *flags) as base:  # type: ignore[list-item]
            wait_for(lambda: _parsed(base), timeout=90)
            before = _overview(base).json()

            store.kill()  # gone at once: a graceful stop may still answer a listing, empty (Emulator.kill)
            root = wait_for(lambda: (r := _root(base))["error"] and r, timeout=60)
            assert root["error"].startswith("s3://stopping/runs: cannot connect to ")
            assert store.url in root["error"] and "gave up after 2 tries" in root["error"]
            assert root["stale"] is True and root["objects"] == len(TINY)
            assert _parsed(base), "runs listed before the store stopped are still shown"
            assert _overview(base).json() == before
            assert alive(base.process.pid)  # the runs page in this state: tests/browser/test_storage_status.py

            store.start()  # same port; moto starts empty: the same objects are put back
            client.create_bucket(Bucket="stopping")
            _upload_tiny(client, "stopping")
            # a listing may catch the restarted store before every object is back: wait for all of them
            wait_for(lambda: (r := _root(base))["error"] is None and r["objects"] == len(TINY), timeout=60)
            assert _root(base)["stale"] is False
            # moto came back empty, so one listing may have seen the objects gone and dropped their cache
            # entries (cache_bounds.py): they are parsed again, to the same numbers
            wait_for(lambda: _parsed(base) and _overview(base).status_code == 200, timeout=90)
            assert _overview(base).json() == before
    finally:
        store.stop()


def test_store_answering_500_shows_the_status_and_recovers(proxied_s3: tuple[FaultProxy, str], tmp_path: Path) -> None:
    proxy, uri = proxied_s3
    flags = ("--s3-endpoint-url", proxy.url, *FAST)
    with running_server([uri], tmp_path / "cache", *flags) as base:  # type: ignore[list-item]
        wait_for(lambda: _parsed(base), timeout=90)
        before = _overview(base).json()
        proxy.mode = "fail"
        root = wait_for(lambda: (r := _root(base))["error"] and r, timeout=60)
        assert root["error"] == f"{uri}: {proxy.url} answered 500 InternalError (gave up after 2 tries)"
        assert proxy.failed >= 2  # retried before giving up
        assert _overview(base).json() == before
        proxy.mode = "pass"
        wait_for(lambda: _root(base)["error"] is None, timeout=60)
        assert _parsed(base)


def test_store_answering_too_slowly_times_out_and_recovers(proxied_s3: tuple[FaultProxy, str], tmp_path: Path) -> None:
    proxy, uri = proxied_s3
    flags = ("--s3-endpoint-url", proxy.url, *FAST)
    with running_server([uri], tmp_path / "cache", *flags) as base:  # type: ignore[list-item]
        wait_for(lambda: _parsed(base), timeout=90)
        proxy.mode, proxy.delay_s = "delay", 3.0  # the server waits 1 s per read
        root = wait_for(lambda: (r := _root(base))["error"] and r, timeout=60)
        assert root["error"] == f"{uri}: no answer from {proxy.url} within 1 s (gave up after 2 tries)"
        assert _overview(base).status_code == 200
        proxy.mode = "pass"
        wait_for(lambda: _root(base)["error"] is None, timeout=60)


def test_object_reads_failing_mark_the_file_and_are_retried(proxied_s3: tuple[FaultProxy, str], tmp_path: Path) -> None:
    """Listing works but reading the objects answers 500: the files say why, and are read again later."""
    proxy, uri = proxied_s3
    proxy.mode, proxy.only_paths = "fail", "/runs/tinygpt/"
    # failed reads are retried after 6 rescans: 2 s rescans leave both files failed together for seconds,
    # long enough to see (with 0.5 s the first file's retry could start before the second had failed)
    flags = ("--s3-endpoint-url", proxy.url, *FAST, "--rescan-seconds", "2")
    with running_server([uri], tmp_path / "cache", *flags) as base:  # type: ignore[list-item]
        run = wait_for(lambda: (r := httpx.get(f"{base}/api/runs").json()["runs"])[0]["state"] == "error" and r[0])
        assert {e["file"] for e in run["errors"]} == {f"tinygpt/{p.name}" for p in TINY}
        reason = f"{proxy.url} answered 500 InternalError (gave up after 2 tries)"
        assert [e["message"] for e in run["errors"]] == [f"{uri}/{e['file']}: {reason}" for e in run["errors"]]
        assert _overview(base).status_code == 422
        assert _root(base)["error"] is None
        proxy.mode = "pass"
        wait_for(lambda: _parsed(base), timeout=90)
        assert _overview(base).status_code == 200
