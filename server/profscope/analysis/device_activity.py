"""Facts about device work that several views show, each defined once (``docs/definitions.md`` §2.2, §2.3).

- the GPU each kernel ran on: its ``device`` argument, else its track's pid (kineto puts GPU n at pid n);
- whether a device event is communication;
- each GPU's busy intervals: the union of its kernels' intervals.

The Overview's GPU summary, the Trace view's utilization counters and the Distributed view's devices all
call these, so the same trace never shows two numbers (or two device names) for one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from profscope.analysis import intervals, name_rules
from profscope.tables import Kind, TraceTables

if TYPE_CHECKING:
    from profscope.analysis.call_tree import CallTree


@dataclass(frozen=True)
class DeviceKernels:
    """The kernels (not memcpy / memset) of a trace and the GPU each ran on."""

    kernel_index: np.ndarray  # their rows in the ``kernels`` table
    event: np.ndarray  # their rows in the events table
    device: np.ndarray  # the GPU index each ran on


def device_kernels(tables: TraceTables) -> DeviceKernels:
    kernels = tables.table("kernels")
    event = np.asarray(kernels["event"], dtype=np.int64)
    is_kernel = np.asarray(tables.events["kind"])[event] == Kind.KERNEL
    kernel_index = np.flatnonzero(is_kernel)
    rows = event[kernel_index]
    device_args = np.asarray(kernels["device"])[kernel_index]
    from_pid = track_pids(tables)[np.asarray(tables.events["track"])[rows]]
    return DeviceKernels(kernel_index, rows, np.where(device_args >= 0, device_args, from_pid).astype(np.int64))


def device_descriptions(tables: TraceTables) -> dict[Any, dict[str, Any]]:
    """Name, memory and compute capability of each GPU in the trace's ``deviceProperties``, by GPU index."""
    described = {}
    for props in tables.meta.get("deviceProperties", []):
        if not isinstance(props, dict):
            continue
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        described[props.get("id")] = {
            "name": props.get("name"),
            "memory_bytes": props.get("totalGlobalMem"),
            "compute_capability": f"{major}.{minor}" if major is not None and minor is not None else None,
        }
    return described


UNDESCRIBED = {"name": None, "memory_bytes": None, "compute_capability": None}


def busy_by_device(start_ns: np.ndarray, end_ns: np.ndarray, device: np.ndarray) -> dict[int, tuple]:
    """Each GPU's busy time as merged (start, end) interval arrays, by GPU index in ascending order."""
    return {
        int(gpu): intervals.merge(start_ns[device == gpu], end_ns[device == gpu]) for gpu in np.unique(device).tolist()
    }


def track_pids(tables: TraceTables) -> np.ndarray:
    """Each track's pid as a number (-1 when it is not one), e.g. the GPU index of a device stream."""
    return np.array([_int_or(t.pid, -1) for t in tables.tracks], dtype=np.int64)


def _int_or(text: str, default: int) -> int:
    try:
        value = int(text)
    except ValueError:
        return default
    return value if -(1 << 63) <= value < (1 << 63) else default  # a pid beyond 64 bits is no GPU index


def communication_device_rows(tables: TraceTables, tree: CallTree) -> np.ndarray:
    """Boolean per event: a device event that is communication.

    A kernel is communication when its name is a collective kernel (NCCL/RCCL/...), when the op
    that launched it is a collective, or when its ``External id`` is a collective op's (old
    traces; torch 2.0.1 wrote the correlation id there instead, which the launch link covers).
    """
    return with_collective_launches(tables, tree, communication_without_call_tree(tables, tree.device_rows))


def communication_without_call_tree(tables: TraceTables, device_rows: np.ndarray) -> np.ndarray:
    """``communication_device_rows`` without the kernels a collective op launched, which the call tree knows (the
    Overview computes this part while the tree is built)."""
    events = tables.events
    name = np.asarray(events["name"])
    is_comm = np.zeros(len(name), dtype=bool)
    kernel_name = name_rules.string_mask(tables.strings, name_rules.is_comm_kernel)
    comm_op_name = name_rules.string_mask(tables.strings, name_rules.is_comm_op)
    is_comm[device_rows] = kernel_name[name[device_rows]]
    external = np.asarray(events["external_id"])
    comm_externals = np.unique(external[comm_op_name[name] & (external >= 0)])
    if len(comm_externals):
        is_comm[device_rows] |= np.isin(external[device_rows], comm_externals)
    return is_comm


def with_collective_launches(tables: TraceTables, tree: CallTree, is_comm: np.ndarray) -> np.ndarray:
    """``is_comm`` (``communication_without_call_tree``), in place, with the device rows a collective op launched."""
    name = np.asarray(tables.events["name"])
    comm_op_name = name_rules.string_mask(tables.strings, name_rules.is_comm_op)
    rows = tree.device_rows
    launched = tree.device_node >= 0
    launching_names = name[tree.node_event[tree.device_node[launched]]]
    is_comm[rows[launched]] |= comm_op_name[launching_names]
    return is_comm
