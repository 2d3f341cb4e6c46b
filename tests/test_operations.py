"""Operations over real HTTP and real processes: /metrics, JSON logs, PROFSCOPE_* settings, and
``profscope index`` shards filling one cache that a server then uses without parsing."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import corpus_file
from profscope.indexer import shard_of
from profscope.metrics import directory_size
from serving import running_server, wait_for

CPU = "generated/tinygpt_cpu"
DDP = "generated/tinygpt_ddp4_gloo"


def _metrics(base: str) -> dict[tuple[str, tuple], float]:
    text = httpx.get(f"{base}/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[(name, tuple(sorted(labels.items())))]


def _ready(base: str) -> bool:
    runs = httpx.get(f"{base}/api/runs").json()["runs"]
    return bool(runs) and all(r["state"] != "parsing" for r in runs)


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    root = tmp_path / "traces"
    shutil.copytree(corpus_file(CPU), root / "cpu")
    (root / "broken").mkdir()
    (root / "broken" / "bad.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X"'))
    return root


def test_metrics_count_ingests_requests_and_cache(root: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PROFSCOPE_WORKERS", "1")  # settings come from PROFSCOPE_* as well as flags
    cache = tmp_path / "cache"
    with running_server([root], cache, "--workers", "1") as base:
        wait_for(lambda: _ready(base))
        for _ in range(3):
            assert httpx.get(f"{base}/api/overview", params={"run": "cpu"}).status_code == 200
        assert httpx.get(f"{base}/api/overview", params={"run": "nope"}).status_code == 404
        assert httpx.get(f"{base}/overview").status_code == 200
        metrics = _metrics(base)
        assert _value(metrics, "profscope_ingests_started_total") == 3
        assert _value(metrics, "profscope_ingests_finished_total") == 2
        assert _value(metrics, "profscope_ingests_failed_total") == 1
        assert _value(metrics, "profscope_ingest_duration_seconds_count") == 3
        assert _value(metrics, "profscope_ingest_duration_seconds_sum") > 0
        route = {"method": "GET", "route": "/api/overview"}
        assert _value(metrics, "profscope_http_requests_total", **route, status="200") == 3
        assert _value(metrics, "profscope_http_requests_total", **route, status="404") == 1
        assert _value(metrics, "profscope_http_requests_total", method="GET", route="/{page}", status="200") == 1
        assert _value(metrics, "profscope_http_request_duration_seconds_count", **route) == 4
        assert _value(metrics, "profscope_http_request_duration_seconds_bucket", **route, le="+Inf") == 4
        assert _value(metrics, "profscope_runs") == 2
        assert _value(metrics, "profscope_trace_files") == 3
        assert _value(metrics, "profscope_roots_failing") == 0
        assert _value(metrics, "profscope_ingest_workers") == 1
        assert _value(metrics, "profscope_ingest_workers_busy") == 0
        assert _value(metrics, "profscope_ingest_queue") == 0
        assert _value(metrics, "profscope_cache_size_bytes") == directory_size(cache) > 0


def test_json_logs_from_the_environment(root: Path, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PROFSCOPE_LOG_FORMAT", "json")
    monkeypatch.setenv("PROFSCOPE_LOG_LEVEL", "info")
    cache = tmp_path / "cache"
    with running_server([root], cache, "--log-level", "info") as base:
        wait_for(lambda: _ready(base))
        httpx.get(f"{base}/api/kernels", params={"run": "cpu", "search": "mm"})
    log = next(tmp_path.glob("server-*.log")).read_text()
    # Every line is JSON, except the warning multiprocessing's resource tracker process prints at exit.
    lines = [json.loads(line) for line in log.splitlines() if line.strip() and "resource_tracker" not in line]
    access = [e for e in lines if e["logger"] == "profscope.access" and e["route"] == "/api/kernels"]
    assert len(access) == 1
    assert access[0]["status"] == 200 and access[0]["path"] == "/api/kernels" and access[0]["duration_ms"] >= 0
    assert "search" not in json.dumps(access[0])  # no query strings in the access log
    assert any("serving" in e["message"] for e in lines if e["logger"] == "profscope")


def _index(root: Path, cache: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    command = [sys.executable, "-m", "profscope.cli", "index", str(root), "--cache-dir", str(cache), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_index_shards_fill_one_cache_that_serve_uses(tmp_path: Path) -> None:
    import os

    root = tmp_path / "bucket"
    shutil.copytree(corpus_file(CPU), root / "cpu")
    shutil.copytree(corpus_file(DDP), root / "ddp")
    (root / "cpu" / "broken.pt.trace.json").write_text('{"traceEvents": [')
    keys = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    cache = tmp_path / "cache"
    # shard 1 of 2 from a Kubernetes Indexed Job's environment, shard 0 from the flag, both at once
    job_env = {**os.environ, "JOB_COMPLETION_INDEX": "1", "PROFSCOPE_SHARD_COUNT": "2"}
    shards = [_index(root, cache, "--shard", "0/2"), _index(root, cache, env=job_env)]
    outputs = [(p.wait(timeout=300), *p.communicate()) for p in shards]
    reports = [json.loads(out.strip().splitlines()[-1]) for _, out, _ in outputs]
    assert [r["shard"] for r in reports] == ["0/2", "1/2"]
    assert sum(r["in_shard"] for r in reports) == len(keys) == 11
    for shard, (code, _, err), report in zip((0, 1), outputs, reports, strict=True):
        mine = [k for k in keys if shard_of(k, 2) == shard]
        assert report["in_shard"] == len(mine)
        has_broken = "cpu/broken.pt.trace.json" in mine
        assert code == (1 if has_broken else 0)
        assert report["failed"] == int(has_broken) and report["parsed"] == len(mine) - int(has_broken)
        assert ("failed: cpu/broken.pt.trace.json: the trace ends before" in err) == has_broken

    again = _index(root, cache, "--shard", "0/1")
    code, out, _ = again.wait(timeout=300), *again.communicate()
    assert code == 1 and json.loads(out.strip().splitlines()[-1])["already_cached"] == 10

    with running_server([root], cache) as base:
        runs = {r["run"]: r for r in httpx.get(f"{base}/api/runs").json()["runs"]}
        assert runs["ddp"]["state"] == "ready" and runs["cpu"]["state"] == "ready"  # at once: nothing to parse
        assert [e["file"] for e in runs["cpu"]["errors"]] == ["cpu/broken.pt.trace.json"]
        overview = httpx.get(f"{base}/api/overview", params={"run": "ddp", "worker": "rank3"})
        assert overview.status_code == 200 and overview.json()["steps"]
        metrics = _metrics(base)
        assert _value(metrics, "profscope_ingests_started_total") == 0
        assert _value(metrics, "profscope_trace_files") == 11


def test_index_rejects_a_bad_shard(tmp_path: Path) -> None:
    bad = _index(tmp_path, tmp_path / "cache", "--shard", "2/2")
    assert bad.wait(timeout=60) == 2 and "need 0 <= I < N" in bad.communicate()[1]


def test_every_setting_is_a_flag_an_environment_variable_and_documented() -> None:
    import argparse
    import inspect

    from conftest import REPO
    from profscope import cli

    readme = (REPO / "README.md").read_text()
    source = inspect.getsource(cli)
    commands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("serve", "index"):
        for action in commands.choices[command]._actions:
            if action.dest in ("help", "shard"):
                continue
            flag = action.option_strings[0] if action.option_strings else None
            variable = "ROOTS" if action.dest == "roots" else action.dest.upper()
            if action.dest == "root":  # index's ROOT is positional on purpose: one root per index
                continue
            assert f'env("{variable}"' in source or f'env_flag("{variable}"' in source, (command, action.dest)
            assert f"PROFSCOPE_{variable}" in readme, (command, variable)
            if flag:
                assert f"`{flag}`" in readme, (command, flag)
    assert "PROFSCOPE_SHARD_COUNT" in readme and "JOB_COMPLETION_INDEX" in readme


def test_an_idle_keep_alive_connection_outlives_proxy_idle_timeouts(tmp_path: Path) -> None:
    """A proxy or browser reuses idle connections: the server must not close one after a few seconds
    (uvicorn's default of 5 s made a request that raced the close fail in the load test)."""
    import http.client
    import time
    from urllib.parse import urlsplit

    root = tmp_path / "empty"
    root.mkdir()
    with running_server([root], tmp_path / "cache", workers=1) as base:
        address = urlsplit(base)
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
        try:
            connection.request("GET", "/healthz")
            assert connection.getresponse().read() and connection.sock is not None
            first_socket = connection.sock
            time.sleep(7)  # longer than uvicorn's default keep-alive timeout
            connection.request("GET", "/healthz")  # on the same socket: raises if the server closed it
            assert connection.getresponse().status == 200
            assert connection.sock is first_socket
        finally:
            connection.close()
