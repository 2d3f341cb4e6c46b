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

import gc
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import msgspec
import numpy as np

from profscope.ingest.json_stream import ChromeTraceReader, CountingReader, TraceFormatError, open_decompressed
from profscope.tables import FLOW_PHASES, NO_ID, SCHEMA, Kind, StringTable, TraceTables, Track

PARSER_VERSION = 1
DEFAULT_MAX_TRACE_BYTES = 64 << 30

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


def category_kind(category: str) -> Kind:
    return CATEGORY_KINDS.get(category.lower(), Kind.OTHER)


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
_EMPTY_ARGS = Args()
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
    except (TypeError, ValueError):
        return math.nan


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
        except msgspec.DecodeError:
            return text.decode("utf-8", "replace")
    return text.decode("utf-8", "replace")


def _triple(raw: msgspec.Raw) -> tuple[int, int, int]:
    if not raw:
        return (NO_ID, NO_ID, NO_ID)
    try:
        values = msgspec.json.decode(bytes(raw))
    except msgspec.DecodeError:
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
    scalars = {}
    for key in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "s"):
        value = item.get(key)
        scalars[key] = value if value is None or isinstance(value, int | float | str) else str(value)
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

    def __init__(self) -> None:
        self.strings = StringTable()
        self.tracks: list[Track] = []
        self._track_ids: dict[tuple[str, str], int] = {}
        self._raw_track_ids: dict[tuple[Number, Number], int] = {}
        self._raw_string_ids: dict[bytes, int] = {}
        self._category_kind: dict[int, Kind] = {}
        self.warnings: dict[str, int] = {}
        self.lists: dict[str, dict[str, list[Any]]] = {
            name: {column: [] for column in layout} for name, layout in SCHEMA.items()
        }
        # Raw float microsecond times, made relative and integer in finish().
        self._x_ts: list[float] = []
        self._x_dur: list[float] = []
        self._times: dict[str, list[float]] = {"memory": [], "flows": [], "counters": [], "instants": []}
        self._open_begins: dict[int, list[tuple[float, Event]]] = {}
        self.event_count = 0
        self.non_event_items = 0

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
            kind = category_kind(self.strings[category_id])
            self._category_kind[category_id] = kind
        return kind

    def add(self, events: list[Event]) -> None:
        self.event_count += len(events)
        complete = [e for e in events if e.ph == "X"]
        if len(complete) != len(events):
            for event in events:
                if event.ph != "X":
                    self._add_other(event)
        self._add_complete(complete)

    def _add_complete(self, events: list[Event]) -> None:
        if not events:
            return
        intern = self.strings.intern
        try:
            ts = np.array([e.ts for e in events], dtype=np.float64)
            dur = np.array([e.dur if e.dur is not None else 0.0 for e in events], dtype=np.float64)
        except (TypeError, ValueError):
            ts = np.array([_as_float(e.ts) for e in events], dtype=np.float64)
            dur = np.array([_as_float(e.dur) for e in events], dtype=np.float64)
            dur[np.isnan(dur)] = 0.0
        bad_ts = ~np.isfinite(ts) | (np.abs(ts) > 1e17)
        if bad_ts.any():
            self.warnings["events without a usable 'ts' were skipped"] = self.warnings.get(
                "events without a usable 'ts' were skipped", 0
            ) + int(bad_ts.sum())
            keep = np.flatnonzero(~bad_ts)
            events = [events[i] for i in keep]
            ts, dur = ts[keep], dur[keep]
        bad_dur = ~np.isfinite(dur) | (dur < 0) | (dur > 1e15)
        if bad_dur.any():
            self.warnings["negative, huge or missing durations were set to 0"] = self.warnings.get(
                "negative, huge or missing durations were set to 0", 0
            ) + int(bad_dur.sum())
            dur[bad_dur] = 0.0
        if not events:
            return
        first_row = len(self._x_ts)
        self._x_ts.extend(ts.tolist())
        self._x_dur.extend(dur.tolist())
        columns = self.lists["events"]
        names = [e.name if isinstance(e.name, str) else _as_str(e.name) for e in events]
        categories = [e.cat if isinstance(e.cat, str) else _as_str(e.cat) for e in events]
        name_ids = [intern(n) for n in names]
        category_ids = [intern(c) for c in categories]
        kinds = [self._kind_of(c) for c in category_ids]
        columns["name"].extend(name_ids)
        columns["cat"].extend(category_ids)
        columns["kind"].extend(int(k) for k in kinds)
        columns["track"].extend(self.track(e.pid, e.tid) for e in events)
        external_ids = columns["external_id"]
        correlations = columns["correlation"]
        for offset, event in enumerate(events):
            args = event.args if event.args is not None else _EMPTY_ARGS
            external = args.external_id if args.external_id is not None else args.external_id_old
            external_ids.append(_as_int(external) if type(external) is not int else external)
            correlation = args.correlation
            correlations.append(_as_int(correlation) if type(correlation) is not int else correlation)
            kind = kinds[offset]
            row = first_row + offset
            if kind in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET):
                self._add_device_args(row, args)
            elif (kind in (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_LEGACY)) and (
                args.input_dims
                or args.input_dims_old
                or args.call_stack is not None
                or args.sequence_number is not None
            ):
                self._add_op_args(row, args)
            elif kind == Kind.PYTHON_FUNCTION:
                python = self.lists["python"]
                python["event"].append(row)
                python["python_id"].append(_as_int(args.python_id))
                python["parent_id"].append(_as_int(args.python_parent_id))
                python["module_id"].append(_as_int(args.python_module_id))
            if args.collective_name is not None:
                self._add_collective_args(row, args)

    def _add_device_args(self, row: int, args: Args) -> None:
        kernels = self.lists["kernels"]
        kernels["event"].append(row)
        kernels["device"].append(_as_int(args.device))
        kernels["stream"].append(_as_int(args.stream))
        grid = _triple(args.grid)
        block = _triple(args.block)
        kernels["grid_x"].append(grid[0])
        kernels["grid_y"].append(grid[1])
        kernels["grid_z"].append(grid[2])
        kernels["block_x"].append(block[0])
        kernels["block_y"].append(block[1])
        kernels["block_z"].append(block[2])
        kernels["registers_per_thread"].append(_as_int(args.registers_per_thread))
        kernels["shared_memory"].append(_as_int(args.shared_memory))
        kernels["blocks_per_sm"].append(_as_float(args.blocks_per_sm))
        kernels["est_occupancy_pct"].append(_as_float(args.occupancy))
        kernels["bytes"].append(_as_int(args.memcpy_bytes))

    def _add_op_args(self, row: int, args: Args) -> None:
        ops = self.lists["ops"]
        intern = self.strings.intern
        dims = args.input_dims or args.input_dims_old
        ops["event"].append(row)
        ops["input_dims"].append(self.raw_string(dims) if dims else NO_ID)
        ops["input_types"].append(self.raw_string(args.input_type) if args.input_type else NO_ID)
        ops["call_stack"].append(intern(args.call_stack) if args.call_stack else NO_ID)
        ops["sequence_number"].append(_as_int(args.sequence_number))
        ops["fwd_thread"].append(_as_int(args.fwd_thread))

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
        table["pg_ranks"].append(intern(_raw_text(args.pg_ranks)) if args.pg_ranks else NO_ID)
        table["seq"].append(_as_int(args.seq))

    def _add_other(self, event: Event) -> None:
        phase = event.ph
        if phase == "M":
            self._add_metadata(event)
            return
        ts = _as_float(event.ts)
        if not math.isfinite(ts):
            self.warn(f"'{_as_str(phase)}' events without a usable 'ts' were skipped")
            return
        if phase in ("i", "I", "R", "n"):
            if event.name == "[memory]":
                self._add_memory(ts, event)
            else:
                self._add_instant(ts, event)
        elif phase in FLOW_PHASES:
            flows = self.lists["flows"]
            self._times["flows"].append(ts)
            flows["flow_id"].append(_as_int(event.id) if not isinstance(event.id, str) else _string_flow_id(event.id))
            flows["phase"].append(FLOW_PHASES[phase])
            flows["ts_ns"].append(0)
            flows["track"].append(self.track(event.pid, event.tid))
            flows["cat"].append(self.strings.intern(_as_str(event.cat)))
            flows["binds_enclosing"].append(1 if event.bp == "e" else 0)
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
        elif phase != "C":  # counters are decoded separately (their args are free-form)
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

    def _add_memory(self, ts: float, event: Event) -> None:
        args = event.args or Args()
        memory = self.lists["memory"]
        self._times["memory"].append(ts)
        memory["ts_ns"].append(0)
        memory["track"].append(self.track(event.pid, event.tid))
        memory["addr"].append(_as_int(args.addr))
        memory["bytes"].append(_as_int(args.mem_bytes, 0))
        memory["total_allocated"].append(_as_int(args.total_allocated))
        memory["total_reserved"].append(_as_int(args.total_reserved))
        memory["device_type"].append(_as_int(args.device_type))
        memory["device_id"].append(_as_int(args.device_id))

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
            if not math.isfinite(ts):
                continue
            track = self.track(item.get("pid"), item.get("tid"))
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

    # ---- finishing -------------------------------------------------------------------------
    def finish(self, top_level: dict[str, Any]) -> TraceTables:
        for stack in self._open_begins.values():
            if stack:
                self.warn("'B' events without a matching 'E' were skipped")
        x_ts = np.asarray(self._x_ts, dtype=np.float64)
        candidates = [x_ts] if len(x_ts) else [np.asarray(v, dtype=np.float64) for v in self._times.values()]
        nonempty = [c for c in candidates if len(c)]
        origin_us = float(min(c.min() for c in nonempty)) if nonempty else 0.0

        def to_ns(values: np.ndarray) -> np.ndarray:
            return np.rint((values - origin_us) * 1000.0).astype(np.int64)

        columns: dict[str, dict[str, np.ndarray]] = {}
        for table_name, layout in SCHEMA.items():
            columns[table_name] = {
                column: np.asarray(self.lists[table_name][column], dtype=dtype) for column, dtype in layout.items()
            }
        events = columns["events"]
        events["ts_ns"] = to_ns(x_ts)
        events["dur_ns"] = np.rint(np.asarray(self._x_dur, dtype=np.float64) * 1000.0).astype(np.int64)
        for table_name, times in self._times.items():
            columns[table_name]["ts_ns"] = to_ns(np.asarray(times, dtype=np.float64))
        _sort_events(columns)
        for pid, values in getattr(self, "_process_meta", {}).items():
            for track in self.tracks:
                if track.pid == pid:
                    for key, value in values.items():
                        setattr(track, key, value)
        meta = _meta_from_top_level(top_level)
        meta.update(
            origin_us=origin_us,
            parser_version=PARSER_VERSION,
            event_count=self.event_count,
            warnings=[{"message": m, "count": c} for m, c in sorted(self.warnings.items())],
        )
        return TraceTables(columns=columns, strings=self.strings, tracks=self.tracks, meta=meta)


def _string_flow_id(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return hash(text) & 0x7FFFFFFFFFFFFFFF


def _sort_events(columns: dict[str, dict[str, np.ndarray]]) -> None:
    """Sort events by (start, longest first) and re-point the side tables at the new rows."""
    events = columns["events"]
    order = np.lexsort((-events["dur_ns"], events["ts_ns"]))
    for column, values in events.items():
        events[column] = values[order]
    new_row = np.empty_like(order, dtype=np.int32)
    new_row[order] = np.arange(len(order), dtype=np.int32)
    for table_name in ("kernels", "ops", "python", "collectives"):
        table = columns[table_name]
        if len(table["event"]):
            table["event"] = new_row[table["event"]]
            row_order = np.argsort(table["event"], kind="stable")
            for column, values in table.items():
                table[column] = values[row_order]


_META_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "distributedInfo",
    "baseTimeNanoseconds",
    "displayTimeUnit",
    "traceName",
    "Framework",
)


def _meta_from_top_level(top_level: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {key: top_level[key] for key in _META_KEYS if key in top_level}
    if not isinstance(meta.get("deviceProperties"), list):
        meta["deviceProperties"] = []
    if not isinstance(meta.get("distributedInfo"), dict):
        meta.pop("distributedInfo", None)
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
) -> TraceTables:
    """Parse a (possibly gzipped) Chrome trace stream into tables.

    ``on_progress`` receives the number of bytes read from ``raw`` so far (compressed bytes for a
    gzip file), which is what a progress bar over the file size needs.
    """
    counting = CountingReader(raw, on_progress)
    reader = ChromeTraceReader(open_decompressed(counting), limit_bytes=max_trace_bytes)
    builder = TableBuilder()
    gc_was_enabled = gc.isenabled()
    gc.disable()  # the parse allocates millions of short-lived objects and no cycles
    try:
        for piece, counters, not_events in reader.pieces(_decode_piece):
            builder.add(piece)
            builder.non_event_items += not_events
            if counters:
                builder.add_counters(counters)
    except TraceFormatError:
        raise
    except msgspec.DecodeError as exc:
        raise TraceFormatError(f"malformed JSON: {exc}") from exc
    finally:
        if gc_was_enabled:
            gc.enable()
    if builder.event_count == 0 and builder.non_event_items:
        raise TraceFormatError(
            f"a JSON list of {builder.non_event_items:,} rows that are not trace events (this looks like "
            "torch.profiler's export_memory_timeline output, a memory timeline, not a Chrome trace)"
        )
    if builder.event_count == 0:
        raise TraceFormatError("the trace has no events")
    if builder.non_event_items:
        builder.warn(f"{builder.non_event_items} items of the event list are not objects and were skipped")
    return builder.finish(reader.top_level)


def _decode_piece(piece: bytes) -> tuple[list[Event], list[Any] | None, int]:
    events, not_events = decode_events(piece)
    counters = None
    if b'"C"' in piece:
        items = _ANY_DECODER.decode(piece)
        counters = [item for item in items if isinstance(item, dict) and item.get("ph") == "C"]
    return events, counters, not_events


def parse_trace_file(path: Path, **kwargs: Any) -> TraceTables:
    with open(path, "rb") as raw:
        return parse_trace(raw, **kwargs)
