"""/api/memory over real HTTP: snapshots in the catalog, a hostile pickle refused on its page, the JSON twins."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from serving import running_server, wait_for

SNAPSHOT = "memory-snapshots/bcrafton_assignment2-systems/memory_snapshot.pickle"
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
