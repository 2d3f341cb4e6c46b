"""The Operator view filtered to one module (``docs/definitions.md`` §14.3).

The cached queries hold, per module row, the operator calls that belong to it alone (by the Module view's
attribution, ``modules.operator_owners``) summed by name and input shape (and by call stack); a request for a
module sums the rows of the module and its descendants, so one stored result answers every module and grouping.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from profscope.analysis.arrays import depths, first_seen_numbering, group_ids, lookup
from profscope.analysis.call_tree import CallTree
from profscope.analysis.callstacks import memo_node_stacks, stack_entry, top_stacks
from profscope.analysis.context import TraceContext
from profscope.analysis.modules import HOW_TO_RECORD, ModuleRows, module_rows, operator_owners
from profscope.analysis.operators import NS_PER_US, SUMMED_NS, op_column, rows_from_sums
from profscope.analysis.payloads import payload
from profscope.tables import NO_ID, TraceTables

PATH_SEPARATOR = " \u203a "
_STACK_TIMES = ("host_self_ns", "host_total_ns", "device_self_ns", "device_total_ns")


@payload("operators.modules", version=1, at_ingest=False)
def operators_by_module(context: TraceContext) -> dict[str, Any]:
    """Per module row: its own operator calls by (name, input shape), and its own share of the time accounting."""
    tables, tree = context.tables, context.tree
    modules = module_rows(context)
    if modules is None:
        return {"applies": False, "reason": HOW_TO_RECORD, "modules": [], "rows": {}, "accounting": {}}
    owner = _owners(context, modules)
    nodes = np.flatnonzero(tree.is_operator & (owner >= 0))
    events = tree.node_event[nodes]
    name = np.asarray(tables.events["name"])[events]
    shape = op_column(tables, "input_dims", events)
    group, first = group_ids(owner[nodes], name, shape)
    sums = _sums(tree, nodes, group, len(first))
    rows = {
        "module": owner[nodes][first].tolist(),
        "name": [tables.strings[int(n)] for n in name[first]],
        "input_shape": [tables.strings[int(s)] if s >= 0 else None for s in shape[first].tolist()],
        "first_call": nodes[first].tolist(),
        "tensor_cores_eligible": tree.tc_eligible[nodes][first].tolist(),
    } | {key: value.tolist() for key, value in sums.items()}
    return {
        "applies": True,
        "reason": None,
        "modules": [
            {
                "id": index,
                "parent": int(modules.parent[index]),
                "name": modules.names[index],
                "type": modules.types[index],
            }
            for index in range(modules.count)
        ],
        "rows": rows,
        "accounting": {
            "host_in_operators_ns": _host_in_operators(tree, modules, owner).tolist(),
            "device_unattributed_ns": _unattributed_device(tables, tree, modules, owner).tolist(),
        },
    }


def _owners(context: TraceContext, modules: ModuleRows) -> np.ndarray:
    return context.memo("operator_owners", lambda: operator_owners(context.tables, context.tree, modules))


@payload("operators.stacks.modules", version=1, at_ingest=False)
def stacks_by_module(context: TraceContext) -> dict[str, Any]:
    """Per module row: its own operator calls by (name, input shape, call stack), with their times."""
    tables, tree = context.tables, context.tree
    modules = module_rows(context)
    if modules is None:
        return {"applies": False, "reason": HOW_TO_RECORD, "modules": [], "stacks": [], "rows": {}}
    owner = _owners(context, modules)
    stacks = memo_node_stacks(context)
    nodes = np.flatnonzero(tree.is_operator & (owner >= 0))
    stack, distinct = first_seen_numbering(stacks.index[nodes])  # numbered as the stacks are first seen
    events = tree.node_event[nodes]
    name = np.asarray(tables.events["name"])[events]
    shape = op_column(tables, "input_dims", events)
    group, first = group_ids(owner[nodes], name, shape, stack)
    sums = _sums(tree, nodes, group, len(first))
    return {
        "applies": True,
        "reason": None,
        "modules": [{"id": index, "parent": int(modules.parent[index])} for index in range(modules.count)],
        "stacks": [stacks.texts[i] for i in distinct.tolist()],
        "rows": {
            "module": owner[nodes][first].tolist(),
            "name": [tables.strings[int(n)] for n in name[first]],
            "input_shape": [tables.strings[int(s)] if s >= 0 else None for s in shape[first].tolist()],
            "stack": stack[first].tolist(),
        }
        | {key: sums[key].tolist() for key in ("calls", *_STACK_TIMES)},
    }


def _sums(tree: CallTree, nodes: np.ndarray, group: np.ndarray, count: int) -> dict[str, np.ndarray]:
    sums = {"calls": np.bincount(group, minlength=count)}
    for key in SUMMED_NS:
        sums[key] = np.bincount(group, weights=getattr(tree, key)[nodes], minlength=count).round().astype(np.int64)
    return sums


def _host_in_operators(tree: CallTree, modules: ModuleRows, owner: np.ndarray) -> np.ndarray:
    """Per module row, a share such that the shares of a row and its descendants add up to the host time inside
    their operators: the host totals of their calls whose nearest operator above is not theirs. A call adds its
    host total to its row and takes it from the deepest row holding both it and that operator above."""
    calls = np.flatnonzero(tree.is_operator & (owner >= 0))
    row_above = _nearest_operator_above(tree)[calls]
    owner_above = lookup(owner, row_above, NO_ID)
    share = np.bincount(owner[calls], weights=tree.host_total_ns[calls], minlength=modules.count)
    both = owner_above >= 0
    common = _common_ancestors(modules.parent, owner[calls][both], owner_above[both])
    inside = common >= 0
    np.subtract.at(share, common[inside], tree.host_total_ns[calls][both][inside])
    return share.round().astype(np.int64)


def _nearest_operator_above(tree: CallTree) -> np.ndarray:
    """Per node, the nearest operator row strictly above it (NO_ID: none)."""
    above = tree.parent.copy()
    while True:
        climbing = np.flatnonzero((above >= 0) & ~tree.is_operator[np.maximum(above, 0)])
        if not len(climbing):
            return np.where(above >= 0, above, NO_ID)
        above[climbing] = tree.parent[above[climbing]]


def _common_ancestors(parent: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The deepest row at or above both rows of each pair (NO_ID when they are in different trees)."""
    depth = depths(parent).tolist()
    pairs, inverse = np.unique(np.stack([first, second], axis=1), axis=0, return_inverse=True)
    found = []
    for a, b in pairs.tolist():
        while a != b and a >= 0 and b >= 0:
            if depth[a] >= depth[b]:
                a = int(parent[a])
            else:
                b = int(parent[b])
        found.append(a if a == b else NO_ID)
    return np.asarray(found, dtype=np.int64)[inverse.reshape(-1)] if len(found) else np.zeros(0, dtype=np.int64)


def _unattributed_device(tables: TraceTables, tree: CallTree, modules: ModuleRows, owner: np.ndarray) -> np.ndarray:
    """Per module row, the device time launched in it by no operator (from an annotation, or the module's own
    Python): by the node that launched it, else the occurrence holding the launching runtime call."""
    events = tables.events
    unattributed = np.flatnonzero(tree.device_op_row < 0)
    launcher = lookup(owner, tree.device_node[unattributed], NO_ID)
    runtime = tree.device_runtime[unattributed]
    has_runtime = runtime >= 0
    by_occurrence = np.full(len(unattributed), NO_ID, dtype=np.int64)
    launches = runtime[has_runtime]
    occurrence = modules.innermost.of(np.asarray(events["track"])[launches], np.asarray(events["ts_ns"])[launches])
    by_occurrence[has_runtime] = lookup(modules.group, occurrence, NO_ID)
    row = np.where(launcher >= 0, launcher, by_occurrence)
    keep = row >= 0
    durations = np.asarray(events["dur_ns"])[tree.device_rows[unattributed]]
    return np.bincount(row[keep], weights=durations[keep], minlength=modules.count).round().astype(np.int64)


# ---- one module's operators, from the stored result ---------------------------------------------
def module_operator_table(stored: dict[str, Any], module_id: int, group_by: str) -> dict[str, Any] | None:
    """The Operator view's answer for the calls of module ``module_id`` and its descendants (None: no such row)."""
    modules = stored["modules"]
    if not 0 <= module_id < len(modules):
        return None
    rows = stored["rows"]
    members = _subtree(modules, module_id)
    keep = [i for i, module in enumerate(rows["module"]) if module in members]
    by_shape = group_by == "operator_input_shape"
    key_of = {i: (rows["name"][i], (rows["input_shape"][i] or "[]") if by_shape else "") for i in keep}
    keys = list(dict.fromkeys(key_of.values()))
    index = {key: position for position, key in enumerate(keys)}
    group = np.asarray([index[key_of[i]] for i in keep], dtype=np.int64)
    picked = np.asarray(keep, dtype=np.int64)
    sums = {
        key: np.bincount(group, weights=np.asarray(rows[key], dtype=np.float64)[picked], minlength=len(keys))
        for key in ("calls", *SUMMED_NS)
    }
    sums["tensor_cores_eligible"] = _eligible_of_first_call(rows, picked, group, len(keys))
    table = rows_from_sums([k[0] for k in keys], [k[1] for k in keys], sums)
    return {
        "group_by": group_by,
        "rows": table,
        "accounting": _module_accounting(stored["accounting"], members, sums),
        "empty_reason": None if table else "No operator call belongs to this module.",
        "module": _module_label(modules, module_id),
    }


def module_stacks(
    stored: dict[str, Any], module_id: int, name: str, input_shape: str | None
) -> list[dict[str, Any]] | None:
    """The call stacks of operator ``name`` (of that input shape, if given) in module ``module_id`` and its
    descendants, as ``/api/operators/stacks`` lists them (None: no such module)."""
    if not 0 <= module_id < len(stored["modules"]):
        return None
    rows = stored["rows"]
    members = _subtree(stored["modules"], module_id)
    by_stack: dict[int, dict[str, float]] = {}
    for i, module in enumerate(rows["module"]):
        shape_matches = input_shape is None or (rows["input_shape"][i] or "[]") == input_shape
        if module not in members or rows["name"][i] != name or not shape_matches:
            continue
        into = by_stack.setdefault(rows["stack"][i], dict.fromkeys(("calls", *_STACK_TIMES), 0))
        for key in ("calls", *_STACK_TIMES):
            into[key] += rows[key][i]
    entries = [
        stack_entry(
            stored["stacks"][stack],
            int(sums["calls"]),
            {f"{key[: -len('_ns')]}_us": sums[key] / NS_PER_US for key in _STACK_TIMES},
        )
        for stack, sums in by_stack.items()
        if stored["stacks"][stack]
    ]
    return top_stacks(entries)


def _subtree(modules: list[dict[str, Any]], root: int) -> set[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for module in modules:
        children[module["parent"]].append(module["id"])
    members, pending = set(), [root]
    while pending:
        row = pending.pop()
        members.add(row)
        pending.extend(children[row])
    return members


def _eligible_of_first_call(rows: dict[str, list], picked: np.ndarray, group: np.ndarray, count: int) -> np.ndarray:
    """Each group's tensor-core eligibility: that of its first call, as in the unfiltered table."""
    first_call = np.asarray(rows["first_call"], dtype=np.int64)[picked]
    eligible = np.asarray(rows["tensor_cores_eligible"], dtype=bool)[picked]
    order = np.argsort(first_call, kind="stable")
    groups, position = np.unique(group[order], return_index=True)
    result = np.zeros(count, dtype=bool)
    result[groups] = eligible[order][position]
    return result


def _module_accounting(accounting: dict[str, list[int]], members: set[int], sums: dict[str, np.ndarray]) -> dict:
    """§9's accounting of the module's calls: host self + runtime calls = host time inside its operators; device
    self + device time launched in the module by no operator = all device time of the module."""
    host_in = sum(accounting["host_in_operators_ns"][m] for m in members)
    unattributed = sum(accounting["device_unattributed_ns"][m] for m in members)
    host_self, device_self = float(sums["host_self_ns"].sum()), float(sums["device_self_ns"].sum())
    return {
        "host_in_operators_us": host_in / NS_PER_US,
        "host_self_us": host_self / NS_PER_US,
        "host_runtime_in_operators_us": (host_in - host_self) / NS_PER_US,
        "device_self_us": device_self / NS_PER_US,
        "device_unattributed_us": unattributed / NS_PER_US,
        "device_total_us": (device_self + unattributed) / NS_PER_US,
    }


def _module_label(modules: list[dict[str, Any]], module_id: int) -> dict[str, Any]:
    path, at = [], module_id
    while at >= 0:
        path.append(modules[at]["name"])
        at = modules[at]["parent"]
    module = modules[module_id]
    return {
        "id": module_id,
        "name": module["name"],
        "type": module["type"],
        "path": PATH_SEPARATOR.join(reversed(path)),
    }
