"""The cache in object storage (``--cache-dir s3://...``, gs://, az://) against real emulators.

``profscope index`` shards (separate processes, as the pods of an Indexed Job) fill a bucket cache;
stateless ``profscope serve`` replicas with empty local disks then serve every page without parsing
(their /metrics say so) and answer exactly as a server of the same files on local disk; a changed
object is parsed again under its new key and published by a writing replica; a partial or corrupt
entry is ignored and parsed again, never served. The SharedCache API is checked directly too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from conftest import corpus_file
from profscope.cache import TraceCache
from profscope.catalog import TraceFile
from profscope.indexer import shard_of
from profscope.ingest.jobs import IngestRequest, run_ingest
from profscope.metrics import SharedCacheMetrics
from profscope.shared_cache import LAYOUT, SharedCache
from profscope.sources import LocalSource, ObjectInfo, SourceError, StorageOptions
from profscope.views.registry import queries
from serving import running_server, wait_for

from .conftest import Bucket
from .snapshots import TRACES, corpus_tree, runs_when_parsed, snapshot

STORAGE = ("--storage-attempts", "2", "--storage-timeout", "5")
FAST_RESCAN = ("--rescan-seconds", "0.5", *STORAGE)
IDENT = ("run", "worker", "span", "file")
BROKEN = "runs/broken/worker0.1.pt.trace.json"
BROKEN_REASON = "the trace ends before"


@pytest.fixture(scope="module")
def local_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus_tree(tmp_path_factory.mktemp("local") / "runs")


@pytest.fixture(scope="module")
def local_snapshot(local_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    with running_server([local_tree], tmp_path_factory.mktemp("local-cache") / "c") as base:
        return snapshot(base, runs_when_parsed(base, len(TRACES)))


# ---- helpers ------------------------------------------------------------------------------------------
def _metrics(base: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{base}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def _lookups(base: str) -> dict[str, float]:
    metrics = _metrics(base)
    return {result: metrics[("profscope_shared_cache_lookups_total", (("result", result),))]
            for result in SharedCacheMetrics.LOOKUP_RESULTS}  # fmt: skip


def _count(base: str, name: str, **labels: str) -> float:
    return _metrics(base)[(name, tuple(sorted(labels.items())))]


def _index(root: str, cache: str, scratch: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "profscope.cli", "index", root, "--cache-dir", cache,
               "--local-cache-dir", str(scratch), *STORAGE, *args]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finished(process: subprocess.Popen) -> tuple[int, dict, str]:
    out, err = process.communicate(timeout=300)
    return process.returncode, json.loads(out.strip().splitlines()[-1]), err


@contextmanager
def _replica(tmp_path: Path, name: str, root: str, cache: str, *extra: str) -> Iterator[str]:
    """A ``profscope serve`` replica with an empty local disk of its own and the bucket cache."""
    local = tmp_path / name / "local"
    assert not local.exists()
    with running_server([root], local, "--cache-dir", cache, "--local-cache-dir", str(local), *FAST_RESCAN, *extra,
                        workers=1) as base:  # type: ignore[list-item]  # fmt: skip
        yield base


def _good_runs(base: str, count: int) -> dict[str, dict]:
    return {name: run for name, run in runs_when_parsed(base, count).items() if name in TRACES}


def _manifests(bucket: Bucket, prefix: str) -> dict[str, tuple[str, dict]]:
    """source key -> (entry prefix, manifest) of every entry in the bucket cache."""
    found = {}
    for key in bucket.keys(f"{prefix}/{LAYOUT}/"):
        if key.endswith("/manifest.json"):
            manifest = orjson.loads(bucket.get(key))
            found[manifest["source"]["key"]] = (key.removesuffix("manifest.json"), manifest)
    return found


def _overview(base: str, run: str, span: str) -> dict:
    body = httpx.get(f"{base}/api/overview", params={"run": run, "worker": "worker0", "span": span}).json()
    return {k: v for k, v in body.items() if k not in IDENT}


def _span_of(path: Path) -> str:
    return re.search(r"\.(\d+)\.pt\.trace", path.name).group(1)


# ---- index shards, then replicas that parse nothing ----------------------------------------------------
def test_index_shards_fill_a_bucket_cache_that_replicas_serve_without_parsing(
    bucket: Bucket, local_tree: Path, local_snapshot: dict, tmp_path: Path
) -> None:
    bucket.upload_tree(local_tree, "runs")
    bucket.put(BROKEN, b'{"traceEvents": [')
    root, cache = bucket.uri("runs"), bucket.uri("cache")
    keys = sorted(k.removeprefix("runs/") for k in bucket.keys("runs/"))
    assert len(keys) == 5

    # two shards at once: one from the flag, one from a Kubernetes Indexed Job's environment
    job_env = {**os.environ, "JOB_COMPLETION_INDEX": "1", "PROFSCOPE_SHARD_COUNT": "2"}
    shards = [_index(root, cache, tmp_path / "scratch0", "--shard", "0/2"),
              _index(root, cache, tmp_path / "scratch1", env=job_env)]  # fmt: skip
    for shard, (code, report, err) in enumerate(_finished(p) for p in shards):
        mine = [k for k in keys if shard_of(k, 2) == shard]
        has_broken = "broken/worker0.1.pt.trace.json" in mine
        assert report["shard"] == f"{shard}/2" and report["cache"] == cache and report["in_shard"] == len(mine)
        assert report["parsed"] == len(mine) - has_broken and report["failed"] == has_broken
        assert code == int(has_broken) and (BROKEN_REASON in err) == has_broken
        assert list((tmp_path / f"scratch{shard}").iterdir()) == []  # parsed entries are not kept locally

    manifests = _manifests(bucket, "cache")
    assert sorted(manifests) == keys
    for key, (prefix, manifest) in manifests.items():
        entry = sorted(k.removeprefix(prefix) for k in bucket.keys(prefix))
        if key.startswith("broken/"):
            assert manifest["state"] == "error" and BROKEN_REASON in manifest["error"]["message"]
            assert entry == ["manifest.json"]
        else:
            bundle = bucket.get(prefix + manifest["bundle"])
            assert manifest["state"] == "ready" and manifest["source"]["root"] == root
            assert len(bundle) == manifest["bytes"] and hashlib.sha256(bundle).hexdigest() == manifest["sha256"]
            assert entry == sorted([manifest["bundle"], "manifest.json"])

    again = _index(root, cache, tmp_path / "scratch2", "--shard", "0/1")
    code, report, _ = _finished(again)
    assert code == 1 and report["already_cached"] == 4 and report["parsed"] == 0 and report["failed"] == 1

    tiny, resnet = (sorted(corpus_file(folder).iterdir())[0] for folder in TRACES.values())
    resnet_overview = local_snapshot["resnet"]["payloads"][("worker0", _span_of(resnet), "/api/overview")]
    resnet_overview = {k: v for k, v in resnet_overview.items() if k not in IDENT}
    with _replica(tmp_path, "writer", root, cache, "--shared-cache-write") as writer:
        with _replica(tmp_path, "reader", root, cache) as reader:
            for base in (writer, reader):
                assert snapshot(base, _good_runs(base, 3)) == local_snapshot
                broken = runs_when_parsed(base, 3)["broken"]
                assert broken["state"] == "error" and BROKEN_REASON in broken["errors"][0]["message"]
                assert _lookups(base) == {"hit": 4, "failure": 1, "miss": 0, "invalid": 0, "error": 0}
                assert _count(base, "profscope_ingests_started_total") == 0  # nothing parsed
                assert _count(base, "profscope_shared_cache_uploads_total", result="bundle") == 0
                assert _count(base, "profscope_shared_cache_fetched_bytes_total") == sum(
                    m["bytes"] for _, m in manifests.values() if m["state"] == "ready"
                )

        # a changed object has a new cache key: the writer parses it and publishes it
        bucket.put(f"runs/tinygpt/{tiny.name}", resnet.read_bytes())
        wait_for(lambda: _overview(writer, "tinygpt", _span_of(tiny)) == resnet_overview, timeout=120, interval=0.3)
        wait_for(lambda: _count(writer, "profscope_ingests_finished_total") == 1, timeout=60)  # views come first
        assert _lookups(writer) == {"hit": 4, "failure": 1, "miss": 1, "invalid": 0, "error": 0}
        wait_for(lambda: _count(writer, "profscope_shared_cache_uploads_total", result="bundle") == 1, timeout=60)

    with _replica(tmp_path, "fresh", root, cache) as fresh:  # a new replica gets the new version from the bucket
        runs_when_parsed(fresh, 3)
        assert _overview(fresh, "tinygpt", _span_of(tiny)) == resnet_overview
        assert _lookups(fresh) == {"hit": 4, "failure": 1, "miss": 0, "invalid": 0, "error": 0}
        assert _count(fresh, "profscope_ingests_started_total") == 0


# ---- partial and corrupt entries ----------------------------------------------------------------------
def test_a_partial_or_corrupt_entry_is_parsed_again_and_never_served(
    bucket: Bucket, local_tree: Path, local_snapshot: dict, tmp_path: Path
) -> None:
    bucket.upload_tree(local_tree, "runs")
    root, cache = bucket.uri("runs"), bucket.uri("cache")
    code, report, err = _finished(_index(root, cache, tmp_path / "scratch"))
    assert code == 0 and report["parsed"] == 4, err
    manifests = _manifests(bucket, "cache")
    tiny = sorted(k for k in manifests if k.startswith("tinygpt/"))
    resnet = sorted(k for k in manifests if k.startswith("resnet/"))

    prefix, manifest = manifests[resnet[0]]  # the bundle cut short (a writer that died mid-upload, then a retry)
    bundle = bucket.get(prefix + manifest["bundle"])
    bucket.put(prefix + manifest["bundle"], bundle[: len(bundle) // 2])
    prefix, _ = manifests[resnet[1]]  # no manifest: the writer died before writing it
    bucket.delete(prefix + "manifest.json")
    prefix, _ = manifests[tiny[0]]  # the manifest itself cut short
    bucket.put(prefix + "manifest.json", bucket.get(prefix + "manifest.json")[:-20])

    with _replica(tmp_path, "repairer", root, cache, "--shared-cache-write") as repairer:
        assert snapshot(repairer, _good_runs(repairer, 2)) == local_snapshot
        assert _lookups(repairer) == {"hit": 1, "failure": 0, "miss": 1, "invalid": 2, "error": 0}
        assert _count(repairer, "profscope_ingests_finished_total") == 3
        wait_for(lambda: _count(repairer, "profscope_shared_cache_uploads_total", result="bundle") == 3, timeout=60)
        log = next((tmp_path / "repairer").glob("server-*.log")).read_text()
        assert "its SHA-256" in log or "not a whole tar archive" in log, log
        assert "its manifest is not JSON" in log, log

    code, report, _ = _finished(_index(root, cache, tmp_path / "scratch"))  # the Job agrees: all complete
    assert code == 0 and report["already_cached"] == 4

    with _replica(tmp_path, "fresh", root, cache) as fresh:
        assert snapshot(fresh, _good_runs(fresh, 2)) == local_snapshot
        assert _lookups(fresh) == {"hit": 4, "failure": 0, "miss": 0, "invalid": 0, "error": 0}
        assert _count(fresh, "profscope_ingests_started_total") == 0


def test_the_index_job_replaces_a_bundle_that_is_missing_or_short(
    s3_bucket: Bucket, local_tree: Path, tmp_path: Path
) -> None:
    s3_bucket.upload_tree(local_tree / "tinygpt", "runs/tinygpt")
    root, cache = s3_bucket.uri("runs"), s3_bucket.uri("cache")
    assert _finished(_index(root, cache, tmp_path / "scratch"))[1]["parsed"] == 2
    (first_prefix, first), (second_prefix, second) = _manifests(s3_bucket, "cache").values()
    s3_bucket.delete(first_prefix + first["bundle"])
    s3_bucket.put(second_prefix + second["bundle"], s3_bucket.get(second_prefix + second["bundle"])[:-1])
    code, report, _ = _finished(_index(root, cache, tmp_path / "scratch"))
    assert code == 0 and report["parsed"] == 2 and report["already_cached"] == 0
    for prefix, manifest in _manifests(s3_bucket, "cache").values():
        assert len(s3_bucket.get(prefix + manifest["bundle"])) == manifest["bytes"]


def test_index_stops_at_the_first_error_of_the_cache_store(s3_bucket: Bucket, local_tree: Path, tmp_path: Path) -> None:
    s3_bucket.upload_tree(local_tree, "runs")
    code, report, err = _finished(_index(s3_bucket.uri("runs"), "s3://no-such-cache-bucket/c", tmp_path / "s"))
    assert code == 1 and report["failed"] == 1 and report["parsed"] == 0
    assert "cannot use the cache: s3://no-such-cache-bucket/c/" in err and "does not exist" in err


def test_a_cache_inside_a_served_root_is_refused_unless_hidden(s3_bucket: Bucket, tmp_path: Path) -> None:
    root = s3_bucket.uri("runs")
    command = [sys.executable, "-m", "profscope.cli", "index", root, "--cache-dir", f"{root}/cache"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and f"is inside the root {root}" in refused.stderr
    hidden = subprocess.run([*command[:-1], f"{root}/.profscope-cache", *STORAGE], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert hidden.returncode == 0, hidden.stderr


# ---- the SharedCache API on every store ---------------------------------------------------------------
@pytest.fixture(scope="module")
def entries(tmp_path_factory: pytest.TempPathFactory) -> tuple[TraceCache, TraceFile, TraceFile]:
    """A local cache holding a parsed real trace and a failed one, with the TraceFiles naming them."""
    folder = tmp_path_factory.mktemp("entries")
    (folder / "bad.pt.trace.json").write_text('{"traceEvents": [')
    good = sorted(corpus_file(TRACES["tinygpt"]).iterdir())[0]
    cache = TraceCache(folder / "cache")
    files = []
    for path in (good, folder / "bad.pt.trace.json"):
        info = ObjectInfo(key=path.name, size=path.stat().st_size, version="1")
        trace = TraceFile(source=str(path.parent), info=info, run="run", worker="worker0", span="1")
        request = IngestRequest.for_file(trace, LocalSource(path.parent), cache.root, queries(), 1 << 30)
        run_ingest(request)
        files.append(trace)
    assert cache.is_ready(files[0].cache_key) and cache.error(files[1].cache_key)
    return cache, files[0], files[1]


def _shared(uri: str) -> SharedCache:
    return SharedCache(uri, StorageOptions(attempts=2, timeout_s=5), SharedCacheMetrics(CollectorRegistry()))


def _total(counter: object) -> dict[str, float]:
    """A counter's non-zero totals by label value ("" for an unlabelled counter)."""
    return {next(iter(s.labels.values()), ""): s.value for family in counter.collect()  # type: ignore[attr-defined]
            for s in family.samples if s.name.endswith("_total") and s.value}  # fmt: skip


def _counted(shared: SharedCache) -> dict[str, float]:
    assert shared.metrics is not None
    counts = {f"lookup {r}": v for r, v in _total(shared.metrics.lookups).items()}
    return counts | {f"upload {r}": v for r, v in _total(shared.metrics.uploads).items()}


def test_an_entry_goes_up_bundle_first_and_comes_back_whole(
    bucket: Bucket, entries: tuple[TraceCache, TraceFile, TraceFile], tmp_path: Path
) -> None:
    cache, good, _ = entries
    shared = _shared(bucket.uri("cache"))
    elsewhere = TraceCache(tmp_path / "elsewhere")
    assert shared.fetch(good.cache_key, elsewhere) == "miss" and not shared.has_bundle(good.cache_key)
    assert shared.publish(good.cache_key, cache, good) == "bundle"
    prefix = f"cache/{LAYOUT}/{good.cache_key}/"
    manifest = orjson.loads(bucket.get(prefix + "manifest.json"))
    bundle = bucket.get(prefix + manifest["bundle"])
    assert bucket.keys(prefix) == sorted([prefix + manifest["bundle"], prefix + "manifest.json"])
    assert manifest["bundle"] == f"bundle-{hashlib.sha256(bundle).hexdigest()}.tar" and manifest["bytes"] == len(bundle)
    assert manifest["source"] == {"root": good.source, "key": good.key, "size": good.info.size, "version": "1",
                                  "kind": "trace"}  # fmt: skip
    assert shared.has_bundle(good.cache_key)
    assert shared.publish(good.cache_key, cache, good) == "present"  # another writer was first: kept as is

    assert shared.fetch(good.cache_key, elsewhere) == "hit"
    for path in cache.directory(good.cache_key).rglob("*"):
        if path.is_file():
            assert (elsewhere.directory(good.cache_key) / path.relative_to(cache.directory(good.cache_key))
                    ).read_bytes() == path.read_bytes()  # fmt: skip
    assert _counted(shared) == {"lookup miss": 1, "lookup hit": 1, "upload bundle": 1, "upload present": 1}
    assert _total(shared.metrics.fetched_bytes) == _total(shared.metrics.uploaded_bytes) == {"": len(bundle)}


def test_failures_are_recorded_with_their_reason_but_storage_errors_are_not(
    bucket: Bucket, entries: tuple[TraceCache, TraceFile, TraceFile], tmp_path: Path
) -> None:
    cache, good, bad = entries
    shared = _shared(bucket.uri("cache"))
    reason = cache.error(bad.cache_key)["message"]
    assert shared.publish(bad.cache_key, cache, bad) == "failure"
    assert bucket.keys(f"cache/{LAYOUT}/{bad.cache_key}/") == [f"cache/{LAYOUT}/{bad.cache_key}/manifest.json"]
    elsewhere = TraceCache(tmp_path / "elsewhere")
    assert shared.fetch(bad.cache_key, elsewhere) == "failure"
    assert elsewhere.error(bad.cache_key)["message"] == reason and not elsewhere.is_ready(bad.cache_key)
    assert not shared.has_bundle(bad.cache_key)  # so the index Job tries it again

    fixed = TraceCache(tmp_path / "fixed")  # a later success under the same key replaces the failure record...
    shutil.copytree(cache.directory(good.cache_key), fixed.directory(bad.cache_key))
    assert shared.publish(bad.cache_key, fixed, bad) == "bundle"
    assert shared.publish(bad.cache_key, cache, bad) == "present"  # ...and a failure never replaces a success
    assert shared.fetch(bad.cache_key, TraceCache(tmp_path / "third")) == "hit"

    storage_trouble = TraceCache(tmp_path / "storage")
    storage_trouble.write_error(good.cache_key, {"message": "the bucket answered 503", "kind": "SourceError"})
    assert shared.publish(good.cache_key, storage_trouble, good) is None
    assert bucket.keys(f"cache/{LAYOUT}/{good.cache_key}/") == []


def test_a_store_that_fails_is_an_error_not_a_miss(
    bucket: Bucket, entries: tuple[TraceCache, TraceFile, TraceFile], tmp_path: Path
) -> None:
    cache, good, _ = entries
    shared = _shared(f"{bucket.kind}://no-such-bucket-{bucket.name}/cache")
    with pytest.raises(SourceError, match="does not exist"):
        shared.publish(good.cache_key, cache, good)
    # S3 and Azure tell a missing bucket from a missing object on reads; GCS answers 404 for both
    expected = "miss" if bucket.kind == "gs" else "error"
    assert shared.fetch(good.cache_key, TraceCache(tmp_path / "local")) == expected
    assert _counted(shared) == {f"lookup {expected}": 1, "upload error": 1}
