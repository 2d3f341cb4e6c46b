"""Profiler memory view: the ``[memory]`` events of a trace (``profile_memory=True``), docs/definitions.md §5.

Definitions (torch-tb-profiler's ``memory_parser.py`` / ``run.py``):
- devices: ``CPU`` (Device Type 0) and ``GPU<id>`` (Device Type 1);
- curve: ``Total Allocated`` / ``Total Reserved`` of each event with an address, against its time;
  the peak of a device is the largest ``Total Allocated`` of its events;
- each event belongs to the innermost host node containing its timestamp on its thread
  (``start <= ts < end``); nodes are the call tree's operators and annotations plus ``nn.Module``
  python functions, as in the plugin's tree. Events whose innermost node is not an operator count
  for no operator;
- memory events table: allocations and releases paired by address (per device), in time order;
  the operator is the one of the allocation, shown as ``parent (aten::empty...)`` when the
  allocation was made by an ``aten::empty*`` op; unpaired halves have no release (or allocation)
  time;
- statistics per operator name and device: self size increase (sum of the op's own event bytes,
  negative for releases), self allocation count and size (its allocations only); the plain
  columns add every operator below it in the tree. Calls counts the op's nodes the plugin visits:
  top-level nodes and the children of nodes that contain a memory event.
Statistics and events can be limited to a time window (events whose time is in it, nodes that
overlap it), as when a range is selected on the curve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from profscope.analysis.arrays import by_level, lexsort_ints
from profscope.analysis.call_tree import ROOT, sweep_sorted
from profscope.analysis.context import TraceContext
from profscope.analysis.payloads import payload
from profscope.tables import NO_ID, TraceTables

NS_PER_US = 1000.0
ROOT_NAME = "CallTreeRoot"
CPU, CUDA = 0, 1


def device_name(device_type: int, device_id: int) -> str | None:
    if device_type == CPU:
        return "CPU"
    if device_type == CUDA:
        return f"GPU{device_id}"
    return None


def device_sort_key(name: str) -> tuple:
    return (0, 0) if name == "CPU" else (1, int(name[3:]))


@dataclass
class MemoryAttribution:
    """Which host node each memory event belongs to, and the part of the node tree the statistics visit."""

    record_node: np.ndarray  # per memory row: node index, or ROOT
    node_name: np.ndarray  # string ids
    node_parent: np.ndarray
    node_start_ns: np.ndarray
    node_end_ns: np.ndarray
    node_is_op: np.ndarray
    node_processed: np.ndarray  # contains a memory event (the plugin visits the children of these only)

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items()}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> MemoryAttribution:
        return cls(**{key: np.asarray(value) for key, value in body.items()})


def attribute_memory(context: TraceContext) -> MemoryAttribution:
    tables, tree = context.tables, context.tree
    memory = tables.table("memory")
    events = tables.events
    python = tables.table("python")
    module_events = np.asarray(python["event"])[np.asarray(python["module_id"]) != NO_ID]
    node_events = np.concatenate([tree.node_event, module_events]).astype(np.int64)
    is_op = np.concatenate([tree.is_operator, np.zeros(len(module_events), bool)])
    node_start = np.asarray(events["ts_ns"])[node_events]
    node_end = node_start + np.asarray(events["dur_ns"])[node_events]
    parent, record_node = _nest_with_records(
        np.asarray(events["track"])[node_events],
        node_start,
        node_end,
        np.asarray(memory["track"]),
        np.asarray(memory["ts_ns"]),
    )
    processed = np.zeros(len(node_events), bool)
    frontier = np.unique(record_node[record_node >= 0])
    while len(frontier):  # the nodes holding a record and all their ancestors, one generation at a time
        processed[frontier] = True
        frontier = parent[frontier]
        frontier = np.unique(frontier[frontier >= 0])
        frontier = frontier[~processed[frontier]]
    return MemoryAttribution(
        record_node=record_node,
        node_name=np.asarray(events["name"])[node_events],
        node_parent=parent,
        node_start_ns=node_start,
        node_end_ns=node_end,
        node_is_op=is_op,
        node_processed=processed,
    )


def _nest_with_records(
    track: np.ndarray, start: np.ndarray, end: np.ndarray, record_track: np.ndarray, record_ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per thread, nest nodes by time (the plugin's rule) and find each record's innermost node.

    A node that starts inside another but ends after it is left out, as in the plugin.
    """
    node_count = len(start)
    parent = np.full(node_count, ROOT, dtype=np.int64)
    record_node = np.full(len(record_ts), ROOT, dtype=np.int64)
    if len(record_ts) == 0:
        return parent, record_node
    # one sweep over nodes and records sorted by (track, time); at equal times nodes come first, the
    # longer node first, so that a record at a node's start is inside it. Records are leaves that end where
    # they start: the call tree's sweep nests them as it nests runtime calls (a record is always inside the
    # open node, as its time is before that node's end), and its UNLINKED marks the nodes left out. Each
    # column is replaced by its sorted copy as soon as the order is known: a 1 GB trace's nodes and records
    # are millions of rows, and every column of them is tens of MB.
    times = np.concatenate([start, record_ts]).astype(np.int64, copy=False)
    ends = np.concatenate([end, record_ts]).astype(np.int64, copy=False)
    tracks = np.concatenate([track, record_track])
    kind = np.concatenate([np.zeros(node_count, np.int8), np.ones(len(record_ts), np.int8)])
    order = lexsort_ints((times - ends, kind, times, tracks))  # times - ends: the longer first
    del kind
    times, ends, tracks = times[order], ends[order], tracks[order]
    found, _ = sweep_sorted(order, times, ends, tracks, node_count)
    del times, ends, tracks
    found_by_item = np.empty(len(order), dtype=np.int64)
    found_by_item[order] = found
    return found_by_item[:node_count], found_by_item[node_count:]


@payload("memory.attribution", version=2)
def memory_attribution(context: TraceContext) -> dict[str, Any]:
    if context.tables.row_count("memory") == 0:
        return {}
    return attribute_memory(context).to_json()


# ---- request-time views (the curve, the tables) over the tables and the cached attribution --------
@dataclass
class MemoryRecords:
    """The memory table with device names and times in µs, sorted by time."""

    ts_us: np.ndarray
    device: np.ndarray  # index into names
    names: list[str]
    addr: np.ndarray
    nbytes: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    row: np.ndarray  # row in the memory table


def memory_records(tables: TraceTables) -> MemoryRecords:
    memory = tables.table("memory")
    order = np.argsort(np.asarray(memory["ts_ns"]), kind="stable")
    device_type = np.asarray(memory["device_type"])[order]
    device_id = np.asarray(memory["device_id"])[order]
    labels = [device_name(int(t), int(i)) for t, i in zip(device_type.tolist(), device_id.tolist(), strict=True)]
    names = sorted({label for label in labels if label is not None}, key=device_sort_key)
    index = {name: i for i, name in enumerate(names)}
    device = np.array([index.get(label, -1) if label else -1 for label in labels], dtype=np.int64)
    origin_ns = 0  # times in the tables are relative to the trace's first timestamp
    return MemoryRecords(
        ts_us=(np.asarray(memory["ts_ns"])[order] - origin_ns) / NS_PER_US,
        device=device,
        names=names,
        addr=np.asarray(memory["addr"])[order],
        nbytes=np.asarray(memory["bytes"])[order],
        total_allocated=np.asarray(memory["total_allocated"])[order],
        total_reserved=np.asarray(memory["total_reserved"])[order],
        row=order,
    )


def peaks(records: MemoryRecords) -> dict[str, dict[str, int]]:
    result = {}
    for index, name in enumerate(records.names):
        mine = records.device == index
        allocated = records.total_allocated[mine & (records.total_allocated != NO_ID)]
        reserved = records.total_reserved[mine & (records.total_reserved != NO_ID)]
        result[name] = {  # None: the trace's events carry no totals (PyTorch before 1.10)
            "peak_allocated_bytes": int(allocated.max()) if len(allocated) else None,
            "peak_reserved_bytes": int(reserved.max()) if len(reserved) else None,
        }
    return result


def _drawable(records: MemoryRecords) -> np.ndarray:
    """Records that are points of the curve: an address (an allocation or release) and both totals."""
    return (records.addr != NO_ID) & (records.total_allocated != NO_ID) & (records.total_reserved != NO_ID)


def curve_unavailable_reason(records: MemoryRecords, device: str) -> str | None:
    """What the device's curve cannot show (None when it draws the allocator's totals): traces from
    before PyTorch 1.10 record only ``Bytes``, without the address to pair them or the allocator's
    totals; their curve is the running sum of ``Bytes`` from the trace's start (as the Trace view's)."""
    mine = records.device == records.names.index(device)
    if not mine.any() or (mine & _drawable(records)).any():
        return None
    return (
        "the memory events of this device carry no 'Addr', 'Total Allocated' or 'Total Reserved' (recorded "
        "before PyTorch 1.10): the curve is the running sum of their 'Bytes' since the trace started (memory "
        "allocated before it is unknown), there is no reserved curve and no allocation to pair with its release"
    )


def curve(
    records: MemoryRecords,
    device: str,
    start_us: float | None = None,
    end_us: float | None = None,
    width_px: int = 1500,
) -> dict[str, Any]:
    """The device's allocated / reserved curve in the window, at most ~4 points per pixel column.

    Per column: its first and last points and the points of its smallest and largest allocated
    value (and largest reserved), so every peak and every trough survives downsampling. Events
    without totals draw the running sum of their ``Bytes`` and no reserved (``null``) instead.
    """
    mine = records.device == records.names.index(device)
    drawable = mine & _drawable(records)
    if drawable.any() or not mine.any():
        rows = np.flatnonzero(drawable)
        allocated = records.total_allocated[rows].astype(np.float64)
        reserved = records.total_reserved[rows].astype(np.float64)
        kind = "totals"
    else:
        rows = np.flatnonzero(mine)
        allocated = np.cumsum(records.nbytes[rows].astype(np.float64))
        reserved = None
        kind = "bytes_running_sum"
    t = records.ts_us[rows]
    low = t[0] if len(t) and start_us is None else (start_us if start_us is not None else 0.0)
    high = t[-1] if len(t) and end_us is None else (end_us if end_us is not None else 0.0)
    inside = (t >= low) & (t <= high)
    times, allocated = t[inside], allocated[inside]
    reserved = reserved[inside] if reserved is not None else None
    if len(times) > 4 * width_px:
        largest = (allocated, -allocated) if reserved is None else (allocated, -allocated, reserved)
        keep = peak_preserving(times, low, high, width_px, largest)
        times, allocated = times[keep], allocated[keep]
        reserved = reserved[keep] if reserved is not None else None
    reserved_column = reserved.tolist() if reserved is not None else [None] * len(times)
    return {
        "device": device,
        "curve_kind": kind,
        "window_us": [float(low), float(high)],
        "points_in_window": int(inside.sum()),
        "curve": [list(point) for point in zip(times.tolist(), allocated.tolist(), reserved_column, strict=True)],
    }


def peak_preserving(
    times: np.ndarray, low: float, high: float, width_px: int, largest_of: tuple[np.ndarray, ...]
) -> np.ndarray:
    """Indices to draw: per pixel column its first and last point, and the point where each series of
    ``largest_of`` is largest (pass ``-values`` to keep a series' smallest too)."""
    scale = width_px / (high - low) if high > low else 0.0
    column = np.clip(((times - low) * scale).astype(np.int64), 0, width_px - 1)
    starts = np.concatenate([[0], np.flatnonzero(np.diff(column)) + 1])
    ends = np.concatenate([starts[1:], [len(times)]]) - 1
    keep = [starts, ends]
    for values in largest_of:
        order = np.lexsort((-values, column))  # within each column, largest first
        keep.append(order[np.searchsorted(column[order], column[starts])])
    return np.unique(np.concatenate(keep))


def memory_events(
    tables: TraceTables,
    records: MemoryRecords,
    attribution: MemoryAttribution,
    device: str,
    start_us: float | None = None,
    end_us: float | None = None,
) -> list[dict[str, Any]]:
    """Allocation / release pairs of one device, in the window (both halves must be in it to pair)."""
    index = records.names.index(device)
    in_window = (records.device == index) & (records.addr != NO_ID)
    if start_us is not None:
        in_window &= records.ts_us >= start_us
    if end_us is not None:
        in_window &= records.ts_us <= end_us
    rows = np.flatnonzero(in_window)
    names = _operator_labels(tables, attribution, records.row[rows], records.nbytes[rows] > 0)
    addrs, sizes, times = records.addr[rows].tolist(), records.nbytes[rows].tolist(), records.ts_us[rows].tolist()
    open_allocs: dict[int, int] = {}  # address -> position of its allocation
    result: list[dict[str, Any]] = []
    unpaired_frees = []
    for position, (addr, nbytes) in enumerate(zip(addrs, sizes, strict=True)):
        if nbytes > 0:
            earlier = open_allocs.get(addr)
            if earlier is not None:  # allocated again without a release in between: the first stays open
                result.append(_event_row(names[earlier], sizes[earlier], times[earlier], None))
            open_allocs[addr] = position
            continue
        alloc = open_allocs.pop(addr, None)
        if alloc is None:
            unpaired_frees.append(position)
        else:
            result.append(_event_row(names[alloc], sizes[alloc], times[alloc], times[position]))
    result += [_event_row(names[p], sizes[p], times[p], None) for p in open_allocs.values()]
    result += [_event_row(names[p], -sizes[p], None, times[p]) for p in unpaired_frees]
    return result


def _event_row(operator: str, size: int, alloc_us: float | None, release_us: float | None) -> dict[str, Any]:
    duration = release_us - alloc_us if alloc_us is not None and release_us is not None else None
    return {
        "operator": operator,
        "size_bytes": size,
        "alloc_time_us": alloc_us,
        "release_time_us": release_us,
        "duration_us": duration,
    }


def _operator_labels(
    tables: TraceTables, attribution: MemoryAttribution, memory_rows: np.ndarray, is_alloc: np.ndarray
) -> list[str]:
    """The plugin's operator label of each event: its allocation's op, ``parent (aten::empty...)`` for empties."""
    owner = _allocation_of(tables)
    labels = []
    for row, alloc in zip(memory_rows.tolist(), is_alloc.tolist(), strict=True):
        source = row if alloc else owner.get(row, -1)  # a release is named after its allocation
        node = int(attribution.record_node[source]) if source >= 0 else ROOT
        if node < 0 or not attribution.node_is_op[node]:
            labels.append("<unknown>")
            continue
        name = tables.strings[int(attribution.node_name[node])]
        if name.startswith("aten::empty"):
            parent = int(attribution.node_parent[node])
            parent_name = tables.strings[int(attribution.node_name[parent])] if parent >= 0 else ROOT_NAME
            name = f"{parent_name} ({name})"
        labels.append(name)
    return labels


def _allocation_of(tables: TraceTables) -> dict[int, int]:
    """Memory row of each release -> memory row of the allocation it releases (whole trace, time order)."""
    memory = tables.table("memory")
    order = np.argsort(np.asarray(memory["ts_ns"]), kind="stable")
    keys = zip(
        order.tolist(),
        np.asarray(memory["device_type"])[order].tolist(),
        np.asarray(memory["device_id"])[order].tolist(),
        np.asarray(memory["addr"])[order].tolist(),
        np.asarray(memory["bytes"])[order].tolist(),
        strict=True,
    )
    open_allocs: dict[tuple, int] = {}
    owner: dict[int, int] = {}
    for row, device_type, device_id, addr, nbytes in keys:
        if addr == NO_ID:
            continue
        if nbytes > 0:
            open_allocs[(device_type, device_id, addr)] = row
        else:
            alloc = open_allocs.pop((device_type, device_id, addr), None)
            if alloc is not None:
                owner[row] = alloc
    return owner


STAT_COLUMNS = (
    "size_increase_bytes",
    "self_size_increase_bytes",
    "allocation_count",
    "self_allocation_count",
    "allocation_size_bytes",
    "self_allocation_size_bytes",
)


def memory_statistics(
    tables: TraceTables,
    records: MemoryRecords,
    attribution: MemoryAttribution,
    start_us: float | None = None,
    end_us: float | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per device, per operator name: calls and the six size / count columns (see the module doc)."""
    nodes = len(attribution.node_parent)
    if nodes == 0:
        return {}
    low_ns = -np.inf if start_us is None else start_us * NS_PER_US
    high_ns = np.inf if end_us is None else end_us * NS_PER_US
    visible = ~((attribution.node_end_ns < low_ns) | (attribution.node_start_ns > high_ns))
    parent = attribution.node_parent
    visited = _visited(parent, visible, attribution.node_processed)
    devices = len(records.names)
    in_window = (records.device >= 0) & (records.ts_us * NS_PER_US >= low_ns) & (records.ts_us * NS_PER_US <= high_ns)
    node = attribution.record_node[records.row]
    counted = in_window & (node >= 0)
    counted[counted] &= attribution.node_is_op[node[counted]] & visited[node[counted]]
    node, device, nbytes = node[counted], records.device[counted], records.nbytes[counted]
    is_alloc = nbytes > 0
    self_increase = np.zeros((nodes, devices))
    self_alloc_size = np.zeros((nodes, devices))
    self_alloc_count = np.zeros((nodes, devices))
    np.add.at(self_increase, (node, device), nbytes)
    np.add.at(self_alloc_size, (node[is_alloc], device[is_alloc]), nbytes[is_alloc])
    np.add.at(self_alloc_count, (node[is_alloc], device[is_alloc]), 1)
    totals = [_subtree_sums(parent, values) for values in (self_increase, self_alloc_count, self_alloc_size)]
    ops = np.flatnonzero(visited & attribution.node_is_op)
    names = attribution.node_name[ops]
    unique_names, group = np.unique(names, return_inverse=True)
    group = group.reshape(-1)
    calls = np.bincount(group, minlength=len(unique_names))
    result: dict[str, list[dict[str, Any]]] = {}
    for d, device_label in enumerate(records.names):
        columns = {
            "size_increase_bytes": totals[0][ops, d],
            "self_size_increase_bytes": self_increase[ops, d],
            "allocation_count": totals[1][ops, d],
            "self_allocation_count": self_alloc_count[ops, d],
            "allocation_size_bytes": totals[2][ops, d],
            "self_allocation_size_bytes": self_alloc_size[ops, d],
        }
        summed = {
            key: np.bincount(group, weights=values, minlength=len(unique_names)) for key, values in columns.items()
        }
        rows = []
        for i, name_id in enumerate(unique_names.tolist()):
            values = {key: int(summed[key][i]) for key in STAT_COLUMNS}
            if any(values.values()):
                rows.append({"operator": tables.strings[int(name_id)], "calls": int(calls[i]), **values})
        rows.sort(key=lambda r: (-r["self_size_increase_bytes"], r["operator"]))
        if rows:
            result[device_label] = rows
    return result


def _visited(parent: np.ndarray, visible: np.ndarray, processed: np.ndarray) -> np.ndarray:
    """Nodes the plugin's traversal reaches: visible, and top-level or under a visited node with memory events."""
    visited = np.zeros(len(parent), bool)
    for level, at_level in enumerate(by_level(_depths(parent))):
        if level == 0:
            visited[at_level] = visible[at_level]
        else:
            up = parent[at_level]
            visited[at_level] = visible[at_level] & visited[up] & processed[up]
    return visited


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of each node (0 top level); nodes left out of the tree (parent -2) get -1."""
    depth = np.where(parent == ROOT, 0, -1)
    pending = np.flatnonzero(parent >= 0)
    while len(pending):
        ready = depth[parent[pending]] >= 0
        depth[pending[ready]] = depth[parent[pending[ready]]] + 1
        if not ready.any():
            break
        pending = pending[~ready]
    return depth


def _subtree_sums(parent: np.ndarray, values: np.ndarray) -> np.ndarray:
    """values[n] + the values of every node below n."""
    totals = values.copy()
    for at_level in reversed(by_level(_depths(parent))[1:]):
        np.add.at(totals, parent[at_level], totals[at_level])
    return totals
