"""Every Overview / Operator / Kernel metric on a small trace whose answers were worked out by hand.

The trace is written in three dialects (2023 kineto, the 2021 capitalised categories, and the
legacy bare event list) and all three must give the same numbers.
"""

from __future__ import annotations

import gzip
import io

import orjson
import pytest

from profscope.analysis.context import TraceContext
from profscope.analysis.kernels import kernel_rows
from profscope.analysis.operators import operator_rows
from profscope.analysis.overview import build_overview
from profscope.ingest.kineto import parse_trace

DEVICE_PROPERTIES = [
    {"id": 0, "name": "Test GPU", "totalGlobalMem": 16 * 2**30, "computeMajor": 7, "computeMinor": 0, "numSms": 80}
]


def _x(cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def events(dialect: str) -> list[dict]:
    modern = dialect == "modern"
    op = "cpu_op" if modern else "Operator"
    runtime = "cuda_runtime" if modern else "Runtime"
    kernel = "kernel" if modern else "Kernel"
    memcpy = "gpu_memcpy" if modern else "Memcpy"
    step = "user_annotation" if modern else "Operator"
    gpu = {"pid": 0, "tid": 7}
    return [
        _x(step, "ProfilerStep#1", 0, 100, **{"External id": 1}),
        _x(
            "user_annotation" if modern else "Operator",
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            5,
            10,
            **{"External id": 2},
        ),
        _x(op, "aten::linear", 20, 40, **{"External id": 10, "Input Dims": [[8, 4], [4, 4], [4]]}),
        _x(op, "aten::addmm", 25, 30, **{"External id": 11, "Input Dims": [[4], [8, 4], [4, 4]]}),
        _x(runtime, "cudaLaunchKernel", 30, 5, **{"External id": 11, "correlation": 100}),
        _x(runtime, "cudaMemcpyAsync", 62, 4, **{"External id": 0, "correlation": 101}),
        _x(op, "nccl:all_reduce", 70, 10, **{"External id": 12}),
        _x(runtime, "cudaLaunchKernel", 72, 2, **{"External id": 12, "correlation": 102}),
        _x(
            kernel,
            "volta_h884gemm_64x64_nn",
            40,
            50,
            **gpu,
            correlation=100,
            device=0,
            stream=7,
            **{
                "blocks per SM": 0.5,
                "est. achieved occupancy %": 40,
                "grid": [4, 1, 1],
                "block": [128, 1, 1],
                "registers per thread": 64,
                "shared memory": 1024,
            },
        ),
        _x(memcpy, "Memcpy HtoD (Pageable -> Device)", 66, 4, **gpu, correlation=101, device=0, stream=7),
        _x(kernel, "ncclKernel_AllReduce_RING_LL_Sum_float", 75, 20, **gpu, correlation=102, device=0, stream=7),
        _x(step, "ProfilerStep#2", 100, 50, **{"External id": 20}),
        _x(op, "aten::relu", 110, 10, **{"External id": 21}),
        _x(runtime, "cudaLaunchKernel", 112, 2, **{"External id": 21, "correlation": 103}),
        _x(
            kernel,
            "relu_kernel",
            115,
            20,
            **gpu,
            correlation=103,
            device=0,
            stream=7,
            **{"blocks per SM": 2.0, "est. achieved occupancy %": 80},
        ),
    ]


def document(dialect: str) -> bytes:
    if dialect == "bare_list":
        return orjson.dumps(events("modern"))
    return orjson.dumps({"schemaVersion": 1, "deviceProperties": DEVICE_PROPERTIES, "traceEvents": events(dialect)})


@pytest.fixture(params=["modern", "legacy_categories", "bare_list"])
def analysed(request: pytest.FixtureRequest) -> tuple:
    raw = document(request.param)
    if request.param == "legacy_categories":
        raw = gzip.compress(raw)  # and gzip, sniffed from the bytes
    tables = parse_trace(io.BytesIO(raw))
    context = TraceContext(tables)
    return tables, context, build_overview(context, context.steps), request.param


def test_step_breakdown_by_priority(analysed: tuple) -> None:
    _, _, overview, _ = analysed
    # Step 2 launched 1 device activity, under 80% of step 1's 3: dropped as probably cut short.
    assert [s["step"] for s in overview["steps"]] == ["1"]
    step = overview["steps"][0]
    # 0-5 other | 5-15 DataLoader | 15-20 other | 20-30 CPU | 30-35 runtime | 35-40 CPU
    # 40-90 kernel (covers memcpy 66-70, runtime 62-66, nccl op 70-80) | 90-95 NCCL kernel | 95-100 other
    assert step["total_us"] == 100
    assert step["kernel_us"] == 50
    assert step["memcpy_us"] == 0
    assert step["memset_us"] == 0
    assert step["communication_us"] == 5
    assert step["runtime_us"] == 5
    assert step["dataloader_us"] == 10
    assert step["cpu_exec_us"] == 15
    assert step["other_us"] == 15
    assert any("left out" in note for note in overview["notes"])


def test_gpu_summary(analysed: tuple) -> None:
    _, _, overview, dialect = analysed
    (gpu,) = overview["gpus"]
    if dialect == "bare_list":  # no top-level object, so no deviceProperties
        assert gpu["name"] is None and gpu["compute_capability"] is None
    else:
        assert gpu["name"] == "Test GPU" and gpu["compute_capability"] == "7.0"
    assert gpu["utilization_pct"] == pytest.approx(55.0)  # kernels cover 40-95 of the 0-100 window
    assert gpu["est_sm_efficiency_pct"] == pytest.approx(25.0)  # 0.5 blocks/SM over 50 of 100 us
    assert gpu["est_achieved_occupancy_pct"] == pytest.approx(40.0)  # relu (80%) lies outside the window
    assert gpu["tensor_cores_pct"] == pytest.approx(50 / 90 * 100)  # h884 kernel: 50 of 90 us


def test_operator_table(analysed: tuple) -> None:
    tables, context, _, _ = analysed
    rows = {r["name"]: r for r in operator_rows(tables, context.tree, "operator")}
    assert set(rows) == {"aten::linear", "aten::addmm", "nccl:all_reduce", "aten::relu"}
    linear, addmm = rows["aten::linear"], rows["aten::addmm"]
    assert (linear["calls"], linear["host_total_us"], linear["host_self_us"]) == (1, 40, 10)
    assert (linear["device_self_us"], linear["device_total_us"]) == (0, 50)
    assert (addmm["host_total_us"], addmm["host_self_us"], addmm["device_self_us"]) == (30, 25, 50)
    assert addmm["tensor_cores_eligible"] and linear["tensor_cores_eligible"]
    assert addmm["tensor_cores_self_pct"] == 100 and linear["tensor_cores_total_pct"] == 100
    assert (rows["nccl:all_reduce"]["host_self_us"], rows["nccl:all_reduce"]["device_self_us"]) == (8, 20)
    assert (rows["aten::relu"]["host_self_us"], rows["aten::relu"]["device_self_us"]) == (8, 20)
    by_shape = operator_rows(tables, context.tree, "operator_input_shape")
    assert {(r["name"], r["input_shape"]) for r in by_shape} >= {("aten::linear", "[[8,4],[4,4],[4]]")}


def test_kernel_tables(analysed: tuple) -> None:
    tables, context, _, _ = analysed
    by_name = {r["name"]: r for r in kernel_rows(tables, context.tree, "kernel")}
    gemm = by_name["volta_h884gemm_64x64_nn"]
    assert (gemm["calls"], gemm["total_us"], gemm["mean_us"], gemm["tensor_cores_used"]) == (1, 50, 50, True)
    assert gemm["mean_blocks_per_sm"] == 0.5 and gemm["mean_est_achieved_occupancy_pct"] == 40
    assert by_name["ncclKernel_AllReduce_RING_LL_Sum_float"]["mean_blocks_per_sm"] == 0  # absent counts as 0
    by_launch = {r["name"]: r for r in kernel_rows(tables, context.tree, "kernel_op")}
    assert by_launch["volta_h884gemm_64x64_nn"]["operator"] == "aten::addmm"
    assert by_launch["volta_h884gemm_64x64_nn"]["grid"] == [4, 1, 1]
    assert by_launch["volta_h884gemm_64x64_nn"]["registers_per_thread"] == 64
    assert by_launch["relu_kernel"]["operator"] == "aten::relu"


def test_recommendations(analysed: tuple) -> None:
    _, _, overview, _ = analysed
    text = " ".join(overview["recommendations"])
    assert "10.0% of the step time is in DataLoader" in text
    assert "GPU 0 has low utilization" not in text  # 55% is above the 50% bar
