"""``profscope serve`` over real HTTP with roots in S3, GCS and Azure emulators: the same runs and the same
view JSON as the same files on local disk; several roots at once; changed and deleted objects."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from conftest import corpus_file
from serving import running_server, wait_for

from .conftest import Bucket, new_bucket
from .snapshots import TRACES, corpus_tree, runs_when_parsed, snapshot

# The views of a run of one GPU trace with [memory] events
TRACE_RUN_VIEWS = ["overview", "operators", "kernels", "modules", "memory", "diff", "trace"]
FAST_RESCAN = ("--rescan-seconds", "0.5", "--storage-attempts", "2", "--storage-timeout", "5")
IDENT = ("run", "worker", "span", "file")


@pytest.fixture(scope="module")
def local_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus_tree(tmp_path_factory.mktemp("local") / "runs")


@pytest.fixture(scope="module")
def local_snapshot(local_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    with running_server([local_tree], tmp_path_factory.mktemp("local-cache") / "c") as base:
        return snapshot(base, runs_when_parsed(base, len(TRACES)))


def test_a_bucket_serves_what_local_disk_serves(
    bucket: Bucket, local_tree: Path, local_snapshot: dict, tmp_path: Path
) -> None:
    bucket.upload_tree(local_tree, "runs")
    bucket.put("runs/notes/README.md", b"not a trace")  # ignored, as on disk
    with running_server([bucket.uri("runs")], tmp_path / "cache") as base:  # type: ignore[list-item]
        runs = runs_when_parsed(base, len(TRACES))
        assert snapshot(base, runs) == local_snapshot
        assert local_snapshot["resnet"]["views"] == TRACE_RUN_VIEWS
        (root,) = httpx.get(f"{base}/api/runs").json()["roots"]
        assert root["root"] == bucket.uri("runs") and root["error"] is None and root["objects"] == 5


def test_several_roots_of_every_kind_at_once(
    storage_env: dict[str, str], local_tree: Path, local_snapshot: dict, tmp_path: Path
) -> None:
    """Four roots all ending in 'runs': the first keeps the plain run names (adding roots renames
    nothing), each later one keeps its runs apart under a label of its own."""
    buckets = [new_bucket(kind) for kind in ("s3", "gs", "az")]
    for bucket in buckets:
        bucket.upload_tree(local_tree, "runs")
    roots = [local_tree, *(bucket.uri("runs") for bucket in buckets)]
    with running_server(roots, tmp_path / "cache", workers=2) as base:  # type: ignore[arg-type]
        runs = runs_when_parsed(base, 4 * len(TRACES), timeout=240)
        prefixes = ["", *(f"{bucket.name}/runs/" for bucket in buckets)]
        assert sorted(runs) == sorted(f"{prefix}{run}" for prefix in prefixes for run in TRACES)
        for prefix in prefixes:
            mine = {name: run for name, run in runs.items() if name.removeprefix(prefix) in TRACES and
                    (prefix or "/" not in name)}  # fmt: skip
            assert snapshot(base, mine, strip_prefix=prefix) == local_snapshot
        roots_json = httpx.get(f"{base}/api/runs").json()["roots"]
        assert [r["error"] for r in roots_json] == [None] * 4


def _payload(base: str, run: str, span: str) -> dict:
    body = httpx.get(f"{base}/api/overview", params={"run": run, "worker": "worker0", "span": span}).json()
    return {k: v for k, v in body.items() if k not in IDENT}


def test_a_changed_object_is_read_again_and_a_deleted_one_disappears(
    bucket: Bucket, local_snapshot: dict, tmp_path: Path
) -> None:
    tiny, resnet = (sorted(corpus_file(folder).iterdir())[0] for folder in TRACES.values())
    bucket.put("runs/job/worker0.1.pt.trace.json.gz", tiny.read_bytes())
    bucket.put("runs/job/worker0.2.pt.trace.json.gz", tiny.read_bytes())
    expected = {
        name: next(v for (_, _, route), v in local_snapshot[name]["payloads"].items() if route == "/api/overview")
        for name in TRACES
    }
    expected = {name: {k: v for k, v in body.items() if k not in IDENT} for name, body in expected.items()}
    with running_server([bucket.uri("runs")], tmp_path / "cache", *FAST_RESCAN) as base:  # type: ignore[list-item]
        runs_when_parsed(base, 1)
        assert _payload(base, "job", "1") == expected["tinygpt"]

        bucket.put("runs/job/worker0.1.pt.trace.json.gz", resnet.read_bytes())  # overwritten in place
        wait_for(lambda: _payload(base, "job", "1") == expected["resnet"], timeout=90, interval=0.3)
        run = runs_when_parsed(base, 1)["job"]
        assert run["views"] == TRACE_RUN_VIEWS
        assert _payload(base, "job", "2") == expected["tinygpt"]

        bucket.delete("runs/job/worker0.2.pt.trace.json.gz")
        wait_for(lambda: runs_when_parsed(base, 1)["job"]["workers"] == [{"worker": "worker0", "spans": ["1"]}])
        gone = httpx.get(f"{base}/api/overview", params={"run": "job", "worker": "worker0", "span": "2"})
        assert gone.status_code == 404

        bucket.delete("runs/job/worker0.1.pt.trace.json.gz")
        wait_for(lambda: httpx.get(f"{base}/api/runs").json()["runs"] == [])


def test_an_empty_prefix_is_listed_again_until_its_files_come(s3_bucket: Bucket, tmp_path: Path) -> None:
    """A bucket prefix with nothing under it yet (training has not written a trace): the root answers with no
    error and 0 objects, the log says it is listed again, and the run appears once a file is uploaded."""
    tiny = sorted(corpus_file(TRACES["tinygpt"]).iterdir())[0]
    cache = tmp_path / "cache"
    with running_server([s3_bucket.uri("later")], cache, *FAST_RESCAN, "--log-level", "info") as base:  # type: ignore[list-item]
        wait_for(lambda: httpx.get(f"{base}/readyz").status_code == 200)
        (root,) = httpx.get(f"{base}/api/runs").json()["roots"]
        assert root["error"] is None and root["objects"] == 0 and root["listed_at"]
        log = next(tmp_path.glob("server-cache-*.log"))
        assert "holds no file (yet)" in log.read_text()
        s3_bucket.put("later/job/worker0.1.pt.trace.json.gz", tiny.read_bytes())
        runs = runs_when_parsed(base, 1)
        assert list(runs) == ["job"]
        assert log.read_text().count("holds no file (yet)") == 1  # said once, not at every rescan
