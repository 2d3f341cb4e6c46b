"""/api/memory over real HTTP: snapshots in the catalog, a hostile pickle refused on its page, the JSON twins."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from serving import running_server, wait_for

SNAPSHOT = "memory-snapshots/ZidongLiu_DeComFL/memory.pickle"
TRACE = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"


class RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _ready(base: str) -> dict:
    def parsed() -> dict | None:
        body = httpx.get(f"{base}/api/runs").json()
        return body if body["runs"] and all(r["state"] != "parsing" for r in body["runs"]) else None

    return wait_for(parsed, timeout=120)


def test_snapshots_join_their_run_and_a_hostile_pickle_is_refused(tmp_path: Path) -> None:
    run = tmp_path / "root" / "job"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TRACE), run / Path(TRACE).name)
    shutil.copy(corpus_file(SNAPSHOT), run / "oom_rank-3_host.pickle")
    marker = tmp_path / "the-command-ran"
    (run / "evil_rank-1.pickle").write_bytes(pickle.dumps({"segments": [RunsACommand(marker)]}, protocol=4))
    with running_server([tmp_path / "root"], tmp_path / "cache") as base:
        runs = _ready(base)["runs"]
        assert [r["run"] for r in runs] == ["job"]
        job = runs[0]
        assert "memory" in job["views"]
        by_worker = {s["worker"]: s for s in job["snapshots"]}
        assert set(by_worker) == {"rank1", "rank3"}
        assert by_worker["rank3"]["state"] == "ready"
        assert by_worker["rank1"]["state"] == "error" and "posix.system" in by_worker["rank1"]["message"]
        assert any("evil_rank-1.pickle" in e["file"] and "refused" in e["message"] for e in job["errors"])

        refused = httpx.get(f"{base}/api/memory/snapshot", params={"run": job["run"], "worker": "rank1"})
        assert refused.status_code == 422 and "can run code" in refused.json()["error"]
        assert not marker.exists()

        summary = httpx.get(f"{base}/api/memory/snapshot", params={"run": job["run"], "worker": "rank3"}).json()
        assert summary["snapshot"] == "oom_rank-3_host" and summary["devices"][0]["peak_allocated_bytes"] > 0
        query = {"run": job["run"], "worker": "rank3", "device": 0}
        timeline = httpx.get(f"{base}/api/memory/snapshot/timeline", params={**query, "height_px": 300}).json()
        tops = [band["y"][i] + band["size"] for band in timeline["bands"] for i in range(len(band["y"]))]
        assert max(tops) <= timeline["peak_allocated_bytes"]
        assert max(timeline["allocated"]["max"]) == summary["devices"][0]["peak_allocated_bytes"]
        for path in ("segments", "top", "stacks", "oom"):
            assert httpx.get(f"{base}/api/memory/snapshot/{path}", params=query).status_code == 200, path
        missing = httpx.get(f"{base}/api/memory/snapshot/timeline", params={**query, "device": 5})
        assert missing.status_code == 404 and "no device 5" in missing.json()["detail"]

        profiler = httpx.get(f"{base}/api/memory", params={"run": job["run"]}).json()
        assert profiler["devices"] == ["CPU"] and profiler["peak_allocated_bytes"] == 4_802_648
        bad = httpx.get(f"{base}/api/memory", params={"run": job["run"], "device": "GPU3"})
        assert bad.status_code == 404

        schema = httpx.get(f"{base}/openapi.json").json()
        for path in ("/api/memory", "/api/memory/snapshot/timeline", "/api/memory/snapshot/allocation"):
            operation = schema["paths"][path]["get"]
            assert operation["summary"]
            assert all(p.get("description") for p in operation["parameters"]), path


INTERNLM = Path(__file__).resolve().parent / "data" / "internlm"


def test_memory_logs_beside_traces_and_standing_alone_over_http(tmp_path: Path) -> None:
    """A memory.log beside a run's traces joins that run; InternLM's memory_trace/ stands as its own run; a file
    named memory.log that is not one fails alone with where and why."""
    root = tmp_path / "root"
    job = root / "job"
    job.mkdir(parents=True)
    shutil.copy(corpus_file(TRACE), job / Path(TRACE).name)
    shutil.copy(INTERNLM / "memory_trace" / "rank0_dp0_tp0" / "memory.log", job / "memory.log")
    shutil.copytree(INTERNLM / "memory_trace", root / "internlm" / "memory_trace")
    (root / "notes").mkdir()
    (root / "notes" / "memory.log").write_text("epoch 1: 12 GB used\n")
    with running_server([root], tmp_path / "cache") as base:
        runs = {r["run"]: r for r in _ready(base)["runs"]}
        assert set(runs) == {"job", "internlm/memory_trace", "notes"}
        assert "memory" in runs["job"]["views"] and "overview" in runs["job"]["views"]
        assert [(f["worker"], f["log"], f["state"]) for f in runs["job"]["memory_logs"]] == [
            ("job", "memory.log", "ready")
        ]
        assert runs["internlm/memory_trace"]["views"] == ["memory"]
        assert runs["notes"]["state"] == "error"
        assert runs["notes"]["errors"] == [
            {
                "file": "notes/memory.log",
                "message": "notes/memory.log: line 1: expected 'Memory State:' (an InternLM SimpleMemoryProfiler "
                "memory.log), got 'epoch 1: 12 GB used'",
            }
        ]

        body = httpx.get(f"{base}/api/memory/log", params={"run": "internlm/memory_trace"}).json()
        assert (body["worker"], body["log"]) == ("rank0_dp0_tp0", "memory.log")
        assert body["peak_allocated_bytes"] == 2_097_361_715  # "2000.20 MB" (see test_memory_log.py)
        assert body["curve"][0] == [0.0, 1_258_417_029, None]  # "1200.12 MB" at the start
        assert body["category_curve"]["activation"][2] == 20 * 1_048_576
        assert httpx.get(f"{base}/api/memory/log", params={"run": "job"}).json()["points"] == 6
        layers = httpx.get(
            f"{base}/api/memory/log/layers", params={"run": "internlm/memory_trace", "category": "grads"}
        ).json()
        assert layers["ids"][0] == "grad_mem" and layers["total_bytes"] == 4 * 104_857_600 + 2 * 20_972
        refused = httpx.get(f"{base}/api/memory/log", params={"run": "notes"})
        assert refused.status_code == 422 and "line 1: expected 'Memory State:'" in refused.json()["error"]
        missing = httpx.get(f"{base}/api/memory/log", params={"run": "job", "worker": "rank9"})
        assert missing.status_code == 404 and "no memory.log of worker 'rank9'" in missing.json()["detail"]
        bad_category = httpx.get(f"{base}/api/memory/log/layers", params={"run": "job", "category": "weights"})
        assert bad_category.status_code == 422

        schema = httpx.get(f"{base}/openapi.json").json()
        for path in ("/api/memory/log", "/api/memory/log/layers"):
            operation = schema["paths"][path]["get"]
            assert operation["summary"] and operation["description"]
            assert all(p.get("description") for p in operation["parameters"]), path


def test_a_snapshot_over_the_configured_limit_is_refused_alone(tmp_path: Path) -> None:
    """--max-snapshot-bytes bounds the memory a decoded snapshot may take: a 2 MB pickle that decodes into far
    more than 4 MiB of Python objects is refused with the limit and how to raise it; its run's trace still opens."""
    run = tmp_path / "root" / "job"
    run.mkdir(parents=True)
    shutil.copy(corpus_file(TRACE), run / Path(TRACE).name)
    shutil.copy(corpus_file(SNAPSHOT), run / "big.pickle")
    with running_server([tmp_path / "root"], tmp_path / "cache", "--max-snapshot-bytes", str(4 << 20)) as base:
        (job,) = _ready(base)["runs"]
        (snapshot,) = job["snapshots"]
        assert snapshot["state"] == "error"
        refused = httpx.get(f"{base}/api/memory/snapshot", params={"run": "job", "snapshot": "big"})
        assert refused.status_code == 422
        message = refused.json()["error"]
        assert "more than 4,194,304 bytes" in message and "--max-snapshot-bytes" in message
        assert httpx.get(f"{base}/api/memory", params={"run": "job"}).json()["peak_allocated_bytes"] == 4_802_648
        assert httpx.get(f"{base}/api/overview", params={"run": "job"}).status_code == 200


def test_the_whole_trace_s_statistics_kept_from_the_first_request_equal_a_window_over_all_of_it(tmp_path: Path) -> None:
    """The page's first request (no window) gets statistics computed once per trace and kept; they must be those
    of a window over the whole trace, and a narrower window must still get its own."""
    source = corpus_file("kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz")
    root = tmp_path / "traces" / "job"
    root.mkdir(parents=True)
    shutil.copy(source, root / source.name)
    with running_server([tmp_path / "traces"], tmp_path / "cache") as base:
        _ready(base)
        whole = httpx.get(f"{base}/api/memory", params={"run": "job", "device": "GPU0"}).json()
        assert whole["stats"]
        ends = [point[0] for point in whole["curve"]]
        everything = {"start_us": 0, "end_us": 1e12}  # µs since the trace's first event: all of it
        windowed = httpx.get(f"{base}/api/memory", params={"run": "job", "device": "GPU0", **everything}).json()
        assert windowed["stats"] == whole["stats"]
        again = httpx.get(f"{base}/api/memory", params={"run": "job", "device": "GPU0"}).json()
        assert again["stats"] == whole["stats"]  # kept: the same rows
        half = {"start_us": 0, "end_us": max(ends) / 2}
        narrower = httpx.get(f"{base}/api/memory", params={"run": "job", "device": "GPU0", **half}).json()
        assert narrower["stats"] != whole["stats"]
        assert sum(r["calls"] for r in narrower["stats"]) < sum(r["calls"] for r in whole["stats"])
