"""The call tree folded by name path: what the Diff view compares level by level (``docs/definitions.md`` §12).

Every host node of the call tree (op, user annotation, module) is folded with the nodes that have the same
name under the same folded parent, so ``ProfilerStep#* > aten::conv2d > aten::convolution`` is one node
whatever the step or call; the kernels each op launched are its leaves (kind ``kernel``). Profiler step
annotations fold into one name, ``ProfilerStep#*``, so two traces with different step numbers join.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis import name_rules
from profscope.analysis.arrays import by_level, depths, group_ids
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import payload
from profscope.tables import Kind, TraceTables

NS_PER_US = 1000.0
STEP_NAME = f"{name_rules.PROFILER_STEP_PREFIX}*"
STEP_KEY = -3  # a name key no string id takes: every profiler step folds into it
TIMES = ("host_total_us", "host_self_us", "device_total_us", "device_self_us")


class _Folded:
    """The folded nodes as columns, appended level by level."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {"parent": [], "name": [], "kind": [], "calls": []}
        for time in TIMES:
            self.columns[time] = []

    def add(
        self, parent: np.ndarray, name: list[str], kind: str, calls: np.ndarray, times: dict[str, np.ndarray]
    ) -> None:
        self.columns["parent"] += parent.astype(int).tolist()
        self.columns["name"] += name
        self.columns["kind"] += [kind] * len(name)
        self.columns["calls"] += calls.astype(int).tolist()
        for time in TIMES:
            self.columns[time] += (times[time] / NS_PER_US).tolist() if time in times else [0.0] * len(name)

    def __len__(self) -> int:
        return len(self.columns["name"])


def fold_call_tree(tables: TraceTables, tree: CallTree) -> dict[str, list[Any]]:
    """Columns ``parent`` (index into the columns, -1 at top level), ``name``, ``kind`` (op / kernel),
    ``calls`` and the host / device self / total times in µs of every folded node, parents first."""
    events = tables.events
    name_id = np.asarray(events["name"])[tree.node_event].astype(np.int64)
    is_step = name_rules.string_mask(tables.strings, name_rules.is_profiler_step)
    name_key = np.where(is_step[name_id], STEP_KEY, name_id)
    depth = depths(tree.parent) if len(tree.parent) else np.zeros(0, np.int64)
    folded_of = np.full(len(name_key), -1, dtype=np.int64)
    folded = _Folded()
    node_times = {
        "host_total_us": tree.host_total_ns,
        "host_self_us": tree.host_self_ns,
        "device_total_us": tree.device_total_ns,
        "device_self_us": tree.device_self_ns,
    }
    for at in by_level(depth):
        parent = np.where(tree.parent[at] >= 0, folded_of[np.maximum(tree.parent[at], 0)], -1)
        group, first = group_ids(parent, name_key[at])
        folded_of[at] = group + len(folded)
        count = len(first)
        names = [STEP_NAME if key == STEP_KEY else tables.strings[int(key)] for key in name_key[at][first]]
        sums = {t: np.bincount(group, weights=v[at].astype(np.float64), minlength=count) for t, v in node_times.items()}
        folded.add(parent[first], names, "op", np.bincount(group, minlength=count), sums)
    _add_kernels(folded, tables, tree, folded_of)
    return folded.columns


def _add_kernels(folded: _Folded, tables: TraceTables, tree: CallTree, folded_of: np.ndarray) -> None:
    """Each op's kernels (memcpy and memset included) as leaves, folded by kernel name."""
    launched = tree.device_node >= 0
    rows = tree.device_rows[launched]
    if not len(rows):
        return
    events = tables.events
    parent = folded_of[tree.device_node[launched]]
    name = np.asarray(events["name"])[rows].astype(np.int64)
    group, first = group_ids(parent, name)
    count = len(first)
    duration = np.bincount(group, weights=np.asarray(events["dur_ns"])[rows].astype(np.float64), minlength=count)
    kinds = np.asarray(events["kind"])[rows][first]
    names = [tables.strings[int(n)] for n in name[first]]
    calls = np.bincount(group, minlength=count)
    for kind, label in ((Kind.KERNEL, "kernel"), (Kind.MEMCPY, "memcpy"), (Kind.MEMSET, "memset")):
        mask = kinds == kind
        if mask.any():
            chosen = np.flatnonzero(mask)
            folded.add(
                parent[first][chosen],
                [names[i] for i in chosen],
                label,
                calls[chosen],
                {"device_total_us": duration[chosen], "device_self_us": duration[chosen]},
            )


@payload("operators.tree", version=2)
def operator_tree(context: TraceContext) -> dict[str, Any]:
    return {"nodes": fold_call_tree(context.tables, context.tree)}
