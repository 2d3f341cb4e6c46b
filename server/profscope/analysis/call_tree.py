"""Host call tree and launch links: which op launched which device activity, with self/total times.

Definitions (torch-tb-profiler's, ``docs/definitions.md`` §3):
- per thread, host ops (``cpu_op``, ``user_annotation``, legacy ``Python``) nest by time containment;
  an op that starts inside another but ends after it is left out of the tree (counted in
  ``dropped``), as the old plugin did;
- a runtime/driver call belongs to the op whose ``External id`` it carries, when that op is on
  the same thread and encloses the call; otherwise (traces whose runtime ``External id`` is the
  correlation id, e.g. torch 2.0.1) to the innermost op that encloses it on its thread; a device
  event (kernel, memcpy, memset) belongs to the runtime call with the same ``correlation``;
- operator rows are the ``cpu_op`` nodes other than steps, optimizer wrappers and data loading;
  every other node (``user_annotation``, ``ProfilerStep#N``, ...) is see-through for rows
  (``docs/definitions.md``, "Operator time accounting"): a row's host self time = its duration −
  the durations of the rows directly below it (looking through non-row nodes) − the runtime calls
  that lie inside it and not inside a row below it; its device self time = the device events those
  runtime calls launched. So an ``nccl:*`` annotation or ``record_function`` range inside an op
  takes no time from it, and the rows' self times add up to the time spent inside operators;
  device time launched outside every row is "unattributed" (``device_op_row`` is ROOT);
- a non-row node's host self time is by plain nesting (duration − children − its runtime calls);
  its device self time is only what it launched with no row above it;
- device total adds the children's totals;
- an op with a single child of the same name is merged with that child (PyTorch's
  ``_remove_dup_nodes``);
- tensor-core eligible = on the eligible list, or a child is eligible, or it launched a TC kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from profscope.analysis import name_rules
from profscope.analysis.arrays import (
    by_level,
    depths,
    is_one_of,
    lexsort_ints,
    lookup,
    match_occurrence,
    stable_argsort,
)
from profscope.analysis.native import call_tree_sweep
from profscope.tables import NO_ID, Kind, TraceTables

_call_tree_sweep = call_tree_sweep()  # None: numpy does what it would (analysis/native.py)

_SWEEP_BLOCK = 1 << 17
ROOT = -1  # launched from outside any op (External id 0): torch-tb-profiler's CallTreeRoot
UNLINKED = -2  # no launching runtime / op could be found


class DeviceLaunches(Protocol):
    """Device rows and the runtime call that launched each: what the steps are re-timed by (``RuntimeLaunches``,
    or a ``CallTree``, which holds them too)."""

    device_rows: np.ndarray
    device_runtime: np.ndarray


@dataclass(frozen=True)
class RuntimeLaunches:
    """Each device event (kernel, memcpy, memset) and the runtime call that launched it (the same ``correlation``;
    the last if repeated): the first link of the call tree's, known without the nesting of the host ops."""

    device_rows: np.ndarray  # event rows of kernels / memcpy / memset
    device_runtime: np.ndarray  # launching runtime event row per device row, or NO_ID
    runtime_rows: np.ndarray  # event rows of every runtime / driver call
    runtime_index: np.ndarray  # per device row, its runtime call's position in runtime_rows, or NO_ID


def runtime_launches(tables: TraceTables) -> RuntimeLaunches:
    events = tables.events
    kind, correlation = np.asarray(events["kind"]), np.asarray(events["correlation"])
    runtime_rows = np.flatnonzero(is_one_of(kind, (Kind.RUNTIME, Kind.DRIVER)))
    device_rows = np.flatnonzero(is_one_of(kind, (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)))
    device_correlation = correlation[device_rows]
    runtime_correlation = correlation[runtime_rows]
    position = match_occurrence(runtime_correlation, np.arange(len(runtime_rows)), device_correlation, NO_ID, last=True)
    position[device_correlation == NO_ID] = NO_ID
    return RuntimeLaunches(device_rows, lookup(runtime_rows, position, NO_ID), runtime_rows, position)


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
    device_op_row: np.ndarray  # the operator row node a device row's time is attributed to, else ROOT
    dropped: int  # host ops left out because they overlap their parent without nesting


def build_call_tree(tables: TraceTables, launches: RuntimeLaunches | None = None) -> CallTree:
    """``launches``: the tables' ``runtime_launches``, when they were found already (the steps need them alone)."""
    events = tables.events
    kind = np.asarray(events["kind"])
    launches = runtime_launches(tables) if launches is None else launches
    host_rows = np.flatnonzero(is_one_of(kind, (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY)))
    host_rows = host_rows[stable_argsort(np.asarray(events["track"])[host_rows])]  # by thread, (ts, -dur)
    runtime_rows = launches.runtime_rows
    parent, dropped, runtime_enclosing = _nest(host_rows, runtime_rows, events)
    is_cpu_op = kind[host_rows] == Kind.CPU_OP
    alias = _merge_single_same_name_children(parent, is_cpu_op, np.asarray(events["name"])[host_rows])
    live = (parent != UNLINKED) & (alias == np.arange(len(host_rows)))
    node_parent = np.where(parent >= 0, lookup(alias, parent, ROOT), parent)
    runtime_node = _runtime_owners(events, host_rows, parent != UNLINKED, alias, runtime_rows, runtime_enclosing)
    runtime_inside = lookup(alias, runtime_enclosing, ROOT)  # host time is taken from the op it lies in
    del runtime_enclosing, parent, alias  # each array is dropped once read for the last time: the build's peak
    device_rows, device_runtime = launches.device_rows, launches.device_runtime
    device_node = lookup(runtime_node, launches.runtime_index, ROOT)  # the node of the runtime call that launched it
    del runtime_node
    tables.release_pages()  # the times and ids are read: only names, kinds and durations are read again
    excluded = name_rules.string_mask(
        tables.strings,
        lambda s: (
            s in name_rules.EXCLUDED_OPERATOR_NAMES
            or name_rules.is_optimizer(s)
            or name_rules.is_step_range(s)
            or name_rules.is_dataloader(s)
        ),
    )
    is_operator = live & is_cpu_op & ~excluded[np.asarray(events["name"])[host_rows]]
    live_parent = np.where(live & (node_parent >= 0), node_parent, ROOT)  # a kept node's parent, as node_parent
    del node_parent
    host_total = np.asarray(events["dur_ns"])[host_rows]
    levels, row_owner, children_time = _pass_down(live_parent, is_operator, host_total)
    sums = _node_sums(
        tables,
        host_rows,
        live_parent,
        levels,
        host_total,
        children_time,
        is_cpu_op,
        runtime_rows,
        runtime_inside,
        device_rows,
        device_node,
        row_owner,
    )
    device_op_row = lookup(row_owner, device_node, ROOT)
    # room for the tree's own arrays
    del levels, row_owner, children_time, host_total, runtime_inside

    # the kept rows by their mask (no array of their positions at the build's last peak), numbered in order
    renumber = np.cumsum(live, dtype=np.int64)
    renumber -= 1
    renumber[~live] = UNLINKED

    def remap(nodes: np.ndarray) -> np.ndarray:
        """Host-row nodes as kept nodes, in place (ROOT and UNLINKED stay)."""
        linked = nodes >= 0
        nodes[linked] = renumber[nodes[linked]]
        return nodes

    # each per-host-row array is dropped once its kept rows are copied: the build's last peak
    kept = {name: sums.pop(name)[live] for name in list(sums)}
    node_event = host_rows[live]
    del host_rows
    parent = remap(live_parent[live])
    del live_parent
    is_operator = is_operator[live]
    del live
    device_node, device_op_row = remap(device_node), remap(device_op_row)  # their own arrays: lookup made them
    return CallTree(
        node_event=node_event,
        parent=parent,
        host_total_ns=kept["host_total"],
        host_self_ns=kept["host_self"],
        device_self_ns=kept["device_self"],
        device_total_ns=kept["device_total"],
        tc_self_ns=kept["tc_self"],
        tc_total_ns=kept["tc_total"],
        tc_eligible=kept["tc_eligible"],
        is_operator=is_operator,
        device_rows=device_rows,
        device_node=device_node,
        device_runtime=device_runtime,
        device_op_row=device_op_row,
        dropped=dropped,
    )


def _merge_single_same_name_children(parent: np.ndarray, is_cpu_op: np.ndarray, names: np.ndarray) -> np.ndarray:
    """``alias[node]``: the node it merges into (itself when it stays); in C when parents come before their
    children (the row-order nesting numbers nodes so)."""
    if _call_tree_sweep is not None:
        alias = _call_tree_sweep.merge_aliases(parent, is_cpu_op, np.ascontiguousarray(names))
        if alias is not None:
            return np.frombuffer(alias, dtype=np.int64)
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
    runtime_external = external_id[runtime_rows]
    # the first op (thread order) owns an id
    by_external = match_occurrence(external_id[host_rows[kept]], alias[kept], runtime_external, UNLINKED)
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


def _pass_down(
    tree_parent: np.ndarray, is_row: np.ndarray, host_total: np.ndarray
) -> tuple[list[np.ndarray] | None, np.ndarray, np.ndarray]:
    """``(levels, row_owner, children_time)``: the nodes of each depth (``by_level``) for the pass up the tree,
    the nearest operator row at or above each node (``_row_owners``), the host time each gives to what is below it
    (``_children_time``). When every parent comes before its children (the row-order nesting numbers nodes so) one
    C loop over the nodes does it and ``levels`` is None: the pass up is one loop too (~0.2 s less CPU on a 1 GB
    trace than the depth of every node, the grouping by depth and a ``ufunc.at`` per level)."""
    if _call_tree_sweep is not None:
        down = _call_tree_sweep.tree_down(tree_parent, is_row, host_total, ROOT)
        if down is not None:
            row_owner, children_time = (np.frombuffer(values, dtype=np.int64) for values in down)
            return None, row_owner, children_time
    levels = by_level(depths(tree_parent))
    row_owner = _row_owners(tree_parent, is_row, levels)
    return levels, row_owner, _children_time(tree_parent, is_row, row_owner, host_total)


def _row_owners(tree_parent: np.ndarray, is_row: np.ndarray, levels: list[np.ndarray]) -> np.ndarray:
    """Per node, the nearest operator row at or above it (ROOT when there is none); ``levels``: the nodes of
    each depth (``by_level``)."""
    owner = np.where(is_row, np.arange(len(is_row)), ROOT)
    for level_nodes in levels[1:]:  # parents first, so owners flow down
        nodes = level_nodes[~is_row[level_nodes]]
        owner[nodes] = owner[tree_parent[nodes]]
    return owner


def _node_sums(
    tables: TraceTables,
    host_rows: np.ndarray,
    tree_parent: np.ndarray,
    levels: list[np.ndarray] | None,
    host_total: np.ndarray,
    children_time: np.ndarray,
    is_cpu_op: np.ndarray,
    runtime_rows: np.ndarray,
    runtime_inside: np.ndarray,
    device_rows: np.ndarray,
    device_node: np.ndarray,
    row_owner: np.ndarray,
) -> dict[str, np.ndarray]:
    """Host self/total, device self/total and tensor-core time per node, summed bottom-up.

    Self times of operator rows look through non-row nodes (see the module docstring): a device
    event is charged to the nearest row at or above its launching node, a runtime call's host time
    to the nearest row at or above the innermost node it lies in (its ``External id`` op may be an
    outer one, and taking the call's time from that op as well as the child it lies in made self
    times negative).
    """
    events = tables.events
    name, dur = np.asarray(events["name"]), np.asarray(events["dur_ns"])
    count = len(host_rows)
    device_dur = dur[device_rows]
    is_tc_kernel = (np.asarray(events["kind"])[device_rows] == Kind.KERNEL) & name_rules.string_mask(
        tables.strings, name_rules.uses_tensor_cores
    )[name[device_rows]]
    is_row = row_owner == np.arange(count)

    def per_node(nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(nodes, weights=weights, minlength=count).astype(np.int64)

    def charged_to(nodes: np.ndarray) -> np.ndarray:
        """The node that pays for what ``nodes`` launched: the row above, else the node itself."""
        owner = row_owner[nodes]
        return np.where(owner >= 0, owner, nodes)

    launched = device_node >= 0
    device_payer = charged_to(device_node[launched])
    device_self = per_node(device_payer, device_dur[launched])
    tc_self = per_node(device_payer, device_dur[launched] * is_tc_kernel[launched])
    attached = runtime_inside >= 0
    runtime_dur = dur[runtime_rows][attached]
    runtime_time = per_node(runtime_inside[attached], runtime_dur)
    np.copyto(runtime_time, per_node(charged_to(runtime_inside[attached]), runtime_dur), where=is_row)
    eligible_names = name_rules.string_mask(tables.strings, lambda s: s in name_rules.TENSOR_CORE_ELIGIBLE_OPS)
    tc_eligible = eligible_names[name[host_rows]] | (tc_self > 0)
    device_total = device_self.copy()
    tc_total = tc_self.copy()
    _pass_up(tree_parent, levels, is_cpu_op, device_total, tc_total, tc_eligible)
    # host self time made in the runtime time's array: no other array of every host row at the build's peak
    np.add(runtime_time, children_time, out=runtime_time)
    return {
        "host_total": host_total,
        "host_self": np.subtract(host_total, runtime_time, out=runtime_time),
        "device_self": device_self,
        "device_total": device_total,
        "tc_self": tc_self,
        "tc_total": tc_total,
        "tc_eligible": tc_eligible,
    }


def _pass_up(
    tree_parent: np.ndarray,
    levels: list[np.ndarray] | None,
    is_cpu_op: np.ndarray,
    device_total: np.ndarray,
    tc_total: np.ndarray,
    tc_eligible: np.ndarray,
) -> None:
    """Adds each node's device and tensor-core totals to its parent's, and makes an op eligible when a child is,
    in place; ``levels`` None (``_pass_down``): parents come before children, one loop in reverse node order."""
    if levels is None:
        if not _call_tree_sweep.tree_up(tree_parent, is_cpu_op, device_total, tc_total, tc_eligible):
            raise ValueError("tree_up: a parent comes after its child")
        return
    for nodes in reversed(levels[1:]):  # deepest first, so sums flow to the roots
        parents = tree_parent[nodes]
        np.add.at(device_total, parents, device_total[nodes])
        np.add.at(tc_total, parents, tc_total[nodes])
        tc_eligible[parents[tc_eligible[nodes] & is_cpu_op[parents]]] = True


def _children_time(
    tree_parent: np.ndarray, is_row: np.ndarray, row_owner: np.ndarray, host_total: np.ndarray
) -> np.ndarray:
    """Host time a node gives to what is below it: a row, to the rows nearest below it; any other, to its children."""
    count = len(tree_parent)
    has_parent = tree_parent >= 0
    parent = np.maximum(tree_parent, 0)
    under_non_row = has_parent & ~is_row[parent]
    children = np.zeros(count, dtype=np.int64)
    np.add.at(children, tree_parent[under_non_row], host_total[under_non_row])
    row_above = np.where(has_parent, row_owner[parent], ROOT)  # the nearest row strictly above
    row_child = is_row & (row_above >= 0)
    np.add.at(children, row_above[row_child], host_total[row_child])
    return children


def _nest(
    rows: np.ndarray, runtime_rows: np.ndarray, events: dict[str, np.ndarray]
) -> tuple[np.ndarray, int, np.ndarray]:
    """Parent node of each host row, and the innermost enclosing node of each runtime row.

    Host rows and runtime calls are swept together per thread in (start, longest first) order with
    a stack of open ops; runtime calls are leaves.
    """
    node_count = len(rows)
    if _call_tree_sweep is not None:  # rows already in that order (ingest sorts them): no sort needed
        columns = (np.ascontiguousarray(events[c], dtype=np.int64) for c in ("ts_ns", "dur_ns"))
        track = np.asarray(events["track"])
        track = track if track.dtype in (np.int32, np.int64) else track.astype(np.int64)
        nested = _call_tree_sweep.nest_in_row_order(
            *columns,
            np.ascontiguousarray(track),
            np.ascontiguousarray(rows, dtype=np.int64),
            np.ascontiguousarray(runtime_rows, dtype=np.int64),
            ROOT,
            UNLINKED,
        )
        if nested is not None:
            found = np.frombuffer(nested[0], dtype=np.int64)
            return found[:node_count], nested[1], found[node_count:]
    all_rows = np.concatenate([rows, runtime_rows])
    starts = np.asarray(events["ts_ns"])[all_rows]
    durations = np.asarray(events["dur_ns"])[all_rows]
    tracks = np.asarray(events["track"])[all_rows]
    order = lexsort_ints((np.arange(len(all_rows)), -durations, starts, tracks))
    starts, ends, tracks = starts[order], (starts + durations)[order], tracks[order]
    del durations, all_rows
    found, dropped = sweep_sorted(order, starts, ends, tracks, node_count)
    result = np.empty(len(order), dtype=np.int64)
    result[order] = found
    return result[:node_count], dropped, result[node_count:]


def sweep_sorted(
    order: np.ndarray, starts: np.ndarray, ends: np.ndarray, tracks: np.ndarray, node_count: int
) -> tuple[np.ndarray, int]:
    """Nest items sorted by (track, start, enclosing ones first): ``order[i]`` is the item at position ``i``,
    items from ``node_count`` on are leaves (runtime calls, memory records). Returns the enclosing node of each
    position (ROOT / UNLINKED) and how many nodes were UNLINKED; in C when the extension was compiled."""
    if _call_tree_sweep is not None:
        as_int64 = [np.ascontiguousarray(column, dtype=np.int64) for column in (order, starts, ends, tracks)]
        swept, dropped = _call_tree_sweep.sweep(*as_int64, node_count, ROOT, UNLINKED)
        return np.frombuffer(swept, dtype=np.int64), dropped
    return _sweep(order, starts, ends, tracks, node_count)


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
