"""The Trace view's API over real HTTP: progress, windows, slices, search, summary, export."""

from __future__ import annotations

import shutil
from io import BytesIO
from pathlib import Path

import httpx
import orjson
import pytest

from conftest import corpus_file
from profscope.ingest.kineto import parse_trace
from serving import running_server, wait_for

RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("roots") / "traces"
    (root / "resnet").mkdir(parents=True)
    shutil.copy(corpus_file(RESNET), root / "resnet" / Path(RESNET).name)
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([root], cache) as base:
        yield base


def _get(base: str, path: str, **params: object) -> httpx.Response:
    return httpx.get(f"{base}{path}", params={"run": "resnet", **params}, timeout=60)


def _ready(base: str, path: str, **params: object) -> dict:
    def attempt() -> dict | None:
        response = _get(base, path, **params)
        assert response.status_code in (200, 202), response.text
        return response.json() if response.status_code == 200 else None

    return wait_for(attempt, timeout=120)


def test_tracks_and_windows(server: str) -> None:
    listing = _ready(server, "/api/timeline/tracks")
    names = [t["name"] for t in listing["tracks"]]
    assert "stream 7" in names and "ProfilerStep" in names and "GPU 0 utilization" in names
    assert listing["duration_us"] > 1_000_000  # about a second of ResNet-50 steps
    groups = {g["id"] for g in listing["groups"]}
    assert all(t["group"] in groups for t in listing["tracks"])

    whole = _get(server, "/api/timeline", width_px=2000).json()
    assert {t["id"] for t in whole["tracks"]} == {t["id"] for t in listing["tracks"]}
    stream = next(t for t in listing["tracks"] if t["name"] == "stream 7")
    zoomed = _get(server, "/api/timeline", start_us=100_000, end_us=100_500, width_px=1000, tracks=stream["id"]).json()
    (only,) = zoomed["tracks"]
    assert only["id"] == stream["id"] and only["slices"]
    for s in only["slices"]:
        assert (
            s["start_us"] < 100_500
            and s["start_us"] + s["dur_us"] > 100_000
            and s["kind"] in ("kernel", "memset", "memcpy")
        )

    compressed = httpx.get(
        f"{server}/api/timeline", params={"run": "resnet", "width_px": 2000}, headers={"Accept-Encoding": "gzip"}
    )
    assert compressed.headers.get("content-encoding") == "gzip"
    assert _get(server, "/api/timeline", start_us=5, end_us=5).status_code == 400


def test_slice_search_summary_export(server: str) -> None:
    _ready(server, "/api/timeline/tracks")
    found = _get(server, "/api/timeline/search", q="volta_scudnn", index=1).json()
    assert found["count"] > 10 and found["index"] == 1
    kernel = found["match"]
    details = _get(server, "/api/timeline/slice", id=kernel["id"]).json()
    assert details["kind"] == "kernel" and details["name"] == kernel["name"]
    relations = {r["relation"] for r in details["related"]}
    assert {"launched by", "launched by operator"} <= relations
    assert details["stack"], "the resnet sample records Call stack args on its operators"
    assert _get(server, "/api/timeline/slice", id=10**9).status_code == 404

    start, end = kernel["start_us"] - 2_000, kernel["start_us"] + 2_000
    summary = _get(server, "/api/timeline/summary", start_us=start, end_us=end).json()
    assert summary["slices"] > 0 and any(n["name"] == kernel["name"] for n in summary["by_name"])

    exported = _get(server, "/api/timeline/export", start_us=start, end_us=end)
    assert "attachment" in exported.headers["content-disposition"]
    body = exported.json()
    assert body["profscope"]["slices"] == summary["slices"]
    reparsed = parse_trace(BytesIO(orjson.dumps(body)), use_second_core=False)
    assert reparsed.row_count("events") == summary["slices"]


def test_unknown_run_and_openapi(server: str) -> None:
    assert httpx.get(f"{server}/api/timeline", params={"run": "nope"}).status_code == 404
    spec = httpx.get(f"{server}/openapi.json").json()
    for path in ("/api/timeline", "/api/timeline/tracks", "/api/timeline/slice", "/api/timeline/search"):
        assert path in spec["paths"], path
        assert spec["paths"][path]["get"]["summary"]
    params = {p["name"]: p for p in spec["paths"]["/api/timeline"]["get"]["parameters"]}
    assert {"run", "worker", "span", "start_us", "end_us", "width_px", "tracks"} <= set(params)
