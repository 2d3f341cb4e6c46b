"""The memory attribution nests nodes and memory records with the call tree's sweep (C when compiled): the same
parents and record owners as the per-item Python loop it replaced (kept here as the reference), on real traces
with memory events and on the edge cases of the plugin's rule."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis import call_tree, memory
from profscope.analysis.context import TraceContext
from profscope.ingest.kineto import parse_trace_file
from profscope.tables import NO_ID

TRACES = [
    "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "generated/tinygpt_ddp4_gloo/rank0.1795315503706026973.pt.trace.json.gz",
    "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",
]


def _reference(track, start, end, record_track, record_ts):
    """The loop ``_nest_with_records`` ran before: per thread, a stack of open nodes."""
    parent = np.full(len(start), memory.ROOT, dtype=np.int64)
    record_node = np.full(len(record_ts), memory.ROOT, dtype=np.int64)
    if len(record_ts) == 0:
        return parent, record_node
    kind = np.concatenate([np.zeros(len(start), np.int8), np.ones(len(record_ts), np.int8)])
    tracks = np.concatenate([track, record_track])
    times = np.concatenate([start, record_ts])
    lengths = np.concatenate([end - start, np.zeros(len(record_ts), np.int64)])
    order = np.lexsort((-lengths, kind, times, tracks))
    ends = end.tolist()
    current_track, stack = None, []
    for item, item_track, item_time in zip(order.tolist(), tracks[order].tolist(), times[order].tolist(), strict=True):
        if item_track != current_track:
            current_track, stack = item_track, []
        while stack and item_time >= ends[stack[-1]]:
            stack.pop()
        if item < len(start):
            if stack and ends[item] > ends[stack[-1]]:
                parent[item] = -2
                continue
            parent[item] = stack[-1] if stack else memory.ROOT
            stack.append(item)
        else:
            record_node[item - len(start)] = stack[-1] if stack else memory.ROOT
    return parent, record_node


def _both_ways(arguments, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _reference(*arguments)
    native = memory._nest_with_records(*arguments)
    with monkeypatch.context() as python_only:
        python_only.setattr(call_tree, "_call_tree_sweep", None)
        python = memory._nest_with_records(*arguments)
    for got in (native, python):
        for part, want in zip(got, expected, strict=True):
            assert part.dtype == np.int64
            np.testing.assert_array_equal(part, want)


@pytest.mark.parametrize("relative", TRACES)
def test_nesting_matches_the_python_loop_on_traces(relative: str, monkeypatch: pytest.MonkeyPatch) -> None:
    tables = parse_trace_file(corpus_file(relative))
    assert tables.row_count("memory") > 0
    tree = TraceContext(tables).tree
    events, python = tables.events, tables.table("python")
    module_events = np.asarray(python["event"])[np.asarray(python["module_id"]) != NO_ID]
    nodes = np.concatenate([tree.node_event, module_events]).astype(np.int64)
    ts = np.asarray(events["ts_ns"])
    end = ts + np.asarray(events["dur_ns"])
    record_track, record_ts = np.asarray(tables.table("memory")["track"]), np.asarray(tables.table("memory")["ts_ns"])
    _both_ways((np.asarray(events["track"])[nodes], ts[nodes], end[nodes], record_track, record_ts), monkeypatch)


def test_edge_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    # thread 1: outer [0, 100) holds inner [10, 30) and a node crossing inner's end (left out), a node with
    # the same start as outer but shorter, a zero-length node; thread 2: one node. Records at a node's start,
    # at its end (outside it), between nodes, on a thread without nodes.
    track = np.array([1, 1, 1, 1, 1, 2], dtype=np.int64)
    start = np.array([0, 10, 20, 0, 50, 5], dtype=np.int64)
    end = np.array([100, 30, 40, 60, 50, 9], dtype=np.int64)
    record_track = np.array([1, 1, 1, 1, 2, 2, 3, 1], dtype=np.int64)
    record_ts = np.array([0, 10, 30, 100, 5, 9, 1, 20], dtype=np.int64)
    _both_ways((track, start, end, record_track, record_ts), monkeypatch)
    parent, record_node = memory._nest_with_records(track, start, end, record_track, record_ts)
    assert parent.tolist() == [-1, 3, -2, 0, 3, -1]
    assert record_node.tolist() == [3, 1, 3, -1, 5, -1, -1, 1]
    _both_ways((track, start, end, record_track[:0], record_ts[:0]), monkeypatch)  # no records
