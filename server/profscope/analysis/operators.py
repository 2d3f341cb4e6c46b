"""Operator view: host and device time per operator, or per operator and input shape (§1.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis.arrays import group_ids, is_one_of
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import payload
from profscope.tables import DEVICE_KINDS, NO_ID, TraceTables

GROUPINGS = ("operator", "operator_input_shape")
NS_PER_US = 1000.0


def op_column(tables: TraceTables, column: str, event_rows: np.ndarray) -> np.ndarray:
    """A column of the ``ops`` side table for the given event rows (NO_ID where absent)."""
    ops = tables.table("ops")
    op_events = np.asarray(ops["event"])
    position = np.searchsorted(op_events, event_rows)
    position = np.minimum(position, max(len(op_events) - 1, 0))
    found = (
        (len(op_events) > 0) & (op_events[position] == event_rows)
        if len(op_events)
        else np.zeros(len(event_rows), bool)
    )
    values = np.asarray(ops[column])[position] if len(op_events) else np.zeros(len(event_rows), dtype=np.int64)
    return np.where(found, values, NO_ID)


def _shape_text(tables: TraceTables, shape_id: int, group_by: str) -> str:
    """The grouping key's shape; an op that recorded no shapes groups as "[]" (as in the old plugin)."""
    if group_by != "operator_input_shape":
        return ""
    return tables.strings[shape_id] if shape_id >= 0 else "[]"


SUMMED_NS = ("host_self_ns", "host_total_ns", "device_self_ns", "device_total_ns", "tc_self_ns", "tc_total_ns")


def operator_sums(tree: CallTree, nodes: np.ndarray, group: np.ndarray, first: np.ndarray) -> dict[str, np.ndarray]:
    """Per group of operator nodes (``first``: each group's first node): ``calls``, the ``SUMMED_NS`` times and
    ``tensor_cores_eligible`` (that of the group's first call)."""
    count = len(first)
    sums = {"calls": np.bincount(group, minlength=count)}
    for key in SUMMED_NS:
        sums[key] = np.bincount(group, weights=getattr(tree, key)[nodes], minlength=count)
    sums["tensor_cores_eligible"] = tree.tc_eligible[nodes][first] if count else np.zeros(0, bool)
    return sums


def rows_from_sums(names: list[str], shapes: list[str], sums: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The Operator view's rows from per-group sums (``operator_sums``), the longest first."""
    device_self, device_total = sums["device_self_ns"], sums["device_total_ns"]
    rows = [
        {
            "name": name,
            "input_shape": shape,
            "calls": int(sums["calls"][i]),
            "host_self_us": sums["host_self_ns"][i] / NS_PER_US,
            "host_total_us": sums["host_total_ns"][i] / NS_PER_US,
            "device_self_us": device_self[i] / NS_PER_US,
            "device_total_us": device_total[i] / NS_PER_US,
            "tensor_cores_eligible": bool(sums["tensor_cores_eligible"][i]),
            "tensor_cores_self_pct": sums["tc_self_ns"][i] / device_self[i] * 100.0 if device_self[i] > 0 else 0.0,
            "tensor_cores_total_pct": sums["tc_total_ns"][i] / device_total[i] * 100.0 if device_total[i] > 0 else 0.0,
        }
        for i, (name, shape) in enumerate(zip(names, shapes, strict=True))
    ]
    has_device = any(r["device_self_us"] > 0 for r in rows)
    sort_key = "device_self_us" if has_device else "host_self_us"
    rows.sort(key=lambda r: (-r[sort_key], r["name"], r["input_shape"]))
    return rows


def operator_rows(tables: TraceTables, tree: CallTree, group_by: str = "operator") -> list[dict[str, Any]]:
    if group_by not in GROUPINGS:
        raise ValueError(f"group_by must be one of {GROUPINGS}")
    nodes = np.flatnonzero(tree.is_operator)
    events = tree.node_event[nodes]
    name = np.asarray(tables.events["name"])[events]
    if group_by == "operator_input_shape":
        shape = op_column(tables, "input_dims", events)
        group, first_of_group = group_ids(name, shape)
        shape_ids = shape[first_of_group].tolist()
    else:  # one shape for all: grouped by name alone
        group, first_of_group = group_ids(name)
        shape_ids = [NO_ID] * len(first_of_group)
    sums = operator_sums(tree, nodes, group, first_of_group)
    names = [tables.strings[int(n)] for n in name[first_of_group]]
    shapes = [_shape_text(tables, int(s), group_by) for s in shape_ids]
    return rows_from_sums(names, shapes, sums)


def why_no_operators(tables: TraceTables, rows: list[dict[str, Any]]) -> str | None:
    """What the page says when there is no operator: for an Nsight Systems export, how to get them."""
    if rows or tables.meta.get("format") != "nsys":
        return None
    return (
        "This Nsight Systems export has no operator ranges. Operators come from the NVTX ranges of "
        "torch.autograd.profiler.emit_nvtx(record_shapes=True) (as Megatron's --profile records them): "
        "profile inside it to see aten ops, their shapes and their device time here."
    )


def time_accounting(tables: TraceTables, tree: CallTree) -> dict[str, float]:
    """Where the Operator view's time comes from, so its rows can be checked to add up.

    ``docs/definitions.md``, "Operator time accounting": host self time summed over the rows plus
    the runtime calls made inside operators is the host time spent inside operators (the union
    of the rows' ranges on each thread); device self time summed over the rows plus the device
    time no operator launched (``device_unattributed_us``) is all kernel, memcpy and memset time.
    """
    rows = tree.is_operator
    top_rows = rows & ~_has_row_above(tree)
    in_operators_ns = int(tree.host_total_ns[top_rows].sum())
    host_self_ns = int(tree.host_self_ns[rows].sum())
    device_ns = np.asarray(tables.events["dur_ns"])[tree.device_rows]
    kinds = np.asarray(tables.events["kind"])[tree.device_rows]
    unattributed = tree.device_op_row < 0
    return {
        "host_in_operators_us": in_operators_ns / NS_PER_US,
        "host_self_us": host_self_ns / NS_PER_US,
        "host_runtime_in_operators_us": (in_operators_ns - host_self_ns) / NS_PER_US,
        "device_self_us": int(tree.device_self_ns[rows].sum()) / NS_PER_US,
        "device_unattributed_us": int(device_ns[unattributed].sum()) / NS_PER_US,
        "device_total_us": int(device_ns[is_one_of(kinds, DEVICE_KINDS)].sum()) / NS_PER_US,
    }


def _has_row_above(tree: CallTree) -> np.ndarray:
    """Per node: some ancestor is an operator row. A node stops climbing at the first row or root it meets."""
    above = np.zeros(len(tree.parent), dtype=bool)
    nodes = np.flatnonzero(tree.parent >= 0)
    ancestor = tree.parent[nodes]
    while len(nodes):
        found = tree.is_operator[ancestor]
        above[nodes[found]] = True
        nodes, ancestor = nodes[~found], tree.parent[ancestor[~found]]
        climbing = ancestor >= 0
        nodes, ancestor = nodes[climbing], ancestor[climbing]
    return above


def _memo_accounting(context: TraceContext) -> dict[str, float]:
    """``time_accounting``, once for both groupings of the Operator view."""
    return context.memo("operators.time_accounting", lambda: time_accounting(context.tables, context.tree))


@payload("operators.operator", version=3)
def operators_by_name(context: TraceContext) -> dict[str, Any]:
    rows = operator_rows(context.tables, context.tree, "operator")
    return {
        "group_by": "operator",
        "rows": rows,
        "accounting": _memo_accounting(context),
        "empty_reason": why_no_operators(context.tables, rows),
    }


@payload("operators.operator_input_shape", version=3)
def operators_by_name_and_shape(context: TraceContext) -> dict[str, Any]:
    rows = operator_rows(context.tables, context.tree, "operator_input_shape")
    return {
        "group_by": "operator_input_shape",
        "rows": rows,
        "accounting": _memo_accounting(context),
        "empty_reason": why_no_operators(context.tables, rows),
    }
