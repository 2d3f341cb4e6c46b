"""Distributed view: per-rank summaries and the cross-rank build, checked against numbers computed here
directly from the traces' JSON events (independently of profscope's parser), and against
torch-tb-profiler 0.4.3's own Distributed view on the 4-rank gloo job."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from functools import cache
from pathlib import Path

import orjson
import pytest

from conftest import REPO, corpus_file
from profscope.analysis import name_rules
from profscope.analysis.context import TraceContext
from profscope.analysis.distributed import build_distributed, rank_from_name, summary_from_json
from profscope.analysis.rank_summary import rank_summary
from profscope.cache import dumps
from profscope.ingest.kineto import parse_trace_file

GLOO = "generated/tinygpt_ddp4_gloo"
GLOO_SPANS = {  # the n-th span of every rank is the same profiling window
    1: ["rank0.1795315503706026973", "rank1.1795315503666467455", "rank2.1795315503654737161",
        "rank3.1795315503686651177"],
    2: ["rank0.1795315510828158212", "rank1.1795315510863218730", "rank2.1795315510854734064",
        "rank3.1795315510872832044"],
}  # fmt: skip
TRACE_FILTER = ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"]
REFERENCE = REPO / "tests" / "reference_data" / "generated__tinygpt_ddp4_gloo.tbprof-distributed.json"


@cache
def summary_of(relative: str) -> bytes:
    """The ``distributed.rank`` payload of a corpus trace, as the cache stores it."""
    tables = parse_trace_file(corpus_file(relative))
    context = TraceContext(tables)
    return dumps(rank_summary(tables, context.tree, context.steps))


def item(relative: str, worker: str | None = None) -> dict:
    summary, error = summary_from_json(summary_of(relative))
    assert error is None
    name = worker or Path(relative).name.split(".")[0]
    return {"worker": name, "span": "1", "file": relative, "summary": summary}


def gloo_items(span: int, ranks: tuple[int, ...] = (0, 1, 2, 3)) -> list[dict]:
    return [item(f"{GLOO}/{GLOO_SPANS[span][r]}.pt.trace.json.gz") for r in ranks]


def raw(relative: str) -> dict:
    with gzip.open(corpus_file(relative)) as f:
        return json.load(f)


def gloo_calls_from_json(relative: str, epoch_ns: int = 1_790_000_000 * 10**9) -> list[tuple[float, float]]:
    """(start µs on the wall clock since ``epoch_ns``, duration µs) of each gloo:all_reduce, from the JSON.
    (``ts`` is relative to ``baseTimeNanoseconds``; a nearby epoch keeps float precision below 1 ns.)"""
    trace = raw(relative)
    base_us = (trace["baseTimeNanoseconds"] - epoch_ns) / 1000
    calls = [(base_us + e["ts"], e["dur"]) for e in trace["traceEvents"] if e.get("name") == "gloo:all_reduce"]
    return sorted(calls)


# ---- the 4-rank gloo job (CPU only) ---------------------------------------------------------------
@pytest.mark.parametrize("span", [1, 2])
def test_gloo_transfer_synchronizing_and_stragglers_by_hand(span: int) -> None:
    files = [f"{GLOO}/{name}.pt.trace.json.gz" for name in GLOO_SPANS[span]]
    calls = [gloo_calls_from_json(f) for f in files]  # per rank, in start order
    assert {len(c) for c in calls} == {3}
    min_duration = [min(calls[r][i][1] for r in range(4)) for i in range(3)]
    view = build_distributed(gloo_items(span))
    ranks = {r["rank"]: r for r in view["ranks"]}
    for r in range(4):
        transfer = sum(min_duration)
        synchronizing = sum(calls[r][i][1] - min_duration[i] for i in range(3))
        steps = ranks[r]["steps"]
        assert sum(s["data_transfer_us"] for s in steps) == pytest.approx(transfer, abs=0.01)
        assert sum(s["synchronizing_us"] for s in steps) == pytest.approx(synchronizing, abs=0.01)
        (stats,) = [row for row in view["op_stats"] if row["rank"] == r]
        assert stats["name"] == "gloo:all_reduce" and stats["calls"] == 3
        assert stats["total_bytes"] == 3 * 166016 * 4  # Input Dims [[166016]] of float
        assert stats["total_latency_us"] == pytest.approx(sum(d for _, d in calls[r]), abs=0.01)
    # arrivals on the wall clock: the last rank to start each call makes the others wait
    expected_last, expected_lost = [], []
    for i in range(3):
        starts = [calls[r][i][0] for r in range(4)]
        last = max(range(4), key=lambda r: starts[r])
        expected_last.append(last)
        expected_lost.append(sum(starts[last] - s for s in starts))
    by_ordinal = {c["ordinal"]: c for c in view["collectives"]}
    for i in range(3):
        assert by_ordinal[i]["last_rank"] == expected_last[i]
        assert by_ordinal[i]["lost_us"] == pytest.approx(expected_lost[i], abs=0.01)
        assert by_ordinal[i]["data_transfer_us"] == pytest.approx(min_duration[i], abs=0.01)
    stragglers = {s["rank"]: s for s in view["stragglers"]}
    for r in range(4):
        assert stragglers[r]["last_count"] == expected_last.count(r)
        assert stragglers[r]["lost_us"] == pytest.approx(
            sum(lost for lost, last in zip(expected_lost, expected_last, strict=True) if last == r), abs=0.01
        )
    slowest = [s for s in view["stragglers"] if s["slowest"]]
    assert len(slowest) == 1
    assert slowest[0]["lost_us"] == max(s["lost_us"] for s in view["stragglers"])
    assert view["alignment"]["method"] == "wall clock"
    assert view["warnings"] == []
    assert [p["name"] for p in view["process_groups"]] == ["0"]  # gloo ops carry no group: the only one


def test_gloo_matches_torch_tb_profiler_distributed_view() -> None:
    """Every rank's per-step Computation/Overlapping/Communication/Other and Data Transfer/Synchronizing,
    against the plugin's own objects (bench/reference/tbprof_distributed_dump.py, kineto-main categories)."""
    reference = json.loads(REFERENCE.read_text())
    for name, digest in reference["sha256"].items():
        assert hashlib.sha256(corpus_file(f"{GLOO}/{name}").read_bytes()).hexdigest() == digest
    for span in GLOO_SPANS:
        expected = reference["spans"][str(span)]
        assert expected["enabled"]
        view = build_distributed(gloo_items(span))
        for row in view["ranks"]:
            plugin = expected["workers"][row["worker"]]
            assert [s["step"] for s in row["steps"]] == plugin["steps"]
            for step in row["steps"]:
                # the plugin counts the ops and annotations around a gloo call as computing while the
                # rank waits in it (all "Overlapping", Communication 0); here they are not (issue 17
                # item 6, docs/definitions.md "Distributed totals"): the communication time is the same,
                # and the plugin's computation only gains what this view does not call computation
                computation, overlapping, communication, other = plugin["overlap"][step["step"]]
                total = computation + overlapping + communication + other
                assert step["overlapping_us"] + step["communication_us"] == pytest.approx(
                    overlapping + communication, abs=0.002
                )
                assert step["computation_us"] + step["overlapping_us"] <= computation + overlapping + 0.002
                assert sum(step[k] for k in ("computation_us", "overlapping_us", "communication_us", "other_us")) == (
                    pytest.approx(total, abs=0.002)
                )
                transfer, sync = plugin["wait"][step["step"]]
                assert step["data_transfer_us"] == pytest.approx(transfer, abs=0.002)
                assert step["synchronizing_us"] == pytest.approx(sync, abs=0.002)
            (stats,) = [s for s in view["op_stats"] if s["worker"] == row["worker"]]
            ops = plugin["comm_ops"]["gloo:all_reduce"]
            assert stats["calls"] == ops["calls"] and stats["total_bytes"] == ops["total_bytes"]
            assert stats["total_latency_us"] == pytest.approx(ops["total_latency_us"], abs=0.002)
            assert stats["data_transfer_us"] == pytest.approx(ops["data_transfer_us"], abs=0.002)


def test_a_missing_rank_still_shows_the_view_with_a_warning() -> None:
    view = build_distributed(gloo_items(1, ranks=(0, 1, 3)))
    assert [r["rank"] for r in view["ranks"]] == [0, 1, 3]
    assert any("3 of 4 ranks" in w and "missing: 2" in w for w in view["warnings"])
    assert all(r["computation_us"] is not None for r in view["ranks"])
    assert len(view["collectives"]) == 3 and all(c["ranks"] == 3 for c in view["collectives"])


def test_a_rank_that_failed_is_reported_and_the_others_shown() -> None:
    items = gloo_items(1, ranks=(0, 1, 2))
    items.append({"worker": "rank3", "span": "1", "file": "rank3.bad.pt.trace.json.gz", "error": "truncated gzip"})
    view = build_distributed(items)
    failed = [r for r in view["ranks"] if r["state"] == "error"]
    assert [(r["worker"], r["rank"], r["rank_source"]) for r in failed] == [("rank3", 3, "name")]
    assert any("rank3" in w and "truncated gzip" in w for w in view["warnings"])
    assert sum(r["state"] == "ready" for r in view["ranks"]) == 3


def test_ranks_that_disagree_are_matched_where_they_can_be() -> None:
    """Rank 0 of span 1 with ranks 1-3 of span 2: same number of calls, but compared with
    another window; a rank with an extra call is reported, not hidden."""
    items = gloo_items(1)
    summary = items[3]["summary"]
    table = summary["collectives"]
    for column, values in list(table.items()):
        if column not in ("names", "kinds", "dtypes"):
            table[column] = values[:2]  # rank 3 lost its last call
    view = build_distributed(items)
    assert view["matching"]["complete"] == 2 and view["matching"]["partial"] == 1
    assert any("2 of 3 collectives were found on every rank" in w for w in view["warnings"])
    partial = [c for c in view["collectives"] if c["ranks"] == 3]
    assert all(c["expected_ranks"] == 4 for c in partial)


# ---- NCCL ranks ------------------------------------------------------------------------------------
def _kernel_calls_from_json(relative: str) -> list[tuple[str, float, float, float]]:
    """(nccl:* op name, absolute start µs, duration µs, ts) of each NCCL kernel: its launch is the
    cuda_runtime with the same correlation, which lies inside an ``nccl:*`` annotation of its thread."""
    events = raw(relative)["traceEvents"]
    runtime = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    annotations = [e for e in events if str(e.get("name", "")).startswith("nccl:")]
    found = []
    for kernel in events:
        if kernel.get("cat") != "kernel" or not kernel["name"].startswith("ncclKernel"):
            continue
        launch = runtime[kernel["args"]["correlation"]]
        start, end = launch["ts"], launch["ts"] + launch["dur"]
        (op,) = [a for a in annotations if a["tid"] == launch["tid"] and a["ts"] <= start and end <= a["ts"] + a["dur"]]
        found.append((op["name"], kernel["ts"], kernel["dur"]))
    return sorted(found, key=lambda c: c[1])


def test_trace_filter_two_nccl_ranks_by_hand() -> None:
    calls = [_kernel_calls_from_json(f) for f in TRACE_FILTER]
    view = build_distributed([item(f) for f in TRACE_FILTER])
    assert [(r["rank"], r["rank_source"], r["mode"]) for r in view["ranks"]] == [
        (0, "distributedInfo", "device"),
        (1, "distributedInfo", "device"),
    ]
    assert any("2 of 128 ranks" in w for w in view["warnings"])
    # the n-th call of each op on rank 0 is the n-th on rank 1; transfer = the shorter of the two
    for op in ("nccl:all_reduce", "nccl:all_to_all", "nccl:_all_gather_base"):
        mine = [[(ts, dur) for name, ts, dur in c if name == op] for c in calls]
        assert len(mine[0]) == len(mine[1]) > 0
        transfer = sum(min(a[1], b[1]) for a, b in zip(mine[0], mine[1], strict=True))
        for rank in (0, 1):
            (stats,) = [s for s in view["op_stats"] if s["rank"] == rank and s["name"] == op]
            assert stats["calls"] == len(mine[rank])
            assert stats["total_latency_us"] == pytest.approx(sum(d for _, d in mine[rank]))
            assert stats["data_transfer_us"] == pytest.approx(transfer)
        # arrival skew of each call: trace_filter has absolute epoch-µs timestamps
        for index, (a, b) in enumerate(zip(mine[0], mine[1], strict=True)):
            row = next((c for c in view["collectives"] if c["name"] == op and c["ordinal"] == index), None)
            if row is None:  # not listed: nobody waited
                assert a[0] == b[0]
                continue
            assert row["skew_us"] == pytest.approx(abs(a[0] - b[0]))
            assert row["last_rank"] == (0 if a[0] > b[0] else 1)
    # all-reduce sizes: Input Dims of the nccl:all_reduce annotation × 4 bytes (float)
    events = raw(TRACE_FILTER[0])["traceEvents"]
    sizes = [e["args"]["Input Dims"][0][0] * 4 for e in events if e.get("name") == "nccl:all_reduce"]
    (stats,) = [s for s in view["op_stats"] if s["rank"] == 0 and s["name"] == "nccl:all_reduce"]
    assert stats["total_bytes"] == sum(sizes)
    assert any("different sizes" in w for w in view["warnings"])  # the sampled ranks' all-reduces differ


def test_single_nccl_rank_with_collective_args() -> None:
    relative = "hta/nccl_parser_config/nccl_data.json.gz"
    view = build_distributed([item(relative, "rank0")])
    (row,) = view["ranks"]
    assert row["rank"] == 0 and row["world_size"] == 2 and row["mode"] == "device"
    events = raw(relative)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel")]
    assert row["calls"] == len(kernels)
    stats = {s["name"]: s for s in view["op_stats"]}
    # sizes from the kernels' own collective args: In msg nelems × dtype size
    element = {"Float": 4, "Long": 8}
    for name in ("allreduce", "broadcast"):
        mine = [k for k in kernels if k["args"]["Collective name"] == name]
        assert stats[name]["calls"] == len(mine)
        assert stats[name]["total_bytes"] == sum(k["args"]["In msg nelems"] * element[k["args"]["dtype"]] for k in mine)
        # one rank: every call is pure data transfer
        assert stats[name]["synchronizing_us"] == pytest.approx(0.0)
    (group,) = view["process_groups"]
    assert group["name"] == "0" and group["desc"] == "default_pg" and group["ranks"] == [0, 1]
    assert group["dimension"] == "world"
    topology = view["topology"][0]["processes"][0]
    assert topology["gpus"][0]["name"] == "NVIDIA A100-PG509-200"
    assert topology["gpus"][0]["memory_bytes"] == 42297524224
    hta = row["hta"]
    assert hta["temporal"]["idle_us"] + hta["temporal"]["compute_us"] + hta["temporal"]["non_compute_us"] == (
        pytest.approx(hta["temporal"]["window_us"])
    )
    assert 0.0 <= hta["comm_comp_overlap_ratio"] <= 1.0
    assert hta["kernel_types"]["COMM"]["count"] == len(kernels)
    assert hta["kernel_types"]["COMM"]["time_us"] == pytest.approx(sum(k["dur"] for k in kernels), abs=0.01)


def test_collectives_that_launched_no_kernel_are_explained() -> None:
    """A world-size-1 NCCL job: its nccl:* ops ran no kernel, so the GPU rank has no call to time; the view says
    why instead of showing 0 calls unexplained. A rank whose ops did launch kernels gets no such note."""
    relative = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    trace = raw(relative)
    assert trace["distributedInfo"]["world_size"] == 1
    ops = Counter(e["name"] for e in trace["traceEvents"] if str(e.get("name", "")).startswith("nccl:"))
    (row,) = build_distributed([item(relative, "rank0")])["ranks"]
    assert row["mode"] == "device" and row["calls"] == 0
    (note,) = row["warnings"]
    assert note.startswith(f"{sum(ops.values())} collective op(s) (")
    assert all(f"{name} \u00d7{count}" in note for name, count in ops.items()), (ops, note)
    (other,) = build_distributed([item("hta/nccl_parser_config/nccl_data.json.gz", "rank0")])["ranks"]
    assert other["calls"] > 0 and other["warnings"] == []


def test_hta_temporal_breakdown_by_hand() -> None:
    """Window = first device activity to last end; idle = window − union of device activities."""
    relative = "hta/nccl_parser_config/nccl_data.json.gz"
    events = raw(relative)["traceEvents"]
    first = min(e["ts"] for e in events if "ts" in e)
    ns = [  # integer ns from the first event: float µs sums would drift by tenths of a ns per event
        (round((e["ts"] - first) * 1000), round((e["ts"] - first) * 1000) + round(e["dur"] * 1000))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    device = sorted((start / 1000, end / 1000) for start, end in ns)
    busy, current = 0.0, None
    for start, end in device:
        if current is None or start > current[1]:
            if current:
                busy += current[1] - current[0]
            current = [start, end]
        else:
            current[1] = max(current[1], end)
    busy += current[1] - current[0]
    window = max(end for _, end in device) - device[0][0]
    (row,) = build_distributed([item(relative, "rank0")])["ranks"]
    assert row["hta"]["temporal"]["window_us"] == pytest.approx(window, abs=0.01)
    assert row["hta"]["temporal"]["idle_us"] == pytest.approx(window - busy, abs=0.05)


def test_hta_idle_time_breakdown_by_hand() -> None:
    """Per stream, the gap before each device activity (after the end of everything before it on its stream) is
    host wait when its launch (the runtime call with its correlation) started after that end, else kernel wait
    under 30 µs, else other (HTA's ``get_idle_time_breakdown``, ``consecutive_kernel_delay`` = 30 µs)."""
    relative = "hta/nccl_parser_config/nccl_data.json.gz"
    events = raw(relative)["traceEvents"]
    first = min(e["ts"] for e in events if "ts" in e)

    def ns(ts: float) -> int:
        return round((ts - first) * 1000)

    launches = {e["args"]["correlation"]: ns(e["ts"]) for e in events if e.get("cat") == "cuda_runtime"}
    streams: dict[tuple, list[tuple[int, int, int | None]]] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start = ns(e["ts"])
            key = (e["args"]["device"], e["args"]["stream"])
            streams.setdefault(key, []).append(
                (start, start + round(e["dur"] * 1000), launches.get(e["args"]["correlation"]))
            )
    expected = {}
    for key, activities in streams.items():
        waits = {"host_wait_us": 0, "kernel_wait_us": 0, "other_us": 0}
        activities.sort()
        busy_until = activities[0][1]
        for start, end, launch in activities[1:]:
            gap = max(0, start - busy_until)
            if launch is not None and launch > busy_until:
                waits["host_wait_us"] += gap
            elif gap < 30_000:
                waits["kernel_wait_us"] += gap
            else:
                waits["other_us"] += gap
            busy_until = max(busy_until, end)
        expected[key] = {k: v / 1000 for k, v in waits.items()}
    (row,) = build_distributed([item(relative, "rank0")])["ranks"]
    idle = row["hta"]["idle"]
    mine = {
        (s["device"], s["stream"]): {k: s[k] for k in ("host_wait_us", "kernel_wait_us", "other_us")}
        for s in idle["streams"]
    }
    assert mine.keys() == expected.keys() and len(mine) == 2
    for key, waits in expected.items():
        assert mine[key] == pytest.approx(waits, abs=0.01), key
    assert idle["host_wait_us"] == pytest.approx(sum(w["host_wait_us"] for w in expected.values()), abs=0.01)
    assert idle["kernel_wait_us"] > 0 and idle["host_wait_us"] > 0


def test_b200_custom_all_reduce_kernels_are_communication() -> None:
    view = build_distributed([item("traces/AMD-AGI_TraceLens/tests/traces/b200/eager_trace.json.gz", "rank0")])
    stats = {s["name"]: s for s in view["op_stats"]}
    assert stats["multimem_all_reduce_kernel"]["calls"] == 73
    assert stats["_allgather_base"]["calls"] == 1
    assert stats["_allgather_base"]["total_bytes"] == 25136 * 2  # In msg nelems × BFloat16
    assert {g["name"] for g in view["process_groups"]} >= {"0", "3"}


# ---- no rank recorded -----------------------------------------------------------------------------
def test_ranks_from_distributed_info_names_or_file_order() -> None:
    non_gpu = item("hta/rank_non_gpu/rank_non_gpu.json.gz", "rank_non_gpu")
    unavailable = item("hta/rank_unavailable/rank_not_found.json.gz", "rank_not_found")
    no_info = item("hta/distributed_info_unavailable/distributed_info_not_found.json.gz", "worker7")
    view = build_distributed([non_gpu, unavailable, no_info])
    got = {r["worker"]: (r["rank"], r["rank_source"]) for r in view["ranks"]}
    assert got["rank_non_gpu"] == (0, "distributedInfo")
    assert got["worker7"] == (7, "name")
    assert got["rank_not_found"] == (1, "file order")
    assert any("rank_not_found" in w and "file order" in w for w in view["warnings"])
    for row in view["ranks"]:  # CPU-only traces: nccl:* host ops are the collectives
        assert row["mode"] == "host" and row["calls"] > 0 and row["hta"] is None


def test_rank_numbers_in_worker_names() -> None:
    assert rank_from_name("rank3") == 3
    assert rank_from_name("worker12") == 12
    assert rank_from_name("rank3_dp0_tp1_pp0") == 3
    assert rank_from_name("sampled_rank-1") == 1
    assert rank_from_name("host_1234") is None
    view = build_distributed([{"worker": "rank5_dp1_tp0_pp2", "span": "1", "file": "x", "error": "unreadable"}])
    assert view["ranks"][0]["parallel"] == {"dp": 1, "tp": 0, "pp": 2}


def test_collective_names() -> None:
    assert name_rules.collective_kind("nccl:_all_gather_base") == "all_gather"
    assert name_rules.collective_kind("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "reduce_scatter"
    assert name_rules.collective_kind("c10d::alltoall_base_") == "all_to_all"
    assert name_rules.collective_kind("gloo:broadcast") == "broadcast"
    assert name_rules.collective_kind("nccl:send") == "send" and name_rules.collective_kind("nccl:recv") == "recv"
    assert name_rules.collective_kind("nccl:coalesced") == "coalesced"
    assert name_rules.collective_kind("allgather_into_tensor_coalesced") == "all_gather"
    assert name_rules.is_comm_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert name_rules.is_comm_kernel("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(x)")
    assert not name_rules.is_comm_kernel("void at::native::reduce_kernel<512, 1>(x)")
    assert name_rules.is_backend_comm_op("gloo:all_reduce") and not name_rules.is_backend_comm_op("c10d::allreduce_")


def test_summary_is_small_and_versioned() -> None:
    data = summary_of(f"{GLOO}/{GLOO_SPANS[1][0]}.pt.trace.json.gz")
    assert len(data) < 10_000
    assert summary_from_json(orjson.dumps({"error": "ValueError: boom"})) == (None, "ValueError: boom")
    stale = orjson.loads(data)
    stale["version"] = 0
    assert summary_from_json(orjson.dumps(stale))[0] is None


# ---- matching by process group and sequence number ------------------------------------------------
BASE_NS = 1_790_000_000 * 10**9
DP, TP = ("0", "mesh_dp", "[0, 1]"), ("1", "mesh_tp", "[0, 1]")


def _collective(group: tuple[str, str, str], seq: int, start_us: float, dur_us: float, nelems: int) -> list[dict]:
    """``record_param_comms`` with its Seq and process group, around the ``gloo:all_reduce`` that does the work."""
    name, desc, ranks = group
    args = {"Collective name": "allreduce", "Process Group Name": name, "Process Group Description": desc,
            "Process Group Ranks": ranks, "Group size": 2, "Seq": seq, "In msg nelems": nelems,
            "Out msg nelems": nelems, "dtype": "Float"}  # fmt: skip
    return [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": start_us - 1,
         "dur": dur_us + 2, "args": args},
        {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": start_us, "dur": dur_us,
         "args": {}},
    ]  # fmt: skip


def _rank_with_calls(tmp_path: Path, rank: int, calls: list[tuple]) -> dict:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 10_000, "args": {}}]  # fmt: skip
    for call in calls:
        events += _collective(*call)
    path = tmp_path / f"rank{rank}.1.pt.trace.json"
    trace = {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "gloo"}, "baseTimeNanoseconds": BASE_NS,
             "traceEvents": events}  # fmt: skip
    path.write_bytes(orjson.dumps(trace))
    tables = parse_trace_file(path)
    context = TraceContext(tables)
    summary, error = summary_from_json(dumps(rank_summary(tables, context.tree, context.steps)))
    assert error is None
    return {"worker": f"rank{rank}", "span": "1", "file": path.name, "summary": summary}


def test_calls_are_matched_by_process_group_and_sequence_not_by_count(tmp_path: Path) -> None:
    """Rank 1's window opens one DP all-reduce later than rank 0's (DP seq 5-7 against 4-6), and both ranks
    make two TP all-reduces in between. Matched by count, rank 0's seq 4 would pair with rank 1's seq 5."""
    zero = _rank_with_calls(tmp_path, 0, [(DP, 4, 100, 50, 1000), (TP, 10, 300, 20, 10), (DP, 5, 1000, 80, 2000),
                                          (TP, 11, 1300, 30, 10), (DP, 6, 2000, 60, 3000)])  # fmt: skip
    one = _rank_with_calls(tmp_path, 1, [(TP, 10, 310, 12, 10), (DP, 5, 1040, 40, 2000), (TP, 11, 1350, 25, 10),
                                         (DP, 6, 2100, 70, 3000), (DP, 7, 3000, 90, 4000)])  # fmt: skip
    view = build_distributed([zero, one])
    by_key = {(c["process_group"], c["seq"]): c for c in view["collectives"]}
    assert all(c["ordinal"] is None for c in view["collectives"])
    # seq 5: rank 0 at 1000 µs for 80, rank 1 at 1040 µs for 40 -> transfer 40, rank 1 last, 40 µs lost
    assert by_key[("0", 5)]["data_transfer_us"] == pytest.approx(40.0)
    assert (by_key[("0", 5)]["last_rank"], by_key[("0", 5)]["lost_us"]) == (1, pytest.approx(40.0))
    assert by_key[("0", 6)]["data_transfer_us"] == pytest.approx(60.0)
    assert (by_key[("0", 6)]["last_rank"], by_key[("0", 6)]["lost_us"]) == (1, pytest.approx(100.0))
    assert (by_key[("1", 11)]["last_rank"], by_key[("1", 11)]["lost_us"]) == (1, pytest.approx(50.0))
    assert by_key[("1", 10)]["data_transfer_us"] == pytest.approx(12.0)
    assert view["matching"]["complete"] == 4 and view["matching"]["single"] == 2
    assert any("4 of 6 collectives were found on every rank" in w for w in view["warnings"])
    assert not any("different sizes" in w for w in view["warnings"])  # a by-count match would pair 1000 with 2000
    ranks = {r["rank"]: r for r in view["ranks"]}
    # rank 0: transfer 50 (seq 4, alone) + 40 + 60 (DP) + 12 + 25 (TP); synchronizing 40 + 0 + 8 + 5
    assert ranks[0]["data_transfer_us"] == pytest.approx(50 + 40 + 60 + 12 + 25)
    assert ranks[0]["synchronizing_us"] == pytest.approx(40 + 0 + 8 + 5)
    groups = {g["name"]: g for g in view["process_groups"]}
    assert (groups["0"]["dimension"], groups["0"]["calls"], groups["0"]["collectives"]) == ("dp", 6, 4)
    assert (groups["1"]["dimension"], groups["1"]["calls"], groups["1"]["collectives"]) == ("tp", 4, 2)
    assert groups["1"]["total_us"] == pytest.approx(20 + 30 + 12 + 25)
    assert groups["0"]["total_bytes"] == 4 * (1000 + 2000 + 3000 + 2000 + 3000 + 4000)


def _paddle(pid: int, start_us: float, end_us: float) -> dict:
    """The ingest summary of a parsed Paddle trace, as far as job_ranks reads it."""
    return {"format": "paddle", "distributed": None, "process": {"pids": [pid], "start_us": start_us, "end_us": end_us}}


@pytest.mark.parametrize(
    ("workers", "summaries", "applies"),
    [
        (["rank0", "rank1"], [None, None], True),  # ranks in the names
        (["sampled_rank-0", "sampled_rank-1"], [None, None], True),
        (["bert__1016001", "owlv2__1016001"], [None, None], False),  # unrelated traces in one folder
        (
            ["a", "b"],
            [{"distributed": {"rank": 0, "world_size": 2}}, {"distributed": {"rank": 1, "world_size": 2}}],
            True,
        ),  # distributedInfo
        (
            ["a", "b"],
            [{"distributed": {"rank": 0, "world_size": 1}}, {"distributed": {"rank": 0, "world_size": 1}}],
            False,
        ),  # same rank twice
        (["eager_trace"], [{"distributed": {"rank": 0, "world_size": 8}}], True),  # one rank of an 8-rank job
        (["eager_trace"], [{"distributed": {"rank": 0, "world_size": 1}}], False),
        (["worker0"], [None], False),  # one plain trace
        ([], [], False),  # only memory snapshots
        (["host_apid_7"], [_paddle(7, 100.0, 200.0)], False),  # one Paddle trace
        (["rank0", "rank0_copy"], [None, None], False),  # the same rank number twice
        # Paddle's default names: distinct processes whose windows share an instant are ranks (rule 3)
        (["host_apid_7", "host_apid_9"], [_paddle(7, 100.0, 200.0), _paddle(9, 150.0, 300.0)], True),
        (["host_apid_7", "host_apid_9"], [_paddle(7, 100.0, 200.0), _paddle(9, 200.0, 300.0)], False),  # touching
        (["host_apid_7", "host_bpid_7"], [_paddle(7, 100.0, 200.0), _paddle(7, 150.0, 300.0)], True),  # two hosts
        (["x", "y"], [_paddle(7, 100.0, 200.0), _paddle(7, 150.0, 300.0)], False),  # one process, two names
        (
            ["host_apid_1", "host_apid_2", "host_apid_3"],  # pairwise overlaps, but no instant in all three
            [_paddle(1, 0.0, 10.0), _paddle(2, 5.0, 20.0), _paddle(3, 15.0, 30.0)],
            False,
        ),
        (["host_apid_7", "host_apid_9"], [_paddle(7, 100.0, 200.0), None], False),  # one not parsed yet
        (
            ["host_apid_7", "host_apid_9"],  # kineto traces are never inferred ranks
            [{**_paddle(7, 100.0, 200.0), "format": "kineto"}, {**_paddle(9, 150.0, 300.0), "format": "kineto"}],
            False,
        ),
    ],
)
def test_which_traces_are_ranks_of_one_job(workers: list[str], summaries: list, applies: bool) -> None:
    from profscope.analysis.distributed import job_ranks

    ranks = job_ranks(workers, lambda: summaries)
    assert (ranks.reason is None) == applies, ranks.reason
    assert bool(ranks.inferred) == (applies and summaries[0] is not None and "process" in summaries[0])


def test_inferred_paddle_ranks_are_numbered_by_host_then_process_id() -> None:
    from profscope.analysis.distributed import job_ranks

    workers = ["host_nodeBpid_5", "host_nodeApid_900", "host_nodeApid_80", "trainer"]
    summaries = [_paddle(5, 0, 10), _paddle(900, 1, 10), _paddle(80, 2, 10), _paddle(3, 3, 10)]
    ranks = job_ranks(workers, lambda: summaries)
    # a name that is not Paddle's default has no host: "" sorts first
    assert ranks.reason is None
    assert ranks.inferred == {"trainer": 0, "host_nodeApid_80": 1, "host_nodeApid_900": 2, "host_nodeBpid_5": 3}
    apart = job_ranks(workers[:2], lambda: [_paddle(5, 0, 10), _paddle(900, 10, 20)])
    assert apart.inferred == {} and "do not all overlap" in (apart.reason or "")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("all_reduce dygraph", "all_reduce"),  # what the recorded two-rank Paddle job writes
        ("all_reduce_", "all_reduce"),
        ("c_allreduce_sum", "all_reduce"),
        ("c_broadcast", "broadcast"),
        ("all_gather dygraph", "all_gather"),
        ("reduce_scatter", "reduce_scatter"),
        ("reduce_sum dygraph", None),  # tensor ops, not collectives
        ("broadcast_to dygraph", None),
        ("gather dygraph", None),
        ("all_reduce kernel launch", None),  # the operator's children are not calls of their own
        ("all_reduce infer_meta", None),
    ],
)
def test_paddle_collective_operators(name: str, kind: str | None) -> None:
    from profscope.analysis import name_rules

    assert name_rules.is_paddle_collective_op(name) == (kind is not None)
    if kind is not None:
        assert name_rules.collective_kind(name) == kind
