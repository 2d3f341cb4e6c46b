"""The columnar model of a CUDA caching-allocator snapshot (``torch.cuda.memory._dump_snapshot``).

Every snapshot shape (a bare list of segments, ``{segments, device_traces, ...}``, legacy block
``history``, entries without ``time_us``, several devices, expandable segments, ``oom`` entries)
is normalised once, in the ingest worker, into these tables. They are stored like trace tables
(one ``.npy`` per column, read back memory-mapped):

- ``entries``: the allocator's trace ring buffer, one row per entry, ordered by device and then by
  position in that device's trace (the position is the time axis when ``time_us`` is absent);
- ``segments`` and ``blocks``: the allocator state when the snapshot was taken; a segment's blocks
  are rows ``first_block .. first_block + block_count`` of ``blocks``, in address order;
- ``frames`` and stacks: every distinct frame once, every distinct call stack once (``stack_frames``
  rows ``stack_start[s] .. stack_start[s + 1]``, innermost frame first, as recorded);
- ``allocations``: alloc/free paired by address per device (derived at ingest, see
  ``analysis/snapshot_allocations.py``): what the active-memory timeline draws;
- ``levels``: allocated and reserved bytes of the entry's device after each entry (aligned with
  ``entries``), and ``device_levels`` the levels of each device before its first entry (derived at
  ingest too: every view of a device starts from them).

Addresses and sizes are bytes; ``time_us`` is the allocator's clock (microseconds since the epoch),
-1 when the snapshot did not record it.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from profscope.tables import NO_ID, StringTable, map_npy

ACTIONS = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "free",  # before free_requested / free_completed existed (PyTorch 2.0)
)
ACTION = {name: code for code, name in enumerate(ACTIONS)}
UNKNOWN_ACTION = -1

BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
BLOCK_STATE = {name: code for code, name in enumerate(BLOCK_STATES)}
BLOCK_STATE["active_awaiting_free"] = BLOCK_STATE["active_pending_free"]  # the docstring's name for it

SEGMENT_TYPES = ("large", "small")

SNAPSHOT_SCHEMA: dict[str, dict[str, str]] = {
    "entries": {
        "device": "i4",
        "action": "i1",
        "addr": "i8",
        "size": "i8",
        "stream": "i8",
        "time_us": "i8",
        "stack": "i4",
        "device_free": "i8",  # oom entries: what the driver reported free
    },
    "segments": {
        "device": "i4",
        "address": "i8",
        "total_size": "i8",
        "allocated_size": "i8",
        "active_size": "i8",
        "requested_size": "i8",
        "stream": "i8",
        "segment_type": "i1",  # index into SEGMENT_TYPES, -1 unknown
        "is_expandable": "i1",
        "pool": "i4",  # string id of the segment_pool_id
        "stack": "i4",
        "first_block": "i8",
        "block_count": "i8",
    },
    "blocks": {
        "segment": "i4",
        "address": "i8",
        "size": "i8",
        "requested_size": "i8",
        "state": "i1",
        "stack": "i4",
    },
    "frames": {"filename": "i4", "line": "i4", "name": "i4"},
    "stacks": {"start": "i8"},  # one more row than there are stacks
    "stack_frames": {"frame": "i4"},
    "allocations": {
        "device": "i4",
        "addr": "i8",
        "size": "i8",
        "stream": "i8",
        "stack": "i4",
        "start": "i8",  # entry row of the alloc; -1: allocated before the trace begins
        "end": "i8",  # entry row of the free; -1: still allocated when the snapshot was taken
        "initial": "i1",  # allocated before the recorded trace (known from a free, or from segments)
    },
    "levels": {"allocated": "i8", "reserved": "i8"},
    "device_levels": {"device": "i4", "initial_allocated": "i8", "initial_reserved": "i8"},
}


def empty_columns(table: str, rows: int = 0) -> dict[str, np.ndarray]:
    return {column: np.full(rows, NO_ID, dtype=dtype) for column, dtype in SNAPSHOT_SCHEMA[table].items()}


@dataclass
class SnapshotTables:
    columns: dict[str, dict[str, np.ndarray]]
    strings: StringTable
    meta: dict[str, Any] = field(default_factory=dict)
    derived: dict[Any, Any] = field(default_factory=dict)  # per-device results the views share (not stored)

    def table(self, name: str) -> dict[str, np.ndarray]:
        return self.columns[name]

    def row_count(self, name: str) -> int:
        table = self.columns[name]
        return len(next(iter(table.values()))) if table else 0

    def stack_frame_rows(self, stack: int) -> np.ndarray:
        """Rows of ``frames`` of one call stack, innermost first (empty for -1)."""
        if stack < 0:
            return np.zeros(0, dtype=np.int32)
        start = np.asarray(self.columns["stacks"]["start"])
        frames = np.asarray(self.columns["stack_frames"]["frame"])
        return frames[int(start[stack]) : int(start[stack + 1])]

    def frame(self, row: int) -> dict[str, Any]:
        frames = self.columns["frames"]
        return {
            "filename": self.strings[int(frames["filename"][row])],
            "line": int(frames["line"][row]),
            "name": self.strings[int(frames["name"][row])],
        }

    def save(self, directory: Path) -> None:
        """Write atomically: a reader sees either the old complete directory or the new one."""
        directory = Path(directory)
        staging = directory.with_name(directory.name + f".tmp{os.getpid()}")
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        for table_name, layout in SNAPSHOT_SCHEMA.items():
            table = self.columns.get(table_name) or empty_columns(table_name)
            for column, dtype in layout.items():
                np.save(staging / f"{table_name}.{column}.npy", np.ascontiguousarray(table[column], dtype=dtype))
        (staging / "strings.json").write_text(json.dumps(self.strings.strings))
        (staging / "meta.json").write_text(json.dumps(self.meta, default=str))
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(staging, directory)

    @classmethod
    def load(cls, directory: Path) -> SnapshotTables:
        directory = Path(directory)
        columns = {
            table: {column: map_npy(directory / f"{table}.{column}.npy") for column in layout}
            for table, layout in SNAPSHOT_SCHEMA.items()
        }
        strings = StringTable(json.loads((directory / "strings.json").read_text()))
        meta = json.loads((directory / "meta.json").read_text())
        return cls(columns=columns, strings=strings, meta=meta)

    @staticmethod
    def is_snapshot_dir(directory: Path) -> bool:
        return (Path(directory) / "entries.action.npy").exists()
