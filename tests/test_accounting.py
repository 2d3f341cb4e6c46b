"""Every microsecond accounted for (issue 17): the views' numbers add up on every corpus trace.

``docs/definitions.md``, "Operator time accounting". The checks recompute each total from the raw
event table, independently of the call tree's sums:
- host: self time summed over the Operator view's rows + the runtime calls lying inside operators
  = the time covered by operators, thread by thread (the union of the rows' ranges);
- device: self time summed over the rows + the unattributed device time = every kernel, memcpy and
  memset; the Overview's kernel time = the Kernel view's total;
- no row has a negative self time.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import orjson
import pytest

from conftest import CORPUS
from profscope.analysis import intervals
from profscope.analysis.context import TraceContext
from profscope.analysis.distributed import build_distributed, summary_from_json
from profscope.analysis.kernels import kernel_rows
from profscope.analysis.operators import _has_row_above, operator_rows, time_accounting
from profscope.analysis.overview import build_overview
from profscope.analysis.rank_summary import rank_summary
from profscope.cache import dumps
from profscope.ingest.kineto import parse_trace, parse_trace_file
from profscope.tables import Kind, TraceTables

REPO_DATA = Path(__file__).parent / "data"
NOT_KINETO = {"hta/execution_trace/benchmark_simple_add_et.json.gz"}  # refused with a clear error elsewhere
TOLERANCE_US = 1e-3  # sums of float µs; every quantity is an integer number of ns underneath


def corpus_traces() -> list[str]:
    found = sorted(
        str(p.relative_to(CORPUS))
        for pattern in ("*.json", "*.json.gz")
        for p in CORPUS.rglob(pattern)
        if "memory-snapshots" not in p.parts
    )
    return [f for f in found if f not in NOT_KINETO]


def _host_time_in_operators(tables: TraceTables, operator_events: np.ndarray) -> tuple[int, int]:
    """(union of the operators' ranges, runtime calls lying wholly inside them), summed over threads."""
    events = tables.events
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    track = np.asarray(events["track"])
    runtime = np.flatnonzero(np.isin(np.asarray(events["kind"]), (Kind.RUNTIME, Kind.DRIVER)))
    covered = inside = 0
    for thread in np.unique(track[operator_events]).tolist():
        ops = operator_events[track[operator_events] == thread]
        starts, ends = intervals.merge(ts[ops], end[ops])
        covered += int((ends - starts).sum())
        calls = runtime[track[runtime] == thread]
        position = np.searchsorted(starts, ts[calls], side="right") - 1
        within = (position >= 0) & (end[calls] <= ends[np.maximum(position, 0)])
        inside += int((end[calls] - ts[calls])[within].sum())
    return covered, inside


def assert_conserved(tables: TraceTables) -> None:
    context = TraceContext(tables)
    tree = context.tree
    rows = operator_rows(tables, tree)
    accounting = time_accounting(tables, tree)
    covered_ns, runtime_ns = _host_time_in_operators(tables, tree.node_event[tree.is_operator])
    host_self_us = sum(r["host_self_us"] for r in rows)
    assert host_self_us + runtime_ns / 1000 == pytest.approx(covered_ns / 1000, abs=TOLERANCE_US)
    assert accounting["host_in_operators_us"] == pytest.approx(covered_ns / 1000, abs=TOLERANCE_US)
    assert accounting["host_self_us"] == pytest.approx(host_self_us, abs=TOLERANCE_US)
    assert all(r["host_self_us"] >= 0 for r in rows), [r["name"] for r in rows if r["host_self_us"] < 0]

    kind = np.asarray(tables.events["kind"])
    dur = np.asarray(tables.events["dur_ns"])
    kernel_view_us = sum(r["total_us"] for r in kernel_rows(tables, tree))
    copies_us = int(dur[np.isin(kind, (Kind.MEMCPY, Kind.MEMSET))].sum()) / 1000
    device_self_us = sum(r["device_self_us"] for r in rows)
    assert device_self_us + accounting["device_unattributed_us"] == pytest.approx(
        kernel_view_us + copies_us, abs=TOLERANCE_US
    )
    assert accounting["device_total_us"] == pytest.approx(kernel_view_us + copies_us, abs=TOLERANCE_US)
    overview = build_overview(context, context.steps)
    assert sum(g["kernel_time_us"] for g in overview["gpus"]) == pytest.approx(kernel_view_us, abs=TOLERANCE_US)


@pytest.mark.parametrize("relative", corpus_traces())
def test_every_corpus_trace_adds_up(corpus: Path, relative: str) -> None:
    assert_conserved(parse_trace_file(corpus / relative, use_second_core=False))


def test_legacy_autograd_file_has_operator_rows_and_cpu_exec() -> None:
    """torch 2.13's ``EventList.export_chrome_trace`` (the legacy autograd profiler's writer).

    Recorded with ``torch.autograd.profiler.profile(use_kineto=False)`` over 3 steps of a 2-layer
    MLP, each step in ``record_function("ProfilerStep#i")``: a bare array, no ``cat``.
    """
    tables = parse_trace_file(REPO_DATA / "legacy_autograd" / "legacy_autograd.json", use_second_core=False)
    assert_conserved(tables)
    context = TraceContext(tables)
    rows = {r["name"]: r for r in operator_rows(tables, context.tree)}
    assert rows["aten::addmm"]["calls"] == 6
    assert rows["aten::linear"]["calls"] == 6
    assert "ProfilerStep#0" not in rows
    overview = build_overview(context, context.steps)
    assert [s["step"] for s in overview["steps"]] == ["0", "1", "2"]
    for step in overview["steps"]:
        assert step["cpu_exec_us"] > 0.5 * step["total_us"]


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_annotations_inside_an_op_take_no_time_from_it() -> None:
    """The DLRM shape: ``record_param_comms`` > ``nccl:all_reduce`` annotation > launch of an NCCL kernel.

    By hand: record_param_comms [0, 100) holds the annotation [10, 90), which holds the launch
    [20, 30) of a 50 µs kernel; ``aten::empty`` [40, 50) is a real op inside the annotation.
    Host self of record_param_comms = 100 − 10 (aten::empty) − 10 (the launch) = 80, where plain
    nesting gave 100 − 80 = 20. Its device self = the kernel's 50 µs. A kernel launched from a
    top-level annotation [200, 230) is listed as unattributed (30 µs).
    """
    events = [
        _x("cpu_op", "record_param_comms", 0, 100, **{"External id": 1}),
        _x("user_annotation", "nccl:all_reduce", 10, 80, **{"External id": 2}),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 10, **{"External id": 2, "correlation": 7}),
        _x("cpu_op", "aten::empty", 40, 10, **{"External id": 3}),
        _x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25, 50, pid=0, tid=7, correlation=7, device=0),
        _x("user_annotation", "## forward ##", 200, 40, **{"External id": 4}),
        _x("cuda_runtime", "cudaLaunchKernel", 205, 5, **{"External id": 4, "correlation": 8}),
        _x("kernel", "void elementwise_kernel", 210, 30, pid=0, tid=7, correlation=8, device=0),
    ]
    tables = parse_trace(io.BytesIO(orjson.dumps({"traceEvents": events})), use_second_core=False)
    assert_conserved(tables)
    context = TraceContext(tables)
    rows = {r["name"]: r for r in operator_rows(tables, context.tree)}
    assert rows["record_param_comms"]["host_self_us"] == 80
    assert rows["record_param_comms"]["device_self_us"] == 50
    assert rows["record_param_comms"]["device_total_us"] == 50
    assert rows["aten::empty"]["host_self_us"] == 10
    assert set(rows) == {"record_param_comms", "aten::empty"}
    accounting = time_accounting(tables, context.tree)
    assert accounting["device_unattributed_us"] == 30
    assert accounting["host_in_operators_us"] == 100
    assert accounting["host_runtime_in_operators_us"] == 10


def test_device_activity_without_a_stream_is_no_pseudo_stream() -> None:
    """MTIA ``dma_request`` events may have no ``stream`` arg; 13 s after the last kernel one of them
    used to be a stream (device −1, stream −1) whose 13 s gap counted as idle, and stretch the window.

    By hand: kernels on stream 101 at [0, 10) and [20, 30) µs, launched by runtime calls at 0 and 15
    (host wait 10 µs before the second); a stream-less dma_request at 13 s.
    """
    events = [
        _x("mtia_runtime", "mtiaLaunchKernel", 0, 2, pid=1, tid=1, correlation=1),
        _x("mtia_runtime", "mtiaLaunchKernel", 15, 2, pid=1, tid=1, correlation=2),
        _x("mtia_ccp_events", "fused_kernel_a", 0, 10, pid=17, tid=3570, correlation=1, stream=101, device=17),
        _x("mtia_ccp_events", "fused_kernel_b", 20, 10, pid=17, tid=3570, correlation=2, stream=101, device=17),
        _x("mtia_ccp_events", "dma_request", 13_000_000, 5, pid=17, tid=20014, direction="DEVICE_TO_HOST"),
    ]
    tables = parse_trace(io.BytesIO(orjson.dumps({"traceEvents": events})), use_second_core=False)
    context = TraceContext(tables)
    (rank,) = build_distributed([_rank_item(tables, context)])["ranks"]
    assert rank["hta"]["activities_without_stream"] == 1
    assert rank["hta"]["temporal"] == {"window_us": 30, "idle_us": 10, "compute_us": 20, "non_compute_us": 0}
    assert [(s["device"], s["stream"]) for s in rank["hta"]["idle"]["streams"]] == [(17, 101)]
    assert rank["hta"]["idle"]["host_wait_us"] == 10
    assert rank["hta"]["idle"]["other_us"] == 0


def _rank_item(tables: TraceTables, context: TraceContext, worker: str = "rank0") -> dict:
    summary, error = summary_from_json(dumps(rank_summary(tables, context.tree, context.steps)))
    assert error is None
    return {"worker": worker, "span": "1", "file": f"{worker}.json", "summary": summary}


GLOO_SPAN_1 = [
    "generated/tinygpt_ddp4_gloo/rank0.1795315503706026973.pt.trace.json.gz",
    "generated/tinygpt_ddp4_gloo/rank1.1795315503666467455.pt.trace.json.gz",
    "generated/tinygpt_ddp4_gloo/rank2.1795315503654737161.pt.trace.json.gz",
    "generated/tinygpt_ddp4_gloo/rank3.1795315503686651177.pt.trace.json.gz",
]
NCCL_TWO_RANKS = ["hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz"]


def _distributed(corpus: Path, files: list[str]) -> dict:
    items = []
    for relative in files:
        tables = parse_trace_file(corpus / relative, use_second_core=False)
        items.append(_rank_item(tables, TraceContext(tables), Path(relative).name.split(".")[0]))
    return build_distributed(items)


@pytest.mark.parametrize("files", [GLOO_SPAN_1, NCCL_TWO_RANKS], ids=["gloo4", "nccl2"])
def test_distributed_tables_reconcile(corpus: Path, files: list[str]) -> None:
    """Ranks table = per rank, average per step; Communication operations = per rank, whole span;
    Process groups = summed over the group's ranks, whole span (docs/definitions.md, "Distributed totals")."""
    view = _distributed(corpus, files)
    for rank in view["ranks"]:
        ops = [o for o in view["op_stats"] if o["worker"] == rank["worker"]]
        per_span_us = sum(o["total_latency_us"] for o in ops)
        steps = rank["steps"]
        in_steps_us = sum(s["overlapping_us"] + s["communication_us"] for s in steps)
        assert per_span_us >= in_steps_us - TOLERANCE_US  # calls outside the steps are in the span only
        average = rank["overlapping_us"] + rank["communication_us"]
        assert average * len(steps) == pytest.approx(in_steps_us, abs=TOLERANCE_US)
        assert rank["calls"] == sum(o["calls"] for o in ops)
    for group in view["process_groups"]:
        members = {r["worker"] for r in view["ranks"] if r["rank"] in group["ranks_with_trace"]}
        ops = [o for o in view["op_stats"] if o["worker"] in members]
        assert group["calls"] == sum(o["calls"] for o in ops)
        assert group["total_us"] == pytest.approx(sum(o["total_latency_us"] for o in ops), abs=TOLERANCE_US)


def test_waiting_inside_gloo_all_reduce_is_communication(corpus: Path) -> None:
    """CPU gloo DDP: the all_reduce runs on a gloo thread while the main thread sits in a
    ``record_function`` range around the whole step; that range is no computation."""
    view = _distributed(corpus, GLOO_SPAN_1)
    for rank in view["ranks"]:
        assert rank["communication_us"] > 10 * rank["overlapping_us"], rank["worker"]


def test_has_row_above_matches_a_walk_up_each_node() -> None:
    """The climb that stops at the first row gives what walking every node up to its root gives."""
    rng = np.random.default_rng(17)
    for size in (0, 1, 400):
        parent = np.array([rng.integers(-1, i) if i else -1 for i in range(size)], dtype=np.int64)
        parent[rng.random(size) < 0.05] = -2
        is_operator = rng.random(size) < 0.3
        tree = type("Tree", (), {"parent": parent, "is_operator": is_operator})()
        expected = []
        for node in range(size):
            above, at = False, parent[node]
            while at >= 0:
                above, at = above or bool(is_operator[at]), parent[at]
            expected.append(above)
        assert _has_row_above(tree).tolist() == expected
