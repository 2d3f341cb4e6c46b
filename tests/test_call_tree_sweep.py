"""The call tree's nesting sweep in C gives exactly the trees of the Python loop it replaces."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import orjson
import pytest

from conftest import corpus_file
from profscope.analysis import call_tree
from profscope.analysis.call_tree import CallTree, build_call_tree
from profscope.ingest.kineto import parse_trace, parse_trace_file

TRACES = [
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/nccl_parser_config/nccl_data.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/inference/vllm_prefilldecode_piecewise/graph_execution.json.gz",
]


def _trees(tables, monkeypatch: pytest.MonkeyPatch) -> tuple[CallTree, CallTree]:
    native = build_call_tree(tables)
    with monkeypatch.context() as python_only:
        python_only.setattr(call_tree, "_call_tree_sweep", None)
        python = build_call_tree(tables)
    return python, native


def _assert_same(python: CallTree, native: CallTree) -> None:
    for field in dataclasses.fields(CallTree):
        ours, theirs = getattr(native, field.name), getattr(python, field.name)
        if isinstance(theirs, np.ndarray):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), field.name
        else:
            assert ours == theirs, field.name


def test_the_extension_is_built() -> None:
    assert call_tree._call_tree_sweep is not None


@pytest.mark.parametrize("relative", TRACES)
def test_native_sweep_gives_the_python_trees(relative: str, monkeypatch: pytest.MonkeyPatch) -> None:
    python, native = _trees(parse_trace_file(corpus_file(relative)), monkeypatch)
    _assert_same(python, native)
    assert len(native.node_event) > 100


def test_overlapping_ops_threads_and_runtime_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    def op(name: str, ts: int, dur: int, tid: int = 1, cat: str = "cpu_op") -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    events = [
        op("outer", 0, 100),
        op("inner", 10, 20),
        op("crosses", 20, 100),  # starts inside "inner"... ends after "outer": unlinked
        op("sibling", 40, 10),
        op("cudaLaunchKernel", 42, 3, cat="cuda_runtime"),
        op("cudaLaunchKernel", 95, 10, cat="cuda_runtime"),  # ends after its op: not enclosed
        op("same start", 0, 100),
        op("other thread", 5, 50, tid=2),
        op("cudaMemcpy", 6, 1, tid=2, cat="cuda_runtime"),
        op("cudaMemcpy", 300, 1, tid=3, cat="cuda_runtime"),
    ]
    tables = parse_trace(io.BytesIO(orjson.dumps({"traceEvents": events})))
    python, native = _trees(tables, monkeypatch)
    _assert_same(python, native)
    assert native.dropped == 1
