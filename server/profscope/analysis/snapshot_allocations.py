"""Allocations of a snapshot: alloc and free paired by address per device, as memory_viz pairs them.

Rules (``torch/utils/viz/MemoryViz.js`` ``process_alloc_data``, docs/definitions.md §7.2):
- an ``alloc`` entry starts an allocation; the next ``free_completed`` (or legacy ``free``) of the
  same address on the same device ends it (``free_requested`` only marks a pending free);
- a free whose alloc is not in the trace (older than the ring buffer) is an allocation that existed
  before the trace began (``initial``), with the free's size and stack;
- an ``active_allocated`` block of the final segments that no unfreed alloc explains also existed
  before the trace began and is still live at the end (size: the block's requested size, which is
  what trace entries record);
- allocated bytes over time: the initial allocations, then + size at each alloc, - size at each free.

Reserved bytes follow ``segment_alloc`` / ``segment_map`` (+) and ``segment_free`` / ``segment_unmap``
(-), replayed backwards from the segments present at the end.

Both levels are replayed once, at ingest (``build_levels``), and stored with the tables: a request
reads them memory-mapped instead of replaying millions of entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profscope.snapshot_tables import ACTION, BLOCK_STATE, SnapshotTables

FREE_ACTIONS = (ACTION["free_completed"], ACTION["free"])
SEGMENT_GROW = (ACTION["segment_alloc"], ACTION["segment_map"])
SEGMENT_SHRINK = (ACTION["segment_free"], ACTION["segment_unmap"])


def build_allocations(tables: SnapshotTables) -> dict[str, np.ndarray]:
    entries = tables.table("entries")
    action = np.asarray(entries["action"])
    device = np.asarray(entries["device"])
    addr = np.asarray(entries["addr"])
    is_alloc = action == ACTION["alloc"]
    is_free = np.isin(action, FREE_ACTIONS)
    rows = np.flatnonzero(is_alloc | is_free)
    rows = rows[np.lexsort((rows, addr[rows], device[rows]))]  # by device, address, then trace order
    same_group_as_next = np.zeros(len(rows), bool)
    if len(rows) > 1:
        same_group_as_next[:-1] = (device[rows[1:]] == device[rows[:-1]]) & (addr[rows[1:]] == addr[rows[:-1]])
    alloc_here = is_alloc[rows]
    free_next = np.zeros(len(rows), bool)
    free_next[:-1] = is_free[rows[1:]]
    paired_alloc = alloc_here & same_group_as_next & free_next  # position i pairs with i + 1
    freed_by_previous = np.zeros(len(rows), bool)
    freed_by_previous[1:] = paired_alloc[:-1]
    unmatched_free = ~alloc_here & ~freed_by_previous

    alloc_rows = rows[alloc_here]
    end_rows = np.full(len(rows), -1, dtype=np.int64)
    end_rows[:-1] = np.where(paired_alloc[:-1], rows[1:], -1)
    alloc_end = end_rows[alloc_here]
    free_rows = rows[unmatched_free]

    live_at_end = alloc_rows[alloc_end < 0]
    initial_blocks = _blocks_live_before_trace(tables, device[live_at_end], addr[live_at_end])
    size = np.asarray(entries["size"])
    stream = np.asarray(entries["stream"])
    stack = np.asarray(entries["stack"])
    parts = [
        (
            device[alloc_rows],
            addr[alloc_rows],
            size[alloc_rows],
            stream[alloc_rows],
            stack[alloc_rows],
            alloc_rows,
            alloc_end,
            np.zeros(len(alloc_rows), "i1"),
        ),
        (
            device[free_rows],
            addr[free_rows],
            size[free_rows],
            stream[free_rows],
            stack[free_rows],
            np.full(len(free_rows), -1),
            free_rows,
            np.ones(len(free_rows), "i1"),
        ),
        initial_blocks,
    ]
    names = ("device", "addr", "size", "stream", "stack", "start", "end", "initial")
    columns = {name: np.concatenate([part[i] for part in parts]) for i, name in enumerate(names)}
    # memory_viz's element order: trace allocations in order, then the initial ones (drawn lowest)
    order = np.lexsort((columns["start"], columns["device"]))
    return {
        name: values[order].astype(dtype)
        for (name, values), dtype in zip(columns.items(), ("i4", "i8", "i8", "i8", "i4", "i8", "i8", "i1"), strict=True)
    }


def _blocks_live_before_trace(tables: SnapshotTables, live_device: np.ndarray, live_addr: np.ndarray) -> tuple:
    blocks = tables.table("blocks")
    segments = tables.table("segments")
    state = np.asarray(blocks["state"])
    active = np.flatnonzero(state == BLOCK_STATE["active_allocated"])
    block_device = np.asarray(segments["device"])[np.asarray(blocks["segment"])[active]]
    block_addr = np.asarray(blocks["address"])[active]
    explained = _pairs_in(block_device, block_addr, live_device, live_addr)
    keep = active[~explained]
    count = len(keep)
    segment_of = np.asarray(blocks["segment"])[keep]
    return (
        np.asarray(segments["device"])[segment_of],
        np.asarray(blocks["address"])[keep],
        np.asarray(blocks["requested_size"])[keep],
        np.asarray(segments["stream"])[segment_of],
        np.asarray(blocks["stack"])[keep],
        np.full(count, -1),
        np.full(count, -1),
        np.ones(count, "i1"),
    )


def _pairs_in(device: np.ndarray, addr: np.ndarray, other_device: np.ndarray, other_addr: np.ndarray) -> np.ndarray:
    """For each (device, addr), whether the same pair occurs among (other_device, other_addr)."""
    found = np.zeros(len(device), bool)
    for dev in np.unique(device):
        mine = device == dev
        theirs = np.unique(other_addr[other_device == dev])
        if len(theirs):
            position = np.minimum(np.searchsorted(theirs, addr[mine]), len(theirs) - 1)
            found[mine] = theirs[position] == addr[mine]
    return found


@dataclass
class DeviceMemory:
    """Allocated and reserved bytes of one device after each of its trace entries."""

    device: int
    rows: np.ndarray  # entry rows of the device, in trace order
    allocated: np.ndarray  # after each entry
    reserved: np.ndarray
    initial_allocated: int
    initial_reserved: int
    allocation_rows: np.ndarray  # rows of the allocations table on this device

    @property
    def peak_allocated(self) -> int:
        return int(max(self.initial_allocated, self.allocated.max(initial=self.initial_allocated)))

    @property
    def end_allocated(self) -> int:
        return int(self.allocated[-1]) if len(self.allocated) else self.initial_allocated


def device_memory(tables: SnapshotTables, device: int) -> DeviceMemory:
    """Memoised on the tables: every snapshot view of a device starts from it.

    Read from the stored ``levels`` when the tables have them (as ingested), else replayed.
    """
    key = ("device_memory", device)
    found = tables.derived.get(key)
    if found is None:
        found = tables.derived[key] = _stored_device_memory(tables, device) or replay_device_memory(tables, device)
    return found


def build_levels(tables: SnapshotTables) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The ``levels`` and ``device_levels`` tables: every device's levels, replayed (and memoised)."""
    rows = tables.row_count("entries")
    allocated = np.zeros(rows, dtype=np.int64)
    reserved = np.zeros(rows, dtype=np.int64)
    devices = list(tables.meta["devices"])
    initial_allocated, initial_reserved = [], []
    for device in devices:
        memory = replay_device_memory(tables, device)
        mine = slice(int(memory.rows[0]), int(memory.rows[-1]) + 1) if len(memory.rows) else slice(0, 0)
        allocated[mine], reserved[mine] = memory.allocated, memory.reserved
        memory.allocated, memory.reserved = allocated[mine], reserved[mine]  # one copy in memory
        tables.derived[("device_memory", device)] = memory
        initial_allocated.append(memory.initial_allocated)
        initial_reserved.append(memory.initial_reserved)
    device_levels = {
        "device": np.asarray(devices, dtype=np.int32),
        "initial_allocated": np.asarray(initial_allocated, dtype=np.int64),
        "initial_reserved": np.asarray(initial_reserved, dtype=np.int64),
    }
    return {"allocated": allocated, "reserved": reserved}, device_levels


def _device_ranges(tables: SnapshotTables, device: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the device in ``entries`` and in ``allocations`` (both tables are ordered by device)."""
    first, last = np.searchsorted(np.asarray(tables.table("entries")["device"]), [device, device + 1])
    low, high = np.searchsorted(np.asarray(tables.table("allocations")["device"]), [device, device + 1])
    return np.arange(first, last), np.arange(low, high)


def _stored_device_memory(tables: SnapshotTables, device: int) -> DeviceMemory | None:
    stored = tables.columns.get("device_levels")
    if not stored or tables.row_count("levels") != tables.row_count("entries"):
        return None
    found = np.flatnonzero(np.asarray(stored["device"]) == device)
    if not len(found):
        return None
    rows, allocation_rows = _device_ranges(tables, device)
    mine = slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) else slice(0, 0)
    levels = tables.table("levels")
    return DeviceMemory(
        device,
        rows,
        levels["allocated"][mine],
        levels["reserved"][mine],
        int(stored["initial_allocated"][found[0]]),
        int(stored["initial_reserved"][found[0]]),
        allocation_rows,
    )


def replay_device_memory(tables: SnapshotTables, device: int) -> DeviceMemory:
    entries = tables.table("entries")
    rows, mine = _device_ranges(tables, device)
    first, last = (int(rows[0]), int(rows[-1]) + 1) if len(rows) else (0, 0)
    allocations = tables.table("allocations")
    size = np.asarray(allocations["size"])[mine]
    start = np.asarray(allocations["start"])[mine]
    end = np.asarray(allocations["end"])[mine]
    started = start >= 0
    ended = end >= 0
    delta = np.bincount(start[started] - first, weights=size[started], minlength=len(rows)) - np.bincount(
        end[ended] - first, weights=size[ended], minlength=len(rows)
    )
    delta = np.rint(delta).astype(np.int64)  # float64 sums of byte counts: exact below 2**53
    initial_allocated = int(size[~started].sum())
    allocated = initial_allocated + np.cumsum(delta)

    action = np.asarray(entries["action"])[first:last]
    entry_size = np.asarray(entries["size"])[first:last]
    segment_delta = np.where(np.isin(action, SEGMENT_GROW), entry_size, 0) - np.where(
        np.isin(action, SEGMENT_SHRINK), entry_size, 0
    )
    segments = tables.table("segments")
    final_reserved = int(np.asarray(segments["total_size"])[np.asarray(segments["device"]) == device].sum())
    initial_reserved = final_reserved - int(segment_delta.sum())
    reserved = initial_reserved + np.cumsum(segment_delta)
    return DeviceMemory(device, rows, allocated, reserved, initial_allocated, initial_reserved, mine)
