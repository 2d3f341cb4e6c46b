"""Allocator state when the snapshot was taken: segments and blocks, fragmentation, and OOM moments.

Definitions shown on the page:
- a block is *allocated* (``active_allocated``), *pending free* (freed, waiting on other streams:
  ``active_pending_free``) or *cached* (``inactive``: free space inside a reserved segment);
- rounding waste = block size - requested size of allocated blocks;
- fragmentation = 1 - largest cached block / all cached bytes (0: the free space is one block;
  near 1: it is split into many small pieces, so a large request can fail although the total would
  fit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis.snapshot_allocations import device_memory
from profscope.analysis.snapshot_stacks import allocation_row, device_origin_us, top_frames
from profscope.snapshot_tables import ACTION, BLOCK_STATE, BLOCK_STATES, SEGMENT_TYPES, SnapshotTables

MAX_SEGMENTS = 2000
OOM_LIVE_ROWS = 20


def fragmentation(cached_sizes: np.ndarray) -> float:
    total = int(cached_sizes.sum())
    return 1.0 - int(cached_sizes.max()) / total if total > 0 else 0.0


def segment_state(tables: SnapshotTables, device: int) -> dict[str, Any]:
    segments = tables.table("segments")
    blocks = tables.table("blocks")
    on_device = np.flatnonzero(np.asarray(segments["device"]) == device)
    block_segment = np.asarray(blocks["segment"])
    block_device = np.asarray(segments["device"])[block_segment] if len(block_segment) else np.zeros(0, int)
    state = np.asarray(blocks["state"])
    size = np.asarray(blocks["size"])
    requested = np.asarray(blocks["requested_size"])
    mine = block_device == device
    cached = mine & (state == BLOCK_STATE["inactive"])
    allocated = mine & (state == BLOCK_STATE["active_allocated"])
    pending = mine & (state == BLOCK_STATE["active_pending_free"])
    order = on_device[np.argsort(-np.asarray(segments["total_size"])[on_device], kind="stable")][:MAX_SEGMENTS]
    rows = []
    for seg in order.tolist():
        first, count = int(segments["first_block"][seg]), int(segments["block_count"][seg])
        own = slice(first, first + count)
        seg_cached = size[own][state[own] == BLOCK_STATE["inactive"]]
        seg_type = int(segments["segment_type"][seg])
        rows.append(
            {
                "segment": seg,
                "address": f"0x{int(segments['address'][seg]) & (2**64 - 1):x}",
                "total_size": int(segments["total_size"][seg]),
                "allocated_bytes": int(size[own][state[own] == BLOCK_STATE["active_allocated"]].sum()),
                "cached_bytes": int(seg_cached.sum()),
                "largest_cached_block": int(seg_cached.max(initial=0)),
                "stream": int(segments["stream"][seg]),
                "type": SEGMENT_TYPES[seg_type] if seg_type >= 0 else None,
                "expandable": bool(segments["is_expandable"][seg]),
                "pool": tables.strings[int(segments["pool"][seg])] or None,
                "blocks": {
                    "offset": (np.asarray(blocks["address"])[own] - int(segments["address"][seg])).tolist(),
                    "size": size[own].tolist(),
                    "requested_size": requested[own].tolist(),
                    "state": [BLOCK_STATES[s] for s in state[own].tolist()],
                },
            }
        )
    return {
        "device": device,
        "segment_count": len(on_device),
        "segments_shown": len(rows),
        "reserved_bytes": int(np.asarray(segments["total_size"])[on_device].sum()),
        "allocated_bytes": int(size[allocated].sum()),
        "requested_bytes": int(requested[allocated].sum()),
        "rounding_waste_bytes": int(size[allocated].sum() - requested[allocated].sum()),
        "pending_free_bytes": int(size[pending].sum()),
        "cached_bytes": int(size[cached].sum()),
        "largest_cached_block": int(size[cached].max(initial=0)),
        "fragmentation": fragmentation(size[cached]),
        "fragmentation_definition": "1 - largest cached (free) block / all cached bytes",
        "segments": rows,
    }


def oom_moments(tables: SnapshotTables, device: int) -> dict[str, Any]:
    """Each ``oom`` entry: what was requested, what the driver had free, what was live then."""
    memory = device_memory(tables, device)
    entries = tables.table("entries")
    action = np.asarray(entries["action"])[memory.rows]
    ooms = memory.rows[action == ACTION["oom"]]
    allocations = tables.table("allocations")
    start = np.asarray(allocations["start"])[memory.allocation_rows]
    end = np.asarray(allocations["end"])[memory.allocation_rows]
    sizes = np.asarray(allocations["size"])[memory.allocation_rows]
    state = segment_state(tables, device)
    origin = device_origin_us(tables, device)
    moments = []
    for row in ooms.tolist():
        live = (start <= row) & ((end > row) | (end < 0))
        live_rows = memory.allocation_rows[live]
        live_sizes = sizes[live]
        order = np.argsort(-live_sizes, kind="stable")[:OOM_LIVE_ROWS]
        after = int(np.count_nonzero(np.isin(action[memory.rows > row], (ACTION["alloc"], ACTION["free_completed"]))))
        time_us = int(entries["time_us"][row])
        moments.append(
            {
                "entry": row,
                "time_us": time_us if time_us >= 0 else None,
                "at_us": time_us - origin if time_us >= 0 and origin is not None else None,  # on the timeline's axis
                "requested_bytes": int(entries["size"][row]),
                "device_free_bytes": int(entries["device_free"][row]) if entries["device_free"][row] >= 0 else None,
                "allocated_bytes": int(memory.allocated[row - memory.rows[0]]),
                "reserved_bytes": int(memory.reserved[row - memory.rows[0]]),
                "live_count": int(live.sum()),
                "largest_live": [allocation_row(tables, int(r)) for r in live_rows[order]],
                "top_frames": top_frames(tables, int(entries["stack"][row])),
                "stack": int(entries["stack"][row]),
                # the snapshot is taken after the OOM (e.g. by an OOM observer): its free blocks are the ones the
                # failed request could not use, unless the trace went on allocating afterwards
                "largest_cached_block_at_snapshot": state["largest_cached_block"],
                "cached_bytes_at_snapshot": state["cached_bytes"],
                "entries_after": after,
            }
        )
    return {"device": device, "ooms": moments}
