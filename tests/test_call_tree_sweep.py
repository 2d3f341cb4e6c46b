"""The call tree's nesting sweep in C gives exactly the trees of the Python loop it replaces."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import orjson
import pytest

from conftest import NATIVE_COMPARISON_TRACES, corpus_file
from profscope.analysis import call_tree, native
from profscope.analysis.call_tree import CallTree, build_call_tree
from profscope.ingest.kineto import parse_trace, parse_trace_file


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
    # built, and from this source: an extension without every function the code calls is not used at all
    # (analysis/native.py), and every comparison below would compare numpy with itself
    assert call_tree._call_tree_sweep is not None
    assert all(hasattr(call_tree._call_tree_sweep, name) for name in native.FUNCTIONS)


def test_an_extension_built_from_older_source_is_left_for_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from profscope.analysis import _call_tree_sweep

    monkeypatch.delattr(_call_tree_sweep, "tree_up")
    native.call_tree_sweep.cache_clear()
    try:
        assert native.call_tree_sweep() is None
    finally:
        monkeypatch.undo()
        native.call_tree_sweep.cache_clear()
    assert native.call_tree_sweep() is _call_tree_sweep


@pytest.mark.parametrize("relative", NATIVE_COMPARISON_TRACES)
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


def _random_events(rng: np.random.Generator, count: int, in_time_order: bool) -> dict[str, np.ndarray]:
    """Few distinct starts and durations (many exact ties), a few threads; sorted by (start, longest first) as
    ingest leaves events, or in random order."""
    ts = rng.integers(0, int(rng.integers(1, 40)), count)
    dur = rng.integers(0, 4, count) * rng.integers(0, 12, count)
    order = np.lexsort((-dur, ts)) if in_time_order else rng.permutation(count)
    return {
        "ts_ns": ts[order].astype(np.int64),
        "dur_ns": dur[order].astype(np.int64),
        "track": rng.integers(0, 3, count)[order].astype(np.int32),
    }


def test_nesting_in_row_order_is_the_sorted_sweep_on_edge_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C nesting straight from rows in time order (``nest_in_row_order``) gives the parents, drops and
    enclosing ops of the Python sweep over rows sorted by (thread, start, longest first, host rows first)."""
    rng = np.random.default_rng(5)
    taken = 0
    for case in range(400):
        count = int(rng.integers(0, 60))
        events = _random_events(rng, count, in_time_order=case % 4 != 0)
        is_runtime = rng.integers(0, 3, count) == 0
        host_rows = np.flatnonzero(~is_runtime)
        host_rows = host_rows[np.argsort(events["track"][host_rows], kind="stable")]  # as build_call_tree has them
        runtime_rows = np.flatnonzero(is_runtime)
        columns = (events["ts_ns"], events["dur_ns"], events["track"], host_rows, runtime_rows)
        taken += call_tree._call_tree_sweep.nest_in_row_order(*columns, call_tree.ROOT, call_tree.UNLINKED) is not None
        native = call_tree._nest(host_rows, runtime_rows, events)
        with monkeypatch.context() as python_only:
            python_only.setattr(call_tree, "_call_tree_sweep", None)
            python = call_tree._nest(host_rows, runtime_rows, events)
        assert native[1] == python[1]
        for ours, theirs in ((native[0], python[0]), (native[2], python[2])):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), case
    assert 250 <= taken < 400  # the rows in time order took the row-order path, the shuffled ones mostly not


def test_tree_passes_in_node_order_are_the_passes_by_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C passes over nodes whose parents come first (``tree_down``, ``tree_up``) give the row owners, the
    children's host time and the device / tensor-core totals of the passes level by level."""
    rng = np.random.default_rng(9)
    for case in range(300):
        count = int(rng.integers(0, 80))
        parent = np.array([int(rng.integers(-1, node)) if node else -1 for node in range(count)], dtype=np.int64)
        is_row = rng.random(count) < rng.random()
        is_cpu_op = rng.random(count) < 0.7
        host_total = rng.integers(0, 1_000, count)
        totals = [rng.integers(0, 50, count), rng.integers(0, 50, count), rng.random(count) < 0.2]
        native_down = call_tree._pass_down(parent, is_row, host_total)
        native_up = [values.copy() for values in totals]
        call_tree._pass_up(parent, native_down[0], is_cpu_op, *native_up)
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(call_tree, "_call_tree_sweep", None)
            levels, owner, children = call_tree._pass_down(parent, is_row, host_total)
            numpy_up = [values.copy() for values in totals]
            call_tree._pass_up(parent, levels, is_cpu_op, *numpy_up)
        assert native_down[0] is None and levels is not None
        for ours, theirs in zip((*native_down[1:], *native_up), (owner, children, *numpy_up), strict=True):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), case


def test_tree_passes_refuse_a_parent_after_its_child() -> None:
    parent = np.array([-1, 2, 0], dtype=np.int64)
    flags, values = np.zeros(3, dtype=bool), np.zeros(3, dtype=np.int64)
    assert call_tree._call_tree_sweep.tree_down(parent, flags, values, call_tree.ROOT) is None
    assert call_tree._call_tree_sweep.tree_up(parent, flags, values, values.copy(), flags.copy()) is False
    levels, _, _ = call_tree._pass_down(parent, flags, values)
    assert levels is not None  # the passes by level instead


def test_merged_aliases_in_node_order_are_the_pointer_jumping_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """``merge_aliases`` (C, parents first) collapses chains of same-name single cpu_op children as the numpy
    pointer jumping does; dropped nodes (UNLINKED) have no parent."""
    rng = np.random.default_rng(13)
    for case in range(300):
        count = int(rng.integers(0, 60))
        # often the node just before (chains of single children), else any earlier node, ROOT or UNLINKED
        parent = np.array(
            [node - 1 if rng.random() < 0.5 else int(rng.integers(-2, node)) if node else -1 for node in range(count)],
            dtype=np.int64,
        )
        is_cpu_op = rng.random(count) < 0.8
        names = rng.integers(0, 3, count).astype(np.int32)
        assert call_tree._call_tree_sweep.merge_aliases(parent, is_cpu_op, names) is not None  # the C loop
        native = call_tree._merge_single_same_name_children(parent, is_cpu_op, names)
        with monkeypatch.context() as numpy_only:
            numpy_only.setattr(call_tree, "_call_tree_sweep", None)
            reference = call_tree._merge_single_same_name_children(parent, is_cpu_op, names)
        assert native.dtype == reference.dtype and np.array_equal(native, reference), case
    unordered = np.array([-1, 2, 0], dtype=np.int64)
    assert call_tree._call_tree_sweep.merge_aliases(unordered, np.ones(3, bool), np.zeros(3, np.int32)) is None
