"""PaddlePaddle traces: parsed into the kineto tables, and every view over real HTTP, on real recordings.

The recordings (tests/data/paddle, see its README) were made with PaddlePaddle 3.3.1; the expected
numbers are read from the raw JSON of the same file here, by hand-written loops independent of the
parser.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from profscope.analysis.call_tree import build_call_tree
from profscope.analysis.paddle_summary import paddle_summary
from profscope.catalog import classify
from profscope.ingest.json_stream import TraceFormatError
from profscope.ingest.paddle import parse_any_trace, strip_duration
from profscope.tables import Kind, TraceTables
from serving import running_server, wait_for

PADDLE_DATA = Path(__file__).parent / "data" / "paddle"
RUNS = ("mlp", "cnn_bn", "transformer", "static_mlp")


def trace_path(run: str) -> Path:
    (path,) = sorted((PADDLE_DATA / run).glob("*.paddle_trace.json.gz"))
    return path


def raw_trace(run: str) -> dict[str, Any]:
    return json.loads(gzip.decompress(trace_path(run).read_bytes()))


def parsed(run: str) -> TraceTables:
    with open(trace_path(run), "rb") as raw:
        return parse_any_trace(raw)


def raw_name(event: dict[str, Any]) -> str:
    return re.sub(r"\[[\d.]+ (?:ms|us)\]$", "", event["name"])


# ---- the parser, on the real files ---------------------------------------------------------------
def test_names_lose_the_duration_suffix_only() -> None:
    assert strip_duration("matmul dygraph[0.642 ms]") == "matmul dygraph"
    assert strip_duration("ProfileStep#3[1.094 ms]") == "ProfileStep#3"
    assert strip_duration("[memory]") == "[memory]"
    assert strip_duration("a[b]") == "a[b]"


@pytest.mark.parametrize("run", RUNS)
def test_every_event_is_read_with_its_kind_name_and_time(run: str) -> None:
    raw = raw_trace(run)
    tables = parsed(run)
    complete = [e for e in raw["traceEvents"] if e.get("ph") == "X"]
    events = tables.events
    assert tables.row_count("events") == len(complete)
    assert tables.meta["warnings"] == []
    names = {tables.strings[int(i)] for i in np.unique(events["name"])}
    assert names == {raw_name(e) for e in complete}
    kinds = {tables.strings[int(c)]: Kind(int(k)) for c, k in zip(events["cat"], events["kind"], strict=True)}
    expected = {"Operator": Kind.CPU_OP, "OperatorInner": Kind.CPU_OP, "ProfileStep": Kind.USER_ANNOTATION,
                "UserDefined": Kind.USER_ANNOTATION, "PythonUserDefined": Kind.USER_ANNOTATION}  # fmt: skip
    assert {cat: kinds[cat] for cat in expected if cat in kinds} == {c: k for c, k in expected.items() if c in kinds}
    assert set(kinds.values()) <= {Kind.CPU_OP, Kind.USER_ANNOTATION}  # a CPU recording: nothing else
    # start times keep args.start_time's nanoseconds: relative times are exact, whatever ts truncated
    first = min(float(e["args"]["start_time"].split()[0]) for e in complete)
    relative_us = sorted(round(float(e["args"]["start_time"].split()[0]) - first, 3) for e in complete)
    assert np.array_equal(np.sort(np.asarray(events["ts_ns"])), np.rint(np.asarray(relative_us) * 1000))
    assert build_call_tree(tables).dropped == 0  # and so every op nests inside its parent


@pytest.mark.parametrize("run", RUNS)
def test_memory_events_keep_place_sizes_and_totals(run: str) -> None:
    raw = raw_trace(run)
    tables = parsed(run)
    memory = [e for e in raw["traceEvents"] if e.get("name") == "[memory]"]
    table = tables.table("memory")
    assert tables.row_count("memory") == len(memory) > 0
    assert sorted(np.asarray(table["bytes"]).tolist()) == sorted(e["args"]["increase_bytes"] for e in memory)
    assert int(np.max(table["total_allocated"])) == max(e["args"]["current_allocated"] for e in memory)
    assert set(np.asarray(table["device_type"]).tolist()) == {0}  # Place(cpu)
    assert sorted(np.asarray(table["addr"]).tolist()) == sorted(int(e["args"]["addr"]) for e in memory)
    peaks = tables.meta["paddle"]["memory_peaks"]["Place(cpu)"]
    assert peaks["peak_allocated_bytes"] == max(e["args"]["peak_allocated"] for e in memory)


def test_threads_are_named_from_metadata_and_extra_info() -> None:
    tables = parsed("static_mlp")
    raw = raw_trace("static_mlp")
    names = {t.tid: t.thread_name for t in tables.tracks}
    executor_threads = [tid for tid, name in raw["ExtraInfo"].items() if name == "HostTasks_thread_0"]
    (thread,) = executor_threads
    assert names[f"{thread}(C++)"] == f"thread {thread}:HostTasks_thread_0(C++)"
    assert tables.meta["paddle"]["span_index"] == int(raw["span_index"])
    assert tables.meta["format"] == "paddle"


def test_a_paddle_trace_is_recognised_by_content_under_any_name(tmp_path: Path) -> None:
    renamed = tmp_path / "trace.json"
    renamed.write_bytes(gzip.decompress(trace_path("mlp").read_bytes()))
    with open(renamed, "rb") as raw:
        tables = parse_any_trace(raw)
    assert tables.meta["format"] == "paddle"
    assert "ProfileStep#1" in tables.strings.strings and "ProfileStep#1[" not in "".join(tables.strings.strings)


def test_a_kineto_trace_is_still_read_as_kineto(tmp_path: Path) -> None:
    kineto = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm[1]", "pid": 1, "tid": 1, "ts": 10, "dur": 5}]}  # fmt: skip
    path = tmp_path / "w.pt.trace.json"
    path.write_bytes(json.dumps(kineto).encode())
    with open(path, "rb") as raw:
        tables = parse_any_trace(raw)
    assert "format" not in tables.meta and tables.strings.strings[0] == "aten::mm[1]"


def test_an_unreadable_paddle_trace_says_it_is_paddle_and_why(tmp_path: Path) -> None:
    text = gzip.decompress(trace_path("mlp").read_bytes())
    path = tmp_path / "cut.paddle_trace.json"
    path.write_bytes(text[: len(text) // 2])
    with (
        open(path, "rb") as raw,
        pytest.raises(TraceFormatError, match="PaddlePaddle profiler trace that cannot be read"),
    ):
        parse_any_trace(raw)


def test_paddle_file_names_give_worker_and_span() -> None:
    name = trace_path("mlp").name
    folder, worker, span, refusal = classify(f"runs/mlp/{name}")  # type: ignore[misc]
    assert (folder, worker, refusal) == ("runs/mlp", "host_vmpid_15427", None)
    assert span == re.search(r"_time_([\d_]+)\.", name).group(1).replace("_", "")  # type: ignore[union-attr]


# ---- every view over real HTTP --------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("paddle") / "runs"
    shutil.copytree(PADDLE_DATA, root)
    (root / "broken").mkdir()
    (root / "kineto").mkdir()
    (root / "kineto" / "w.1.pt.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 9},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5}]}))  # fmt: skip
    cut = gzip.decompress(trace_path("mlp").read_bytes())
    (root / "broken" / "host_xpid_1_time_2026_01_01_00_00_00_000001.paddle_trace.json").write_bytes(cut[:4000])
    cache = tmp_path_factory.mktemp("cache") / "c"
    with running_server([root], cache) as base:
        wait_for(lambda: all(r["state"] != "parsing" for r in httpx.get(f"{base}/api/runs").json()["runs"]))
        yield base


def get(base: str, path: str, **params: Any) -> dict[str, Any]:
    response = httpx.get(f"{base}{path}", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("run", RUNS)
def test_overview_steps_are_paddles_profile_steps_and_add_up(server, run: str) -> None:  # type: ignore[no-untyped-def]
    raw = raw_trace(run)
    steps = sorted(
        (e for e in raw["traceEvents"] if e.get("cat") == "ProfileStep"), key=lambda e: int(raw_name(e).split("#")[1])
    )
    overview = get(server, "/api/overview", run=run)
    assert overview["steps_from_profiler_steps"] and overview["notes"] == []
    assert [s["step"] for s in overview["steps"]] == [raw_name(e).split("#")[1] for e in steps]
    for step, event in zip(overview["steps"], steps, strict=True):
        assert step["total_us"] == pytest.approx(event["dur"], abs=0.002)  # a CPU run: the host step
        parts = sum(v for k, v in step.items() if k.endswith("_us") and k not in ("total_us", "start_us"))
        assert parts == pytest.approx(step["total_us"], abs=0.01)
    if run != "static_mlp":  # the dygraph runs read a DataLoader each step
        assert all(s["dataloader_us"] > 0 for s in overview["steps"])


def test_operator_numbers_match_the_raw_json(server) -> None:  # type: ignore[no-untyped-def]
    raw = raw_trace("mlp")
    durations: dict[str, list[float]] = defaultdict(list)
    for event in raw["traceEvents"]:
        if event.get("cat") in ("Operator", "OperatorInner", "DygraphKernelLaunch"):
            durations[raw_name(event)].append(event["dur"])
    rows = {r["name"]: r for r in get(server, "/api/operators", run="mlp")["rows"]}
    for name in ("matmul dygraph", "adam_ dygraph", "matmul kernel launch", "relu infer_meta"):
        assert rows[name]["calls"] == len(durations[name])
        assert rows[name]["host_total_us"] == pytest.approx(sum(durations[name]), abs=0.01)
    # matmul dygraph's self time: its total less its direct children on the same thread
    children = sum(
        durations["matmul infer_meta"] + durations["matmul kernel launch"] + durations["matmul node_creation"]
    )
    assert rows["matmul dygraph"]["host_self_us"] == pytest.approx(
        sum(durations["matmul dygraph"]) - children, abs=0.01
    )


@pytest.mark.parametrize("run", RUNS)
def test_every_view_answers_on_a_paddle_run(server, run: str) -> None:  # type: ignore[no-untyped-def]
    runs = {r["run"]: r for r in get(server, "/api/runs")["runs"]}
    assert runs[run]["state"] == "ready" and runs[run]["errors"] == []
    assert {"overview", "operators", "memory", "trace"} <= set(runs[run]["views"])
    assert get(server, "/api/kernels", run=run)["rows"] == []  # CPU only
    memory = get(server, "/api/memory", run=run)
    raw = raw_trace(run)
    allocated = [e["args"]["current_allocated"] for e in raw["traceEvents"] if e.get("name") == "[memory]"]
    assert memory["devices"] == ["CPU"] and memory["peak_allocated_bytes"] == max(allocated)
    distributed = get(server, "/api/distributed", run=run)
    assert distributed["workers"] == 1
    tracks = get(server, "/api/timeline/tracks", run=run)
    names = {t["name"] for t in tracks["tracks"]}
    pid = next(e["pid"] for e in raw["traceEvents"] if e.get("cat") == "ProfileStep")
    assert f"thread {pid}:MainThread(Python)" in names and f"thread {pid}:MainThread(C++)" in names


def test_a_broken_paddle_file_fails_alone_with_a_clear_message(server) -> None:  # type: ignore[no-untyped-def]
    runs = {r["run"]: r for r in get(server, "/api/runs")["runs"]}
    assert runs["broken"]["state"] == "error"
    (error,) = runs["broken"]["errors"]
    assert "PaddlePaddle profiler trace that cannot be read" in error["message"]
    assert httpx.get(f"{server}/api/overview", params={"run": "broken"}).status_code == 422
    assert runs["mlp"]["state"] == "ready"


def test_the_paddle_summary_route_serves_the_analysis_for_paddle_runs_only(server) -> None:  # type: ignore[no-untyped-def]
    runs = {r["run"]: r for r in get(server, "/api/runs")["runs"]}
    assert "paddle" in runs["mlp"]["views"] and "paddle" not in runs["kineto"]["views"]
    body = get(server, "/api/paddle/summary", run="mlp", unit="us")
    assert body["unit"] == "us" and body["unit_ns"] == 1000.0
    expected = json.loads(json.dumps(paddle_summary(parsed("mlp"))))
    assert {key: body[key] for key in expected} == expected
    refused = httpx.get(f"{server}/api/paddle/summary", params={"run": "kineto"})
    assert refused.status_code == 404 and "not one" in refused.json()["detail"]
    assert httpx.get(f"{server}/paddle", params={"run": "mlp"}).status_code == 200
