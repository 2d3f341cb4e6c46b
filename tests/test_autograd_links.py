"""The outermost call-tree node starting at a (thread, time): the sort-free path agrees with the sorting one."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import corpus_file
from profscope.analysis import autograd_links
from profscope.analysis.autograd_links import _outermost_by_sort, _outermost_in_tree_order, fwdbwd_links
from profscope.analysis.context import TraceContext
from profscope.ingest.kineto import parse_trace_file
from profscope.tables import NO_ID

TRACES = [  # with fwdbwd flows: the Module view's backward ops are found this way
    "generated/tinygpt_cpu/worker0.1795315486519085323.pt.trace.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]


@pytest.mark.parametrize("trace", TRACES)
def test_the_tree_order_path_finds_the_nodes_the_sort_finds(trace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    context = TraceContext(parse_trace_file(corpus_file(trace)))
    tables, tree = context.tables, context.tree
    events = tables.events
    node_track = np.asarray(events["track"])[tree.node_event].astype(np.int64)
    node_ts = np.asarray(events["ts_ns"])[tree.node_event]
    node_dur = np.asarray(events["dur_ns"])[tree.node_event]
    # every node's own start, plus times where none starts
    tracks = np.concatenate([node_track, node_track[:50]])
    times = np.concatenate([node_ts, node_ts[:50] + 1])
    fast = _outermost_in_tree_order(node_track, node_ts, node_dur, tracks, times)
    assert fast is not None  # the tree's order: the fast path is the one taken on real traces
    np.testing.assert_array_equal(fast, _outermost_by_sort(node_track, node_ts, node_dur, tracks, times))
    assert (fast[: len(node_ts)] >= 0).all()
    # and the Module view's links, through either path
    links = fwdbwd_links(tables, tree)
    assert len(links.forward_node) > 0
    monkeypatch.setattr(autograd_links, "_outermost_in_tree_order", lambda *args: None)
    by_sort = fwdbwd_links(tables, tree)
    np.testing.assert_array_equal(links.forward_node, by_sort.forward_node)
    np.testing.assert_array_equal(links.backward_node, by_sort.backward_node)


@pytest.mark.parametrize("seed", range(20))
def test_nodes_out_of_tree_order_take_the_sort(seed: int) -> None:
    random = np.random.default_rng(seed)
    size = int(random.integers(1, 300))
    node_track = random.integers(0, 3, size).astype(np.int64)
    node_ts = random.integers(0, 40, size).astype(np.int64)
    node_dur = random.integers(0, 5, size).astype(np.int64)
    tracks, times = random.integers(0, 4, 100).astype(np.int64), random.integers(-2, 45, 100).astype(np.int64)
    expected = _outermost_by_sort(node_track, node_ts, node_dur, tracks, times)
    fast = _outermost_in_tree_order(node_track, node_ts, node_dur, tracks, times)
    if fast is not None:  # only when the random nodes happen to be in the tree's order
        np.testing.assert_array_equal(fast, expected)
    # in the tree's order (thread, start, longest first) the fast path is taken and agrees
    order = np.lexsort((-node_dur, node_ts, node_track))
    in_order = (node_track[order], node_ts[order], node_dur[order])
    fast = _outermost_in_tree_order(*in_order, tracks, times)
    assert fast is not None
    np.testing.assert_array_equal(fast, _outermost_by_sort(*in_order, tracks, times))
    assert (fast == NO_ID).any()  # track 3 has no node: the "none" answer is exercised too


def test_the_links_leave_no_page_of_the_flows_mapped(tmp_path) -> None:
    """The flows are read once, at the start of the Module view's build; their pages stayed mapped through the rest
    of it (nsres_x1GB: 40 MiB, at the peak of the worker that computed it). They are released once read; the
    events' pages the build goes on reading stay; the links are the same."""
    from conftest import resident_bytes_mapped_under
    from profscope.tables import TraceTables

    parsed = parse_trace_file(corpus_file(TRACES[1]))
    want = fwdbwd_links(parsed, TraceContext(parsed).tree)
    parsed.save(tmp_path / "tables")
    tables = TraceTables.load(tmp_path / "tables")
    context = TraceContext(tables)
    tree = context.tree
    np.asarray(tables.events["ts_ns"]).sum()  # read: mapped
    links = fwdbwd_links(tables, tree)
    assert len(links.forward_node) > 0
    for name in ("forward_track", "forward_ts", "forward_node", "backward_node"):
        np.testing.assert_array_equal(getattr(links, name), getattr(want, name))
    flows = sorted((tmp_path / "tables").glob("flows.*.npy"))
    assert len(flows) >= 4 and all(resident_bytes_mapped_under(path) == 0 for path in flows)
    assert resident_bytes_mapped_under(tmp_path / "tables" / "events.ts_ns.npy") > 0
