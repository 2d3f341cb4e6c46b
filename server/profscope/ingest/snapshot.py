"""Read a CUDA allocator snapshot pickle (safely) into :class:`SnapshotTables`, in bounded memory.

Shapes handled (``docs/definitions.md`` §7.1): a bare list of segments (oldest snapshots); a dict with
``segments`` and ``device_traces`` (one list per device), optionally ``allocator_settings`` and
``external_annotations``; blocks with ``frames`` / ``requested_size`` or with the legacy
``history``; trace entries with or without ``time_us``; ``oom`` entries (``device_free`` instead of
``addr``); expandable segments (``segment_map`` / ``segment_unmap``).

Big snapshots: a snapshot's trace entries share their frame dicts through the pickle memo, but each
entry is its own dict with its own frame list, about 1 KB once decoded. So while the unpickler runs,
every 8 MiB of input the reader turns the entries decoded so far into columns and empties their
dicts and frame lists, keeping the decoded size to a fraction of the pickle's.
"""

from __future__ import annotations

import gc
import math
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from profscope import parser_versions
from profscope.ingest.malloc_tuning import collection_paused
from profscope.ingest.safe_pickle import LIMIT_SETTING, PickleRefused, load_plain_data, resident_bytes
from profscope.snapshot_tables import ACTION, BLOCK_STATE, SEGMENT_TYPES, UNKNOWN_ACTION, SnapshotTables
from profscope.tables import NO_ID, StringTable

SNAPSHOT_PARSER_VERSION = parser_versions.SNAPSHOT  # bump it there when the tables of a snapshot change
SWEEP_EVERY_BYTES = 8 << 20
MAX_ANNOTATIONS = 10_000
# Settings and annotations are copied for the page. A pickle can make a small list reach itself many
# times over (each level [x, x]): copying that naively takes 2**depth steps, so the copy is bounded.
MAX_METADATA_VALUES = 1_000_000
MAX_METADATA_DEPTH = 64


class SnapshotFormatError(Exception):
    """The file is not a memory snapshot profscope can read (the message says why)."""


class _StackMark:
    """Left in a consumed entry's frame list, in case a later entry shares that list."""

    __slots__ = ("stack",)

    def __init__(self, stack: int) -> None:
        self.stack = stack


class _Stacks:
    """Interns frames and call stacks; identical frame dicts (shared through the memo) cost one lookup."""

    def __init__(self, strings: StringTable) -> None:
        self.strings = strings
        self.frame_rows: dict[tuple[str, int, str], int] = {}
        self.frame_columns: dict[str, array] = {"filename": array("i"), "line": array("i"), "name": array("i")}
        self.stack_rows: dict[tuple[int, ...], int] = {}
        self.stack_start = array("q", [0])
        self.stack_frames = array("i")
        self._by_identity: dict[tuple[int, ...], int] = {}
        self._alive: list[list] = []  # keeps the frame dicts behind ``_by_identity`` from being reused
        self._marks: dict[int, _StackMark] = {}

    def mark(self, stack: int) -> _StackMark:
        found = self._marks.get(stack)
        if found is None:
            found = self._marks[stack] = _StackMark(stack)
        return found

    def stack_of(self, frames: Any) -> int:
        if not frames or type(frames) is not list:
            return NO_ID
        if len(frames) == 1 and type(frames[0]) is _StackMark:
            return frames[0].stack
        identity = tuple(map(id, frames))
        found = self._by_identity.get(identity)
        if found is not None:
            return found
        rows = tuple(self._frame_row(frame) for frame in frames)
        stack = self.stack_rows.get(rows)
        if stack is None:
            stack = self.stack_rows[rows] = len(self.stack_rows)
            self.stack_frames.extend(rows)
            self.stack_start.append(len(self.stack_frames))
        self._by_identity[identity] = stack
        self._alive.append(list(frames))
        return stack

    def forget_identities(self) -> None:
        """Frame dicts may be freed after decoding: identities are no longer valid keys."""
        self._by_identity.clear()
        self._alive.clear()

    def _frame_row(self, frame: Any) -> int:
        if type(frame) is not dict:
            raise SnapshotFormatError(f"a stack frame is a {type(frame).__name__}, expected a dict")
        key = (_text(frame.get("filename", "")), _int(frame.get("line"), 0), _text(frame.get("name", "")))
        filename, line, name = key
        row = self.frame_rows.get(key)
        if row is None:
            row = self.frame_rows[key] = len(self.frame_rows)
            self.frame_columns["filename"].append(self.strings.intern(filename))
            self.frame_columns["line"].append(max(min(line, 2**31 - 1), -(2**31)))
            self.frame_columns["name"].append(self.strings.intern(name))
        return row


def _int(value: Any, default: int = NO_ID, limit: int = 2**63) -> int:
    """An integer field: ``default`` when the value is not a number or does not fit ``[-limit, limit)``."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return default
        value = int(value)
    if isinstance(value, int):
        return value if -limit <= value < limit else default
    return default


def _text(value: Any) -> str:
    """A name field: strings as they are, numbers as text, anything else by its type (never its repr,
    which for a self-sharing structure from a hostile pickle can take forever)."""
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, int | float):
        return str(value)
    return f"<{type(value).__name__}>"


def _addr(value: Any) -> int:
    """Addresses are unsigned 64-bit; the tables keep them in int64 (CUDA addresses are below 2**63)."""
    if type(value) is not int:
        value = _int(value, 0)
    if not -(2**63) <= value < 2**64:
        raise SnapshotFormatError(f"address {value} does not fit in 64 bits")
    return value - 2**64 if value >= 2**63 else value


ENTRY_COLUMNS = (
    ("device", "i4"),
    ("order", "i8"),
    ("action", "i1"),
    ("addr", "i8"),
    ("size", "i8"),
    ("stream", "i8"),
    ("time_us", "i8"),
    ("stack", "i4"),
    ("device_free", "i8"),
)
ENTRY_DTYPE = np.dtype(list(ENTRY_COLUMNS))
# What a value that does not fit its column becomes (device, order, action, addr, size, stream, time, stack, free)
ENTRY_DEFAULTS = (0, 0, UNKNOWN_ACTION, 0, 0, 0, NO_ID, NO_ID, NO_ID)


class _EntryColumns:
    """Trace entries, appended as they are decoded (possibly several devices interleaved)."""

    def __init__(self, stacks: _Stacks, budget: Callable[[], None]) -> None:
        self.stacks = stacks
        self.budget = budget
        self.chunks: list[np.ndarray] = []  # one structured array per batch of entries
        self.unknown_actions: dict[str, int] = {}
        self.without_time = 0
        self.out_of_range = 0  # rows with an integer beyond 64 bits
        self.rows = 0

    def add(self, device: int, first_order: int, entries: list) -> list[int]:
        """Append the entries' rows; returns their stack ids."""
        stack_of = self.stacks.stack_of
        actions = ACTION
        rows = []
        stacks = []
        for order, entry in enumerate(entries, first_order):
            if type(entry) is not dict:
                raise SnapshotFormatError(f"device {device} trace entry {order} is not a dict")
            get = entry.get
            action_name = get("action")
            action = actions.get(action_name, UNKNOWN_ACTION) if action_name.__class__ is str else UNKNOWN_ACTION
            if action == UNKNOWN_ACTION:
                name = _text(action_name)
                self.unknown_actions[name] = self.unknown_actions.get(name, 0) + 1
            time_us = get("time_us")
            device_free = get("device_free")
            addr = get("addr", 0)
            size = get("size", 0)
            stream = get("stream", 0)
            stack = stack_of(get("frames"))
            stacks.append(stack)
            rows.append(
                (
                    device,
                    order,
                    action,
                    addr if type(addr) is int and addr < 2**63 else _addr(addr),
                    size if type(size) is int else _int(size, 0),
                    stream if type(stream) is int else _int(stream, 0),
                    time_us if type(time_us) is int else _int(time_us),
                    stack,
                    NO_ID if device_free is None else _int(device_free),
                )
            )
            if time_us is None:
                self.without_time += 1
        if rows:
            self.chunks.append(self._array(rows))
        self.rows += len(rows)
        self.budget()
        return stacks

    def _array(self, rows: list[tuple]) -> np.ndarray:
        try:
            return np.array(rows, dtype=ENTRY_DTYPE)
        except OverflowError:  # an integer beyond 64 bits means nothing: the column's default instead
            fitted = [tuple(map(_int, row, ENTRY_DEFAULTS)) for row in rows]
            self.out_of_range += sum(row != fit for row, fit in zip(rows, fitted, strict=True))
            return np.array(fitted, dtype=ENTRY_DTYPE)

    def consume(self, device: int, first_order: int, entries: list) -> None:
        """Add, then empty the entries' dicts and frame lists so the decoded objects shrink."""
        stacks = self.add(device, first_order, entries)
        mark = self.stacks.mark
        for entry, stack in zip(entries, stacks, strict=True):
            frames = entry.get("frames")
            if type(frames) is list and frames and type(frames[0]) is not _StackMark:
                frames[:] = (mark(stack),)
            entry.clear()

    def relabel(self, provisional: dict[int, int]) -> None:
        for chunk in self.chunks:
            for temporary, device in provisional.items():
                chunk["device"][chunk["device"] == temporary] = device

    def sorted_columns(self) -> dict[str, np.ndarray]:
        table = np.concatenate(self.chunks) if self.chunks else np.zeros(0, dtype=ENTRY_DTYPE)
        self.chunks = []
        order = np.lexsort((table["order"], table["device"]))
        return {name: np.ascontiguousarray(table[name][order]) for name, _ in ENTRY_COLUMNS if name != "order"}


class _TraceSweeper:
    """Between reads: finds the per-device trace lists being filled and turns new entries into columns."""

    def __init__(self, entries: _EntryColumns) -> None:
        self.entries = entries
        self.lists: dict[int, tuple[list, int]] = {}  # id -> (list, device-order of discovery)
        self.consumed: dict[int, int] = {}
        self.next_sweep = SWEEP_EVERY_BYTES

    def on_input(self, bytes_read: int, unpickler: Any) -> None:
        if bytes_read < self.next_sweep or unpickler is None:
            return
        self.next_sweep = bytes_read + SWEEP_EVERY_BYTES
        if not self._consume_known():
            self._discover(unpickler)
            self._consume_known()

    def _consume_known(self) -> bool:
        grew = False
        for key, (entries, discovered) in self.lists.items():
            done = self.consumed[key]
            ready = len(entries)  # items reach a list complete (APPENDS), so all of them can be read
            if ready > done:
                self.entries.consume(provisional_device(discovered), done, entries[done:ready])
                self.consumed[key] = ready
                grew = True
        return grew

    def _discover(self, unpickler: Any) -> None:
        """The unpickler's memo holds every list decoded so far: find the trace lists among them."""
        for item in gc.get_referents(unpickler):
            if type(item) is list and item and id(item) not in self.lists:
                first = item[0]
                if type(first) is dict and "action" in first:
                    self.lists[id(item)] = (item, len(self.lists))
                    self.consumed[id(item)] = 0


def parse_snapshot(
    raw: IO[bytes],
    max_decoded_bytes: int,
    on_progress: Callable[[int], None] | None = None,
) -> SnapshotTables:
    strings = StringTable()
    stacks = _Stacks(strings)
    baseline = resident_bytes()

    def budget() -> None:
        if resident_bytes() - baseline > max_decoded_bytes:
            raise PickleRefused(
                f"refused: the decoded snapshot would take more than {max_decoded_bytes:,} bytes ({LIMIT_SETTING})"
            )

    entries = _EntryColumns(stacks, budget)
    sweeper = _TraceSweeper(entries)
    with collection_paused():  # millions of new dicts and lists would start full collections over and over
        document = load_plain_data(raw, max_decoded_bytes, on_progress=on_progress, on_input=sweeper.on_input)
        stacks.forget_identities()
        return _normalise(document, strings, stacks, entries, sweeper)


def parse_snapshot_file(path: Path, max_decoded_bytes: int = 16 << 30) -> SnapshotTables:
    with open(path, "rb") as raw:
        return parse_snapshot(raw, max_decoded_bytes)


def _normalise(
    document: Any, strings: StringTable, stacks: _Stacks, entries: _EntryColumns, sweeper: _TraceSweeper
) -> SnapshotTables:
    warnings: list[str] = []
    if isinstance(document, list):  # the oldest snapshots: just the segments
        segments, traces, extra = document, [], {}
        shape = "segments list"
    elif isinstance(document, dict) and "segments" in document:
        segments = document.get("segments") or []
        traces = document.get("device_traces") or []
        extra = document
        shape = "snapshot dict"
    else:
        what = f"a dict with keys {sorted(map(str, document))[:8]}" if isinstance(document, dict) else type(document)
        raise SnapshotFormatError(
            f"not a CUDA memory snapshot: expected a dict with 'segments' (torch.cuda.memory._snapshot()), got {what}"
        )
    if not isinstance(segments, list) or not isinstance(traces, list):
        raise SnapshotFormatError("not a CUDA memory snapshot: 'segments' and 'device_traces' must be lists")

    swept = {key: sweeper.consumed[key] for key in sweeper.lists}
    for device, trace in enumerate(traces):
        if not isinstance(trace, list):
            raise SnapshotFormatError(f"device_traces[{device}] is a {type(trace).__name__}, expected a list")
        done = swept.pop(id(trace), 0)
        entries.add(device, done, trace[done:])
    if swept:
        raise SnapshotFormatError("trace entries were found outside 'device_traces'")
    _relabel_swept_devices(entries, sweeper, traces)

    segment_columns, block_columns = _segments(segments, strings, stacks)
    columns = {
        "entries": entries.sorted_columns(),
        "segments": segment_columns,
        "blocks": block_columns,
        "frames": {
            name: np.frombuffer(values, dtype=values.typecode) if len(values) else np.zeros(0, "i4")
            for name, values in stacks.frame_columns.items()
        },
        "stacks": {"start": np.frombuffer(stacks.stack_start, dtype="q").copy()},
        "stack_frames": {
            "frame": np.frombuffer(stacks.stack_frames, dtype="i").copy()
            if len(stacks.stack_frames)
            else np.zeros(0, "i4")
        },
    }
    if entries.unknown_actions:
        warnings.append(f"unknown trace actions kept as 'unknown': {entries.unknown_actions}")
    if entries.out_of_range:
        warnings.append(f"{entries.out_of_range} trace entries had integers beyond 64 bits, read as unknown")
    devices = sorted(
        set(np.unique(columns["entries"]["device"]).tolist()) | set(np.unique(segment_columns["device"]).tolist())
    )
    settings = extra.get("allocator_settings") if isinstance(extra, dict) else None
    annotations = extra.get("external_annotations") if isinstance(extra, dict) else None
    settings = _bounded_plain(settings, "allocator_settings", warnings) if isinstance(settings, dict) else None
    annotations = (
        _bounded_plain(annotations[:MAX_ANNOTATIONS], "external_annotations", warnings)
        if isinstance(annotations, list)
        else None
    )
    meta = {
        "shape": shape,
        "devices": [int(d) for d in devices],
        "device_traces": len(traces),
        "has_time": entries.rows > 0 and entries.without_time == 0,
        "entries_without_time": entries.without_time,
        "allocator_settings": settings,
        "external_annotations": annotations or [],
        "warnings": warnings,
    }
    return SnapshotTables(columns=columns, strings=strings, meta=meta)


def provisional_device(discovered: int) -> int:
    """Rows consumed while decoding: the device index is known only once the whole list of lists is."""
    return -1 - discovered


def _relabel_swept_devices(entries: _EntryColumns, sweeper: _TraceSweeper, traces: list) -> None:
    device_of = {id(trace): index for index, trace in enumerate(traces)}
    entries.relabel(
        {
            provisional_device(discovered): device_of[id(lst)]
            for lst, discovered in sweeper.lists.values()
            if id(lst) in device_of
        }
    )


class _TooLarge(Exception):
    pass


def _bounded_plain(value: Any, what: str, warnings: list[str]) -> Any:
    """JSON-safe copy of settings / annotations, or None (and a warning) when it is absurdly big or deep."""
    remaining = [MAX_METADATA_VALUES]
    try:
        return _plain(value, remaining, 0)
    except _TooLarge:
        warnings.append(
            f"'{what}' was left out: more than {MAX_METADATA_VALUES:,} values or {MAX_METADATA_DEPTH} levels deep"
        )
        return None


def _plain(value: Any, remaining: list[int], depth: int) -> Any:
    """JSON-safe copy (tuples become lists, odd keys become strings), counting down ``remaining`` values."""
    remaining[0] -= 1
    if remaining[0] < 0 or depth > MAX_METADATA_DEPTH:
        raise _TooLarge
    if isinstance(value, dict):
        return {_text(k): _plain(v, remaining, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, remaining, depth + 1) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return _text(value)


def _pool_name(pool: Any) -> str:
    """A memory pool id as text: ``(0, 1)`` for the usual (device, id) pair."""
    if isinstance(pool, list | tuple) and all(isinstance(part, int | str) for part in pool):
        return repr(tuple(pool))
    return _text(pool)


def _segments(segments: list, strings: StringTable, stacks: _Stacks) -> tuple[dict, dict]:
    seg = {
        name: []
        for name in (
            "device",
            "address",
            "total_size",
            "allocated_size",
            "active_size",
            "requested_size",
            "stream",
            "segment_type",
            "is_expandable",
            "pool",
            "stack",
            "first_block",
            "block_count",
        )
    }
    blk = {name: [] for name in ("segment", "address", "size", "requested_size", "state", "stack")}
    for index, segment in enumerate(segments):
        if not isinstance(segment, dict):
            raise SnapshotFormatError(f"segment {index} is a {type(segment).__name__}, expected a dict")
        address = _addr(segment.get("address", 0))
        blocks = segment.get("blocks") or []
        if not isinstance(blocks, list):
            raise SnapshotFormatError(f"the blocks of segment {index} are a {type(blocks).__name__}, expected a list")
        first = len(blk["segment"])
        cursor = address
        allocated = active = requested = 0
        for block in blocks:
            if not isinstance(block, dict):
                raise SnapshotFormatError(f"a block of segment {index} is not a dict")
            size = _int(block.get("size"), 0)
            block_address = _addr(block["address"]) if "address" in block else cursor
            state_name = block.get("state", "inactive")
            state = BLOCK_STATE.get(state_name) if isinstance(state_name, str) else None
            if state is None:
                raise SnapshotFormatError(f"block state {_text(state_name)!r} of segment {index} is not a known state")
            history = block.get("history")
            last = history[-1] if isinstance(history, list) and history and isinstance(history[-1], dict) else {}
            block_requested = _int(block.get("requested_size", last.get("real_size", size)), size)
            frames = block.get("frames", last.get("frames"))
            blk["segment"].append(index)
            blk["address"].append(block_address)
            blk["size"].append(size)
            blk["requested_size"].append(block_requested if state != BLOCK_STATE["inactive"] else 0)
            blk["state"].append(state)
            blk["stack"].append(stacks.stack_of(frames))
            cursor = block_address + size
            if state == BLOCK_STATE["active_allocated"]:
                allocated += size
            if state != BLOCK_STATE["inactive"]:
                active += size
                requested += block_requested
        pool = segment.get("segment_pool_id")
        seg["device"].append(_int(segment.get("device"), 0, limit=2**31))
        seg["address"].append(address)
        seg["total_size"].append(_int(segment.get("total_size"), cursor - address))
        seg["allocated_size"].append(_int(segment.get("allocated_size"), allocated))
        seg["active_size"].append(_int(segment.get("active_size"), active))
        seg["requested_size"].append(_int(segment.get("requested_size"), requested))
        seg["stream"].append(_int(segment.get("stream"), 0))
        seg_type = segment.get("segment_type")
        seg["segment_type"].append(SEGMENT_TYPES.index(seg_type) if seg_type in SEGMENT_TYPES else -1)
        seg["is_expandable"].append(1 if segment.get("is_expandable") else 0)
        seg["pool"].append(strings.intern(_pool_name(pool)) if pool is not None else NO_ID)
        seg["stack"].append(stacks.stack_of(segment.get("frames")))
        seg["first_block"].append(first)
        seg["block_count"].append(len(blk["segment"]) - first)
    dtypes = {
        "segment_type": "i1",
        "is_expandable": "i1",
        "pool": "i4",
        "stack": "i4",
        "device": "i4",
        "segment": "i4",
        "state": "i1",
    }
    segment_columns = {k: np.asarray(v, dtype=dtypes.get(k, "i8")) for k, v in seg.items()}
    block_columns = {k: np.asarray(v, dtype=dtypes.get(k, "i8")) for k, v in blk.items()}
    return segment_columns, block_columns
