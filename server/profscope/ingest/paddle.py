"""Parse a PaddlePaddle profiler trace (``export_chrome_tracing``) into the same ``TraceTables`` as kineto.

A Paddle trace is a Chrome trace too, so the kineto reader cuts it into pieces and the kineto
``TableBuilder`` builds the tables; what differs ends here, once:
- every name carries its duration (``matmul dygraph[0.642 ms]``): the suffix is dropped;
- categories are Paddle's tracer event types (``Operator``, ``OperatorInner``, ``DygraphKernelLaunch``,
  ``CudaRuntime``, ``ProfileStep``, ...), mapped to kinds by ``PADDLE_CATEGORY_KINDS``;
- ``ts`` is truncated to whole microseconds while ``args.start_time`` ("360.464 us", relative to the
  profile's first event) keeps nanoseconds: start times come from ``start_time`` so nesting is exact.
  Times are handed to the builder relative to a whole microsecond near the start (epoch microseconds
  as float64 keep only quarter microseconds, which would make an op and the next one overlap);
  ``meta["origin_us"]`` is made absolute again at the end;
- ``args`` spell things their own way: ``correlation id``, ``input_shapes`` / ``input_dtypes`` (objects
  keyed by input name), ``callstack``, and ``[memory]`` instants (category ``Allocate`` / ``Free``)
  with ``place``, ``addr`` (a string), ``increase_bytes``, ``current_*`` and ``peak_*`` per place;
- a ``[memory]`` event's ``ts`` is truncated too, but Paddle writes each one right after the host
  event it happened in (same thread): memory events are held back to the end of the file and each
  is placed within that event and outside its children, so it is attributed to the same event as
  in Paddle's own Memory Summary;
- ``deviceProperties`` name the SM count ``smCount`` (kineto: ``numSms``);
- threads are ``"12721(Python)"`` / ``"12721(C++)"``; ``ExtraInfo`` names the threads; the top-level
  ``span_index`` (``span_indx`` in older versions) numbers the profiling windows of a process;
- nothing records the rank (no ``distributedInfo``, no rank in ``ExtraInfo`` or the names, not even with
  ``paddle.distributed.launch``): ``meta["process"]`` keeps the process ids and the wall-clock window,
  from which the catalog's runs tell ranks of one job apart from unrelated traces.

Paddle-only facts the summary tables need (the peaks per place, ``span_index``, the thread names)
go to ``meta["paddle"]``.
"""

from __future__ import annotations

import bisect
import io
import math
import re
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import IO, Any

import msgspec
import numpy as np

from profscope import parser_versions
from profscope.ingest.json_stream import ChromeTraceReader, CountingReader, TraceFormatError, open_decompressed
from profscope.ingest.kineto import (
    ABSENT,
    DEFAULT_MAX_TRACE_BYTES,
    Args,
    Event,
    Number,
    TableBuilder,
    _as_int,
    parse_trace,
)
from profscope.tables import Kind, TraceTables

PADDLE_PARSER_VERSION = parser_versions.PADDLE  # bump it there when what this module writes changes

# Every TracerEventType of PaddlePaddle 3.3 (paddle.profiler.TracerEventType); others are Kind.OTHER
PADDLE_CATEGORY_KINDS: dict[str, Kind] = {
    "operator": Kind.CPU_OP,
    "operatorinner": Kind.CPU_OP,
    "dygraphkernellaunch": Kind.CPU_OP,
    "statickernellaunch": Kind.CPU_OP,
    "pythonop": Kind.CPU_OP,
    "communication": Kind.CPU_OP,  # a collective's host-side op; its NCCL kernels are "Kernel"
    "profilestep": Kind.USER_ANNOTATION,
    "forward": Kind.USER_ANNOTATION,
    "backward": Kind.USER_ANNOTATION,
    "optimization": Kind.USER_ANNOTATION,
    "dataloader": Kind.USER_ANNOTATION,
    "userdefined": Kind.USER_ANNOTATION,
    "pythonuserdefined": Kind.USER_ANNOTATION,
    "cudaruntime": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "memcpy": Kind.MEMCPY,
    "memset": Kind.MEMSET,
}

# "matmul dygraph[0.642 ms]" -> "matmul dygraph"
_DURATION_SUFFIX = re.compile(r"\[-?\d+(?:\.\d+)?(?:e[-+]?\d+)? ?(?:s|ms|us|ns)\]$")
_PLACE = re.compile(r"^Place\((?P<device>[a-z_]+)(?::(?P<id>\d+))?\)$")
# Signs of a Paddle trace near the top of the file: the span index key before the event list, or
# Paddle's thread ids ("12721(Python)", "12721(C++)"), which no other writer uses.
_PADDLE_SIGNS = (
    re.compile(rb'"span_ind(?:e)?x"\s*:'),
    re.compile(rb'"tid"\s*:\s*"\d+\((?:Python|C\+\+)\)"'),
)
SNIFF_BYTES = 64 << 10
_NOT_HOST = frozenset(("Kernel", "Memcpy", "Memset", "CudaRuntime"))  # device events and their launches
CPU_DEVICE_TYPE, CUDA_DEVICE_TYPE = 0, 1
_HOST_THREAD_SIDES = ("(Python)", "(C++)")  # Paddle's host thread ids: "12721(Python)", "12721(C++)"


class PaddleArgs(Args, gc=False):
    """Paddle's ``args``: kineto's fields read under Paddle's names, and what only Paddle writes."""

    correlation: Number = msgspec.field(name="correlation id", default=None)
    occupancy: Number = msgspec.field(name="theoretical achieved occupancy %", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="input_shapes", default=ABSENT)
    input_type: msgspec.Raw = msgspec.field(name="input_dtypes", default=ABSENT)
    call_stack: str | None = msgspec.field(name="callstack", default=None)
    addr: Number = msgspec.field(name="addr", default=None)  # a decimal string
    mem_bytes: Number = msgspec.field(name="increase_bytes", default=None)
    total_allocated: Number = msgspec.field(name="current_allocated", default=None)
    total_reserved: Number = msgspec.field(name="current_reserved", default=None)
    start_time: Number = None
    place: Number = None
    peak_allocated: Number = None
    peak_reserved: Number = None


class PaddleEvent(Event, gc=False):
    """A kineto ``Event`` whose ``args`` are Paddle's."""

    args: PaddleArgs | None = None  # type: ignore[assignment]


_PIECE_DECODER = msgspec.json.Decoder(list[PaddleEvent])
_ITEMS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_EVENT_DECODER = msgspec.json.Decoder(PaddleEvent)
_EMPTY_RAW_CONTAINERS = (b"{}", b"[]", b"")


def looks_like_paddle(head: bytes) -> bool:
    """Whether the first (decompressed) bytes of a trace are a Paddle profiler's."""
    return any(sign.search(head) for sign in _PADDLE_SIGNS)


def strip_duration(name: str) -> str:
    return _DURATION_SUFFIX.sub("", name) if name.endswith("]") else name


def place_device(place: str) -> tuple[int, int]:
    """(device type, device id) of a Paddle place in kineto's numbering; other places are (-1, -1)."""
    found = _PLACE.match(place)
    if found is None:
        return -1, -1
    if found.group("device") == "cpu":
        return CPU_DEVICE_TYPE, -1
    if found.group("device") == "gpu" and found.group("id") is not None:
        return CUDA_DEVICE_TYPE, int(found.group("id"))
    return -1, -1  # gpu_pinned, xpu, custom devices: no kineto device of their own


class _Replay(io.RawIOBase):
    """The bytes read ahead to sniff the format, then the rest of the stream."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if len(self._head):
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _decompressed_head(head: bytes) -> bytes:
    """The start of the text of a possibly gzipped prefix (as much as that prefix inflates to)."""
    if not head.startswith(b"\x1f\x8b"):
        return head
    try:
        return zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES * 16)
    except zlib.error:
        return b""  # not really gzip: the kineto parser says so


def parse_any_trace(
    raw: IO[bytes],
    on_progress: Callable[[int], None] | None = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
    **kineto_options: Any,
) -> TraceTables:
    """A Chrome trace of either writer, told apart by its content: Paddle's, else kineto's."""
    head = raw.read(SNIFF_BYTES)
    replay = io.BufferedReader(_Replay(head, raw))
    if looks_like_paddle(_decompressed_head(head)):
        return parse_paddle_trace(replay, on_progress=on_progress, max_trace_bytes=max_trace_bytes)
    return parse_trace(replay, on_progress=on_progress, max_trace_bytes=max_trace_bytes, **kineto_options)


def parse_paddle_trace(
    raw: IO[bytes],
    on_progress: Callable[[int], None] | None = None,
    max_trace_bytes: int = DEFAULT_MAX_TRACE_BYTES,
) -> TraceTables:
    """Parse a (possibly gzipped) Paddle trace stream; a file that is not readable says why, as Paddle's."""
    reader = ChromeTraceReader(open_decompressed(CountingReader(raw, on_progress)), limit_bytes=max_trace_bytes)
    converter = _PaddleConverter()
    builder = TableBuilder(PADDLE_CATEGORY_KINDS)
    try:
        pieces = 0
        for events in reader.pieces(converter.decode):
            builder.add(events, pieces)
            pieces += 1
        builder.add(converter.placed_memory_events(), pieces)  # after every host event: see the module doc
    except (msgspec.DecodeError, UnicodeDecodeError, TraceFormatError) as exc:
        raise TraceFormatError(f"a PaddlePaddle profiler trace that cannot be read: {exc}") from exc
    if builder.event_count == 0:
        raise TraceFormatError("a PaddlePaddle profiler trace without events")
    if converter.skipped:
        builder.warn(f"{converter.skipped} items of the event list are not Paddle events and were skipped")
    tables = builder.finish(reader.top_level)
    tables.meta["origin_us"] += converter.epoch_us or 0
    tables.meta["process"] = _profiled_process(tables)
    _name_threads(tables, reader.top_level.get("ExtraInfo"))
    for device in tables.meta.get("deviceProperties", []):  # Paddle says smCount where kineto says numSms
        if isinstance(device.get("smCount"), int) and "numSms" not in device:
            device["numSms"] = device["smCount"]
    tables.meta["paddle"] = converter.paddle_meta(reader.top_level)
    tables.meta["format"] = "paddle"
    tables.meta["decoder"] = "python"
    return tables


def _profiled_process(tables: TraceTables) -> dict[str, Any]:
    """The process ids of the profiled host threads and the wall-clock window (epoch µs) the events cover.

    Paddle's traces record no rank: these say which traces of a folder are ranks of one job
    (``docs/definitions.md`` §10). Paddle's ``ts`` is the system clock, so windows of one host compare.
    """
    pids = sorted({int(t.pid) for t in tables.tracks if t.tid.endswith(_HOST_THREAD_SIDES) and t.pid.isdigit()})
    starts = np.asarray(tables.events["ts_ns"])
    if len(starts) == 0:
        return {"pids": pids, "start_us": None, "end_us": None}
    ends = starts + np.asarray(tables.events["dur_ns"])
    origin_us = float(tables.meta["origin_us"])
    return {
        "pids": pids,
        "start_us": origin_us + int(starts.min()) / 1000,
        "end_us": origin_us + int(ends.max()) / 1000,
    }


def _name_threads(tables: TraceTables, extra_info: Any) -> None:
    """Threads without a ``thread_name`` get ExtraInfo's name for their id, kept with the Python / C++ side."""
    names = extra_info if isinstance(extra_info, dict) else {}
    for track in tables.tracks:
        if track.thread_name:
            continue
        thread_id, _, side = track.tid.partition("(")
        known = names.get(thread_id)
        if isinstance(known, str):
            track.thread_name = f"thread {thread_id}:{known}" + (f"({side}" if side else "")


class _PaddleConverter:
    """Turns decoded Paddle events into kineto ``Event``s, remembering the per-place memory peaks."""

    def __init__(self) -> None:
        self.skipped = 0
        self._names: dict[str, str] = {}
        self.epoch_us: int | None = None  # the whole microsecond every time is given relative to
        self._start_time_base_us: float | None = None  # (where start_time 0 is) - epoch_us
        self.peaks: dict[str, dict[str, int]] = {}
        self._last_host: dict[tuple[Number, str], tuple[float, float]] = {}  # thread -> (start, end) written last
        self._hosts: dict[tuple[Number, str], list[tuple[float, float]]] = defaultdict(list)
        self._memory: list[tuple[Event, tuple[float, float] | None]] = []  # (event, the host event it belongs to)

    def decode(self, piece: bytes | memoryview) -> list[Event]:
        piece = bytes(piece)  # Raw fields point into what msgspec decodes: not the reader's reused buffer
        try:
            decoded = _PIECE_DECODER.decode(piece)
        except msgspec.ValidationError:  # an odd type somewhere: keep the events that have usable ones
            decoded = self._lenient(piece)
        return [converted for event in decoded if (converted := self._convert(event)) is not None]

    def _lenient(self, piece: bytes) -> list[PaddleEvent]:
        events = []
        for item in _ITEMS_DECODER.decode(piece):
            try:  # one event at a time, so one odd event loses only itself
                events.append(_EVENT_DECODER.decode(item))
            except msgspec.ValidationError:
                self.skipped += 1
        return events

    def _convert(self, event: PaddleEvent) -> Event | None:
        """The event made kineto-shaped in place (Paddle's events are kineto ``Event``s with other args)."""
        if not event.ph and not event.name:
            return None  # the "{}" Paddle writes to close the event list
        args = event.args
        if args is not None:
            args.input_dims, args.input_type = _present(args.input_dims), _present(args.input_type)
            args.call_stack = args.call_stack or None
        if event.ph == "i" and event.name == "[memory]" and args is not None:
            self._keep_memory_event(event, args)
            return None
        if event.ph == "M":
            return event
        event.ts = self._precise_ts(event.ts, args.start_time if args is not None else None)  # flows: no start_time
        if event.ph != "X":
            return event
        event.name = self._strip(event.name if isinstance(event.name, str) else str(event.name))
        if event.cat not in _NOT_HOST and isinstance(event.ts, float) and _is_number(event.dur):
            span = (event.ts, event.ts + float(event.dur))  # type: ignore[arg-type]
            thread = _thread(event)
            self._last_host[thread] = span
            self._hosts[thread].append(span)
        return event

    def _strip(self, name: str) -> str:
        stripped = self._names.get(name)
        if stripped is None:
            stripped = self._names[name] = strip_duration(name)
        return stripped

    def _relative_ts(self, ts: Number) -> Number:
        """``ts`` relative to ``epoch_us`` (exact for the integers Paddle writes); unusable values pass through."""
        if not isinstance(ts, int | float) or isinstance(ts, bool) or ts != ts or abs(ts) > 1e17:
            return ts
        if self.epoch_us is None:
            self.epoch_us = int(ts)
        return ts - self.epoch_us

    def _precise_ts(self, ts: Number, start_time: Number) -> Number:
        """``ts`` with the nanoseconds ``args.start_time`` keeps (times relative to one base, so all agree)."""
        relative_ts = self._relative_ts(ts)
        since_start = _relative_time_us(start_time)
        if since_start is None or not isinstance(relative_ts, int | float):
            return relative_ts
        if self._start_time_base_us is None:
            self._start_time_base_us = relative_ts - since_start
        return self._start_time_base_us + since_start

    def _keep_memory_event(self, event: PaddleEvent, args: PaddleArgs) -> None:
        """Hold a memory event back (see ``placed_memory_events``), its place as a kineto device, its peaks noted."""
        place = args.place if isinstance(args.place, str) else ""
        args.device_type, args.device_id = place_device(place)
        peaks = self.peaks.setdefault(place, {"peak_allocated_bytes": 0, "peak_reserved_bytes": 0})
        for key, value in (("peak_allocated_bytes", args.peak_allocated), ("peak_reserved_bytes", args.peak_reserved)):
            peaks[key] = max(peaks[key], _as_int(value, 0))
        event.ts = self._relative_ts(event.ts)
        self._memory.append((event, self._last_host.get(_thread(event))))

    def placed_memory_events(self) -> list[Event]:
        """The memory events, each moved into the host event written before it and out of that event's children."""
        starts = {thread: sorted(spans) for thread, spans in self._hosts.items()}
        for event, owner in self._memory:
            if owner is not None and _is_number(event.ts):
                spans = starts[_thread(event)]  # type: ignore[arg-type]
                event.ts = _outside_children(min(max(float(event.ts), owner[0]), owner[1]), owner, spans)  # type: ignore[arg-type]
        return [event for event, _ in self._memory]

    def paddle_meta(self, top_level: dict[str, Any]) -> dict[str, Any]:
        span = top_level.get("span_index", top_level.get("span_indx"))
        extra = top_level.get("ExtraInfo")
        return {
            "parser_version": PADDLE_PARSER_VERSION,
            "span_index": _as_int(span) if span is not None else None,
            "extra_info": {str(k): str(v) for k, v in extra.items()} if isinstance(extra, dict) else {},
            "memory_peaks": self.peaks,
        }


def _outside_children(when: float, owner: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    """``when`` moved past (or else before) the children of ``owner`` that cover it, staying inside ``owner``."""
    nudge = 0.001  # one nanosecond, in microseconds
    for _ in range(len(spans)):
        low = bisect.bisect_left(spans, (owner[0], -math.inf))
        high = bisect.bisect_right(spans, (when, math.inf))
        covering = [s for s in spans[low:high] if s != owner and s[1] <= owner[1] and s[0] <= when <= s[1]]
        if not covering:
            return when
        first, last = min(s[0] for s in covering), max(s[1] for s in covering)
        if last + nudge <= owner[1]:
            when = last + nudge
        elif first - nudge >= owner[0]:
            when = first - nudge
        else:
            return when
    return when


def _relative_time_us(start_time: Number) -> float | None:
    """``"360.464 us"`` -> 360.464; anything else -> None."""
    if not isinstance(start_time, str) or not start_time.endswith(" us"):
        return None
    try:
        value = float(start_time[:-3])
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _thread(event: PaddleEvent | Event) -> tuple[Number, str]:
    """One thread's key: Paddle splits a thread into "12721(Python)" and "12721(C++)" tracks."""
    return event.pid, str(event.tid).split("(", 1)[0]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _present(raw: msgspec.Raw) -> msgspec.Raw:
    """An args object or list that says something; ``{}`` (what Paddle writes without shapes) is absent."""
    return ABSENT if len(raw) < 8 and bytes(raw).strip() in _EMPTY_RAW_CONTAINERS else raw
