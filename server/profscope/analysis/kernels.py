"""Kernel view: device kernels grouped by name, or by launch properties and launching op (§1.6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis import name_rules
from profscope.analysis.arrays import group_ids, lookup
from profscope.analysis.call_tree import CallTree
from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import payload
from profscope.tables import Kind, TraceTables

GROUPINGS = ("kernel", "kernel_op")
NS_PER_US = 1000.0
NO_OPERATOR = "N/A"


def kernel_rows(tables: TraceTables, tree: CallTree, group_by: str = "kernel") -> list[dict[str, Any]]:
    if group_by not in GROUPINGS:
        raise ValueError(f"group_by must be one of {GROUPINGS}")
    kernels = tables.table("kernels")
    events = tables.events
    kernel_event = np.asarray(kernels["event"])
    is_kernel = np.asarray(events["kind"])[kernel_event] == Kind.KERNEL
    rows = kernel_event[is_kernel]
    if len(rows) == 0:
        return []
    name = np.asarray(events["name"])[rows].astype(np.int64)
    duration = np.asarray(events["dur_ns"])[rows].astype(np.float64)
    blocks_per_sm = np.nan_to_num(np.asarray(kernels["blocks_per_sm"])[is_kernel], nan=0.0)
    occupancy = np.nan_to_num(np.asarray(kernels["est_occupancy_pct"])[is_kernel], nan=0.0)
    has_blocks = bool((np.asarray(kernels["blocks_per_sm"])[is_kernel] >= 0).any())
    has_occupancy = bool((np.asarray(kernels["est_occupancy_pct"])[is_kernel] >= 0).any())

    # launching op of each kernel (tree.device_rows is sorted, as is ``rows``)
    position = np.searchsorted(tree.device_rows, rows)
    node = tree.device_node[position]
    op_name = lookup(np.asarray(events["name"])[tree.node_event], node, -1)
    op_eligible = lookup(tree.tc_eligible, node, False)

    if group_by == "kernel":
        key_columns = [name]
    else:
        launch = [
            np.asarray(kernels[c])[is_kernel].astype(np.int64)
            for c in (
                "grid_x",
                "grid_y",
                "grid_z",
                "block_x",
                "block_y",
                "block_z",
                "registers_per_thread",
                "shared_memory",
            )
        ]
        key_columns = [name, op_name.astype(np.int64), *launch]
    group, first = group_ids(*key_columns)
    unique_keys = np.stack([column[first] for column in key_columns], axis=1)
    count = len(unique_keys)
    calls = np.bincount(group, minlength=count)
    total = np.bincount(group, weights=duration, minlength=count)
    maximum = np.zeros(count)
    np.maximum.at(maximum, group, duration)
    minimum = np.full(count, np.inf)
    np.minimum.at(minimum, group, duration)
    weighted_blocks = np.bincount(group, weights=blocks_per_sm * duration, minlength=count)
    weighted_occupancy = np.bincount(group, weights=occupancy * duration, minlength=count)
    any_eligible = np.bincount(group, weights=op_eligible.astype(float), minlength=count) > 0
    tc_name = name_rules.string_mask(tables.strings, name_rules.uses_tensor_cores)
    out = []
    for i in range(count):
        kernel_name = tables.strings[int(unique_keys[i, 0])]
        row: dict[str, Any] = {
            "name": kernel_name,
            "calls": int(calls[i]),
            "total_us": total[i] / NS_PER_US,
            "mean_us": total[i] / calls[i] / NS_PER_US,
            "max_us": maximum[i] / NS_PER_US,
            "min_us": minimum[i] / NS_PER_US,
            "tensor_cores_used": bool(tc_name[int(unique_keys[i, 0])]),
            "mean_blocks_per_sm": weighted_blocks[i] / total[i] if has_blocks and total[i] > 0 else None,
            "mean_est_achieved_occupancy_pct": weighted_occupancy[i] / total[i]
            if has_occupancy and total[i] > 0
            else None,
        }
        if group_by == "kernel_op":
            op = int(unique_keys[i, 1])
            row["operator"] = tables.strings[op] if op >= 0 else NO_OPERATOR
            row["grid"] = _dims(unique_keys[i, 2:5])
            row["block"] = _dims(unique_keys[i, 5:8])
            row["registers_per_thread"] = int(unique_keys[i, 8]) if unique_keys[i, 8] >= 0 else None
            row["shared_memory"] = int(unique_keys[i, 9]) if unique_keys[i, 9] >= 0 else None
            row["op_tensor_cores_eligible"] = bool(any_eligible[i])
        else:
            row["operator"] = None
        out.append(row)
    out.sort(key=lambda r: (-r["total_us"], r["name"], str(r.get("operator"))))
    return out


def _dims(values: np.ndarray) -> list[int] | None:
    dims = [int(v) for v in values if v >= 0]
    return dims or None


def tensor_core_split(rows: list[dict[str, Any]]) -> dict[str, float]:
    used = sum(r["total_us"] for r in rows if r["tensor_cores_used"])
    total = sum(r["total_us"] for r in rows)
    return {"using_us": used, "not_using_us": total - used}


@payload("kernels.kernel", version=2)
def kernels_by_name(context: TraceContext) -> dict[str, Any]:
    rows = kernel_rows(context.tables, context.tree, "kernel")
    return {"group_by": "kernel", "rows": rows, "tensor_cores": tensor_core_split(rows)}


@payload("kernels.kernel_op", version=3)
def kernels_by_launch(context: TraceContext) -> dict[str, Any]:
    rows = kernel_rows(context.tables, context.tree, "kernel_op")
    return {"group_by": "kernel_op", "rows": rows, "tensor_cores": tensor_core_split(rows)}
