"""Parse a kineto / torch.profiler Chrome trace into ``TraceTables``.

Format drift is handled here, once, so no view has to know about it:
- categories of every era and vendor map to one ``Kind`` (``Kernel``/``kernel``, ``Runtime``/
  ``cuda_runtime``/``mtia_runtime``/..., ``Operator``/``cpu_op``, ``mtia_ccp_events``, ...);
- ``External id`` / ``external id``, ``Input Dims`` / ``Input dims``;
- string or integer pids/tids, the legacy bare-array file, ``B``/``E`` pairs;
- values of the wrong JSON type are coerced where the meaning is clear and dropped otherwise,
  counted in ``meta["warnings"]`` instead of failing the file.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from profscope import parser_versions
from profscope.ingest import native_events
from profscope.ingest.json_stream import ChromeTraceReader, CountingReader, TraceFormatError, open_decompressed
from profscope.ingest.malloc_tuning import (
    collection_paused,
    read_buffers_from_heap,
    release_freed_memory,
    trim_freed_heap,
)
from profscope.ingest.native_events import NativePiece
from profscope.ingest.parallel_decode import PieceDecoder, PieceRouter, SpeculationFailed
from profscope.tables import (
    EVENT_ROW_TABLES,
    FLOW_PHASES,
    NO_ID,
    SCHEMA,
    STRING_COLUMNS,
    TRACK_TABLES,
    Kind,
    StringTable,
    TraceTables,
    Track,
)

PARSER_VERSION = parser_versions.TRACE  # bump it there when tables or cached artifacts change shape
DEFAULT_MAX_TRACE_BYTES = 64 << 30
THREADED_FINISH_ROWS = 1 << 18  # below, a thread pool costs more than the ~10 ms it could save

Number = int | float | str | None
ABSENT = msgspec.Raw(b"")  # default of raw-JSON fields; msgspec cannot make Raw optional

CATEGORY_KINDS: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "python": Kind.PYTHON_LEGACY,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "glow_runtime": Kind.RUNTIME,
    "xpu_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "hip_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER,
    "xpu_driver": Kind.DRIVER,
    "privateuse1_driver": Kind.DRIVER,
    "kernel": Kind.KERNEL,
    "mtia_ccp_events": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "trace": Kind.SPAN,
    "cuda_sync": Kind.SYNC,
}


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys any view reads; every other key is skipped by the decoder."""

    external_id: Number = msgspec.field(name="External id", default=None)
    external_id_old: Number = msgspec.field(name="external id", default=None)
    correlation: Number = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=ABSENT)
    input_dims_old: msgspec.Raw = msgspec.field(name="Input dims", default=ABSENT)
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=ABSENT)
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    sequence_number: Number = msgspec.field(name="Sequence number", default=None)
    fwd_thread: Number = msgspec.field(name="Fwd thread id", default=None)
    device: Number = None
    stream: Number = None
    grid: msgspec.Raw = ABSENT
    block: msgspec.Raw = ABSENT
    registers_per_thread: Number = msgspec.field(name="registers per thread", default=None)
    shared_memory: Number = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: Number = msgspec.field(name="blocks per SM", default=None)
    occupancy: Number = msgspec.field(name="est. achieved occupancy %", default=None)
    memcpy_bytes: Number = msgspec.field(name="bytes", default=None)
    python_id: Number = msgspec.field(name="Python id", default=None)
    python_parent_id: Number = msgspec.field(name="Python parent id", default=None)
    python_module_id: Number = msgspec.field(name="Python module id", default=None)
    addr: Number = msgspec.field(name="Addr", default=None)
    mem_bytes: Number = msgspec.field(name="Bytes", default=None)
    total_allocated: Number = msgspec.field(name="Total Allocated", default=None)
    total_reserved: Number = msgspec.field(name="Total Reserved", default=None)
    device_type: Number = msgspec.field(name="Device Type", default=None)
    device_id: Number = msgspec.field(name="Device Id", default=None)
    name: Number = None  # metadata events: process_name / thread_name
    sort_index: Number = None
    labels: Number = None
    collective_name: Number = msgspec.field(name="Collective name", default=None)
    in_nelems: Number = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Number = msgspec.field(name="Out msg nelems", default=None)
    group_size: Number = msgspec.field(name="Group size", default=None)
    dtype: Number = None
    pg_name: Number = msgspec.field(name="Process Group Name", default=None)
    pg_desc: Number = msgspec.field(name="Process Group Description", default=None)
    pg_ranks: msgspec.Raw = msgspec.field(name="Process Group Ranks", default=ABSENT)
    seq: Number = msgspec.field(name="Seq", default=None)


class Event(msgspec.Struct, gc=False):
    ph: Number = ""
    name: Number = ""
    cat: Number = ""
    pid: Number = 0
    tid: Number = 0
    ts: Number = None
    dur: Number = None
    id: Number = None
    bp: Number = None
    s: Number = None
    args: Args | None = None


_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_ARGS_DECODER = msgspec.json.Decoder(Args)
_EMPTY_ARGS = Args()
_NO_TRIPLE = (NO_ID, NO_ID, NO_ID)
_INSTANT_PHASES = frozenset(("i", "I", "R", "n"))
_DEVICE_KINDS = frozenset((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))
_HOST_KINDS = frozenset((Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY))
_DEVICE_KIND_IDS = np.array(sorted(_DEVICE_KINDS), dtype=np.int8)
_HOST_KIND_IDS = np.array(sorted(_HOST_KINDS), dtype=np.int8)
_SKIPPED_TS = "events without a usable 'ts' were skipped"
_SKIPPED_COUNTERS = "counter events without a usable 'ts' were skipped"
_UNMATCHED_BEGIN = "'B' events without a matching 'E' were skipped"
_TIMED_SIDE_TABLES = ("memory", "flows", "counters", "instants")  # sorted by time, then file order
_ZEROED_DUR = "negative, huge or missing durations were set to 0"
_NON_UTF8 = "pieces of the trace had bytes that are not UTF-8 (shown as \ufffd)"
# Beyond this, times in nanoseconds relative to the trace's start overflow int64 (epoch µs today: 1.8e15).
MAX_ABS_TS_US = 4e15
MAX_DUR_US = 1e15


def _ints(values: list[Any]) -> list[int]:
    return [v if v.__class__ is int else NO_ID if v is None else _as_int(v) for v in values]


def _floats(values: list[Any]) -> list[float]:
    return [v if v.__class__ is float else math.nan if v is None else _as_float(v) for v in values]


_ANY_DECODER = msgspec.json.Decoder()


# ---- value coercion (wrong JSON types end here) ---------------------------------------------
def _as_int(value: Number, default: int = NO_ID) -> int:
    if type(value) is int:
        return value if -(1 << 63) <= value < (1 << 63) else default
    if value is None or isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else default
    try:
        number = float(value)
    except (TypeError, ValueError):
        return default
    if not math.isfinite(number) or abs(number) >= 9.2e18:
        return default
    return int(number)


def _as_float(value: Number) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond any float
        return math.nan


def _usable_ts(ts: Any) -> Any:
    """A start time (float or float array) that is a number and can be placed on the trace's timeline."""
    return np.isfinite(ts) & (np.abs(ts) <= MAX_ABS_TS_US)


def _scalar(value: Any) -> Number:
    """A JSON value where a number or string is expected: containers and booleans become their text."""
    if value is None or (isinstance(value, int | float | str) and not isinstance(value, bool)):
        return value
    return str(value)


def _as_str(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _id_text(value: Number) -> str:
    """pid / tid as text: 25738 and "25738" are the same thread (old traces quote tids)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return _as_str(value)


def _raw_text(raw: msgspec.Raw) -> str:
    """Compact JSON text of a raw value (shapes, type lists): the grouping key of a shape."""
    if not raw:
        return ""
    text = bytes(raw)
    if b" " in text or b"\n" in text:
        try:
            return msgspec.json.encode(msgspec.json.decode(text)).decode()
        except (msgspec.DecodeError, UnicodeDecodeError):  # Raw values are not checked for UTF-8 when read
            return text.decode("utf-8", "replace")
    return text.decode("utf-8", "replace")


def _triple(raw: msgspec.Raw) -> tuple[int, int, int]:
    if not raw:
        return (NO_ID, NO_ID, NO_ID)
    try:
        values = msgspec.json.decode(bytes(raw))
    except (msgspec.DecodeError, UnicodeDecodeError):
        return (NO_ID, NO_ID, NO_ID)
    if not isinstance(values, list):
        return (NO_ID, NO_ID, NO_ID)
    padded = [*[_as_int(v) for v in values[:3]], NO_ID, NO_ID, NO_ID][:3]
    return (padded[0], padded[1], padded[2])


def _lenient_event(item: Any) -> Event | None:
    """Build an Event from an untyped dict, keeping what has a usable type."""
    if not isinstance(item, dict):
        return None
    args = item.get("args")
    typed_args: Args | None = None
    if isinstance(args, dict):
        fields: dict[str, Any] = {}
        for field_name, encoded_name in zip(Args.__struct_fields__, Args.__struct_encode_fields__, strict=True):
            if encoded_name not in args:
                continue
            value = args[encoded_name]
            annotation = Args.__annotations__[field_name]
            if "Raw" in str(annotation):
                fields[field_name] = msgspec.Raw(msgspec.json.encode(value))
            elif field_name == "call_stack":
                fields[field_name] = value if isinstance(value, str) else None
            elif value is None or isinstance(value, int | float | str):
                fields[field_name] = value
        typed_args = Args(**fields)
    scalars = {key: _scalar(item.get(key)) for key in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s")}
    return Event(**scalars, args=typed_args)


def decode_events(piece: bytes) -> tuple[list[Event], int]:
    """The events of a piece, and how many items were not event objects at all."""
    try:
        return _EVENTS_DECODER.decode(piece), 0
    except msgspec.ValidationError:
        items = _ANY_DECODER.decode(piece)
        if not isinstance(items, list):
            raise TraceFormatError("'traceEvents' is not a list") from None
        events = [event for event in map(_lenient_event, items) if event is not None]
        return events, len(items) - len(events)


# ---- building columns ------------------------------------------------------------------------
class TableBuilder:
    """Accumulates decoded event pieces into column lists, then finalises numpy tables."""

    def __init__(self, category_kinds: dict[str, Kind] | None = None) -> None:
        # another format's categories (Paddle's) map to kinds through its own table, keyed lower-case
        self._category_kinds = CATEGORY_KINDS if category_kinds is None else category_kinds
        self.strings = StringTable()
        self.tracks: list[Track] = []
        self._track_ids: dict[tuple[str, str], int] = {}
        self._raw_track_ids: dict[tuple[Number, Number], int] = {}
        self._raw_string_ids: dict[bytes, int] = {}
        self._triples: dict[bytes, tuple[int, int, int]] = {}
        self._category_kind: dict[int, Kind] = {}
        self.warnings: dict[str, int] = {}
        self.lists: dict[str, dict[str, list[Any]]] = {
            name: {column: [] for column in layout} for name, layout in SCHEMA.items()
        }
        # Raw float microsecond times, made relative and integer in finish().
        # Each piece's column lists become numpy chunks right away, so peak memory is the arrays,
        # not millions of Python objects. Times stay float microseconds until finish().
        self._chunks: dict[str, dict[str, list[np.ndarray]]] = {
            name: {column: [] for column in layout} for name, layout in SCHEMA.items()
        }
        self._rows = 0
        self._x_ts: list[np.ndarray] = []
        self._x_dur: list[np.ndarray] = []
        self._x_order: list[np.ndarray] = []  # file order, to break ties when sorting by time
        self._side_order: dict[str, list[np.ndarray]] = {name: [] for name in _TIMED_SIDE_TABLES}
        self._piece = self._piece_rows = 0
        self._times: dict[str, list[float]] = {"memory": [], "flows": [], "counters": [], "instants": []}
        self._time_chunks: dict[str, list[np.ndarray]] = {name: [] for name in self._times}
        self._open_begins: dict[int, list[tuple[float, Event]]] = {}
        self.event_count = 0
        self.non_event_items = 0
        self.native_pieces = 0  # pieces whose complete events the C decoder read
        # (piece, ids before it): which piece first interned each string and track (see FirstSightings)
        self._string_marks: list[tuple[int, int]] = []
        self._track_marks: list[tuple[int, int]] = []
        self._merged: tuple[FirstSightings, FirstSightings] | None = None  # strings, tracks; once a part is merged

    def warn(self, message: str) -> None:
        self.warnings[message] = self.warnings.get(message, 0) + 1

    def track(self, pid: Number, tid: Number) -> int:
        found = self._raw_track_ids.get((pid, tid))
        if found is not None:
            return found
        key = (_id_text(pid), _id_text(tid))
        found = self._track_ids.get(key)
        if found is None:
            found = len(self.tracks)
            self._track_ids[key] = found
            self.tracks.append(Track(pid=key[0], tid=key[1]))
        self._raw_track_ids[(pid, tid)] = found
        return found

    def intern_all(self, values: list[Any]) -> list[int]:
        """String ids of many values at once (a dict lookup each; new strings interned on a miss)."""
        get = self.strings._ids.get
        ids = [get(v) for v in values]
        if None in ids:
            intern = self.strings.intern
            ids = [i if i is not None else intern(_as_str(v)) for i, v in zip(ids, values, strict=True)]
        return ids

    def tracks_of(self, events: list[Event]) -> list[int]:
        get = self._raw_track_ids.get
        ids = [get((e.pid, e.tid)) for e in events]
        if None in ids:
            ids = [i if i is not None else self.track(e.pid, e.tid) for i, e in zip(ids, events, strict=True)]
        return ids

    def raw_string(self, raw: msgspec.Raw) -> int:
        """Intern the compact text of a raw JSON value, caching by its exact bytes."""
        data = bytes(raw)
        found = self._raw_string_ids.get(data)
        if found is None:
            found = self.strings.intern(_raw_text(raw))
            self._raw_string_ids[data] = found
        return found

    def _kind_of(self, category_id: int) -> Kind:
        kind = self._category_kind.get(category_id)
        if kind is None:
            kind = self._category_kinds.get(self.strings[category_id].lower(), Kind.OTHER)
            self._category_kind[category_id] = kind
        return kind

    def add(self, events: list[Event], piece: int = 0) -> None:
        """Add one decoded piece. Work is done per column over the piece, not per event.

        ``piece`` is the piece's position in the file: with the position inside it, it orders events
        that start at the same time and last as long, whichever process decoded them.
        """
        self._start_piece(piece, len(events))
        complete = [e for e in events if e.ph == "X"]
        if len(complete) != len(events):
            self._add_not_complete([e for e in events if e.ph != "X"])
        self._add_complete(complete)
        self._flush()

    def add_native(self, others: list[Event], native: NativePiece, piece: int = 0) -> None:
        """Add a piece whose complete events the C decoder turned into columns (``others``: the rest)."""
        self._start_piece(piece, len(others) + len(native.rows) + len(native.flows) + len(native.memory))
        self.native_pieces += 1
        self._add_not_complete(others, native)
        self._flush_columns()  # events closed by a "B"/"E" pair above come first, as in ``add``
        self._add_native_complete(native)
        self._flush()

    def _start_piece(self, piece: int, event_count: int) -> None:
        self._piece, self._piece_rows = piece, 0
        self.event_count += event_count
        self._string_marks.append((piece, len(self.strings)))
        self._track_marks.append((piece, len(self.tracks)))

    def _add_not_complete(self, others: list[Event], native: NativePiece | None = None) -> None:
        memory = [e for e in others if e.name == "[memory]" and e.ph in _INSTANT_PHASES]
        if memory:
            self._add_memory(memory)
        if native is not None and len(native.memory):
            self._add_native_memory(native)
        flows = [e for e in others if e.ph in FLOW_PHASES]
        if flows:
            self._add_flows(flows)
        if native is not None and len(native.flows):
            self._add_native_flows(native)
        for event in others:
            if event.ph in FLOW_PHASES or (event.name == "[memory]" and event.ph in _INSTANT_PHASES):
                continue
            self._add_other(event)

    def _flush(self) -> None:
        for table_name in _TIMED_SIDE_TABLES:
            added = len(self._times[table_name])
            if added:
                self._side_order[table_name].append(
                    (self._piece << 32) + (1 << 31) + self._piece_rows + np.arange(added, dtype=np.int64)
                )
                self._piece_rows += added
        self._flush_columns()
        for table_name, times in self._times.items():
            if times:
                self._time_chunks[table_name].append(np.asarray(times, dtype=np.float64))
                times.clear()

    def _flush_columns(self) -> None:
        """Turn the column lists gathered so far into numpy chunks (times stay until ``_flush``)."""
        for table_name, layout in SCHEMA.items():
            for column, values in self.lists[table_name].items():
                if values:
                    self._chunks[table_name][column].append(_column(values, layout[column]))
                    values.clear()

    def _add_complete(self, events: list[Event]) -> None:
        if not events:
            return
        ts, dur, events = self._checked_times(events)
        if not events:
            return
        first_row = self._rows
        self._rows += len(events)
        self._x_ts.append(ts)
        self._x_dur.append(dur)
        self._x_order.append((self._piece << 32) + self._piece_rows + np.arange(len(events), dtype=np.int64))
        self._piece_rows += len(events)
        columns = self.lists["events"]
        name_ids = self.intern_all([e.name for e in events])
        category_ids = self.intern_all([e.cat for e in events])
        for category in set(category_ids):
            self._kind_of(category)
        kinds = [self._category_kind[c] for c in category_ids]
        columns["name"].extend(name_ids)
        columns["cat"].extend(category_ids)
        columns["kind"].extend(kinds)
        columns["track"].extend(self.tracks_of(events))
        all_args = [e.args if e.args is not None else _EMPTY_ARGS for e in events]
        external = [a.external_id if a.external_id is not None else a.external_id_old for a in all_args]
        columns["external_id"].extend(_ints(external))
        columns["correlation"].extend(_ints([a.correlation for a in all_args]))

        device = [i for i, k in enumerate(kinds) if k in _DEVICE_KINDS]
        if device:
            self._add_device_args([first_row + i for i in device], [all_args[i] for i in device])
        with_op_args = [
            i
            for i, k in enumerate(kinds)
            if k in _HOST_KINDS
            and (
                all_args[i].input_dims
                or all_args[i].input_dims_old
                or all_args[i].call_stack is not None
                or all_args[i].sequence_number is not None
            )
        ]
        if with_op_args:
            self._add_op_args([first_row + i for i in with_op_args], [all_args[i] for i in with_op_args])
        python = [i for i, k in enumerate(kinds) if k == Kind.PYTHON_FUNCTION]
        if python:
            args = [all_args[i] for i in python]
            table = self.lists["python"]
            table["event"].extend([first_row + i for i in python])
            table["python_id"].extend(_ints([a.python_id for a in args]))
            table["parent_id"].extend(_ints([a.python_parent_id for a in args]))
            table["module_id"].extend(_ints([a.python_module_id for a in args]))
        for i, args in enumerate(all_args):
            if args.collective_name is not None:
                self._add_collective_args(first_row + i, args)

    def _add_native_complete(self, native: NativePiece) -> None:
        """``_add_complete`` for columns the C decoder wrote: same interning order, same rows.

        The decoder left every event with a bad time, an odd type or an out-of-range value to the
        Python parser, so nothing here drops, coerces or warns.
        """
        rows = native.rows
        if not len(rows):
            return
        first_row = self._rows
        self._rows += len(rows)
        self._x_ts.append(np.ascontiguousarray(rows["ts"]))
        self._x_dur.append(np.ascontiguousarray(rows["dur"]))
        self._x_order.append((self._piece << 32) + self._piece_rows + np.arange(len(rows), dtype=np.int64))
        self._piece_rows += len(rows)
        # the local tables list values in order of first appearance: interning them in that order
        # assigns the ids the Python parser would
        name_ids = np.asarray(self.intern_all(native.names), dtype=np.int32)
        category_ids = self.intern_all(native.cats)
        kinds = np.asarray([self._kind_of(c) for c in category_ids], dtype=np.int8)[rows["cat"]]
        track_ids = np.asarray([self.track(pid, tid) for pid, tid in native.tracks], dtype=np.int32)
        events = self._chunks["events"]
        events["name"].append(name_ids[rows["name"]])
        events["cat"].append(np.asarray(category_ids, dtype=np.int32)[rows["cat"]])
        events["kind"].append(kinds)
        events["track"].append(track_ids[rows["track"]])
        events["external_id"].append(np.ascontiguousarray(rows["external_id"]))
        events["correlation"].append(np.ascontiguousarray(rows["correlation"]))
        device = np.flatnonzero(np.isin(kinds, _DEVICE_KIND_IDS))
        if len(device):
            self._add_native_kernels(first_row + device, rows[device], native.raws)
        ops = np.flatnonzero(np.isin(kinds, _HOST_KIND_IDS) & (rows["has_op_args"] != 0))
        if len(ops):
            self._add_native_ops(first_row + ops, rows[ops], native)
        python = np.flatnonzero(kinds == Kind.PYTHON_FUNCTION)
        if len(python):
            table = self._chunks["python"]
            table["event"].append(first_row + python)
            table["python_id"].append(rows["python_id"][python])  # fancy indexing: copies, not views
            table["parent_id"].append(rows["python_parent_id"][python])
            table["module_id"].append(rows["python_module_id"][python])
        for row, args in native.collectives:
            self._add_collective_args(first_row + row, _ARGS_DECODER.decode(args))

    def _add_native_kernels(self, event_rows: np.ndarray, rows: np.ndarray, raws: list[bytes]) -> None:
        # each column is copied out of the structured rows: a view would keep all 168 bytes of a row alive
        kernels = self._chunks["kernels"]
        kernels["event"].append(event_rows)
        for column in ("device", "stream", "registers_per_thread", "shared_memory", "blocks_per_sm", "bytes"):
            kernels[column].append(np.ascontiguousarray(rows[column]))
        kernels["est_occupancy_pct"].append(np.ascontiguousarray(rows["occupancy"]))
        for field in ("grid", "block"):
            local_ids = rows[field]
            # one (x, y, z) per raw value the rows use; the extra last row, NO_ID x 3, is for "absent"
            triples = np.full((len(raws) + 1, 3), NO_ID, dtype=np.int32)
            for local_id in np.unique(local_ids[local_ids >= 0]).tolist():
                triples[local_id] = [_fitting(v, "i4") for v in self.triple(raws[local_id])]
            values = triples[local_ids]
            for axis, suffix in enumerate(("x", "y", "z")):
                kernels[f"{field}_{suffix}"].append(np.ascontiguousarray(values[:, axis]))

    def _add_native_ops(self, event_rows: np.ndarray, rows: np.ndarray, native: NativePiece) -> None:
        ops = self._chunks["ops"]
        ops["event"].append(event_rows)
        raws = [self._raw_string_ids.get(raw, _NOT_INTERNED) for raw in native.raws]
        ops["input_dims"].append(_intern_first_seen(rows["input_dims"], native.raws, self.raw_string, raws))
        ops["input_types"].append(_intern_first_seen(rows["input_types"], native.raws, self.raw_string, raws))
        get = self.strings._ids.get
        stacks = [get(stack, _NOT_INTERNED) if stack else NO_ID for stack in native.call_stacks]
        ops["call_stack"].append(_intern_first_seen(rows["call_stack"], native.call_stacks, self._intern_stack, stacks))
        ops["sequence_number"].append(np.ascontiguousarray(rows["sequence_number"]))
        ops["fwd_thread"].append(np.ascontiguousarray(rows["fwd_thread"]))

    def _intern_stack(self, call_stack: str) -> int:
        return self.strings.intern(call_stack) if call_stack else NO_ID

    def _checked_times(self, events: list[Event]) -> tuple[np.ndarray, np.ndarray, list[Event]]:
        """ts and dur as float arrays; events without a usable ts are dropped, bad durations zeroed."""
        try:
            ts = np.array([e.ts for e in events], dtype=np.float64)
            dur = np.array([e.dur if e.dur is not None else 0.0 for e in events], dtype=np.float64)
        except (TypeError, ValueError):
            ts = np.array([_as_float(e.ts) for e in events], dtype=np.float64)
            dur = np.array([_as_float(e.dur) for e in events], dtype=np.float64)
            dur[np.isnan(dur)] = 0.0
        bad_ts = ~_usable_ts(ts)
        if bad_ts.any():
            self.warnings[_SKIPPED_TS] = self.warnings.get(_SKIPPED_TS, 0) + int(bad_ts.sum())
            keep = np.flatnonzero(~bad_ts)
            events = [events[i] for i in keep]
            ts, dur = ts[keep], dur[keep]
        bad_dur = ~np.isfinite(dur) | (dur < 0) | (dur > MAX_DUR_US)
        if bad_dur.any():
            self.warnings[_ZEROED_DUR] = self.warnings.get(_ZEROED_DUR, 0) + int(bad_dur.sum())
            dur[bad_dur] = 0.0
        return ts, dur, events

    def _add_device_args(self, rows: list[int], args: list[Args]) -> None:
        kernels = self.lists["kernels"]
        kernels["event"].extend(rows)
        kernels["device"].extend(_ints([a.device for a in args]))
        kernels["stream"].extend(_ints([a.stream for a in args]))
        grids = [self.triple(a.grid) for a in args]
        blocks = [self.triple(a.block) for a in args]
        for axis, suffix in enumerate(("x", "y", "z")):
            kernels[f"grid_{suffix}"].extend([g[axis] for g in grids])
            kernels[f"block_{suffix}"].extend([b[axis] for b in blocks])
        kernels["registers_per_thread"].extend(_ints([a.registers_per_thread for a in args]))
        kernels["shared_memory"].extend(_ints([a.shared_memory for a in args]))
        kernels["blocks_per_sm"].extend(_floats([a.blocks_per_sm for a in args]))
        kernels["est_occupancy_pct"].extend(_floats([a.occupancy for a in args]))
        kernels["bytes"].extend(_ints([a.memcpy_bytes for a in args]))

    def triple(self, raw: msgspec.Raw) -> tuple[int, int, int]:
        if not raw:
            return _NO_TRIPLE
        data = bytes(raw)
        found = self._triples.get(data)
        if found is None:
            found = self._triples[data] = _triple(raw)
        return found

    def _add_op_args(self, rows: list[int], args: list[Args]) -> None:
        ops = self.lists["ops"]
        intern, raw_string = self.strings.intern, self.raw_string
        ops["event"].extend(rows)
        dims = [a.input_dims or a.input_dims_old for a in args]
        ops["input_dims"].extend([raw_string(d) if d else NO_ID for d in dims])
        ops["input_types"].extend([raw_string(a.input_type) if a.input_type else NO_ID for a in args])
        ops["call_stack"].extend(
            [intern(a.call_stack) if a.call_stack.__class__ is str and a.call_stack else NO_ID for a in args]
        )
        ops["sequence_number"].extend(_ints([a.sequence_number for a in args]))
        ops["fwd_thread"].extend(_ints([a.fwd_thread for a in args]))

    def _add_collective_args(self, row: int, args: Args) -> None:
        table = self.lists["collectives"]
        intern = self.strings.intern
        table["event"].append(row)
        table["collective_name"].append(intern(_as_str(args.collective_name)))
        table["in_nelems"].append(_as_int(args.in_nelems))
        table["out_nelems"].append(_as_int(args.out_nelems))
        table["group_size"].append(_as_int(args.group_size))
        table["dtype"].append(intern(_as_str(args.dtype)) if args.dtype is not None else NO_ID)
        table["pg_name"].append(intern(_as_str(args.pg_name)) if args.pg_name is not None else NO_ID)
        table["pg_desc"].append(intern(_as_str(args.pg_desc)) if args.pg_desc is not None else NO_ID)
        table["pg_ranks"].append(self.raw_string(args.pg_ranks) if args.pg_ranks else NO_ID)
        table["seq"].append(_as_int(args.seq))

    def _timed(self, events: list[Event], what: str) -> tuple[list[float], list[Event]]:
        times = _floats([e.ts for e in events])
        usable = _usable_ts(np.asarray(times, dtype=np.float64))
        if usable.all():
            return times, events
        kept = [(t, e) for t, e, ok in zip(times, events, usable.tolist(), strict=True) if ok]
        self.warn(f"{what} without a usable 'ts' were skipped")
        return [t for t, _ in kept], [e for _, e in kept]

    def _add_memory(self, events: list[Event]) -> None:
        times, events = self._timed(events, "memory events")
        args = [e.args if e.args is not None else _EMPTY_ARGS for e in events]
        memory = self.lists["memory"]
        self._times["memory"].extend(times)
        memory["ts_ns"].extend([0] * len(events))
        memory["track"].extend(self.tracks_of(events))
        memory["addr"].extend(_ints([a.addr for a in args]))
        memory["bytes"].extend([_as_int(a.mem_bytes, 0) for a in args])  # an unknown size counts as 0 bytes
        memory["total_allocated"].extend(_ints([a.total_allocated for a in args]))
        memory["total_reserved"].extend(_ints([a.total_reserved for a in args]))
        memory["device_type"].extend(_ints([a.device_type for a in args]))
        memory["device_id"].extend(_ints([a.device_id for a in args]))

    def _add_flows(self, events: list[Event]) -> None:
        times, events = self._timed(events, "flow events")
        flows = self.lists["flows"]
        self._times["flows"].extend(times)
        flows["flow_id"].extend(
            [
                i if i.__class__ is int else _string_flow_id(i) if isinstance(i, str) else _as_int(i)
                for i in [e.id for e in events]
            ]
        )
        flows["phase"].extend([FLOW_PHASES[e.ph] for e in events])
        flows["ts_ns"].extend([0] * len(events))
        flows["track"].extend(self.tracks_of(events))
        flows["cat"].extend(self.intern_all([e.cat for e in events]))
        flows["binds_enclosing"].extend([1 if e.bp == "e" else 0 for e in events])

    def _add_native_memory(self, native: NativePiece) -> None:
        """``_add_memory`` for the memory events the C decoder read (odd ones it left to Python)."""
        memory = native.memory
        self._times["memory"].extend(memory["ts"].tolist())
        track_ids = np.asarray([self.track(pid, tid) for pid, tid in native.memory_tracks], dtype=np.int32)
        self._flush_columns()  # this piece's memory rows come after any gathered so far
        table = self._chunks["memory"]
        table["ts_ns"].append(np.zeros(len(memory), dtype=np.int64))
        table["track"].append(track_ids[memory["track"]])
        for column in ("addr", "bytes", "total_allocated", "total_reserved", "device_type", "device_id"):
            table[column].append(np.ascontiguousarray(memory[column]))

    def _add_native_flows(self, native: NativePiece) -> None:
        """``_add_flows`` for the flows the C decoder read (it left those without a usable ts to Python)."""
        flows = native.flows
        self._times["flows"].extend(flows["ts"].tolist())
        track_ids = np.asarray([self.track(pid, tid) for pid, tid in native.flow_tracks], dtype=np.int32)
        category_ids = np.asarray(self.intern_all(native.flow_cats), dtype=np.int32)
        self._flush_columns()  # this piece's flow rows come after any gathered so far
        table = self._chunks["flows"]
        table["flow_id"].append(np.ascontiguousarray(flows["id"]))
        table["phase"].append(np.ascontiguousarray(flows["phase"]))
        table["ts_ns"].append(np.zeros(len(flows), dtype=np.int64))
        table["track"].append(track_ids[flows["track"]])
        table["cat"].append(category_ids[flows["cat"]])
        table["binds_enclosing"].append(np.ascontiguousarray(flows["binds_enclosing"]))

    def _add_other(self, event: Event) -> None:
        phase = event.ph
        if phase == "M":
            self._add_metadata(event)
            return
        if phase == "C":  # counters are decoded separately (their args are free-form)
            return
        ts = _as_float(event.ts)
        if not _usable_ts(ts):
            self.warn(f"'{_as_str(phase)[:8]}' events without a usable 'ts' were skipped")
            return
        if phase in _INSTANT_PHASES:
            self._add_instant(ts, event)
        elif phase == "B":
            self._open_begins.setdefault(self.track(event.pid, event.tid), []).append((ts, event))
        elif phase == "E":
            stack = self._open_begins.get(self.track(event.pid, event.tid))
            if not stack:
                self.warn("'E' events without a matching 'B' were skipped")
                return
            begin_ts, begin = stack.pop()
            begin.ph, begin.ts, begin.dur = "X", begin_ts, ts - begin_ts
            self._add_complete([begin])
        else:
            self.warn(f"events with unknown phase {_as_str(phase)[:8]!r} were skipped")

    def _add_metadata(self, event: Event) -> None:
        args = event.args
        if args is None:
            return
        track = self.tracks[self.track(event.pid, event.tid)]
        if event.name == "process_name":
            track.process_name = _as_str(args.name)
            self._apply_to_process(track.pid, process_name=track.process_name)
        elif event.name == "thread_name":
            track.thread_name = _as_str(args.name)
        elif event.name == "process_sort_index":
            self._apply_to_process(track.pid, process_sort_index=_as_int(args.sort_index, 0))
        elif event.name == "thread_sort_index":
            track.thread_sort_index = _as_int(args.sort_index, 0)
        elif event.name == "process_labels":
            self._apply_to_process(track.pid, process_labels=_as_str(args.labels))

    def _apply_to_process(self, pid: str, **values: Any) -> None:
        self._process_meta = getattr(self, "_process_meta", {})
        self._process_meta.setdefault(pid, {}).update(values)

    def _add_instant(self, ts: float, event: Event) -> None:
        instants = self.lists["instants"]
        self._times["instants"].append(ts)
        instants["ts_ns"].append(0)
        instants["track"].append(self.track(event.pid, event.tid))
        instants["name"].append(self.strings.intern(_as_str(event.name)))
        instants["cat"].append(self.strings.intern(_as_str(event.cat)))

    def add_counters(self, items: Iterable[Any]) -> None:
        counters = self.lists["counters"]
        for item in items:
            if not isinstance(item, dict) or item.get("ph") != "C" or not isinstance(item.get("args"), dict):
                continue
            ts = _as_float(item.get("ts"))
            if not _usable_ts(ts):
                self.warn(_SKIPPED_COUNTERS)
                continue
            track = self.track(_scalar(item.get("pid")), _scalar(item.get("tid")))
            name = self.strings.intern(_as_str(item.get("name")))
            for series, value in item["args"].items():
                number = _as_float(value)
                if not math.isfinite(number):
                    continue
                self._times["counters"].append(ts)
                counters["ts_ns"].append(0)
                counters["track"].append(track)
                counters["name"].append(name)
                counters["series"].append(self.strings.intern(_as_str(series)))
                counters["value"].append(number)
        self._flush()

    # ---- two builders, one trace ------------------------------------------------------------
    def partial(self) -> dict[str, Any]:
        """Everything this builder gathered, unfinished, to be merged into another (picklable)."""
        self._flush()
        return {
            "chunks": self._chunks,
            "x_ts": self._x_ts,
            "x_dur": self._x_dur,
            "x_order": self._x_order,
            "side_order": self._side_order,
            "time_chunks": self._time_chunks,
            "rows": self._rows,
            "strings": self.strings.strings,
            "string_pieces": first_pieces(self._string_marks, len(self.strings)),
            "tracks": self.tracks,
            "track_pieces": first_pieces(self._track_marks, len(self.tracks)),
            "process_meta": getattr(self, "_process_meta", {}),
            "warnings": self.warnings,
            "event_count": self.event_count,
            "non_event_items": self.non_event_items,
            "native_pieces": self.native_pieces,
            "open_begins": sum(len(stack) for stack in self._open_begins.values()),
        }

    def merge(self, part: dict[str, Any]) -> None:
        """Append another builder's rows after this one's, renumbering its strings, tracks and rows (``part`` is
        emptied)."""
        self._flush()
        if self._merged is None:  # where this builder's own strings and tracks were first seen, before theirs join
            self._merged = (
                FirstSightings(first_pieces(self._string_marks, len(self.strings))),
                FirstSightings(first_pieces(self._track_marks, len(self.tracks))),
            )
        string_map = np.asarray(self.intern_all(part["strings"]), dtype=np.int64)
        track_map = np.asarray([self.track(t.pid, t.tid) for t in part["tracks"]], dtype=np.int64)
        strings_seen, tracks_seen = self._merged
        strings_seen.add(string_map, part["string_pieces"], len(self.strings))
        tracks_seen.add(track_map, part["track_pieces"], len(self.tracks))
        for theirs, ours in zip(part["tracks"], track_map.tolist(), strict=True):
            track = self.tracks[ours]
            track.thread_name = track.thread_name or theirs.thread_name
            if track.thread_sort_index is None:
                track.thread_sort_index = theirs.thread_sort_index
        for pid, values in part["process_meta"].items():
            self._apply_to_process(pid, **values)
        row_offset = self._rows
        for table_name, columns in part["chunks"].items():
            for column, chunks in columns.items():
                for chunk in chunks:
                    if column in STRING_COLUMNS.get(table_name, ()):
                        chunk = np.where(chunk >= 0, string_map[np.maximum(chunk, 0)], chunk)
                    elif column == "track" and table_name in TRACK_TABLES:
                        chunk = track_map[chunk]
                    elif column == "event" and table_name in EVENT_ROW_TABLES:
                        chunk = chunk + row_offset
                    self._chunks[table_name][column].append(chunk.astype(SCHEMA[table_name][column], copy=False))
        self._x_ts.extend(part["x_ts"])
        self._x_dur.extend(part["x_dur"])
        self._x_order.extend(part["x_order"])
        for table_name, chunks in part["side_order"].items():
            self._side_order[table_name].extend(chunks)
        for table_name, chunks in part["time_chunks"].items():
            self._time_chunks[table_name].extend(chunks)
        self._rows += part["rows"]
        self.event_count += part["event_count"]
        self.non_event_items += part["non_event_items"]
        self.native_pieces += part["native_pieces"]
        for message, count in part["warnings"].items():
            self.warnings[message] = self.warnings.get(message, 0) + count
        if part["open_begins"]:
            self.warnings[_UNMATCHED_BEGIN] = self.warnings.get(_UNMATCHED_BEGIN, 0) + part["open_begins"]
        part.clear()  # its chunks are this builder's now: held here alone, each freed as the finish joins it

    # ---- finishing -------------------------------------------------------------------------
    def finish(self, top_level: dict[str, Any], threads: int = 1) -> TraceTables:
        """The tables, sorted and renumbered; ``threads``: how many threads join, renumber and reorder the
        columns (numpy's copies and gathers release the GIL: with two, the core the decoding helper used while
        the file was read does half of this last, otherwise serial, part of the parse)."""
        for stack in self._open_begins.values():
            if stack:
                self.warn(_UNMATCHED_BEGIN)
        self._flush()
        x_ts = _concatenate(self._x_ts, "f8")
        threads = threads if len(x_ts) >= THREADED_FINISH_ROWS else 1
        times = {name: _concatenate(chunks, "f8") for name, chunks in self._time_chunks.items()}
        nonempty = [c for c in ([x_ts] if len(x_ts) else times.values()) if len(c)]
        origin_us = float(min(c.min() for c in nonempty)) if nonempty else 0.0
        del nonempty

        def to_ns(values: np.ndarray) -> np.ndarray:
            """Microseconds (a joined column of this finish's own, overwritten) since the origin as integer
            nanoseconds."""
            return _us_to_ns_in_place(np.subtract(values, origin_us, out=values))

        # each float column dropped once converted
        ts_ns = {name: to_ns(values) for name, values in times.items()}
        del times
        ts_ns["events"] = to_ns(x_ts)
        del x_ts
        dur_ns = _us_to_ns_in_place(_concatenate(self._x_dur, "f8"))  # the joined chunks' own array

        # each column's chunks are dropped once joined, and their heap pages handed back as they go (the pieces'
        # chunks, under the mapping threshold, leave holes in the heap that only a trim returns)
        columns: dict[str, dict[str, np.ndarray]] = {table_name: {} for table_name in SCHEMA}

        def join(key: tuple[str, str]) -> np.ndarray:
            values = _concatenate(self._chunks[key[0]].pop(key[1]), SCHEMA[key[0]][key[1]])
            trim_freed_heap()
            return values

        keys = [(table_name, column) for table_name, layout in SCHEMA.items() for column in layout]
        joined = _each_on(threads, join, keys)
        for (table_name, column), values in joined:
            columns[table_name][column] = values
        del joined
        self._chunks.clear()
        release_freed_memory()
        if self._merged is not None:
            self._renumber_as_one_process(columns, *self._merged, threads=threads)
        events = columns["events"]
        for table_name, values in ts_ns.items():
            columns[table_name]["ts_ns"] = values
        del ts_ns
        events["dur_ns"] = dur_ns
        del dur_ns
        _sort_events(columns, _concatenate(self._x_order, "i8"), threads)
        for table_name in _TIMED_SIDE_TABLES:
            table = columns[table_name]
            order = time_order(table["ts_ns"], _concatenate(self._side_order[table_name], "i8"))
            _gather_rows(table, order, threads)
        for pid, values in getattr(self, "_process_meta", {}).items():
            for track in self.tracks:
                if track.pid == pid:
                    for key, value in values.items():
                        setattr(track, key, value)
        _legacy_autograd_ops(events, self.strings, self.tracks)
        meta = _meta_from_top_level(top_level)
        meta.update(
            origin_us=origin_us,
            parser_version=PARSER_VERSION,
            event_count=self.event_count,
            warnings=[{"message": m, "count": c} for m, c in sorted(self.warnings.items())],
        )
        return TraceTables(columns=columns, strings=self.strings, tracks=self.tracks, meta=meta)

    def _renumber_as_one_process(
        self,
        columns: dict[str, dict[str, np.ndarray]],
        strings: FirstSightings,
        tracks: FirstSightings,
        threads: int = 1,
    ) -> None:
        """String and track ids in the order one process reading every piece would have given them, whichever
        process decoded which piece: the cached results of a file do not depend on how its parse was shared."""
        string_order, new_string = strings.order(len(self.strings))
        track_order, new_track = tracks.order(len(self.tracks))
        # one gather per column: the id tables end with NO_ID, which is where an absent id (-1) points
        string_ids = np.append(new_string, NO_ID).astype(np.int32)
        track_ids = np.append(new_track, NO_ID).astype(np.int32)
        targets = [(t, c, string_ids) for t, names in STRING_COLUMNS.items() for c in names]
        targets += [(t, "track", track_ids) for t in TRACK_TABLES]

        def renumber(target: tuple[str, str, np.ndarray]) -> np.ndarray:
            # in place: each id column is its own array, joined from its chunks; "wrap" maps an absent id (-1) to
            # the last entry, as indexing does, without the copy into a buffer that "raise" makes
            table_name, column, new_ids = target
            ids = columns[table_name][column]
            if _owns_memory(ids) and ids.dtype == new_ids.dtype:
                return np.take(new_ids, ids, out=ids, mode="wrap")
            return new_ids[ids]

        for (table_name, column, _), values in _each_on(threads, renumber, targets):
            columns[table_name][column] = values
        self.strings = StringTable([self.strings.strings[i] for i in string_order.tolist()])
        self.tracks = [self.tracks[i] for i in track_order.tolist()]


def first_pieces(marks: list[tuple[int, int]], count: int) -> np.ndarray:
    """The piece that first interned each of ``count`` ids, from (piece, ids interned before it) marks in the
    order the pieces were added; -1 for ids interned before the first piece."""
    pieces = np.full(count, -1, dtype=np.int64)
    for (piece, start), (_, end) in zip(marks, [*marks[1:], (0, count)], strict=True):
        pieces[start:end] = piece
    return pieces


class FirstSightings:
    """Where each id of a builder's table (strings or tracks) was first seen, over the builders merged into it.

    One process reading a trace interns a string (or a track) when it first meets it: ids follow the pieces
    in file order, and within a piece the order the builder meets values in. Shared between processes, each
    interns in the order of the pieces it got, and the merge appends the others' after its own. The key
    (first piece, process, that process's id) sorts them back into the one-process order: a piece was read
    by one process, whose ids keep the order of the values new in it, and the values that are new in the
    whole trace there are new in that process too. Ids beyond the known (interned after the merge) follow, in
    their order."""

    LATER = np.iinfo(np.int64).max

    def __init__(self, pieces: np.ndarray) -> None:
        self.piece = pieces
        self.process = np.zeros(len(pieces), dtype=np.int64)
        self.local = np.arange(len(pieces), dtype=np.int64)
        self.processes = 1

    def add(self, mapping: np.ndarray, their_pieces: np.ndarray, total: int) -> None:
        """Another builder's ids, merged as ``mapping`` (theirs -> ours); ``total``: our ids now."""
        self._grow(total)
        earlier = their_pieces < self.piece[mapping]
        ours = mapping[earlier]
        self.piece[ours] = their_pieces[earlier]
        self.process[ours] = self.processes
        self.local[ours] = np.flatnonzero(earlier)
        self.processes += 1

    def order(self, total: int) -> tuple[np.ndarray, np.ndarray]:
        """(old id of each new id, new id of each old id)."""
        self._grow(total)
        old_of_new = np.lexsort((self.local, self.process, self.piece))
        new_of_old = np.empty_like(old_of_new)
        new_of_old[old_of_new] = np.arange(len(old_of_new))
        return old_of_new, new_of_old

    def _grow(self, total: int) -> None:
        known = len(self.piece)
        if total > known:
            self.piece = np.concatenate([self.piece, np.full(total - known, self.LATER, dtype=np.int64)])
            self.process = np.concatenate([self.process, np.zeros(total - known, dtype=np.int64)])
            self.local = np.concatenate([self.local, np.arange(known, total, dtype=np.int64)])


LEGACY_AUTOGRAD_PID = "CPU functions"


def _legacy_autograd_ops(events: dict[str, np.ndarray], strings: StringTable, tracks: list[Track]) -> None:
    """Uncategorised slices of the legacy ``torch.autograd.profiler`` file are host operators.

    ``EventList.export_chrome_trace`` writes a bare array of ``X`` events with no ``cat``, all under
    ``pid: "CPU functions"`` (operators and ``record_function`` ranges alike, which it does not
    tell apart); without this every event would count as "other".
    """
    # one more slot, False, for events without a track (NO_ID indexes the last one)
    legacy_tracks = np.array([t.pid == LEGACY_AUTOGRAD_PID for t in tracks] + [False], dtype=bool)
    if not legacy_tracks.any():
        return
    no_category = np.asarray(events["cat"]) == strings.lookup("")
    legacy = no_category & legacy_tracks[np.asarray(events["track"])] & (np.asarray(events["kind"]) == Kind.OTHER)
    events["kind"][legacy] = Kind.CPU_OP


def _us_to_ns_in_place(microseconds: np.ndarray) -> np.ndarray:
    """Float microseconds (an array of the caller's own, overwritten) as integer nanoseconds: scaled and rounded in
    place, so a 1 GB trace's ~30 MB columns of times make no further float temporaries."""
    microseconds *= 1000.0
    return np.rint(microseconds, out=microseconds).astype(np.int64)


def _concatenate(chunks: list[np.ndarray], dtype: str) -> np.ndarray:
    """The chunks joined as one column of ``dtype``. The list is emptied: each chunk is freed once joined, not
    held by the builder to the end of the finish (a 1 GB trace's times, durations and file order: ~100 MB)."""
    taken = chunks[:]
    chunks.clear()
    return np.concatenate(taken).astype(dtype, copy=False) if taken else np.zeros(0, dtype=dtype)


def _column(values: list[Any], dtype: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=dtype)
    except OverflowError:  # an integer beyond the column's width (a 2**40 device, a 300 device type): unknown
        if np.dtype(dtype).kind == "f":
            return np.asarray([_as_float(v) for v in values], dtype=dtype)
        return np.asarray([_fitting(_as_int(v), dtype) for v in values], dtype=dtype)


def _fitting(value: int, dtype: str) -> int:
    """``value``, or NO_ID if an integer column of ``dtype`` cannot hold it."""
    low, high = _integer_range(dtype)
    return value if low <= value <= high else NO_ID


@cache
def _integer_range(dtype: str) -> tuple[int, int]:
    limits = np.iinfo(dtype)
    return int(limits.min), int(limits.max)


_NOT_INTERNED = -2


def _intern_first_seen(
    local_ids: np.ndarray, values: list[Any], intern: Callable[[Any], int], known: list[int]
) -> np.ndarray:
    """Global ids of per-piece local ids (NO_ID stays), interning values in order of first use.

    ``known``: each value's global id if it has one already, else ``_NOT_INTERNED``. Past the first pieces
    every value used is known: then no order matters, and no sort of the ids finds their first uses."""
    ids = np.asarray([*known, NO_ID], dtype=np.int64)[local_ids]  # the last entry answers NO_ID
    if not (ids == _NOT_INTERNED).any():
        return ids
    present = local_ids[local_ids >= 0]
    unique, first_use = np.unique(present, return_index=True)
    mapping = np.full(len(values) + 1, NO_ID, dtype=np.int64)  # the last entry answers NO_ID
    for local_id in unique[np.argsort(first_use)].tolist():
        mapping[local_id] = intern(values[local_id])
    return mapping[local_ids]


def _string_flow_id(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        value = None
    if value is not None and -(1 << 63) <= value < (1 << 63):
        return value
    # a digest, not hash(): the same in every process (pieces of one trace are decoded in two)
    return int.from_bytes(hashlib.blake2b(text.encode(errors="replace"), digest_size=8).digest(), "little") >> 1


def time_order(ts: np.ndarray, *tie_keys: np.ndarray, longest_first: np.ndarray | None = None) -> np.ndarray:
    """``np.lexsort((*tie_keys, ts))``, 4-5x faster on traces: a stable sort by time alone (traces are
    nearly in time order already), then ``lexsort`` of only the rows whose time is not unique.
    ``longest_first``: durations, the last tie key but descending (``-longest_first``), negated on the tied rows
    alone."""
    order = np.argsort(ts, kind="stable")
    sorted_ts = ts[order]
    tie = sorted_ts[1:] == sorted_ts[:-1]
    del sorted_ts
    if not tie.any():
        return order
    if longest_first is not None:
        tie_keys = (*tie_keys, longest_first)
    tied = np.zeros(len(ts), dtype=bool)
    tied[1:] = tie
    tied[:-1] |= tie
    positions = np.flatnonzero(tied)  # runs of rows sharing a time, one after the other
    run_starts = ~np.concatenate(([False], tie))[positions]  # a tied row not tied to the row before
    group = np.cumsum(run_starts)  # the run each tied row is in, counted among the tied rows only
    rows = order[positions]  # in row order within each run (the sort was stable), as lexsort leaves ties
    keys = [key[rows] for key in tie_keys]
    if longest_first is not None:
        np.negative(keys[-1], out=keys[-1])
    order[positions] = rows[np.lexsort((*keys, group))]
    return order


def _sort_events(columns: dict[str, dict[str, np.ndarray]], file_order: np.ndarray, threads: int = 1) -> None:
    """Sort events by (start, longest first, file order) and re-point the side tables at the new rows."""
    events = columns["events"]
    order = time_order(events["ts_ns"], file_order, longest_first=events["dur_ns"])
    del file_order  # the caller's temporary: gone before the columns are reordered
    trim_freed_heap()  # the sort's temporaries, freed into the heap: its pages go back before the gathers
    _gather_rows(events, order, threads)
    new_row = np.empty_like(order, dtype=np.int32)
    new_row[order] = np.arange(len(order), dtype=np.int32)
    del order
    for table_name in ("kernels", "ops", "python", "collectives"):
        table = columns[table_name]
        if len(table["event"]):
            table["event"] = new_row[table["event"]]
            _gather_rows(table, np.argsort(table["event"], kind="stable"), threads)
    trim_freed_heap()


def _gather_rows(table: dict[str, np.ndarray], order: np.ndarray, threads: int) -> None:
    """Every column of ``table`` reordered by ``order``, column after column into the memory of the one before of
    the same type (``np.take`` into it): one new array per type and thread instead of one per column, so the
    table is not held twice and the kernel zeroes a few columns' pages, not all of them (a 1 GB trace's events
    table is ~200 MB)."""
    by_type: dict[str, list[str]] = {}
    for column, values in table.items():
        by_type.setdefault(values.dtype.str, []).append(column)
    shares = [names[part::threads] for names in by_type.values() for part in range(min(threads, len(names)))]

    def reorder(share: list[str]) -> None:
        spare: np.ndarray | None = None
        for column in share:
            values = table[column]
            if spare is None or spare.shape != order.shape:
                spare = np.empty(len(order), dtype=values.dtype)
            np.take(values, order, out=spare, mode="clip")  # indices are valid: "raise" would copy into a buffer
            table[column] = spare
            # reused only when nothing else holds it (``values`` and getrefcount's argument) and it owns its memory
            spare = values if _owns_memory(values) and sys.getrefcount(values) == 2 else None

    _each_on(threads, reorder, shares)


def _owns_memory(values: np.ndarray) -> bool:
    """An array whose memory is its own, writable and contiguous (a column the parse made): safe to write over."""
    return values.base is None and values.flags.writeable and values.flags.c_contiguous


def _each_on(threads: int, function: Callable[[Any], Any], items: list[Any]) -> list[tuple[Any, Any]]:
    """``(item, function(item))`` for each item, on ``threads`` threads; ``function`` must spend its time in
    numpy calls that release the GIL (copies, gathers, sorts) for a second thread to help."""
    if threads <= 1 or len(items) < 2:
        return [(item, function(item)) for item in items]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="profscope-finish") as pool:
        return list(zip(items, pool.map(function, items), strict=True))


_META_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "Framework",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(1 << 63) <= value < (1 << 63)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | float | bool) or _is_int(value)


# deviceProperties fields the views compute with: integers, or left out
_DEVICE_NUMBERS = frozenset(
    (
        "id", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock", "maxThreadsPerMultiprocessor",
        "regsPerBlock", "regsPerMultiprocessor", "warpSize", "sharedMemPerBlock", "sharedMemPerMultiprocessor",
        "numSms", "sharedMemPerBlockOptin",
    )
)  # fmt: skip


def _device_property(key: str, value: Any) -> bool:
    if key in _DEVICE_NUMBERS:
        return _is_int(value)
    return isinstance(value, str) if key == "name" else _is_scalar(value)


def _device_properties(value: Any) -> list[dict[str, Any]]:
    """``deviceProperties``: objects of plain values, integers where the views compute (ids, capabilities)."""
    if not isinstance(value, list):
        return []
    return [
        {key: item for key, item in device.items() if _device_property(key, item)}
        for device in value
        if isinstance(device, dict)
    ]


def _distributed_info(value: Any) -> dict[str, Any] | None:
    """``distributedInfo``: rank and world size as integers, process groups as objects with integer ranks."""
    if not isinstance(value, dict):
        return None
    info = {key: item for key, item in value.items() if _is_scalar(item) and key != "pg_config"}
    for key in ("rank", "world_size"):
        if key in info and not _is_int(info[key]):
            del info[key]
    groups = value.get("pg_config")
    if isinstance(groups, list):
        info["pg_config"] = [
            {
                **{key: item for key, item in group.items() if _is_scalar(item)},
                "ranks": group["ranks"]
                if isinstance(group.get("ranks"), list) and all(map(_is_int, group["ranks"]))
                else None,
            }
            for group in groups
            if isinstance(group, dict)
        ]
    return info


def _meta_from_top_level(top_level: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {key: top_level[key] for key in _META_KEYS if key in top_level}
    meta["deviceProperties"] = _device_properties(meta.get("deviceProperties"))
    meta["distributedInfo"] = _distributed_info(meta.get("distributedInfo"))
    if meta["distributedInfo"] is None:
        del meta["distributedInfo"]
    meta["other"] = {
        key: value
        for key, value in top_level.items()
        if key not in _META_KEYS and key != "traceEvents" and isinstance(value, str | int | float | bool)
    }
    return meta


def parse_trace(
    raw: IO[bytes],
    on_progress: Callable[[int], None] | None = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    use_second_core: bool = True,
    native: bool = True,
) -> TraceTables:
    """Parse a (possibly gzipped) Chrome trace stream into tables.

    ``on_progress`` receives the number of bytes read from ``raw`` so far (compressed bytes for a
    gzip file), which is what a progress bar over the file size needs. A big trace is decoded on two
    cores: a second process builds the tables of most pieces, merged at the end. With ``native``
    (and the extension built) complete events are decoded by the C decoder; without, all in Python.

    If a piece the second process took turns out cut wrongly, a seekable ``raw`` is read again on one
    core; any other stream raises ``SpeculationFailed`` and the caller opens it again (``use_second_core=False``).
    """
    start = raw.tell() if use_second_core and raw.seekable() else None
    try:
        return _parse_trace(raw, on_progress, max_trace_bytes, use_second_core, native)
    except SpeculationFailed:
        if start is None:
            raise
        raw.seek(start)
        return _parse_trace(raw, on_progress, max_trace_bytes, False, native)


def _parse_trace(
    raw: IO[bytes],
    on_progress: Callable[[int], None] | None,
    max_trace_bytes: int,
    use_second_core: bool,
    native: bool,
) -> TraceTables:
    router = PieceRouter(enabled=use_second_core, decoder=KINETO_PIECES, native=native)
    router.start_early()  # before the inflating thread exists
    try:
        stream = open_decompressed(CountingReader(raw, on_progress))
    except BaseException:
        router.close()
        raise
    reader = ChromeTraceReader(stream, limit_bytes=max_trace_bytes)
    builder = TableBuilder()
    try:
        with collection_paused():  # the parse allocates millions of short-lived objects and no cycles
            try:
                with read_buffers_from_heap():
                    for piece, decoded in reader.pieces(router.route, router.route_here):
                        if decoded is not None:
                            add_decoded(builder, decoded, piece)
            except (TraceFormatError, msgspec.DecodeError, UnicodeDecodeError):
                router.check_speculation()  # a wrong cut sent to the helper may be the real cause: then read again
                raise
            for part in router.finish():
                builder.merge(part)
    except TraceFormatError:
        raise
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"malformed JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"a string of the trace is not valid UTF-8: {exc}") from exc
    finally:
        router.close()
        stream.close()  # stops the inflating thread of a parse given up half-way
    if builder.event_count == 0 and builder.non_event_items:
        raise TraceFormatError(
            f"a JSON list of {builder.non_event_items:,} rows that are not trace events (this looks like "
            "torch.profiler's export_memory_timeline output, a memory timeline, not a Chrome trace)"
        )
    if builder.event_count == 0:
        raise TraceFormatError("the trace has no events")
    if builder.non_event_items:
        builder.warn(f"{builder.non_event_items} items of the event list are not objects and were skipped")
    if reader.non_utf8_pieces + router.non_utf8_pieces:
        builder.warnings[_NON_UTF8] = reader.non_utf8_pieces + router.non_utf8_pieces
    tables = builder.finish(reader.top_level, threads=2 if use_second_core and (os.cpu_count() or 1) > 1 else 1)
    if tables.row_count("events") == 0 and tables.row_count("memory") == 0:
        raise TraceFormatError(_no_usable_event(builder.event_count, tables.meta["warnings"]))
    tables.meta["pieces"] = {
        "total": router.pieces,
        "decoded_by_second_process": router.sent,
        "decoded_natively": builder.native_pieces,
    }
    tables.meta["decoder"] = "native" if builder.native_pieces else "python"
    return tables


def _no_usable_event(event_count: int, warnings: list[dict[str, Any]]) -> str:
    """Why a well-formed file gave nothing to show: it is an error of the file, not an empty worker."""
    reasons = "; ".join(f"{w['message']} ({w['count']:,})" for w in warnings)
    return (
        f"no usable event: {event_count:,} trace events were read, but none is a timed slice (ph X, or B/E pairs, "
        "with a numeric ts) or a [memory] record" + (f" — {reasons}" if reasons else "")
    )


DecodedPiece = tuple[list[Event], list[Any] | None, int, NativePiece | None]


def add_decoded(builder: TableBuilder, decoded: DecodedPiece, piece: int) -> None:
    events, counters, not_events, native = decoded
    if native is None:
        builder.add(events, piece)
    else:
        builder.add_native(events, native, piece)
    builder.non_event_items += not_events
    if counters:
        builder.add_counters(counters)


def decode_piece(piece: bytes | memoryview, native: bool = True) -> DecodedPiece:
    """A piece's events: complete events as columns by the C decoder when it can, the rest as ``Event``s."""
    columns = native_events.decode(piece) if native else None
    if columns is not None:
        try:
            others = _EVENTS_DECODER.decode(columns.others) if columns.other_count else []
        except msgspec.ValidationError:
            columns = None  # an odd type among the other events: the Python parser takes the whole piece
        else:
            return others, _counters(columns.others), 0, columns
    piece = bytes(piece)  # the Python parser's Raw fields point into what it decodes: not a reused buffer
    events, not_events = decode_events(piece)
    return events, _counters(piece), not_events, None


def _counters(piece: bytes) -> list[Any] | None:
    """The counter events ("C") of a piece, as plain dicts: their args are free-form."""
    if b'"C"' not in piece:
        return None
    return [item for item in _ANY_DECODER.decode(piece) if isinstance(item, dict) and item.get("ph") == "C"]


KINETO_PIECES = PieceDecoder(decode=decode_piece, new_builder=TableBuilder, add=add_decoded)


def parse_trace_file(path: Path, **kwargs: Any) -> TraceTables:
    with open(path, "rb") as raw:
        return parse_trace(raw, **kwargs)
