"""What a served run looks like over HTTP, in a form two servers can be compared by."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx

from conftest import corpus_file
from serving import wait_for

TRACES = {
    "tinygpt": "generated/tinygpt_cpu",
    "resnet": "kineto-tb_plugin/samples/resnet50_num_workers_0",
}


def corpus_tree(target: Path) -> Path:
    """``target/<run>/<trace files>`` for every run in TRACES (copies of corpus files)."""
    for run, folder in TRACES.items():
        (target / run).mkdir(parents=True, exist_ok=True)
        for path in sorted(corpus_file(folder).iterdir()):
            shutil.copy(path, target / run / path.name)
    return target


def runs_when_parsed(base: str, count: int, timeout: float = 120.0) -> dict[str, dict]:
    def ready() -> dict[str, dict] | None:
        runs = {r["run"]: r for r in httpx.get(f"{base}/api/runs", timeout=10).json()["runs"]}
        done = len(runs) == count and all(r["state"] != "parsing" for r in runs.values())
        return runs if done else None

    return wait_for(ready, timeout=timeout, interval=0.2)


# The API routes behind each page a run lists (run["views"]); the Trace view reads the tables and its index.
VIEW_ROUTES = {
    "diff": [],  # compares two traces: nothing of one run to snapshot (tests/test_diff_http.py)
    "overview": ["/api/overview"],
    "modules": ["/api/modules"],
    "operators": ["/api/operators"],
    "kernels": ["/api/kernels"],
    "memory": ["/api/memory"],
    "distributed": ["/api/distributed"],
    "trace": ["/api/timeline/tracks", "/api/timeline"],
}


def snapshot(base: str, runs: dict[str, dict], strip_prefix: str = "") -> dict:
    """Every run's workers, spans, files and the JSON of every route of every page of every span."""
    shown: dict = {}
    for name, run in runs.items():
        views = {}
        for worker in run["workers"]:
            for span in worker["spans"]:
                for view in run["views"]:
                    for route in VIEW_ROUTES[view]:
                        params = {"run": name, "worker": worker["worker"], "span": span}
                        response = httpx.get(f"{base}{route}", params=params, timeout=30)
                        assert response.status_code == 200, (route, params, response.text)
                        body = response.json()
                        if "run" in body:
                            body["run"] = body["run"].removeprefix(strip_prefix)
                        views[(worker["worker"], span, route)] = body
        shown[name.removeprefix(strip_prefix)] = {
            "state": run["state"],
            "workers": run["workers"],
            "views": run["views"],
            "errors": run["errors"],
            "files": sorted((f["file"], f["worker"], f["span"], f["bytes"], f["state"]) for f in run["files"]),
            "payloads": views,
        }
    return shown
