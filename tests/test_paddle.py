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


def test_paddle_protobuf_profiles_are_listed_with_the_reason_they_are_not_read() -> None:
    found = classify("runs/x/host_apid_1_time_2026_01_01_00_00_00_000001.paddle_trace.pb")
    assert found is not None and "export_chrome_tracing" in str(found[3])


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
    distributed = get(server, "/api/distributed", run=run)  # one process: the view says why it does not apply
    assert distributed["applies"] is False and "one trace" in distributed["reason"]
    assert "one trace" in runs[run]["unavailable"]["distributed"]
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
    assert "PaddlePaddle" in runs["kineto"]["unavailable"]["paddle"]
    body = get(server, "/api/paddle/summary", run="mlp", unit="us")
    assert body["unit"] == "us" and body["unit_ns"] == 1000.0
    expected = json.loads(json.dumps(paddle_summary(parsed("mlp"))))
    assert body["applies"] is True and {key: body[key] for key in expected} == expected
    refused = get(server, "/api/paddle/summary", run="kineto")
    assert refused["applies"] is False and "not one" in refused["reason"] and "operators" not in refused
    assert httpx.get(f"{server}/paddle", params={"run": "mlp"}).status_code == 200


# ---- the hand-written GPU-shaped trace (tests/data/paddle/gpu, times chosen by hand) ----------------
GPU_RUN = "gpu"


def gpu_trace(rank: int) -> TraceTables:
    (path,) = sorted((PADDLE_DATA / GPU_RUN).glob(f"rank{rank}_time_*.paddle_trace.json"))
    with open(path, "rb") as raw:
        return parse_any_trace(raw)


def test_gpu_events_keep_launch_links_kernel_args_shapes_and_stacks() -> None:
    tables = gpu_trace(0)
    events, kernels = tables.events, tables.table("kernels")
    kinds = np.asarray(events["kind"])
    assert (kinds == Kind.KERNEL).sum() == 8 and (kinds == Kind.MEMCPY).sum() == 2 and (kinds == Kind.MEMSET).sum() == 2
    assert (kinds == Kind.RUNTIME).sum() == 12
    device_rows = np.asarray(kernels["event"])
    runtime_correlations = set(np.asarray(events["correlation"])[kinds == Kind.RUNTIME].tolist())
    assert set(np.asarray(events["correlation"])[device_rows].tolist()) == runtime_correlations == set(range(1, 13))
    first = {tables.strings[int(events["name"][row])]: i for i, row in enumerate(device_rows.tolist())}
    sgemm = first["volta_sgemm_128x64_nn"]
    assert [int(kernels[c][sgemm]) for c in ("device", "stream", "grid_x", "grid_y", "block_x")] == [0, 7, 2, 4, 256]
    assert float(kernels["est_occupancy_pct"][sgemm]) == 25.0 and int(kernels["registers_per_thread"][sgemm]) == 128
    assert int(kernels["bytes"][first["Memcpy HtoD (Pageable -> Device)"]]) == 4096
    ops = tables.table("ops")
    (matmul,) = [
        i for i, row in enumerate(ops["event"]) if tables.strings[int(events["name"][row])] == "matmul dygraph"
    ][:1]
    assert tables.strings[int(ops["input_dims"][matmul])] == '{"X":[[64,128]],"Y":[[128,256]]}'
    assert tables.strings[int(ops["input_types"][matmul])] == '{"X":["float32"],"Y":["float32"]}'
    assert tables.strings[int(ops["call_stack"][matmul])] == "train.py(42): forward"
    memory = tables.table("memory")
    assert set(np.asarray(memory["device_type"]).tolist()) == {1} and set(np.asarray(memory["device_id"]).tolist()) == {
        0
    }
    assert tables.meta["deviceProperties"][0]["numSms"] == 80
    assert {t.thread_name for t in tables.tracks if t.pid == "0"} == {"stream 7"}


def test_gpu_kernel_view_by_hand(server) -> None:  # type: ignore[no-untyped-def]
    rows = {r["name"]: r for r in get(server, "/api/kernels", run=GPU_RUN)["rows"]}
    expected = {  # (calls, total, max, min) µs, from the times written in write_gpu_traces.py
        "ncclKernel_AllReduce_RING_LL_Sum_float": (2, 340.0, 170.0, 170.0),
        "volta_sgemm_128x64_nn": (2, 80.0, 50.0, 30.0),
        "volta_sgemm_128x64_nt": (2, 60.0, 30.0, 30.0),
        "adam_kernel": (2, 40.0, 20.0, 20.0),
    }
    assert {n: (r["calls"], r["total_us"], r["max_us"], r["min_us"]) for n, r in rows.items()} == expected
    by_op = get(server, "/api/kernels", run=GPU_RUN, group_by="kernel_op")["rows"]
    launched_by = {r["name"]: r["operator"] for r in by_op}
    assert launched_by["volta_sgemm_128x64_nn"] == "matmul kernel launch"
    assert launched_by["ncclKernel_AllReduce_RING_LL_Sum_float"] == "ProcessGroupNCCL::AllReduce"
    assert launched_by["adam_kernel"] == "adam_ dygraph"


def test_gpu_overview_steps_by_hand(server) -> None:  # type: ignore[no-untyped-def]
    steps = get(server, "/api/overview", run=GPU_RUN)["steps"]
    # step 1: kernels 50 + 30 + 20; the all-reduce's 170 less the 20 the Adam kernel overlaps; launches
    # 6 x 10 less the one inside the forward kernel and the one inside the all-reduce
    got = [{k: s[k] for k in ("total_us", "kernel_us", "memcpy_us", "memset_us", "communication_us", "runtime_us")}
           for s in steps]  # fmt: skip
    assert got == [
        {"total_us": 1000.0, "kernel_us": 100.0, "memcpy_us": 10.0, "memset_us": 4.0, "communication_us": 150.0,
         "runtime_us": 40.0},
        {"total_us": 1000.0, "kernel_us": 80.0, "memcpy_us": 10.0, "memset_us": 4.0, "communication_us": 150.0,
         "runtime_us": 50.0},
    ]  # fmt: skip
    for step in steps:
        parts = sum(v for k, v in step.items() if k.endswith("_us") and k not in ("total_us", "start_us"))
        assert parts == pytest.approx(step["total_us"])


def test_gpu_distributed_view_by_hand(server) -> None:  # type: ignore[no-untyped-def]
    body = get(server, "/api/distributed", run=GPU_RUN)
    assert body["workers"] == 2
    ranks = {r["rank"]: r for r in body["ranks"]}
    # per step: all-reduce 170 µs on rank 0 and 140 µs on rank 1 (it starts 30 µs later), 20 µs of it
    # overlapped by the Adam kernel; computation = kernels other than NCCL less that overlap
    assert [(s["communication_us"], s["overlapping_us"], s["computation_us"]) for s in ranks[0]["steps"]] == [
        (150.0, 20.0, 80.0), (150.0, 20.0, 60.0)]  # fmt: skip
    assert [(s["communication_us"], s["overlapping_us"], s["computation_us"]) for s in ranks[1]["steps"]] == [
        (120.0, 20.0, 80.0), (120.0, 20.0, 60.0)]  # fmt: skip
    (collective,) = [c for c in body["collectives"] if c["ordinal"] == 0]
    assert collective["last_rank"] == 1 and collective["skew_us"] == 30.0
    straggler = {s["rank"]: s for s in body["stragglers"]}
    assert straggler[1]["lost_us"] == 60.0 and straggler[0]["lost_us"] == 0.0


# ---- a real 2-rank job (paddle.distributed.launch, gloo) with Paddle's default file names ---------------
def rank_files(run: str) -> list[tuple[str, dict[str, Any]]]:
    """(worker, raw trace) of each file of a multi-process recording, by process id."""
    found = []
    for path in sorted((PADDLE_DATA / run).glob("*.paddle_trace.json.gz")):
        worker = classify(f"{run}/{path.name}")[1]  # type: ignore[index]
        found.append((worker, json.loads(gzip.decompress(path.read_bytes()))))
    return sorted(
        found, key=lambda item: next(e["pid"] for e in item[1]["traceEvents"] if e.get("cat") == "ProfileStep")
    )


def raw_events(raw: dict[str, Any], category: str, name: str | None = None) -> list[dict[str, Any]]:
    return sorted((e for e in raw["traceEvents"] if e.get("cat") == category and name in (None, raw_name(e))),
                  key=lambda e: e["ts"])  # fmt: skip


def test_a_launched_job_with_default_names_is_distributed_with_inferred_ranks(server) -> None:  # type: ignore[no-untyped-def]
    ranks = rank_files("two_ranks")
    workers = [worker for worker, _ in ranks]
    assert all(worker.startswith("host_") for worker in workers)  # Paddle's default names: no rank in them
    runs = {r["run"]: r for r in get(server, "/api/runs")["runs"]}
    assert "distributed" in runs["two_ranks"]["views"]
    # numbered by process id on one host: the launcher started rank 0 first
    assert [(w["worker"], w["inferred_rank"]) for w in runs["two_ranks"]["workers"]] == [
        (workers[0], 0),
        (workers[1], 1),
    ]
    body = get(server, "/api/distributed", run="two_ranks")
    assert body["applies"] is True and body["workers"] == 2
    assert [(r["worker"], r["rank"], r["rank_source"]) for r in body["ranks"]] == [
        (workers[0], 0, "inferred"), (workers[1], 1, "inferred")]  # fmt: skip
    assert any("inferred" in warning and workers[0] in warning for warning in body["warnings"])
    durations = []  # each rank's all-reduce durations, by hand from the raw events
    for row, (_, raw) in zip(body["ranks"], ranks, strict=True):
        calls = raw_events(raw, "Operator", "all_reduce dygraph")
        steps = raw_events(raw, "ProfileStep")
        assert row["calls"] == len(calls) == len(steps) == 3  # one all-reduce of the loss per step
        for step, call in zip(row["steps"], calls, strict=True):
            # the thread waits inside the collective: none of it is computation, so no overlap
            assert step["communication_us"] == pytest.approx(call["dur"], abs=0.002)
            assert step["overlapping_us"] == 0.0
        durations.append([call["dur"] for call in calls])
    transfer = sum(min(pair) for pair in zip(*durations, strict=True))  # each call: the faster rank's duration
    for rank, own in enumerate(durations):
        (stats,) = [s for s in body["op_stats"] if s["rank"] == rank]
        assert (stats["name"], stats["calls"]) == ("all_reduce dygraph", 3)
        assert stats["total_latency_us"] == pytest.approx(sum(own), abs=0.005)
        assert stats["data_transfer_us"] == pytest.approx(transfer, abs=0.005)
        assert stats["synchronizing_us"] == pytest.approx(sum(own) - transfer, abs=0.005)
    assert body["matching"]["calls"] == 6 and body["alignment"]["method"] == "wall clock"
    host = re.match(r"host_(.*)pid_", workers[0]).group(1)  # type: ignore[union-attr]
    assert [node["host"] for node in body["topology"]] == [host]  # from Paddle's name host_{hostname}pid_{pid}


def test_the_diff_pairs_inferred_ranks_with_named_ranks(server) -> None:  # type: ignore[no-untyped-def]
    body = get(server, "/api/diff", run="two_ranks", base_run=GPU_RUN)
    workers = [worker for worker, _ in rank_files("two_ranks")]
    pairs = [(row["rank"], row["base_worker"], row["target_worker"]) for row in body["distributed"]["ranks"]]
    assert pairs == [(0, "rank0", workers[0]), (1, "rank1", workers[1])]
    gpu = get(server, "/api/distributed", run=GPU_RUN)  # rank{N} names: ranks from the name, not inferred
    assert [(r["worker"], r["rank_source"]) for r in gpu["ranks"]] == [("rank0", "name"), ("rank1", "name")]


def test_two_paddle_jobs_one_after_the_other_are_not_ranks(server) -> None:  # type: ignore[no-untyped-def]
    (_, first), (_, second) = rank_files("two_jobs")
    assert max(e["ts"] + e.get("dur", 0) for e in first["traceEvents"] if "ts" in e) < min(
        e["ts"] for e in second["traceEvents"] if "ts" in e)  # fmt: skip
    runs = {r["run"]: r for r in get(server, "/api/runs")["runs"]}
    assert "distributed" not in runs["two_jobs"]["views"]
    assert "do not all overlap" in runs["two_jobs"]["unavailable"]["distributed"]
    assert all("inferred_rank" not in w for w in runs["two_jobs"]["workers"])
    body = get(server, "/api/distributed", run="two_jobs")
    assert body["applies"] is False and "separate jobs" in body["reason"]


def test_gpu_paddle_summary_by_hand() -> None:
    summary = paddle_summary(gpu_trace(0))
    assert summary["total_ns"] == 2_000_000
    # communication: host event [710, 760] and the all-reduce [730, 900] merged = 190 µs a step;
    # computation: the other kernels, 100 + 80; overlap: the Adam kernel inside the all-reduce, 20 a step
    assert {k: v["time_ns"] for k, v in summary["distribution"].items()} == {
        "ProfileStep": 2_000_000, "Communication": 380_000, "Computation": 180_000, "Overlap": 40_000}  # fmt: skip
    gpu = {r["type"]: (r["calls"], r["time_ns"]) for r in summary["overview"]["gpu"]}
    assert gpu == {"Kernel": (8, 480_000), "Memcpy": (2, 20_000), "Memset": (2, 8_000), "Communication": (2, 340_000)}
    model = {r["name"]: r for r in summary["model"]}
    # kernels launched inside each phase: Forward 50 + 30; Optimization the Adam kernel, 2 x 20 (the
    # all-reduce is launched from the Communication event between Backward and Optimization)
    assert model["Forward"]["gpu"]["total_ns"] == 80_000 and model["Optimization"]["gpu"]["total_ns"] == 40_000
    assert model["Others"]["gpu"]["total_ns"] == 520_000 - 80_000 - 60_000 - 40_000
    operators = {r["name"]: r for r in summary["operators"]}
    assert operators["copy_to dygraph"]["gpu"]["total_ns"] == 20_000  # memcpy counts in the operator's GPU time
    (launch,) = operators["matmul dygraph"]["inner"]
    assert launch["name"] == "matmul kernel launch" and launch["kernels"][0]["gpu"]["total_ns"] == 80_000
    kernels = {r["name"]: (r["calls"], r["gpu"]["total_ns"]) for r in summary["kernels"]}
    assert kernels["volta_sgemm_128x64_nn"] == (2, 80_000) and sum(k[1] for k in kernels.values()) == 520_000
    (place,) = summary["memory"]
    assert place["place"] == "Place(gpu:0)" and place["peak_allocated_bytes"] == 4096
    rows = {r["name"]: (r["allocation_count"], r["free_count"], r["increased_bytes"]) for r in place["rows"]}
    assert rows == {"matmul dygraph": (2, 0, 8192), "adam_ dygraph": (0, 2, -8192)}


def test_gpu_operator_view_has_paddles_input_shapes_and_call_stacks(server) -> None:  # type: ignore[no-untyped-def]
    rows = get(server, "/api/operators", run=GPU_RUN, group_by="operator_input_shape")["rows"]
    (matmul,) = [r for r in rows if r["name"] == "matmul dygraph"]
    assert matmul["input_shape"] == '{"X":[[64,128]],"Y":[[128,256]]}' and matmul["calls"] == 2
    assert matmul["device_total_us"] == pytest.approx(80.0)  # the forward kernel, 50 + 30, launched inside it
    stacks = get(server, "/api/operators/stacks", run=GPU_RUN, name="matmul dygraph")["stacks"]
    assert [frame["text"] for frame in stacks[0]["frames"]][:1] == ["train.py(42): forward"]


def test_odd_values_in_a_paddle_trace_lose_only_their_own_event(tmp_path: Path) -> None:
    raw = raw_trace("mlp")
    raw["span_indx"] = raw.pop("span_index")  # older Paddle versions spell it so
    events = raw["traceEvents"]
    operators = [i for i, e in enumerate(events) if e.get("cat") == "Operator"]
    events[operators[0]]["args"] = ["not", "an", "object"]
    events[operators[1]]["dur"] = "long"
    events[operators[2]]["ts"] = "yesterday"
    events[operators[3]]["args"]["start_time"] = "soon"
    path = tmp_path / "odd.paddle_trace.json"
    path.write_text(json.dumps(raw))
    with open(path, "rb") as stream:
        tables = parse_any_trace(stream)
    assert tables.meta["paddle"]["span_index"] == 0
    warnings = {w["message"]: w["count"] for w in tables.meta["warnings"]}
    assert warnings["1 items of the event list are not Paddle events and were skipped"] == 1  # the list args
    assert warnings["events without a usable 'ts' were skipped"] == 1
    complete = [e for e in events if e.get("ph") == "X"]
    assert tables.row_count("events") == len(complete) - 2  # the list-args one and the one without a time
    assert tables.row_count("ops") == 0  # the "{}" shapes of the events read one at a time are still absent
