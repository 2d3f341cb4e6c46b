"""Host call tree and launch links: which op launched which device activity, with self/total times.

Definitions (torch-tb-profiler's, ``anchors.md`` §1.5):
- per thread, host ops (``cpu_op``, ``user_annotation``, legacy ``Python``) nest by time containment;
  an op that starts inside another but ends after it is left out of the tree (counted in
  ``dropped``), as the old plugin did;
- a runtime/driver call belongs to the op whose ``External id`` it carries, when that op is on
  the same thread and encloses the call; otherwise (traces whose runtime ``External id`` is the
  correlation id, e.g. torch 2.0.1) to the innermost op that encloses it on its thread; a device
  event (kernel, memcpy, memset) belongs to the runtime call with the same ``correlation``;
- host self time = duration − children's durations − its runtime calls' durations;
- device self time = its runtime calls' device events; device total adds the children's totals;
- an op with a single child of the same name is merged with that child (PyTorch's
  ``_remove_dup_nodes``);
- tensor-core eligible = on the eligible list, or a child is eligible, or it launched a TC kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profscope.analysis import names as rules
from profscope.analysis.arrays import lookup, match_keys
from profscope.tables import NO_ID, Kind, TraceTables

try:
    from profscope.analysis import _call_tree_sweep
except ImportError:  # built without a compiler (the extension is optional): the same sweep in Python
    _call_tree_sweep = None

_SWEEP_BLOCK = 1 << 17
ROOT = -1  # launched from outside any op (External id 0): torch-tb-profiler's CallTreeRoot
UNLINKED = -2  # no launching runtime / op could be found


@dataclass
class CallTree:
    node_event: np.ndarray  # event row of each node (merged-away nodes excluded)
    parent: np.ndarray  # node index of the parent, ROOT for top level
    host_total_ns: np.ndarray
    host_self_ns: np.ndarray
    device_self_ns: np.ndarray
    device_total_ns: np.ndarray
    tc_self_ns: np.ndarray
    tc_total_ns: np.ndarray
    tc_eligible: np.ndarray
    is_operator: np.ndarray  # rows of the operator table
    device_rows: np.ndarray  # event rows of kernels / memcpy / memset
    device_node: np.ndarray  # launching node per device row (ROOT / UNLINKED otherwise)
    device_runtime: np.ndarray  # launching runtime event row per device row, or NO_ID
    dropped: int  # host ops left out because they overlap their parent without nesting


def build_call_tree(tables: TraceTables) -> CallTree:
    events = tables.events
    kind = np.asarray(events["kind"])
    host_rows = np.flatnonzero(np.isin(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY)))
    host_rows = host_rows[np.argsort(np.asarray(events["track"])[host_rows], kind="stable")]  # by thread, (ts, -dur)
    runtime_rows = np.flatnonzero(np.isin(kind, (Kind.RUNTIME, Kind.DRIVER)))
    parent, dropped, runtime_enclosing = _nest(host_rows, runtime_rows, events)
    is_cpu_op = kind[host_rows] == Kind.CPU_OP
    alias = _merge_single_same_name_children(parent, is_cpu_op, np.asarray(events["name"])[host_rows])
    live = (parent != UNLINKED) & (alias == np.arange(len(host_rows)))
    node_parent = np.where(parent >= 0, lookup(alias, parent, ROOT), parent)
    runtime_node = _runtime_owners(events, host_rows, parent != UNLINKED, alias, runtime_rows, runtime_enclosing)
    del runtime_enclosing
    device_rows, device_runtime, device_node = _device_launches(events, runtime_rows, runtime_node)
    sums = _node_sums(
        tables, host_rows, live, node_parent, is_cpu_op, runtime_rows, runtime_node, device_rows, device_node
    )

    excluded = rules.string_mask(
        tables.strings,
        lambda s: (
            s in rules.EXCLUDED_OPERATOR_NAMES
            or rules.is_optimizer(s)
            or rules.is_step_range(s)
            or rules.is_dataloader(s)
        ),
    )
    is_operator = live & is_cpu_op & ~excluded[np.asarray(events["name"])[host_rows]]
    keep = np.flatnonzero(live)
    renumber = np.full(len(host_rows), UNLINKED, dtype=np.int64)
    renumber[keep] = np.arange(len(keep))

    def remap(nodes: np.ndarray) -> np.ndarray:
        return np.where(nodes >= 0, lookup(renumber, nodes, UNLINKED), nodes)

    return CallTree(
        node_event=host_rows[keep],
        parent=remap(node_parent[keep]),
        host_total_ns=sums["host_total"][keep],
        host_self_ns=sums["host_self"][keep],
        device_self_ns=sums["device_self"][keep],
        device_total_ns=sums["device_total"][keep],
        tc_self_ns=sums["tc_self"][keep],
        tc_total_ns=sums["tc_total"][keep],
        tc_eligible=sums["tc_eligible"][keep],
        is_operator=is_operator[keep],
        device_rows=device_rows,
        device_node=remap(device_node),
        device_runtime=device_runtime,
        dropped=dropped,
    )


def _merge_single_same_name_children(parent: np.ndarray, is_cpu_op: np.ndarray, names: np.ndarray) -> np.ndarray:
    """``alias[node]``: the node it merges into (itself when it stays)."""
    child_count = np.bincount(parent[parent >= 0], minlength=len(parent))
    has_parent = np.flatnonzero(parent >= 0)
    single = has_parent[child_count[parent[has_parent]] == 1]  # the only child of its parent
    merges = single[is_cpu_op[single] & is_cpu_op[parent[single]] & (names[single] == names[parent[single]])]
    alias = np.arange(len(parent))
    alias[merges] = parent[merges]
    while True:  # a chain of same-name single children collapses into its top (pointer jumping)
        jumped = alias[alias]
        if np.array_equal(jumped, alias):
            return alias
        alias = jumped


def _runtime_owners(
    events: dict[str, np.ndarray],
    host_rows: np.ndarray,
    kept_nodes: np.ndarray,
    alias: np.ndarray,
    runtime_rows: np.ndarray,
    runtime_enclosing: np.ndarray,
) -> np.ndarray:
    """The node each runtime call belongs to: its External id's op if that op encloses it, else the innermost."""
    external_id = np.asarray(events["external_id"])
    kept = np.flatnonzero(kept_nodes)
    kept_external = external_id[host_rows[kept]]
    owner_external, first = np.unique(kept_external, return_index=True)  # the first op (thread order) owns an id
    runtime_external = external_id[runtime_rows]
    by_external = match_keys(owner_external, alias[kept[first]], runtime_external, UNLINKED)
    by_external[(runtime_external == 0) | (runtime_external == NO_ID)] = UNLINKED
    consistent = np.zeros(len(runtime_rows), dtype=bool)
    if len(host_rows):
        track, ts, dur = (np.asarray(events[c]) for c in ("track", "ts_ns", "dur_ns"))
        candidate = host_rows[np.maximum(by_external, 0)]
        consistent = (
            (by_external >= 0)
            & (track[candidate] == track[runtime_rows])
            & (ts[candidate] <= ts[runtime_rows])
            & (ts[runtime_rows] + dur[runtime_rows] <= ts[candidate] + dur[candidate])
        )
    return np.where(consistent, by_external, lookup(alias, runtime_enclosing, ROOT))


def _device_launches(
    events: dict[str, np.ndarray], runtime_rows: np.ndarray, runtime_node: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Device rows, the runtime call that launched each (same correlation; the last if repeated), its node."""
    kind, correlation = np.asarray(events["kind"]), np.asarray(events["correlation"])
    runtime_correlation = correlation[runtime_rows]
    order = np.argsort(runtime_correlation, kind="stable")
    sorted_correlation = runtime_correlation[order]
    last_of_value = np.append(sorted_correlation[1:] != sorted_correlation[:-1], True)[: len(sorted_correlation)]
    device_rows = np.flatnonzero(np.isin(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)))
    device_correlation = correlation[device_rows]
    position = match_keys(sorted_correlation[last_of_value], order[last_of_value], device_correlation, NO_ID)
    position[device_correlation == NO_ID] = NO_ID
    return device_rows, lookup(runtime_rows, position, NO_ID), lookup(runtime_node, position, ROOT)


def _node_sums(
    tables: TraceTables,
    host_rows: np.ndarray,
    live: np.ndarray,
    node_parent: np.ndarray,
    is_cpu_op: np.ndarray,
    runtime_rows: np.ndarray,
    runtime_node: np.ndarray,
    device_rows: np.ndarray,
    device_node: np.ndarray,
) -> dict[str, np.ndarray]:
    """Host self/total, device self/total and tensor-core time per node, summed bottom-up."""
    events = tables.events
    name, dur = np.asarray(events["name"]), np.asarray(events["dur_ns"])
    count = len(host_rows)
    host_total = dur[host_rows]
    device_dur = dur[device_rows]
    is_tc_kernel = (np.asarray(events["kind"])[device_rows] == Kind.KERNEL) & rules.string_mask(
        tables.strings, rules.uses_tensor_cores
    )[name[device_rows]]
    launched = device_node >= 0

    def per_node(nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(nodes, weights=weights, minlength=count).astype(np.int64)

    device_self = per_node(device_node[launched], device_dur[launched])
    tc_self = per_node(device_node[launched], device_dur[launched] * is_tc_kernel[launched])
    attached = runtime_node >= 0
    runtime_time = per_node(runtime_node[attached], dur[runtime_rows][attached])
    has_live_parent = live & (node_parent >= 0)
    children_time = per_node(node_parent[has_live_parent], host_total[has_live_parent])
    eligible_names = rules.string_mask(tables.strings, lambda s: s in rules.TENSOR_CORE_ELIGIBLE_OPS)
    tc_eligible = eligible_names[name[host_rows]] | (tc_self > 0)
    device_total = device_self.copy()
    tc_total = tc_self.copy()
    tree_parent = np.where(has_live_parent, node_parent, ROOT)
    depth = _depths(tree_parent)
    for level in range(int(depth.max(initial=0)), 0, -1):  # deepest first, so sums flow to the roots
        nodes = np.flatnonzero(depth == level)
        parents = tree_parent[nodes]
        np.add.at(device_total, parents, device_total[nodes])
        np.add.at(tc_total, parents, tc_total[nodes])
        tc_eligible[parents[tc_eligible[nodes] & is_cpu_op[parents]]] = True
    return {
        "host_total": host_total,
        "host_self": host_total - children_time - runtime_time,
        "device_self": device_self,
        "device_total": device_total,
        "tc_self": tc_self,
        "tc_total": tc_total,
        "tc_eligible": tc_eligible,
    }


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given as parent indices (-1 for roots)."""
    depth = np.zeros(len(parent), dtype=np.int64)
    ancestor = parent.copy()
    climbing = ancestor >= 0
    while climbing.any():
        depth[climbing] += 1
        ancestor[climbing] = parent[ancestor[climbing]]
        climbing = ancestor >= 0
    return depth


def _nest(
    rows: np.ndarray, runtime_rows: np.ndarray, events: dict[str, np.ndarray]
) -> tuple[np.ndarray, int, np.ndarray]:
    """Parent node of each host row, and the innermost enclosing node of each runtime row.

    Host rows and runtime calls are swept together per thread in (start, longest first) order with
    a stack of open ops; runtime calls are leaves.
    """
    node_count = len(rows)
    all_rows = np.concatenate([rows, runtime_rows])
    starts = np.asarray(events["ts_ns"])[all_rows]
    durations = np.asarray(events["dur_ns"])[all_rows]
    tracks = np.asarray(events["track"])[all_rows]
    order = np.lexsort((np.arange(len(all_rows)), -durations, starts, tracks))
    starts, ends, tracks = starts[order], (starts + durations)[order], tracks[order]
    del durations, all_rows
    if _call_tree_sweep is not None:
        swept, dropped = _call_tree_sweep.sweep(
            order, starts, ends, tracks.astype(np.int64), node_count, ROOT, UNLINKED
        )
        found = np.frombuffer(swept, dtype=np.int64)
    else:
        found, dropped = _sweep(order, starts, ends, tracks, node_count)
    result = np.empty(len(order), dtype=np.int64)
    result[order] = found
    return result[:node_count], dropped, result[node_count:]


def _sweep(
    order: np.ndarray, starts: np.ndarray, ends: np.ndarray, tracks: np.ndarray, node_count: int
) -> tuple[np.ndarray, int]:
    """The enclosing node of each position (ROOT / UNLINKED), and how many ops were UNLINKED.

    Reads the sorted columns in blocks so that only one block at a time exists as Python objects;
    ``_call_tree_sweep`` (C) does the same loop when it was compiled.
    """
    found = np.empty(len(order), dtype=np.int64)
    stack_items: list[int] = []
    stack_ends: list[int] = []
    current_track = None
    dropped = 0
    for block in range(0, len(order), _SWEEP_BLOCK):
        part = slice(block, block + _SWEEP_BLOCK)
        out: list[int] = []
        for item, start, stop, thread in zip(
            order[part].tolist(), starts[part].tolist(), ends[part].tolist(), tracks[part].tolist(), strict=True
        ):
            if thread != current_track:
                current_track, stack_items, stack_ends = thread, [], []
            while stack_ends and start >= stack_ends[-1]:
                stack_items.pop()
                stack_ends.pop()
            if item >= node_count:  # a runtime call: enclosed by the open op if it ends inside it
                out.append(stack_items[-1] if stack_ends and stop <= stack_ends[-1] else ROOT)
            elif stack_ends and stop > stack_ends[-1]:  # starts inside the open op but ends after it
                out.append(UNLINKED)
                dropped += 1
            else:
                out.append(stack_items[-1] if stack_items else ROOT)
                stack_items.append(item)
                stack_ends.append(stop)
        found[part] = out
    return found, dropped
