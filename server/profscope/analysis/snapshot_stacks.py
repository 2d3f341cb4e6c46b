"""Call stacks of snapshot allocations: readable frames, top allocations, bytes grouped by stack.

Frames are recorded innermost first and include the allocator's own C++ frames and the CPython
interpreter's; like memory_viz (``frameFilter`` in MemoryViz.js) those are left out of what is
shown, and repeated frames are kept (recursion is real).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from profscope.analysis.payloads import payload
from profscope.analysis.snapshot_allocations import device_memory
from profscope.snapshot_tables import ACTION, SnapshotTables

OMIT_FUNCTIONS = (
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
)
OMIT_FILENAMES = (
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
)
TOP_FRAMES = 4
MAX_TREE_DEPTH = 16
MIN_TREE_SHARE = 0.002  # stacks below 0.2% of the bytes are merged into "(smaller stacks)" at their parent


def is_shown_frame(filename: str, name: str) -> bool:
    return not any(f in name for f in OMIT_FUNCTIONS) and not any(f in filename for f in OMIT_FILENAMES)


def is_python_frame(filename: str) -> bool:
    return filename.endswith(".py")


def frame_text(frame: dict[str, Any]) -> str:
    return f"{frame['filename']}:{frame['line']} {frame['name']}"


def stack_frames(tables: SnapshotTables, stack: int, python_only: bool = False) -> list[dict[str, Any]]:
    """Shown frames of a stack, innermost first; ``python_only`` keeps Python frames when there are any."""
    frames = [tables.frame(int(row)) for row in tables.stack_frame_rows(stack)]
    frames = [f for f in frames if is_shown_frame(f["filename"], f["name"])]
    if python_only:
        python = [f for f in frames if is_python_frame(f["filename"])]
        frames = python or frames
    return frames


def top_frames(tables: SnapshotTables, stack: int) -> list[str]:
    """The innermost Python frames (none for a stack without any: C++ allocator frames are not Python's)."""
    python = [f for f in stack_frames(tables, stack, python_only=True) if is_python_frame(f["filename"])]
    return [frame_text(f) for f in python[:TOP_FRAMES]]


def live_allocations(tables: SnapshotTables, device: int, moment: str) -> tuple[np.ndarray, int]:
    """Rows of ``allocations`` live at the device's peak (``moment="peak"``) or at the end, and that entry row."""
    memory = device_memory(tables, device)
    allocations = tables.table("allocations")
    rows = memory.allocation_rows
    start = np.asarray(allocations["start"])[rows]
    end = np.asarray(allocations["end"])[rows]
    if moment == "end" or len(memory.rows) == 0:
        return rows[end < 0], int(memory.rows[-1]) if len(memory.rows) else -1
    if memory.initial_allocated >= memory.allocated.max(initial=0):
        at = -1  # before the first entry
        return rows[(start < 0)], at
    at = int(memory.rows[int(np.argmax(memory.allocated))])
    live = (start <= at) & ((end > at) | (end < 0))
    return rows[live], at


def device_origin_us(tables: SnapshotTables, device: int) -> int | None:
    """The device's first entry time (the timeline's zero), None without times."""
    key = ("origin_us", device)
    if key not in tables.derived:
        tables.derived[key] = _device_origin_us(tables, device)
    return tables.derived[key]


def _device_origin_us(tables: SnapshotTables, device: int) -> int | None:
    entries = tables.table("entries")
    first, last = np.searchsorted(np.asarray(entries["device"]), [device, device + 1])
    times = np.asarray(entries["time_us"])[first:last]
    return int(times.min()) if len(times) and times.min() >= 0 else None


def allocation_row(tables: SnapshotTables, row: int) -> dict[str, Any]:
    allocations = tables.table("allocations")
    entries = tables.table("entries")
    start, end = int(allocations["start"][row]), int(allocations["end"][row])
    time_us = np.asarray(entries["time_us"])
    stack = int(allocations["stack"][row])
    origin = device_origin_us(tables, int(allocations["device"][row]))

    def since_origin(entry: int) -> int | None:
        return int(time_us[entry]) - origin if entry >= 0 and origin is not None and time_us[entry] >= 0 else None

    return {
        "id": int(row),
        "addr": f"0x{int(allocations['addr'][row]) & (2**64 - 1):x}",
        "size": int(allocations["size"][row]),
        "stream": int(allocations["stream"][row]),
        "alloc_entry": start if start >= 0 else None,
        "free_entry": end if end >= 0 else None,
        "alloc_time_us": int(time_us[start]) if start >= 0 and time_us[start] >= 0 else None,
        "free_time_us": int(time_us[end]) if end >= 0 and time_us[end] >= 0 else None,
        "alloc_at_us": since_origin(start),  # on the timeline's axis: µs since the device's first entry
        "free_at_us": since_origin(end),
        "before_trace": bool(allocations["initial"][row]),
        "stack": stack,
        "top_frames": top_frames(tables, stack),
    }


def top_allocations(tables: SnapshotTables, device: int, moment: str = "peak", limit: int = 100) -> dict[str, Any]:
    rows, at = live_allocations(tables, device, moment)
    sizes = np.asarray(tables.table("allocations")["size"])[rows]
    order = np.argsort(-sizes, kind="stable")[:limit]
    return {
        "device": device,
        "moment": moment,
        "entry": at,
        "live_count": len(rows),
        "live_bytes": int(sizes.sum()),
        "rows": [allocation_row(tables, int(rows[i])) for i in order],
    }


def stack_tree(tables: SnapshotTables, device: int, moment: str = "peak") -> dict[str, Any]:
    """Bytes live at the moment, grouped by call stack from the outermost Python frame inwards.

    Sunburst columns (``ids``, ``labels``, ``parents``, ``values``); values are bytes and
    each node's value is the sum of its children's plus what was allocated exactly there.
    """
    rows, at = live_allocations(tables, device, moment)
    allocations = tables.table("allocations")
    sizes = np.asarray(allocations["size"])[rows]
    stacks = np.asarray(allocations["stack"])[rows]
    unique_stacks, group = np.unique(stacks, return_inverse=True)
    bytes_per_stack = np.bincount(group.reshape(-1), weights=sizes, minlength=len(unique_stacks))
    total = float(sizes.sum())
    paths = [_outermost_first(tables, int(stack)) for stack in unique_stacks.tolist()]
    common = _common_prefix(paths)
    values: dict[tuple[str, ...], float] = {(): total}
    for path, nbytes in zip(paths, bytes_per_stack.tolist(), strict=True):
        path = path[len(common) :] or ("(allocated here)",)
        if nbytes < total * MIN_TREE_SHARE and path:
            path = (*path[:1], "(smaller stacks)")
        for depth in range(1, len(path) + 1):
            values[path[:depth]] = values.get(path[:depth], 0.0) + nbytes
    ids, labels, parents, node_values = [], [], [], []
    for path, nbytes in values.items():
        ids.append("/".join(path) if path else "all")
        labels.append(path[-1] if path else f"all live memory (device {device})")
        parents.append(("/".join(path[:-1]) if len(path) > 1 else "all") if path else "")
        node_values.append(int(nbytes))
    return {
        "device": device,
        "moment": moment,
        "entry": at,
        "total_bytes": int(total),
        "common_frames": list(common),  # outermost frames every stack shares, left out of the tree
        "ids": ids,
        "labels": labels,
        "parents": parents,
        "values": node_values,
    }


def _common_prefix(paths: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Frames every path starts with (a trunk that would fill the sunburst's inner rings)."""
    if len(paths) < 2:
        return ()
    prefix = paths[0]
    for path in paths[1:]:
        length = 0
        while length < min(len(prefix), len(path)) and prefix[length] == path[length]:
            length += 1
        prefix = prefix[:length]
    return prefix[: max(0, min(len(p) for p in paths) - 1)]


def _outermost_first(tables: SnapshotTables, stack: int) -> tuple[str, ...]:
    if stack < 0:
        return ("(no stack recorded)",)
    frames = stack_frames(tables, stack, python_only=True)
    path = tuple(f"{f['name']} ({_short(f['filename'])}:{f['line']})" for f in reversed(frames))
    return path[-MAX_TREE_DEPTH:] if path else ("(no Python frames)",)


def _short(filename: str) -> str:
    parts = filename.replace("\\", "/").rsplit("/", 2)
    return "/".join(parts[-2:])


@payload("snapshot.summary", kind="snapshot", version=2)
def snapshot_summary(tables: SnapshotTables) -> dict[str, Any]:
    devices = []
    segments = tables.table("segments")
    for device in tables.meta["devices"]:
        memory = device_memory(tables, device)
        on_device = np.asarray(segments["device"]) == device
        devices.append(
            {
                "device": device,
                "entries": len(memory.rows),
                "allocations": len(memory.allocation_rows),
                "peak_allocated_bytes": memory.peak_allocated,
                "end_allocated_bytes": memory.end_allocated,
                "peak_reserved_bytes": int(max(memory.initial_reserved, memory.reserved.max(initial=0))),
                "end_reserved_bytes": int(np.asarray(segments["total_size"])[on_device].sum()),
                "segments": int(on_device.sum()),
                **_first_oom(tables, device, memory.rows),
            }
        )
    return {
        "shape": tables.meta["shape"],
        "devices": devices,
        "oom_devices": [d["device"] for d in devices if d["oom_count"]],
        "has_time": tables.meta["has_time"],
        "allocator_settings": tables.meta.get("allocator_settings"),
        "external_annotations": len(tables.meta.get("external_annotations") or []),
        "warnings": tables.meta.get("warnings", []),
    }


def _first_oom(tables: SnapshotTables, device: int, rows: np.ndarray) -> dict[str, Any]:
    """How many ``oom`` entries the device's trace holds, and the first one's time on the timeline's axis
    (None without times): the page opens on it."""
    entries = tables.table("entries")
    ooms = rows[np.asarray(entries["action"])[rows] == ACTION["oom"]]
    origin = device_origin_us(tables, device)
    first_at = None
    if len(ooms) and origin is not None and entries["time_us"][int(ooms[0])] >= 0:
        first_at = int(entries["time_us"][int(ooms[0])]) - origin
    return {"oom_count": len(ooms), "first_oom_at_us": first_at}
