"""The Overview's sweeps in C (``intervals.merge_each``, ``intervals.paint``) give, on corpus traces, the category
unions and step shares of the numpy code they replace, and the same Overview, byte for byte; and its category ranges
are those the definitions give, however its masks are made."""

from __future__ import annotations

import io

import numpy as np
import orjson
import pytest

from conftest import NATIVE_COMPARISON_TRACES, corpus_file
from profscope.analysis import intervals, name_rules, overview
from profscope.analysis.context import TraceContext
from profscope.analysis.device_activity import communication_device_rows
from profscope.ingest.kineto import parse_trace, parse_trace_file
from profscope.tables import Kind


@pytest.mark.parametrize("relative", NATIVE_COMPARISON_TRACES)
def test_the_overview_s_sweeps_in_c_give_numpy_s_sets_and_overview(
    relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert intervals._native is not None
    context = TraceContext(parse_trace_file(corpus_file(relative)))
    tables, tree, steps = context.tables, context.tree, context.steps
    window = intervals.merge(steps.starts_ns, steps.ends_ns)
    ranges = overview.category_intervals(tables, tree)
    shares = intervals.paint(window, [ranges[c] for c in overview.CATEGORIES])
    payload = orjson.dumps(overview.build_overview(context, steps))
    with monkeypatch.context() as numpy_only:
        numpy_only.setattr(intervals, "_native", None)
        numpy_ranges = overview.category_intervals(tables, tree)
        numpy_shares = intervals.paint(window, [numpy_ranges[c] for c in overview.CATEGORIES])
        numpy_payload = orjson.dumps(overview.build_overview(context, steps))
    assert ranges.keys() == numpy_ranges.keys()
    for got, wanted in [
        *zip(ranges.values(), numpy_ranges.values(), strict=True),
        *zip(shares, numpy_shares, strict=True),
    ]:
        assert got[0].dtype == got[1].dtype == np.int64
        np.testing.assert_array_equal(got[0], wanted[0])
        np.testing.assert_array_equal(got[1], wanted[1])
    assert sum(len(starts) for starts, _ in ranges.values()) > 100
    assert payload == numpy_payload


def _categories_as_defined(context: TraceContext) -> dict:
    """Each category's ranges, one mask of the events per category as docs/definitions.md §2 states it."""
    tables = context.tables
    events = tables.events
    kind, name = np.asarray(events["kind"]), np.asarray(events["name"])
    ts, dur = np.asarray(events["ts_ns"]), np.asarray(events["dur_ns"])
    comm_kernel = communication_device_rows(tables, context.tree)
    comm_op, dataloader, step = (
        name_rules.string_mask(tables.strings, rule)[name]
        for rule in (name_rules.is_comm_op, name_rules.is_dataloader, name_rules.is_step_range)
    )
    host = np.isin(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY))
    kernel = kind == Kind.KERNEL
    masks = {
        "kernel": kernel & ~comm_kernel,
        "memcpy": kind == Kind.MEMCPY,
        "memset": kind == Kind.MEMSET,
        "communication": (kernel & comm_kernel) | (host & comm_op),
        "runtime": np.isin(kind, (Kind.RUNTIME, Kind.DRIVER)),
        "dataloader": host & dataloader,
        "cpu_exec": host & ~dataloader & ~step & ~comm_op,
    }
    return {category: intervals.merge(ts[mask], ts[mask] + dur[mask]) for category, mask in masks.items()}


def _named_like_every_category() -> TraceContext:
    """Host ops and annotations named as communication, data loading and steps, and device events and runtime calls
    named so too (which the names do not make host categories), with kernels launched from them."""

    def event(name: str, cat: str, ts: int, dur: int, tid: int = 1, **args: int) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}

    step, loader, comm = (
        "ProfilerStep#1",
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
        "nccl:all_reduce",
    )
    events = [
        event(step, "user_annotation", 0, 1000),
        event(loader, "user_annotation", 10, 100),
        event(comm, "cpu_op", 200, 100, **{"External id": 7}),
        event("cudaLaunchKernel", "cuda_runtime", 210, 10, **{"External id": 7, "correlation": 1}),
        event("ncclKernel_AllReduce", "kernel", 400, 50, tid=7, correlation=1),
        event("aten::mm", "cpu_op", 500, 100, **{"External id": 8}),
        event("cudaLaunchKernel", "cuda_runtime", 510, 10, **{"External id": 8, "correlation": 2}),
        event(loader, "kernel", 620, 30, tid=7, correlation=2),
        event(loader, "cuda_runtime", 700, 20),
        event(step, "gpu_memcpy", 730, 20, tid=7),
        event(comm, "gpu_memset", 760, 10, tid=7),
        event("aten::add", "cpu_op", 800, 50, tid=2),
        event(loader, "cpu_op", 820, 100, tid=2),
    ]
    return TraceContext(parse_trace(io.BytesIO(orjson.dumps({"traceEvents": events}))))


@pytest.mark.parametrize("relative", [*NATIVE_COMPARISON_TRACES, None])
def test_the_category_ranges_are_those_the_definitions_give(relative: str | None) -> None:
    """The masks of ``category_intervals`` (the categories the call tree does not decide from one byte of name bits
    per event, the kernels' after the tree) select the events of each category as defined."""
    context = (
        _named_like_every_category() if relative is None else TraceContext(parse_trace_file(corpus_file(relative)))
    )
    got = overview.category_intervals(context.tables, context.tree)
    wanted = _categories_as_defined(context)
    assert list(got) == list(overview.CATEGORIES) and got.keys() == wanted.keys()
    for category, (starts, ends) in wanted.items():
        np.testing.assert_array_equal(got[category][0], starts, err_msg=category)
        np.testing.assert_array_equal(got[category][1], ends, err_msg=category)
    if relative is None:  # each category has events here
        assert all(len(starts) for starts, _ in got.values())
