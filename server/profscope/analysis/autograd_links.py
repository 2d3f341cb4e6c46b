"""Autograd's ``fwdbwd`` flows: each links a forward op to the backward op that computes its gradient
(``docs/definitions.md`` §14)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profscope.analysis.arrays import lexsort_ints, match_keys
from profscope.analysis.call_tree import CallTree
from profscope.tables import NO_ID, TraceTables

_FLOW_START, _FLOW_FINISH = 0, 2


@dataclass
class FwdBwdLinks:
    """One row per linked pair: where its forward op starts, and the call-tree nodes at both ends (NO_ID: none)."""

    forward_track: np.ndarray
    forward_ts: np.ndarray
    forward_node: np.ndarray
    backward_node: np.ndarray


def fwdbwd_links(tables: TraceTables, tree: CallTree) -> FwdBwdLinks:
    """The ``fwdbwd`` flow pairs; an end's op is the outermost call-tree node starting where the flow event is."""
    flows = tables.table("flows")
    cat_id = tables.strings.lookup("fwdbwd")
    if cat_id < 0 or not len(flows["flow_id"]):
        empty = np.zeros(0, dtype=np.int64)
        return FwdBwdLinks(empty, empty, empty, empty)
    is_link = np.asarray(flows["cat"]) == cat_id
    phase, flow_id = np.asarray(flows["phase"])[is_link], np.asarray(flows["flow_id"])[is_link]
    flow_ts, flow_track = np.asarray(flows["ts_ns"])[is_link], np.asarray(flows["track"])[is_link]
    del is_link
    # the flows are read: their pages go for the rest of the view that asked (nsres_x1GB: 40 MiB, mapped through
    # the Module view's build, its peak)
    tables.release_pages(table="flows")
    start, finish = np.flatnonzero(phase == _FLOW_START), np.flatnonzero(phase == _FLOW_FINISH)
    start = start[np.unique(flow_id[start], return_index=True)[1]]  # one start per flow id
    forward_of = match_keys(flow_id[start], start, flow_id[finish], NO_ID)
    finish, forward_of = finish[forward_of >= 0], forward_of[forward_of >= 0]
    ends = np.concatenate([forward_of, finish])  # both ends' nodes in one search
    nodes = node_starting_at(tables, tree, flow_track[ends], flow_ts[ends])
    return FwdBwdLinks(
        forward_track=flow_track[forward_of],
        forward_ts=flow_ts[forward_of],
        forward_node=nodes[: len(forward_of)],
        backward_node=nodes[len(forward_of) :],
    )


def node_starting_at(tables: TraceTables, tree: CallTree, tracks: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The outermost call-tree node that starts at each (track, time), NO_ID if none."""
    events = tables.events
    node_track = np.asarray(events["track"])[tree.node_event]
    node_ts = np.asarray(events["ts_ns"])[tree.node_event]
    node_dur = np.asarray(events["dur_ns"])[tree.node_event]
    found = _outermost_in_tree_order(node_track, node_ts, node_dur, tracks, times)
    return found if found is not None else _outermost_by_sort(node_track, node_ts, node_dur, tracks, times)


def _outermost_in_tree_order(
    node_track: np.ndarray, node_ts: np.ndarray, node_dur: np.ndarray, tracks: np.ndarray, times: np.ndarray
) -> np.ndarray | None:
    """``_outermost_by_sort`` without a sort: the tree lists its nodes by thread, then by (start, longest first),
    so the first node of each (track, time) is the outermost one. None when the nodes are not in that order or
    (track, time) does not fit one int64 as it is."""
    if not len(node_ts) or int(node_track.min()) < 0:
        return None
    low = min(int(node_ts.min()), int(np.min(times, initial=node_ts[0])))
    span = max(int(node_ts.max()), int(np.max(times, initial=node_ts[0]))) - low + 1
    if (int(node_track.max()) + 1) * span >= 2**62 or int(np.asarray(tracks).min(initial=0)) < 0:
        return None
    node_key = node_track.astype(np.int64) * span
    node_key += node_ts
    node_key -= low
    same_key = node_key[1:] == node_key[:-1]
    if not (node_key[1:] >= node_key[:-1]).all() or not (node_dur[1:][same_key] <= node_dur[:-1][same_key]).all():
        return None
    del same_key
    wanted = np.asarray(tracks).astype(np.int64) * span + (times - low)
    first = np.minimum(np.searchsorted(node_key, wanted), len(node_key) - 1)  # the first node of an equal key
    return np.where(node_key[first] == wanted, first, NO_ID).astype(np.int64)


def _outermost_by_sort(
    node_track: np.ndarray, node_ts: np.ndarray, node_dur: np.ndarray, tracks: np.ndarray, times: np.ndarray
) -> np.ndarray:
    """For each (track, time), the longest node starting there (the lowest index among equals), NO_ID if none."""
    # one int64 key per (track, time): times ranked first, so that track * ranks cannot overflow
    ranks = np.unique(np.concatenate([node_ts, times]), return_inverse=True)[1].reshape(-1).astype(np.int64)
    width = int(ranks.max(initial=0)) + 1
    node_track = node_track.astype(np.int64)
    node_key = node_track * width + ranks[: len(node_ts)]
    wanted = tracks.astype(np.int64) * width + ranks[len(node_ts) :]
    # longest first per key; (track, rank) orders as node_key does, and the nodes are nearly in that order
    order = lexsort_ints((-node_dur, ranks[: len(node_ts)], node_track))
    first = np.append(True, node_key[order][1:] != node_key[order][:-1])
    return match_keys(node_key[order][first], order[first], wanted, NO_ID)
