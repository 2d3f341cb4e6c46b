"""The server over real HTTP: runs, views, progress, errors that stay on their page, new files, cache reuse."""

from __future__ import annotations

import gzip
import re
import shutil
import signal
from pathlib import Path

import httpx
import orjson
import pytest

from conftest import corpus_file
from profscope.analysis.context import TraceContext
from profscope.analysis.overview import build_overview
from profscope.ingest.kineto import parse_trace_file
from serving import alive, appear, children_of, running_server, wait_for

RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
TINYGPT = "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz"


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roots") / "traces"
    (root / "resnet").mkdir(parents=True)
    shutil.copy(corpus_file(RESNET), root / "resnet" / Path(RESNET).name)
    (root / "cpu").mkdir()
    shutil.copy(corpus_file(TINYGPT), root / "cpu" / Path(TINYGPT).name)
    (root / "broken").mkdir()
    (root / "broken" / "bad.1.pt.trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na')[:40])
    (root / "broken" / "snapshot.pickle").write_bytes(b"\x80\x04N.")
    useless = {"ph": 1, "name": 2, "ts": "soon", "dur": [], "pid": {}, "tid": None, "cat": 5, "args": 3}
    (root / "broken" / "useless.1.pt.trace.json").write_bytes(orjson.dumps({"traceEvents": [useless]}))
    return root


@pytest.fixture(scope="module")
def server(roots: Path, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([roots], cache, "--rescan-seconds", "0.5") as base:
        yield base, cache


def _runs(base: str) -> dict:
    return {r["run"]: r for r in httpx.get(f"{base}/api/runs").json()["runs"]}


def _ready(base: str) -> dict | None:
    runs = _runs(base)
    return runs if all(r["state"] != "parsing" for r in runs.values()) else None


def test_runs_are_listed_and_parsed(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    runs = wait_for(lambda: _ready(base))
    assert set(runs) == {"resnet", "cpu", "broken"}
    assert runs["resnet"]["state"] == "ready" and runs["resnet"]["progress"] == 1.0
    assert runs["resnet"]["workers"] == [{"worker": "worker0", "spans": ["1623143089861"]}]
    views = ["overview", "operators", "kernels", "modules", "memory", "diff", "trace"]
    assert runs["resnet"]["views"] == views  # both record [memory]
    assert runs["cpu"]["views"] == ["overview", "operators", "modules", "memory", "diff", "trace"]


def test_views_over_http_equal_the_analysis(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    wait_for(lambda: _ready(base))
    overview = httpx.get(f"{base}/api/overview", params={"run": "resnet"}).json()
    tables = parse_trace_file(corpus_file(RESNET))
    context = TraceContext(tables)
    expected = orjson.loads(orjson.dumps(build_overview(context, context.steps)))
    assert overview["steps"] == expected["steps"]
    assert overview["gpus"] == expected["gpus"]
    assert overview["worker"] == "worker0" and overview["span"] == "1623143089861"
    operators = httpx.get(
        f"{base}/api/operators", params={"run": "resnet", "search": "conv", "top": 3, "sort": "-host_total_us"}
    ).json()
    assert len(operators["rows"]) == 3
    assert all("conv" in r["name"].lower() for r in operators["rows"])
    assert [r["host_total_us"] for r in operators["rows"]] == sorted(
        (r["host_total_us"] for r in operators["rows"]), reverse=True
    )
    kernels = httpx.get(f"{base}/api/kernels", params={"run": "resnet", "group_by": "kernel_op"}).json()
    assert kernels["rows"][0]["operator"] and kernels["rows"][0]["grid"]
    stacks = httpx.get(f"{base}/api/operators/stacks", params={"run": "resnet", "name": "aten::conv2d"}).json()
    frame = stacks["stacks"][0]["frames"][0]
    assert frame["path"].endswith(".py") and frame["line"] > 0 and frame["links"]["view"].startswith("/source?")
    cpu = httpx.get(f"{base}/api/kernels", params={"run": "cpu"}).json()
    assert cpu["rows"] == []


def test_a_broken_file_fails_alone_with_its_message(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    runs = wait_for(lambda: _ready(base))
    broken = runs["broken"]
    assert broken["state"] == "error"
    messages = {e["file"]: e["message"] for e in broken["errors"]}
    assert (
        "gzip" in messages["broken/bad.1.pt.trace.json.gz"] or "truncated" in messages["broken/bad.1.pt.trace.json.gz"]
    )
    assert "memory snapshot" in messages["broken/snapshot.pickle"]
    # well-formed JSON whose only event has a wrong type in every field: an error, not an empty worker
    assert "no usable event" in messages["broken/useless.1.pt.trace.json"]
    response = httpx.get(f"{base}/api/overview", params={"run": "broken"})
    assert response.status_code == 422 and response.json()["error"]
    for page in ("overview", "operators", "kernels"):
        response = httpx.get(f"{base}/api/{page}", params={"run": "broken", "worker": "useless"})
        assert response.status_code == 422 and "no usable event" in response.json()["error"], page
    assert httpx.get(f"{base}/api/overview", params={"run": "resnet"}).status_code == 200
    assert httpx.get(f"{base}/api/overview", params={"run": "no-such-run"}).status_code == 404


def test_files_added_later_join_their_run(server, roots: Path) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    wait_for(lambda: _ready(base))
    shutil.copy(corpus_file(RESNET), roots / "resnet" / "worker0.1623143566756.pt.trace.json.gz")
    runs = wait_for(lambda: (r := _runs(base)) and len(r["resnet"]["workers"][0]["spans"]) == 2 and r)
    assert runs["resnet"]["workers"][0]["spans"] == ["1623143089861", "1623143566756"]
    overview = wait_for(
        lambda: (
            (r := httpx.get(f"{base}/api/overview", params={"run": "resnet", "span": "1623143566756"})).status_code
            == 200
            and r
        )
    )
    assert overview.json()["span"] == "1623143566756"


def test_pages_openapi_and_health(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    paths = httpx.get(f"{base}/openapi.json").json()["paths"]
    assert {"/api/runs", "/api/overview", "/api/operators", "/api/kernels", "/api/operators/stacks"} <= set(paths)
    for page in ("/", "/overview?run=resnet", "/operators?run=resnet", "/kernels?run=resnet", "/api-docs"):
        response = httpx.get(base + page)
        assert response.status_code == 200, page
        assert "script-src 'self'" in response.headers["content-security-policy"]
    assert httpx.get(f"{base}/static/bundles/overview.js").status_code == 200


PRELOADED_FETCH = re.compile(r'<link rel="preload" href="([^"]+)" as="fetch" crossorigin="anonymous">')


def _preloaded(base: str, page: str) -> list[str]:
    """The API requests a page has the browser fetch with its modules (``&amp;`` read back as ``&``)."""
    response = httpx.get(base + page)
    assert response.status_code == 200, page
    return [href.replace("&amp;", "&") for href in PRELOADED_FETCH.findall(response.text)]


def test_a_run_page_has_its_first_request_fetched_with_it(server) -> None:  # type: ignore[no-untyped-def]
    """A page whose URL names only the trace preloads the request its script makes first (View.first_request),
    with the worker and span the script picks (the first listed); any other parameter, an unknown run, worker
    or span, or a repeated parameter leaves it to the script."""
    base, _ = server
    runs = wait_for(lambda: _ready(base))
    worker = runs["resnet"]["workers"][0]
    trace = f"run=resnet&worker={worker['worker']}&span={worker['spans'][0]}"
    expected = {
        "overview": f"/api/overview?{trace}",
        "operators": f"/api/operators?{trace}&group_by=operator",
        "kernels": f"/api/kernels?{trace}&group_by=kernel",
        "memory": f"/api/memory?{trace}&width_px=1500",
        "modules": f"/api/modules?{trace}",
        "distributed": f"/api/distributed?run=resnet&span={worker['spans'][0]}",
        "trace": f"/api/timeline/tracks?{trace}",
        "paddle": f"/api/paddle/summary?{trace}&unit=ms",
    }
    for page, request in expected.items():
        for url in (f"/{page}?run=resnet", f"/{page}?{trace}", f"/{page}?span={worker['spans'][0]}&run=resnet"):
            assert _preloaded(base, url) == ["/api/runs", request], url
        assert httpx.get(base + request).status_code == 200, request  # the API's answer (a view not applying says so)
    assert httpx.get(base + expected["overview"]).json() == httpx.get(f"{base}/api/overview?run=resnet").json()
    for url in (
        "/overview?run=resnet&step_range=iteration",
        "/operators?run=resnet&group_by=operator_input_shape",
        "/overview?run=no-such-run",
        "/overview?run=resnet&worker=worker9",
        "/overview?run=resnet&span=1",
        "/overview?run=resnet&run=cpu",
        "/overview",
        "/diff?run=resnet",
    ):
        assert _preloaded(base, url) == ["/api/runs"], url


def test_source_viewer_refuses_without_a_source_root(server) -> None:  # type: ignore[no-untyped-def]
    base, _ = server
    response = httpx.get(f"{base}/api/source", params={"path": "/etc/passwd", "line": 1})
    assert response.status_code == 404


def test_progress_is_reported_while_a_big_trace_parses(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"aten::op{i % 50}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10,
            "dur": 5,
            "args": {"External id": i, "Input Dims": [[i % 7, 3]]},
        }
        for i in range(400_000)
    ]
    root = tmp_path / "big"
    root.mkdir()
    staged = tmp_path / "w.1.pt.trace.json"
    staged.write_bytes(orjson.dumps({"traceEvents": events}))
    with running_server([root], tmp_path / "cache", "--rescan-seconds", "0.5", workers=1) as base:
        appear(staged, root / staged.name)
        seen = []

        def done() -> bool:
            response = httpx.get(f"{base}/api/overview", params={"run": "big"})
            seen.append((response.status_code, response.json()))
            return response.status_code == 200

        wait_for(done, timeout=120, interval=0.05)
    parsing = [body for status, body in seen if status == 202]
    assert parsing, "the first requests should have been answered 202 while parsing"
    assert all(b["state"] in ("parsing", "pending") and b["bytes_total"] > 0 for b in parsing)
    assert seen[-1][1]["steps"][0]["cpu_exec_us"] > 0


def test_a_restarted_server_reuses_the_cache(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    shutil.copy(corpus_file(TINYGPT), root / Path(TINYGPT).name)
    cache = tmp_path / "cache"
    with running_server([root], cache) as base:
        wait_for(lambda: _ready(base))
    cached = sorted(p.name for p in (cache / "traces").iterdir())
    with running_server([root], cache) as base:
        runs = _runs(base)  # first answer after start: already ready, nothing re-parsed
        assert runs["r"]["state"] == "ready"
        assert httpx.get(f"{base}/api/overview", params={"run": "r"}).status_code == 200
    assert sorted(p.name for p in (cache / "traces").iterdir()) == cached


def test_worker_processes_exit_with_a_killed_server(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    shutil.copy(corpus_file(TINYGPT), root / Path(TINYGPT).name)
    with running_server([root], tmp_path / "cache", workers=2) as base:
        wait_for(lambda: _ready(base))
        # its parse workers (forked or spawned) and anything else it started
        workers = wait_for(lambda: children_of(base.process.pid))
        base.process.send_signal(signal.SIGKILL)  # no shutdown hook runs
        base.process.wait()
        wait_for(lambda: not any(alive(p) for p in workers), timeout=10)
