"""Nsight Systems SQLite exports: the parser against SQL on the same file, hand-written exports for what
the corpus lacks (two NCCL ranks, emit_nvtx shapes, a CUDA graph, GPU memory usage), and every view's
JSON over real HTTP."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from conftest import corpus_file
from nsys_export import Export, cuda_graph, cuda_graph_whole, emit_nvtx_ops, two_rank_nccl_run
from profscope.analysis.call_tree import build_call_tree
from profscope.analysis.context import TraceContext
from profscope.analysis.device_activity import communication_device_rows
from profscope.analysis.overview import overview_for_step_range
from profscope.app import create_app
from profscope.catalog import NSYS, build_runs, classify_nsys
from profscope.config import Settings
from profscope.ingest.nsys import NsysExportError, parse_nsys, parse_nsys_file
from profscope.sources.base import ObjectInfo
from profscope.tables import Kind, TraceTables
from profscope.views import overview as overview_view
from profscope.views.registry import queries
from serving import running_server, wait_for

# the analyses every view lists for a trace (an export is one), by query name
TRACE_QUERIES = {query.name: query.build for query in queries() if query.kind == "trace"}

CORPUS_EXPORTS = [
    "nsys-sqlite/hpcgroup_pipit/pipit/tests/data/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    "nsys-sqlite/hpcgroup_pipit/pipit/tests/data/cloverleaf-nsys/perlmutter-cloverleaf-cuda.sqlite",
    "nsys-sqlite/GindaChen_nsys-ai/tests/fixtures/h100_2gpu_1s.sqlite",
    "nsys-sqlite/GindaChen_nsys-ai/tests/fixtures/mfu_2gpu_before.sqlite",
]


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        return connection.execute(query).fetchall()


def _has_table(path: Path, table: str) -> bool:
    return bool(_sql(path, f"SELECT 1 FROM sqlite_master WHERE type='table' AND name='{table}'"))


def _of_kind(tables: TraceTables, *kinds: Kind) -> np.ndarray:
    return np.flatnonzero(np.isin(np.asarray(tables.events["kind"]), kinds))


def _device_bytes(tables: TraceTables, kind: Kind) -> int:
    kernels = tables.table("kernels")
    rows = np.flatnonzero(np.asarray(tables.events["kind"])[kernels["event"]] == kind)
    return int(np.asarray(kernels["bytes"])[rows].sum())


# ---- the corpus: every number against a direct SQL query on the same file ---------------------------
@pytest.fixture(scope="module", params=CORPUS_EXPORTS, ids=lambda p: Path(p).stem)
def parsed(request: pytest.FixtureRequest) -> tuple[Path, TraceTables]:
    path = corpus_file(request.param)
    return path, parse_nsys_file(path)


def test_kernels_equal_sql(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    rows = _of_kind(tables, Kind.KERNEL)
    count, total_ns = _sql(path, 'SELECT COUNT(*), SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')[0]
    assert len(rows) == count > 0
    assert int(np.asarray(tables.events["dur_ns"])[rows].sum()) == total_ns
    by_name = Counter(
        dict(
            _sql(
                path,
                "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value",
            )
        )
    )
    names = np.asarray(tables.events["name"])[rows]
    assert Counter(tables.strings[int(i)] for i in names) == by_name
    first = _sql(path, 'SELECT gridX, blockX, registersPerThread, staticSharedMemory + dynamicSharedMemory, deviceId, '
                 'streamId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start, "end" DESC LIMIT 1')[0]  # fmt: skip
    kernels = tables.table("kernels")
    first_row = int(np.flatnonzero(np.isin(kernels["event"], rows))[0])
    ours = tuple(int(kernels[c][first_row]) for c in
                 ("grid_x", "block_x", "registers_per_thread", "shared_memory", "device", "stream"))  # fmt: skip
    assert ours == first
    blocks_per_sm = np.asarray(kernels["blocks_per_sm"])[np.isin(kernels["event"], rows)]
    if not _has_table(path, "TARGET_INFO_GPU"):
        assert np.isnan(blocks_per_sm).all()  # no SM count: the Kernel view shows no blocks per SM
        return
    expected = _sql(path, "SELECT SUM(k.gridX * k.gridY * k.gridZ * 1.0 / g.smCount) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                    "JOIN TARGET_INFO_GPU g ON g.id = k.deviceId")[0][0]  # fmt: skip
    assert blocks_per_sm.sum() == pytest.approx(expected, rel=1e-9)


def test_copies_and_sets_equal_sql(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    count, nbytes = _sql(path, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0]
    assert len(_of_kind(tables, Kind.MEMCPY)) == count > 0
    assert _device_bytes(tables, Kind.MEMCPY) == nbytes
    if _has_table(path, "CUPTI_ACTIVITY_KIND_MEMSET"):
        count, nbytes = _sql(path, "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0]
        assert len(_of_kind(tables, Kind.MEMSET)) == count
        assert _device_bytes(tables, Kind.MEMSET) == nbytes
    directions = dict(_sql(path, "SELECT copyKind, SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"))
    htod = sum(
        int(b)
        for e, b in zip(tables.table("kernels")["event"], tables.table("kernels")["bytes"], strict=True)
        if "HtoD" in tables.strings[int(tables.events["name"][e])]
    )
    assert htod == directions.get(1, 0)


def test_nvtx_ranges_equal_sql(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    if not _has_table(path, "NVTX_EVENTS"):
        assert len(_of_kind(tables, Kind.CPU_OP, Kind.USER_ANNOTATION)) == 0
        return
    count, total_ns = _sql(
        path, 'SELECT COUNT(*), COALESCE(SUM("end" - start), 0) FROM NVTX_EVENTS WHERE eventType IN (59, 60)'
    )[0]
    rows = _of_kind(tables, Kind.CPU_OP, Kind.USER_ANNOTATION)
    assert len(rows) == count > 0
    assert int(np.asarray(tables.events["dur_ns"])[rows].sum()) == total_ns
    ops = _sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
               "WHERE eventType = 59 AND COALESCE(n.text, s.value) LIKE '%, op_id = %'")[0][0]  # fmt: skip
    assert tables.row_count("ops") == ops


def test_runtime_calls_link_their_kernels_as_sql_joins_them(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    runtime = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert len(_of_kind(tables, Kind.RUNTIME, Kind.DRIVER)) == runtime
    linked = _sql(
        path,
        "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
        "WHERE r.correlationId = k.correlationId "
        "AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))",
    )[0][0]
    tree = build_call_tree(tables)
    kernel = np.asarray(tables.events["kind"])[tree.device_rows] == Kind.KERNEL
    assert int((tree.device_runtime[kernel] >= 0).sum()) == linked > 0


def test_syncs_sit_on_the_gpu_their_process_ran_kernels_on(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    if not _has_table(path, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
        return
    device_of_pid = dict(
        _sql(path, "SELECT (globalPid >> 24) & 16777215, MIN(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1")
    )
    syncs = _of_kind(tables, Kind.SYNC)
    assert len(syncs) == _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")[0][0]
    pids = np.asarray(tables.events["correlation"])[syncs] >> 32
    devices = [int(tables.tracks[int(t)].pid) for t in np.asarray(tables.events["track"])[syncs]]
    assert devices == [device_of_pid[int(p)] for p in pids]


def test_device_properties_come_from_target_info_gpu(parsed: tuple[Path, TraceTables]) -> None:
    path, tables = parsed
    if not _has_table(path, "TARGET_INFO_GPU"):
        assert tables.meta["deviceProperties"] == [] and tables.meta["nsys"]["has_gpu_info"] is False
        return
    expected = [(i, n, m) for i, n, m in _sql(path, "SELECT id, name, totalMemory FROM TARGET_INFO_GPU ORDER BY id")]
    assert [(d["id"], d["name"], d["totalGlobalMem"]) for d in tables.meta["deviceProperties"]] == expected


def test_every_payload_builds_on_the_corpus(parsed: tuple[Path, TraceTables]) -> None:
    _, tables = parsed
    context = TraceContext(tables)
    for build in TRACE_QUERIES.values():
        build(context)  # raises on a shape the analyses cannot take
    kernels = TRACE_QUERIES["kernels.kernel"](context)
    assert sum(r["calls"] for r in kernels["rows"]) == len(_of_kind(tables, Kind.KERNEL))


# ---- hand-written exports: what the corpus lacks -------------------------------------------------------
def test_emit_nvtx_ranges_are_operators_with_shapes(tmp_path: Path) -> None:
    tables = parse_nsys_file(emit_nvtx_ops(tmp_path / "ops.sqlite"))
    context = TraceContext(tables)
    rows = {(r["name"], r["input_shape"]): r for r in TRACE_QUERIES["operators.operator_input_shape"](context)["rows"]}
    assert set(rows) == {("aten::linear", "[[4,8],[16,8],[16]]"), ("aten::mm", "[[4,8],[8,16]]"),
                         ("aten::add_", "[[4,16],[16],[]]")}  # fmt: skip
    # device time through the kernels launched inside: mm's GEMM 12 µs, add_'s kernel 3 µs, linear holds both
    assert rows[("aten::mm", "[[4,8],[8,16]]")]["device_self_us"] == pytest.approx(12.0)
    assert rows[("aten::add_", "[[4,16],[16],[]]")]["device_self_us"] == pytest.approx(3.0)
    assert rows[("aten::linear", "[[4,8],[16,8],[16]]")]["device_total_us"] == pytest.approx(15.0)
    ops = tables.table("ops")
    seq = {tables.strings[int(tables.events["name"][e])]: int(s)
           for e, s in zip(ops["event"], ops["sequence_number"], strict=True)}  # fmt: skip
    assert seq["aten::mm"] == 8 and seq["aten::linear"] == 7 and seq["aten::add_"] == -1
    label = tables.strings.lookup("FSDP::pre_forward (layer.0)")
    assert Kind(int(tables.events["kind"][list(tables.events["name"]).index(label)])) == Kind.USER_ANNOTATION
    assert [tables.strings[int(n)] for n in tables.table("instants")["name"]] == ["checkpoint saved"]
    names = {tables.strings[int(n)] for n in tables.events["name"]}
    assert {"cudaLaunchKernel", "cudaMemcpyAsync", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"} <= names


def test_cuda_graph_nodes_link_to_their_graph_launch(tmp_path: Path) -> None:
    tables = parse_nsys_file(cuda_graph(tmp_path / "graph.sqlite"))
    tree = build_call_tree(tables)
    launches = {tables.strings[int(tables.events["name"][r])] for r in tree.device_runtime}
    assert launches == {"cudaGraphLaunch"} and len(tree.device_rows) == 3
    assert tables.meta["nsys"]["cuda_graph_kernels"] == 3
    steps = TraceContext(tables).steps
    assert steps.names == ["5"]  # ProfilerStep#5 as an NVTX range


def test_whole_graph_executions_are_device_work_of_their_launch(tmp_path: Path) -> None:
    tables = parse_nsys_file(cuda_graph_whole(tmp_path / "graph.sqlite"))
    tree = build_call_tree(tables)
    assert [tables.strings[int(tables.events["name"][r])] for r in tree.device_rows] == ["CUDA graph 7"] * 2
    assert {tables.strings[int(tables.events["name"][r])] for r in tree.device_runtime} == {"cudaGraphLaunch"}
    assert tables.meta["nsys"]["cuda_graph_launches"] == 2
    gpu = TRACE_QUERIES["overview"](TraceContext(tables))["gpus"][0]
    assert gpu["kernel_time_us"] == pytest.approx(100.0)  # two 50 µs graph runs


def test_nvtx_without_string_ids_column(tmp_path: Path) -> None:
    """Exports whose NVTX_EVENTS has the text inline only (no textId column)."""
    path = emit_nvtx_ops(tmp_path / "ops.sqlite")
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE NVTX_EVENTS SET text = 'aten::mm, seq = 8, op_id = 3' WHERE textId IS NOT NULL")
        connection.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN textId")
    connection.close()
    tables = parse_nsys_file(path)
    names = {tables.strings[int(n)] for n in tables.events["name"]}
    assert {"aten::mm", "aten::linear", "FSDP::pre_forward (layer.0)"} <= names


def test_gpu_memory_usage_events_are_memory_rows(tmp_path: Path) -> None:
    tables = parse_nsys_file(cuda_graph(tmp_path / "graph.sqlite"))
    memory = tables.table("memory")
    assert list(memory["bytes"]) == [1 << 20, 2 << 20, -(1 << 20)]
    assert list(memory["total_allocated"]) == list(memory["total_reserved"]) == [1 << 20, 3 << 20, 2 << 20]
    assert list(memory["device_id"]) == [0, 0, 0] and list(memory["device_type"]) == [1, 1, 1]


def test_two_ranks_with_nccl_kernels(tmp_path: Path) -> None:
    for path in two_rank_nccl_run(tmp_path):
        tables = parse_nsys_file(path)
        context = TraceContext(tables)
        assert context.steps.names == ["1", "2", "3"]  # the "iteration N" NVTX ranges
        comm = communication_device_rows(tables, context.tree)
        comm_names = {tables.strings[int(tables.events["name"][r])] for r in np.flatnonzero(comm)}
        assert comm_names == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL"}
        steps = TRACE_QUERIES["overview"](context)["steps"]
        # the 3 ms all-reduce kernel, and the 20 µs ncclAllReduce NVTX range (NCCL's host call) while the GPU idles
        assert [s["communication_us"] for s in steps] == pytest.approx([3020.0] * 3)


def test_files_that_are_not_exports_say_so(tmp_path: Path) -> None:
    text = tmp_path / "notes.sqlite"
    text.write_text("hello")
    with pytest.raises(NsysExportError, match="not an SQLite database"):
        parse_nsys_file(text)
    other = tmp_path / "app.sqlite"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE users (name TEXT)")
    connection.close()
    with pytest.raises(NsysExportError, match="not an Nsight Systems export"):
        parse_nsys_file(other)
    bare = tmp_path / "osrt.sqlite"
    with sqlite3.connect(bare) as connection:
        connection.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        connection.execute("CREATE TABLE OSRT_API (start INTEGER)")
    connection.close()
    with pytest.raises(NsysExportError, match="without CUDA or NVTX data"):
        parse_nsys_file(bare)
    cut = tmp_path / "cut.sqlite"  # an export truncated in transfer: the header, then nothing usable
    cut.write_bytes(emit_nvtx_ops(tmp_path / "whole.sqlite").read_bytes()[:1500])
    with pytest.raises(NsysExportError, match=r"cut\.sqlite: cannot read the SQLite database"):
        parse_nsys_file(cut)


def test_a_stream_is_copied_within_the_size_limit(tmp_path: Path) -> None:
    path = emit_nvtx_ops(tmp_path / "ops.sqlite")
    data = path.read_bytes()
    seen: list[int] = []
    tables = parse_nsys(io.BytesIO(data), on_progress=seen.append, max_trace_bytes=len(data))
    assert tables.row_count("ops") == 4 and seen[-1] == len(data)  # 3 ops, and the label with an op_id
    with pytest.raises(NsysExportError, match="larger than the limit"):
        parse_nsys(io.BytesIO(data), max_trace_bytes=len(data) - 1)


def test_an_older_schema_without_optional_tables(tmp_path: Path) -> None:
    """Exports of older nsys: no MEMSET table, runtime names as text (``name``) instead of ``nameId``."""
    export = Export()
    launch = export.launch(1_000, 2_000)
    export.kernel(3_000, 4_000, "k", launch)
    path = export.write(tmp_path / "old.sqlite")
    with sqlite3.connect(path) as connection:
        connection.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN nameId TO name")
        connection.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET name = 'cudaLaunch_v3020'")
        connection.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET")
    connection.close()
    tables = parse_nsys_file(path)
    runtime = _of_kind(tables, Kind.RUNTIME)
    assert [tables.strings[int(tables.events["name"][r])] for r in runtime] == ["cudaLaunch"]
    assert len(_of_kind(tables, Kind.KERNEL)) == 1 and len(_of_kind(tables, Kind.MEMSET)) == 0


# ---- catalog -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("job/megatron_rank3.sqlite", ("job", "rank3", "default")),
        ("job/traces/rank2_dp0_tp1/prof.sqlite", ("job/traces", "rank2_dp0_tp1", "prof")),
        ("solo.sqlite", ("", "solo", "default")),
        ("job/prof.sqlite.gz", None),
        ("job/prof.json", None),
    ],
)
def test_classify_nsys(key: str, expected: tuple | None) -> None:
    assert classify_nsys(key) == expected


def _runs(*keys: str) -> dict:
    return build_runs([("root", "file:///r", [ObjectInfo(key=k, size=1, version="1") for k in keys])])


def test_numbered_exports_of_one_prefix_are_ranks() -> None:
    run = _runs("job/prof_0.sqlite", "job/prof_1.sqlite", "job/prof_10.sqlite")["job"]
    assert list(run.workers()) == ["rank0", "rank1", "rank10"] and {f.kind for f in run.files} == {NSYS}
    lone = _runs("one/report_4711.sqlite")["one"]  # a pid (%p), not a rank
    assert list(lone.workers()) == ["report_4711"]
    mixed = _runs("m/a_0.sqlite", "m/b_1.sqlite")["m"]
    assert list(mixed.workers()) == ["a_0", "b_1"]


# ---- every view over real HTTP ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("nsys-root")
    (root / "corpus").mkdir()
    for relative in CORPUS_EXPORTS[:3]:
        shutil.copy(corpus_file(relative), root / "corpus" / Path(relative).name)
    (root / "job").mkdir()
    two_rank_nccl_run(root / "job")
    (root / "ops").mkdir()
    emit_nvtx_ops(root / "ops" / "ops.sqlite")
    (root / "graph").mkdir()
    cuda_graph(root / "graph" / "graph.sqlite")
    (root / "odd").mkdir()
    (root / "odd" / "notes.sqlite").write_text("not a database")
    (root / "odd" / "prof.nsys-rep").write_bytes(b"binary")
    with running_server([root], tmp_path_factory.mktemp("cache") / "c") as url:
        wait_for(lambda: all(r["state"] != "parsing" for r in httpx.get(f"{url}/api/runs").json()["runs"]), 120)
        yield url


def _get(url: str, path: str, **params: str) -> dict:
    response = httpx.get(f"{url}{path}", params=params, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def test_runs_list_exports_and_explain_the_rest(served: str) -> None:
    runs = {r["run"]: r for r in _get(served, "/api/runs")["runs"]}
    assert [w["worker"] for w in runs["job"]["workers"]] == ["rank0", "rank1"]
    assert "distributed" in runs["job"]["views"] and "memory" in runs["graph"]["views"]
    assert "memory" not in runs["ops"]["views"]  # no GPU memory usage events: no Memory tab
    errors = {e["file"]: e["message"] for e in runs["odd"]["errors"]}
    assert "not an SQLite database" in errors["odd/notes.sqlite"]
    assert "nsys export --type sqlite" in errors["odd/prof.nsys-rep"]


def test_kernel_and_overview_views_of_the_corpus(served: str) -> None:
    for relative in CORPUS_EXPORTS[:3]:
        path = corpus_file(relative)
        worker = path.stem
        kernels = _get(served, "/api/kernels", run="corpus", worker=worker)
        count, total_ns = _sql(path, 'SELECT COUNT(*), SUM("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL')[0]
        assert sum(r["calls"] for r in kernels["rows"]) == count
        assert sum(r["total_us"] for r in kernels["rows"]) == pytest.approx(total_ns / 1000, rel=1e-6)
        overview = _get(served, "/api/overview", run="corpus", worker=worker)
        step = overview["steps"][0]
        categories = ("kernel_us", "memcpy_us", "memset_us", "communication_us", "runtime_us", "dataloader_us",
                      "cpu_exec_us", "other_us")  # fmt: skip
        assert sum(step[c] for c in categories) == pytest.approx(step["total_us"], abs=0.01)


def test_operator_view_of_emit_nvtx(served: str) -> None:
    body = _get(served, "/api/operators", run="ops", group_by="operator_input_shape")
    mm = next(r for r in body["rows"] if r["name"] == "aten::mm")
    assert mm["input_shape"] == "[[4,8],[8,16]]" and mm["device_self_us"] == pytest.approx(12.0)
    assert body["empty_reason"] is None
    without = _get(served, "/api/operators", run="job")  # NVTX iteration ranges only, no emit_nvtx
    assert without["rows"] == [] and "emit_nvtx(record_shapes=True)" in without["empty_reason"]


def test_trace_view_has_threads_streams_and_launch_flows(served: str) -> None:
    listing = _get(served, "/api/timeline/tracks", run="ops")
    kinds = {g["kind"] for g in listing["groups"]}
    assert "gpu" in kinds
    window = _get(served, "/api/timeline", run="ops", width_px="4000")
    slices = [s for t in window["tracks"] for s in t.get("slices", [])]
    kernel = next(s for s in slices if s.get("name") == "vectorized_elementwise_kernel")
    related = {
        (r["relation"], r["name"])
        for r in _get(served, "/api/timeline/slice", run="ops", id=str(kernel["id"]))["related"]
    }
    assert {("launched by", "cudaLaunchKernel"), ("launched by operator", "aten::add_")} <= related
    assert {"aten::linear", "FSDP::pre_forward (layer.0)", "cudaMemcpyAsync"} <= {s.get("name") for s in slices}


def test_distributed_view_of_two_nccl_ranks(served: str) -> None:
    body = _get(served, "/api/distributed", run="job")
    assert [(r["worker"], r["rank"], r["rank_source"]) for r in body["ranks"]] == [("rank0", 0, "name"),
                                                                                  ("rank1", 1, "name")]  # fmt: skip
    assert body["steps"] == ["1", "2", "3"]
    assert [g["collective_types"] for g in body["process_groups"]] == [["all_reduce"]]
    assert body["matching"]["complete"] == 3  # every all-reduce kernel of rank 0 paired with rank 1's
    assert [r["communication_us"] for r in body["ranks"]] == pytest.approx([3000.0, 3000.0])  # per step


def test_memory_view_of_gpu_memory_usage(served: str) -> None:
    body = _get(served, "/api/memory", run="graph")
    assert body["devices"] == ["GPU0"] and body["peak_allocated_bytes"] == 3 << 20
    assert body["curve_reason"] is None and max(point[1] for point in body["curve"]) == 3 << 20


def test_overview_steps_from_a_picked_range(served: str) -> None:
    automatic = _get(served, "/api/overview", run="job", worker="rank0")
    assert automatic["step_ranges"] == [{"name": "ncclAllReduce", "count": 3}]  # "iteration N" occur once each
    picked = _get(served, "/api/overview", run="job", worker="rank0", step_range="ncclAllReduce")
    assert picked["step_range"] == "ncclAllReduce" and [s["step"] for s in picked["steps"]] == ["1", "2", "3"]
    # host range 120 µs after each iteration start, re-timed to the end of the all-reduce it launched (at 6.3 ms);
    # the first starts at the end of the GEMM launched before it (3.2 ms: device work before the first step)
    assert [s["total_us"] for s in picked["steps"]] == pytest.approx([4100.0, 6180.0, 6180.0])
    again = _get(served, "/api/overview", run="job", worker="rank0", step_range="ncclAllReduce")
    assert again == picked  # memoised, the same answer
    missing = httpx.get(f"{served}/api/overview", params={"run": "job", "step_range": "no such range"})
    assert missing.status_code == 404 and "no host range is named 'no such range'" in missing.json()["detail"]


def test_a_picked_range_is_computed_once_and_kept_by_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Overview of a picked step range is kept among the Store's loaded structures (bounded, per range name),
    not recomputed on every request, and not kept anywhere else."""
    computed: Counter = Counter()

    def counting(context: TraceContext, step_range: str) -> dict:
        computed[step_range] += 1
        return overview_for_step_range(context, step_range)

    monkeypatch.setattr(overview_view, "overview_for_step_range", counting)
    (tmp_path / "root" / "job").mkdir(parents=True)
    two_rank_nccl_run(tmp_path / "root" / "job")
    settings = Settings(roots=[str(tmp_path / "root")], cache_dir=tmp_path / "cache")
    with TestClient(create_app(settings)) as client:
        store = client.app.state.profscope.store
        ask = {"run": "job", "worker": "rank0"}
        wait_for(lambda: client.get("/api/overview", params=ask).status_code == 200, timeout=120)
        for _ in range(2):
            picked = client.get("/api/overview", params={**ask, "step_range": "ncclAllReduce"})
            assert picked.status_code == 200 and picked.json()["step_range"] == "ncclAllReduce"
        assert computed == Counter({"ncclAllReduce": 1})
        store.capacity = 1  # the Store's bound applies to picks too: a new structure pushes the pick out
        store.loaded("another structure", lambda: 0)
        client.get("/api/overview", params={**ask, "step_range": "ncclAllReduce"})
        assert computed == Counter({"ncclAllReduce": 2})


# ---- the command line: ingest one file, index a folder --------------------------------------------------
def test_ingest_and_index_read_exports(tmp_path: Path) -> None:
    root = tmp_path / "bucket"
    (root / "job").mkdir(parents=True)
    two_rank_nccl_run(root / "job")
    ingest = subprocess.run(
        [sys.executable, "-m", "profscope.cli", "ingest", str(root / "job" / "job_rank0.sqlite")],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    report = json.loads(ingest.stdout.strip().splitlines()[-1])
    assert report["kernels"] == 6 and "error" not in report
    cache = tmp_path / "cache"
    index = subprocess.run(
        [sys.executable, "-m", "profscope.cli", "index", str(root), "--cache-dir", str(cache)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert index.returncode == 0, index.stderr
    assert json.loads(index.stdout.strip().splitlines()[-1])["parsed"] == 2
    with running_server([root], cache) as url:
        runs = {r["run"]: r for r in httpx.get(f"{url}/api/runs").json()["runs"]}
        assert runs["job"]["state"] == "ready"  # read from the index's cache: nothing to parse
        assert _get(url, "/api/overview", run="job", worker="rank1")["steps"]
